// FP8 e4m3 (float8_e4m3fn): conversions against a brute-force nearest-even search over the 127
// non-negative finite values (ml_dtypes' rules: NaN and overflow past 464 -> NaN, or +-448 when
// saturating), quantization per tensor / channel / 128x128 block, scale checks, the reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/fp8.hpp"
#include "support/expect_error.hpp"
#include "support/random.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The 127 non-negative finite values by code, built from the format's definition.
std::vector<double> finite_values() {
  std::vector<double> v;
  for (int c = 0; c < 0x7F; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return v;
}
// Round to nearest, ties to the even code; beyond the last value's half ulp: overflow (-1).
int nearest_code(double a, const std::vector<double>& v) {
  if (a > 464.0) return -1;
  int best = 0;
  for (int c = 1; c < static_cast<int>(v.size()); ++c) {
    const double d = std::fabs(v[c] - a), db = std::fabs(v[best] - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return best;
}
}  // namespace

TEST(Fp8, EveryCodeDecodesAndRoundTrips) {
  const std::vector<double> v = finite_values();
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3fn_bits_to_f32(static_cast<std::uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(std::signbit(f), c == 0xFF) << c;  // ml_dtypes keeps the NaN's sign both ways
      continue;
    }
    EXPECT_EQ(f, (c & 0x80 ? -1 : 1) * v[c & 0x7F]) << c;
    EXPECT_EQ(f32_to_e4m3fn_bits(f), c) << c;
    EXPECT_EQ(f32_to_e4m3fn_bits(f, true), c) << c;
  }
  EXPECT_EQ(e4m3fn_bits_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3fn_bits_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3fn_bits_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3fn_bits_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::signbit(e4m3fn_bits_to_f32(0x80)));
}

TEST(Fp8, RoundingMatchesNearestEvenOnSampledFloats) {
  const std::vector<double> v = finite_values();
  std::uint64_t checked = 0;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) {  // every exponent, many mantissas
    const float x = from_bits(static_cast<std::uint32_t>(u));
    if (std::isnan(x)) continue;
    const int near = std::isinf(x) ? -1 : nearest_code(std::fabs(static_cast<double>(x)), v);
    const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
    ASSERT_EQ(f32_to_e4m3fn_bits(x), near < 0 ? sign | 0x7F : sign | near) << x;
    ASSERT_EQ(f32_to_e4m3fn_bits(x, true), near < 0 ? sign | 0x7E : sign | near) << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000u);
  // The ties and edges by name: midpoints go to the even code.
  EXPECT_EQ(f32_to_e4m3fn_bits(464.0f), 0x7E);  // between 448 (even) and the NaN pattern
  EXPECT_EQ(f32_to_e4m3fn_bits(std::nextafter(464.0f, 1e9f)), 0x7F);
  EXPECT_EQ(f32_to_e4m3fn_bits(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: to 0
  EXPECT_EQ(f32_to_e4m3fn_bits(std::ldexp(1.5f, -9)), 0x02);   // 1.5 ulps: to the even 2
  EXPECT_EQ(f32_to_e4m3fn_bits(std::ldexp(1.0625f, -6)), 0x08);
  EXPECT_EQ(f32_to_e4m3fn_bits(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3fn_bits(std::numeric_limits<float>::infinity()), 0x7F);
  EXPECT_EQ(f32_to_e4m3fn_bits(-std::numeric_limits<float>::infinity(), true), 0xFE);
  EXPECT_EQ(f32_to_e4m3fn_bits(-std::numeric_limits<float>::quiet_NaN(), true), 0xFF);
  // Through the typed store: a double rounds once (to odd in f32 first, then to nearest even).
  std::uint8_t b = 0;
  store_from_double(&b, DType::F8E4M3, 0, 1.0625 + 1e-12);  // just above the tie 1.0625: up
  EXPECT_EQ(b, 0x39);
  EXPECT_EQ(load_as_double(&b, DType::F8E4M3, 0), 1.125);
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::F8E4M3), "f8e4m3");
  EXPECT_FALSE(is_float(DType::F8E4M3));  // the 16/32-bit float ops refuse it
}

TEST(Fp8, QuantizeEveryGranularity) {
  const std::int64_t n = 130, k = 200, ld = 203;  // not multiples of 128: partial blocks
  std::vector<float> w(static_cast<std::size_t>(n * ld), NAN);  // padding stays NaN: never read
  Rng rng(5);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < k; ++j)
      w[i * ld + j] = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(i % 7) - 3));
  for (std::int64_t j = 0; j < k; ++j) w[5 * ld + j] = 0.0f;  // an all-zero row
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128}) {
    const Fp8Weight q = quantize_fp8(w.data(), n, k, ld, kind);
    const auto [sr, sc] = fp8_scale_shape(kind, n, k);
    ASSERT_EQ(q.scales.size(), static_cast<std::size_t>(sr * sc)) << fp8_scale_kind_name(kind);
    EXPECT_NO_THROW(check_fp8_scales("test", kind, n, k, q.scales.data(), q.scales.size()));
    auto group_scale = [&](std::int64_t i, std::int64_t j) {
      if (kind == Fp8ScaleKind::Tensor) return q.scales[0];
      if (kind == Fp8ScaleKind::Channel) return q.scales[i];
      return q.scales[(i / 128) * ((k + 127) / 128) + j / 128];
    };
    int at_max = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k; ++j) {
        const double v = fp8_weight_value(q, i, j), x = w[i * ld + j];
        at_max += (q.codes[i * k + j] & 0x7F) == 0x7E;
        // Half a step of e4m3: 2^-4 relative for normals, 2^-10 x the scale among subnormals.
        const double bound = std::max(std::fabs(x) / 16, std::ldexp(static_cast<double>(group_scale(i, j)), -10));
        ASSERT_LE(std::fabs(v - x), bound * (1 + 1e-6)) << fp8_scale_kind_name(kind) << " (" << i << ", " << j << ")";
        ASSERT_FALSE(v * x < 0) << "sign flipped at (" << i << ", " << j << ")";
      }
    EXPECT_GE(at_max, kind == Fp8ScaleKind::Tensor ? 1 : static_cast<int>(sr * sc) - 2) << fp8_scale_kind_name(kind);
    if (kind == Fp8ScaleKind::Channel) EXPECT_EQ(q.scales[5], 1.0f);  // the zero row
  }
  EXPECT_EQ(fp8_scale_shape(Fp8ScaleKind::Block128, 130, 200), (std::pair<std::int64_t, std::int64_t>{2, 2}));
}

