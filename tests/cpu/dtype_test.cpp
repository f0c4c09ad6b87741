// Host f16/bf16 conversions on known bit patterns, and typed element access.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "llmm/dtype.hpp"

using namespace llmm;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_EQ(dtype_size(DType::U32), 4u);
  EXPECT_EQ(dtype_name(DType::BF16), "bf16");
  EXPECT_EQ(dtype_name(DType::U32), "u32");
  EXPECT_TRUE(is_float(DType::F16));
  EXPECT_FALSE(is_float(DType::U8));
  EXPECT_EQ(unit_roundoff(DType::F16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(DType::BF16), std::ldexp(1.0, -8));
}

TEST(F16, KnownPatterns) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_bits(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);      // max finite
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7BFF);      // just below the rounding boundary
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);      // tie rounds to even: Inf
  EXPECT_EQ(f32_to_f16_bits(1e9f), 0x7C00);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // min normal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // max subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp -> even 2
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16_bits(2047.5f), 0x6800);  // mantissa carry into the exponent (2048)
  std::uint16_t nan = f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(nan)));
  // A signalling NaN whose payload lives only in low f32 bits must stay NaN.
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(from_bits(0x7F800001u)))));
}

TEST(F16, DecodesAndRoundTripsEveryPattern) {
  EXPECT_EQ(f16_bits_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_f32(0x7C00), INFINITY);
  EXPECT_TRUE(std::signbit(f16_bits_to_f32(0x8000)));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16_bits(f), h) << "pattern " << h;
  }
}

TEST(BF16, KnownPatternsAndRoundTrip) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x40490FDBu)), 0x4049);  // pi
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3F808000u)), 0x3F80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00010000u)), 0x0001);  // f32 subnormal kept
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(from_bits(0x7F800001u)))));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16_bits(f), h) << "pattern " << h;
  }
}

TEST(DType, StoreFromDoubleRoundsOnce) {
  // 1 + 2^-11 + 2^-40 is above the f16 tie: correct rounding goes up. Rounding through f32
  // first would land exactly on the tie and go down to even.
  std::uint16_t h = 0;
  store_from_double(&h, DType::F16, 0, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(h, 0x3C01);
  store_from_double(&h, DType::BF16, 0, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
  EXPECT_EQ(h, 0x3F81);
  store_from_double(&h, DType::BF16, 0, 1.0 + std::ldexp(1.0, -8));  // exact tie -> even
  EXPECT_EQ(h, 0x3F80);
  float f = 0;
  store_from_double(&f, DType::F32, 0, 0.1);
  EXPECT_EQ(f, 0.1f);
  EXPECT_EQ(load_as_double(&h, DType::BF16, 0), 1.0);
  std::uint32_t u = 123456;
  EXPECT_EQ(load_as_double(&u, DType::U32, 0), 123456.0);
}
