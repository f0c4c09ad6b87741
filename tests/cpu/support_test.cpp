// The test helpers themselves: random data, poisoning, and the comparator must be able to fail.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/reference.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

TEST(Support, RandomIsDeterministicNonZeroAndVaried) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    HostTensor x = host_tensor_3d(t, 2, 17, 33, /*pad_cols=*/3);
    HostTensor y = host_tensor_3d(t, 2, 17, 33, 3);
    poison(x.bytes.data(), x.bytes.size());
    fill_random(x.view, 7);
    fill_random(y.view, 7);
    double lo = INFINITY, hi = 0;
    int neg = 0;
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 17; ++i) {
        for (std::int64_t j = 0; j < 33; ++j) {
          std::int64_t off = b * x.view.stride(0) + i * x.view.stride(1) + j;
          double v = x.get(off);
          ASSERT_TRUE(std::isfinite(v));
          ASSERT_NE(v, 0.0);
          ASSERT_EQ(v, y.get(off));
          lo = std::min(lo, std::fabs(v));
          hi = std::max(hi, std::fabs(v));
          neg += v < 0;
        }
        EXPECT_TRUE(std::isnan(x.get(i * x.view.stride(1) + 33)));  // padding untouched
      }
    EXPECT_GT(hi / lo, 16.0) << dtype_name(t);
    EXPECT_GT(neg, 2 * 17 * 33 / 4);
    fill_random(y.view, 8);
    EXPECT_NE(x.get(0), y.get(0));
  }
}

TEST(Support, PoisonIsNaNInEveryFloatType) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    HostTensor x = host_tensor(t, {5});
    poison(x.view);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(x.get(i))) << dtype_name(t);
  }
}

TEST(Support, ComparatorPassesExactAndCatchesErrors) {
  HostTensor a = host_tensor_3d(DType::F32, 1, 8, 16), b = host_tensor_3d(DType::F32, 1, 16, 8);
  fill_random(a.view, 3);
  fill_random(b.view, 4);
  cpu::MatmulF64 ref = cpu::matmul_f64({a.view, b.view});
  HostTensor c = host_tensor_3d(DType::F32, 1, 8, 8);
  cpu::matmul({a.view, b.view}, c.view);
  Tolerance tol{0.0, 2.0, unit_roundoff(DType::F32), unit_roundoff(DType::F32)};
  EXPECT_TRUE(matches_reference(c.view, ref, tol));

  float* cp = static_cast<float*>(c.view.data);
  float saved = cp[13];
  cp[13] += 1e-2f * std::fabs(saved) + 1e-3f;
  CompareResult r = compare(c.view, ref, tol);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(r.first_bad, 13);
  EXPECT_GT(r.max_abs_err, 0.0);
  EXPECT_NE(r.summary().find("first bad at flat index 13"), std::string::npos) << r.summary();

  cp[13] = saved;
  cp[5] = NAN;  // NaN never passes, however loose the tolerance
  Tolerance loose{1e30, 0, 0, 0};
  r = compare(c.view, ref, loose);
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(r.first_bad, 5);
}

TEST(Support, ComparatorChecksShape) {
  HostTensor a = host_tensor_3d(DType::F32, 1, 2, 2), b = host_tensor_3d(DType::F32, 1, 2, 2);
  fill_random(a.view, 1);
  fill_random(b.view, 2);
  cpu::MatmulF64 ref = cpu::matmul_f64({a.view, b.view});
  HostTensor wrong = host_tensor_3d(DType::F32, 1, 2, 3);
  EXPECT_THROW(compare(wrong.view, ref, Tolerance{}), Error);
}
