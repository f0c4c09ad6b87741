// The CPU reference against hand-computed values: it is the oracle, so it is tested first.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/reference.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

TEST(Reference, SeedOnes) {
  // Seed 000: b=10, m=32, n=32, k=16 of ones gives 16 everywhere.
  std::vector<float> a(10 * 32 * 16, 1.0f), b(10 * 16 * 32, 1.0f), c(10 * 32 * 32, -1.0f);
  cpu::MatmulProblem p{View::contiguous(a.data(), DType::F32, {10, 32, 16}),
                       View::contiguous(b.data(), DType::F32, {10, 16, 32})};
  cpu::matmul(p, View::contiguous(c.data(), DType::F32, {10, 32, 32}), 2);
  for (float x : c) ASSERT_EQ(x, 16.0f);
}

TEST(Reference, SeedRampValues) {
  // Seed 000: b=2, m=2, n=4, k=3 with a = b = 0, 1, 2, ...
  std::vector<float> a(12), b(24), c(16);
  for (int i = 0; i < 12; ++i) a[static_cast<std::size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 24; ++i) b[static_cast<std::size_t>(i)] = static_cast<float>(i);
  cpu::MatmulProblem p{View::contiguous(a.data(), DType::F32, {2, 2, 3}),
                       View::contiguous(b.data(), DType::F32, {2, 3, 4})};
  cpu::matmul(p, View::contiguous(c.data(), DType::F32, {2, 2, 4}));
  std::vector<float> want = {20, 23, 26, 29, 56, 68, 80, 92, 344, 365, 386, 407, 488, 518, 548, 578};
  EXPECT_EQ(c, want);
}

TEST(Reference, TransposedStorageGivesSameProduct) {
  // A = [[1, 2], [3, 4], [5, 6]] (3x2), B = [[1, -1, 2], [0, 3, -2]] (2x3), by hand:
  // C = [[1, 5, -2], [3, 9, -2], [5, 13, -2]].
  std::vector<double> want = {1, 5, -2, 3, 9, -2, 5, 13, -2};
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, at = {1, 3, 5, 2, 4, 6};
  std::vector<float> b = {1, -1, 2, 0, 3, -2}, bt = {1, 0, -1, 3, 2, -2};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      cpu::MatmulProblem p{ta ? View::contiguous(at.data(), DType::F32, {1, 2, 3})
                              : View::contiguous(a.data(), DType::F32, {1, 3, 2}),
                           tb ? View::contiguous(bt.data(), DType::F32, {1, 3, 2})
                              : View::contiguous(b.data(), DType::F32, {1, 2, 3}),
                           ta == 1, tb == 1};
      cpu::MatmulF64 r = cpu::matmul_f64(p);
      EXPECT_EQ(r.value, want) << "ta=" << ta << " tb=" << tb;
      // |a||b| sums by hand for row 0: |1*1|+|2*0|=1, |1*-1|+|2*3|=7, |1*2|+|2*-2|=6.
      EXPECT_EQ(r.abs_sum[0], 1.0);
      EXPECT_EQ(r.abs_sum[1], 7.0);
      EXPECT_EQ(r.abs_sum[2], 6.0);
    }
}

TEST(Reference, BroadcastBatchAndPaddedOutput) {
  // b has batch 1 (broadcast to a's 3); c is padded and its padding must stay untouched.
  HostTensor a = host_tensor_3d(DType::F32, 3, 2, 2);
  std::vector<float> av = {1, 0, 0, 1, 2, 0, 0, 2, 0, 1, 1, 0};  // I, 2I, swap
  std::copy(av.begin(), av.end(), static_cast<float*>(a.view.data));
  HostTensor b = host_tensor_3d(DType::F32, 1, 2, 2);
  std::vector<float> bv = {1, 2, 3, 4};
  std::copy(bv.begin(), bv.end(), static_cast<float*>(b.view.data));
  HostTensor c = host_tensor_3d(DType::F32, 3, 2, 2, /*pad_cols=*/1, /*pad_batch=*/2);
  poison(c.bytes.data(), c.bytes.size());
  cpu::matmul({a.view, b.view}, c.view);
  const float* cp = static_cast<const float*>(c.view.data);
  auto C = [&](int bi, int i, int j) { return cp[bi * c.view.stride(0) + i * c.view.stride(1) + j]; };
  EXPECT_EQ(C(0, 0, 0), 1);
  EXPECT_EQ(C(0, 1, 1), 4);
  EXPECT_EQ(C(1, 0, 1), 4);
  EXPECT_EQ(C(1, 1, 0), 6);
  EXPECT_EQ(C(2, 0, 0), 3);
  EXPECT_EQ(C(2, 1, 1), 2);
  EXPECT_TRUE(std::isnan(cp[2]));   // row padding
  EXPECT_TRUE(std::isnan(cp[6]));   // batch padding
}