TEST(Fp8, RefusalsNameTheValues) {
  std::vector<float> w(4 * 8, 1.0f);
  w[2 * 8 + 3] = INFINITY;
  expect_error([&] { quantize_fp8(w.data(), 4, 8, 8, Fp8ScaleKind::Block128); }, ErrorCode::InvalidArgument,
               "quantize_fp8: weight (2, 3) is inf (not finite)");
  expect_error([&] { quantize_fp8(w.data(), 4, 8, 7, Fp8ScaleKind::Tensor); }, ErrorCode::InvalidArgument,
               "quantize_fp8: n 4, k 8, ld 7");
  const float bad[2] = {1.0f, 0.0f};
  expect_error([&] { check_fp8_scales("op", Fp8ScaleKind::Channel, 2, 8, bad, 2); }, ErrorCode::InvalidArgument,
               "op: scale 1 is 0 (must be finite and > 0)");
  expect_error([&] { check_fp8_scales("op", Fp8ScaleKind::Block128, 300, 8, bad, 2); }, ErrorCode::InvalidArgument,
               "op: block scales of a [300, 8] weight are [3, 1] (3 values), got 2");
}

TEST(Fp8, ReferenceMatchesTheDequantizedDenseReference) {
  const std::int64_t m = 3, n = 140, k = 260;
  std::vector<float> w(static_cast<std::size_t>(n * k)), x(static_cast<std::size_t>(m * k));
  fill_random(View::contiguous(w.data(), DType::F32, {n, k}), 11, 0.1);
  fill_random(View::contiguous(x.data(), DType::F32, {m, k}), 12);
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128}) {
    const Fp8Weight q = quantize_fp8(w.data(), n, k, k, kind);
    std::vector<double> dq(static_cast<std::size_t>(n * k));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k; ++j) dq[i * k + j] = fp8_weight_value(q, i, j);
    const cpu::MatmulF64 r = cpu::matmul_fp8_f64(View::contiguous(x.data(), DType::F32, {m, k}), q, 2);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l) s += static_cast<double>(x[i * k + l]) * dq[j * k + l];
        ASSERT_NEAR(r.value[i * n + j], s, 1e-12 * r.abs_sum[i * n + j]) << fp8_scale_kind_name(kind);
      }
    // and near the unquantized product: within e4m3's 2^-4 relative step per term
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < k; ++l) s += static_cast<double>(x[l]) * w[j * k + l];
      EXPECT_LE(std::fabs(r.value[j] - s), r.abs_sum[j] / 16 + 1e-9) << fp8_scale_kind_name(kind);
    }
  }
  const Fp8Weight q = quantize_fp8(w.data(), n, k, k, Fp8ScaleKind::Tensor);
  expect_error([&] { cpu::matmul_fp8_f64(View::contiguous(x.data(), DType::F32, {m, k - 1}), q); },
               ErrorCode::InvalidArgument, "reference_matmul_fp8: x must be a float [m, 260] view");
}
