// View construction, validation refusals, byte extents, overlap; checked arithmetic.
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/view.hpp"
#include "support/expect_error.hpp"

using namespace llmm;

using llmm::test::expect_error;

TEST(Checked, ArithmeticThrowsOnOverflow) {
  EXPECT_EQ(checked_mul(1u << 20, 1u << 20, "x"), 1ull << 40);
  EXPECT_EQ(checked_add(5, 7, "x"), 12u);
  expect_error([] { checked_mul(1ull << 40, 1ull << 30, "expert bytes"); }, ErrorCode::InvalidArgument,
               "expert bytes");
  expect_error([] { checked_add(std::numeric_limits<std::uint64_t>::max(), 1, "extent"); },
               ErrorCode::InvalidArgument, "extent");
  expect_error([] { to_u64(-3, "m"); }, ErrorCode::InvalidArgument, "m: -3 is negative");
  EXPECT_EQ(to_usize(42, "n"), 42u);
}

TEST(View, ContiguousStridesAndExtent) {
  std::vector<float> buf(2 * 3 * 4);
  View v = View::contiguous(buf.data(), DType::F32, {2, 3, 4});
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(1), 4);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_EQ(v.numel(), 24u);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.byte_extent(), 96u);
  EXPECT_EQ(v.describe(), "f32[2, 3, 4] strides [12, 4, 1] on cpu");
  validate_view(v, "op", "a");
}

TEST(View, PaddedAndBroadcastExtent) {
  std::vector<std::uint16_t> buf(100);
  View v = View::strided(buf.data(), DType::F16, {2, 3, 4}, {20, 6, 1});
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.byte_extent(), (20 + 2 * 6 + 3 + 1) * 2u);
  View bc = View::strided(buf.data(), DType::F16, {5, 3, 4}, {0, 4, 1});
  EXPECT_EQ(bc.byte_extent(), 12 * 2u);
  View empty = View::contiguous(nullptr, DType::F32, {0, 7});
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.byte_extent(), 0u);
  validate_view(empty, "op", "x");  // empty views may have null data
}

TEST(View, Refusals) {
  float x[4] = {1, 2, 3, 4};
  expect_error([&] { View::contiguous(x, DType::F32, {1, 1, 1, 1, 1}); }, ErrorCode::InvalidArgument, "rank 5");
  expect_error([&] { View::contiguous(x, DType::F32, {2, -1}); }, ErrorCode::InvalidArgument, "negative");
  expect_error([&] { View::strided(x, DType::F32, {2, 2}, {2}); }, ErrorCode::InvalidArgument, "2 dims but 1 strides");
  expect_error([&] { View::strided(x, DType::F32, {2, 2}, {-2, 1}); }, ErrorCode::InvalidArgument, "negative");

  View null_data = View::contiguous(nullptr, DType::F32, {2, 2});
  expect_error([&] { validate_view(null_data, "matmul", "a"); }, ErrorCode::InvalidArgument, "matmul: a has null data");

  View mis = View::contiguous(reinterpret_cast<char*>(x) + 1, DType::F32, {2});
  expect_error([&] { validate_view(mis, "matmul", "b"); }, ErrorCode::InvalidArgument, "not aligned");

  View huge = View::strided(x, DType::F32, {1ll << 40, 2}, {1ll << 40, 1});
  expect_error([&] { validate_view(huge, "matmul", "c"); }, ErrorCode::InvalidArgument, "overflows");

  View bad_rank;
  bad_rank.rank = 7;
  expect_error([&] { validate_view(bad_rank, "op", "v"); }, ErrorCode::InvalidArgument, "rank 7");
}

TEST(View, Overlap) {
  std::vector<float> buf(64);
  View a = View::contiguous(buf.data(), DType::F32, {4, 4});        // [0, 16)
  View b = View::contiguous(buf.data() + 16, DType::F32, {4, 4});   // [16, 32)
  View c = View::contiguous(buf.data() + 15, DType::F32, {2});      // [15, 17)
  View d = View::strided(buf.data() + 1, DType::F32, {4, 1}, {4, 1});  // interleaved with a
  EXPECT_FALSE(overlaps(a, b));
  EXPECT_TRUE(overlaps(a, c));
  EXPECT_TRUE(overlaps(b, c));
  EXPECT_TRUE(overlaps(a, d));  // conservative: interleaved ranges count
  EXPECT_TRUE(overlaps(a, a));
  View other_device = b;
  other_device.device = DeviceKind::CUDA;
  EXPECT_FALSE(overlaps(a, View::contiguous(buf.data(), DType::F32, {0})));
  EXPECT_FALSE(overlaps(b, other_device));
}

// Found by fuzz_view (fuzz/regressions/fuzz_view): arithmetic on extreme but representable
// views must neither overflow (UB) nor refuse a valid view.
TEST(View, ExtremeSizesNeitherOverflowNorRefuseValidViews) {
  View v;
  v.rank = 3, v.dtype = DType::U8, v.data = reinterpret_cast<void*>(std::uintptr_t{1} << 40);
  v.shape = {std::int64_t{1} << 62, std::int64_t{1} << 62, 0};
  EXPECT_EQ(v.numel(), 0u);  // empty: no product of the other dims
  EXPECT_EQ(v.byte_extent(), 0u);
  View w;
  w.rank = 2, w.dtype = DType::U8, w.data = v.data;
  w.shape = {std::int64_t{1} << 32, std::int64_t{1} << 31};
  w.strides = {std::int64_t{1} << 31, 1};
  EXPECT_TRUE(w.is_contiguous());  // the running product passes 2^63 after the last check
  View neg;
  neg.rank = 1, neg.dtype = DType::F32, neg.data = v.data;
  neg.shape = {INT64_MIN};
  expect_error([&] { (void)neg.byte_extent(); }, ErrorCode::InvalidArgument, "is negative");
  EXPECT_THROW((void)overlaps(neg, neg), Error);  // overlaps reaches byte_extent on unvalidated views
}