TEST(Reference, RoundsOnceToOutputDtype) {
  // 1 + 2^-9 + 2^-9 accumulated exactly is 1 + 2^-8: a bf16 tie that goes to even (1.0);
  // the f16 output keeps it exactly.
  std::vector<std::uint16_t> a(3), b(3);
  float av[3] = {1.0f, std::ldexp(1.0f, -9), std::ldexp(1.0f, -9)};
  for (int i = 0; i < 3; ++i) {
    a[static_cast<std::size_t>(i)] = f32_to_f16_bits(av[i]);
    b[static_cast<std::size_t>(i)] = f32_to_f16_bits(1.0f);
  }
  cpu::MatmulProblem p{View::contiguous(a.data(), DType::F16, {1, 1, 3}),
                       View::contiguous(b.data(), DType::F16, {1, 3, 1})};
  std::uint16_t c16 = 0, cb = 0;
  cpu::matmul(p, View::contiguous(&c16, DType::F16, {1, 1, 1}));
  EXPECT_EQ(f16_bits_to_f32(c16), 1.0f + std::ldexp(1.0f, -8));
  cpu::matmul(p, View::contiguous(&cb, DType::BF16, {1, 1, 1}));
  EXPECT_EQ(bf16_bits_to_f32(cb), 1.0f);
}

TEST(Reference, ThreadCountDoesNotChangeBits) {
  HostTensor a = host_tensor_3d(DType::BF16, 2, 37, 53);
  HostTensor b = host_tensor_3d(DType::BF16, 2, 53, 29);
  fill_random(a.view, 1);
  fill_random(b.view, 2);
  cpu::MatmulF64 r1 = cpu::matmul_f64({a.view, b.view}, 1);
  cpu::MatmulF64 r3 = cpu::matmul_f64({a.view, b.view}, 3);
  EXPECT_EQ(r1.value, r3.value);
  EXPECT_EQ(r1.abs_sum, r3.abs_sum);
}

// One row (m = 1) is cut into column blocks across threads: still the same bits, every column
// written once, for widths that are not block multiples.
TEST(Reference, OneRowSplitsOverColumnsWithTheSameBits) {
  for (std::int64_t n : {1, 63, 64, 65, 1000}) {
    HostTensor a = host_tensor_3d(DType::F32, 1, 1, 77);
    HostTensor b = host_tensor_3d(DType::F32, 1, 77, n);
    fill_random(a.view, 3);
    fill_random(b.view, 4);
    cpu::MatmulF64 r1 = cpu::matmul_f64({a.view, b.view}, 1);
    for (int t : {2, 7, 64}) {
      cpu::MatmulF64 rt = cpu::matmul_f64({a.view, b.view}, t);
      EXPECT_EQ(r1.value, rt.value) << "n " << n << " threads " << t;
      EXPECT_EQ(r1.abs_sum, rt.abs_sum) << "n " << n << " threads " << t;
    }
    double want = 0;  // column n - 1 by hand
    for (std::int64_t l = 0; l < 77; ++l)
      want += static_cast<double>(static_cast<float*>(a.view.data)[l]) *
              static_cast<double>(static_cast<float*>(b.view.data)[l * n + n - 1]);
    EXPECT_EQ(r1.value.back(), want) << n;
  }
}

TEST(Reference, Refusals) {
  std::vector<float> x(64, 1.0f);
  std::vector<std::uint8_t> u(64, 1);
  auto expect_invalid = [](auto fn, const char* part) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  View a = View::contiguous(x.data(), DType::F32, {1, 2, 3});
  View b_bad_k = View::contiguous(x.data(), DType::F32, {1, 4, 2});
  expect_invalid([&] { cpu::matmul_f64({a, b_bad_k}); }, "reference_matmul: inner dimensions differ: a gives k=3, b gives k=4");
  View b_u8 = View::contiguous(u.data(), DType::U8, {1, 3, 2});
  expect_invalid([&] { cpu::matmul_f64({a, b_u8}); }, "non-float dtype u8");
  View a2 = View::contiguous(x.data(), DType::F32, {2, 2, 3});
  View b3 = View::contiguous(x.data(), DType::F32, {3, 3, 2});
  expect_invalid([&] { cpu::matmul_f64({a2, b3}); }, "batch sizes 2 and 3 differ");
  View b_ok = View::contiguous(x.data(), DType::F32, {1, 3, 2});
  std::vector<float> c(16);
  expect_invalid([&] { cpu::matmul({a, b_ok}, View::contiguous(c.data(), DType::F32, {1, 3, 2})); },
                 "c must be [1, 2, 2]");
  View a_2d = View::contiguous(x.data(), DType::F32, {2, 3});
  expect_invalid([&] { cpu::matmul_f64({a_2d, b_ok}); }, "must be 3-D");
}
