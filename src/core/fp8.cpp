// FP8 e4m3 weights: scale groups, quantization, values and the float64 reference.
#include "llmm/fp8.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "llmm/checked.hpp"
#include "llmm/error.hpp"

namespace llmm {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The index of weight (i, j)'s scale in the row-major scale array.
std::int64_t scale_index(Fp8ScaleKind kind, std::int64_t k, std::int64_t i, std::int64_t j) {
  switch (kind) {
    case Fp8ScaleKind::Tensor: return 0;
    case Fp8ScaleKind::Channel: return i;
    case Fp8ScaleKind::Block128: return (i / kFp8Block) * ceil_div(k, kFp8Block) + j / kFp8Block;
  }
  return 0;
}

}  // namespace

const char* fp8_scale_kind_name(Fp8ScaleKind k) noexcept {
  switch (k) {
    case Fp8ScaleKind::Tensor: return "tensor";
    case Fp8ScaleKind::Channel: return "channel";
    case Fp8ScaleKind::Block128: return "block";
  }
  return "?";
}

std::pair<std::int64_t, std::int64_t> fp8_scale_shape(Fp8ScaleKind kind, std::int64_t n, std::int64_t k) {
  switch (kind) {
    case Fp8ScaleKind::Tensor: return {1, 1};
    case Fp8ScaleKind::Channel: return {n, 1};
    case Fp8ScaleKind::Block128: return {ceil_div(n, kFp8Block), ceil_div(k, kFp8Block)};
  }
  return {0, 0};
}

Fp8Weight quantize_fp8(const float* w, std::int64_t n, std::int64_t k, std::int64_t ld, Fp8ScaleKind kind) {
  constexpr const char* op = "quantize_fp8";
  if (n < 0 || k < 0 || ld < k) fail(ErrorCode::InvalidArgument, op, ": n ", n, ", k ", k, ", ld ", ld, " (need n, k >= 0, ld >= k)");
  if (n * k > 0 && !w) fail(ErrorCode::InvalidArgument, op, ": null weights");
  Fp8Weight q;
  q.n = n, q.k = k, q.kind = kind;
  const auto [sr, sc] = fp8_scale_shape(kind, n, k);
  q.scales.assign(to_usize(checked_mul(sr, sc, "quantize_fp8 scales"), "quantize_fp8 scales"), 0.0f);
  q.codes.resize(to_usize(checked_mul(n, k, "quantize_fp8 codes"), "quantize_fp8 codes"));
  std::vector<float> amax(q.scales.size(), 0.0f);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < k; ++j) {
      const float v = w[i * ld + j];
      if (!std::isfinite(v)) fail(ErrorCode::InvalidArgument, op, ": weight (", i, ", ", j, ") is ", v, " (not finite)");
      float& m = amax[static_cast<std::size_t>(scale_index(kind, k, i, j))];
      m = std::max(m, std::fabs(v));
    }
  for (std::size_t g = 0; g < amax.size(); ++g)
    q.scales[g] = amax[g] == 0.0f ? 1.0f : std::max(amax[g] / kE4M3Max, std::numeric_limits<float>::denorm_min());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < k; ++j)
      q.codes[static_cast<std::size_t>(i * k + j)] =
          f32_to_e4m3fn_bits(w[i * ld + j] / q.scales[static_cast<std::size_t>(scale_index(kind, k, i, j))], true);
  return q;
}

double fp8_weight_value(const Fp8Weight& w, std::int64_t i, std::int64_t j) {
  return static_cast<double>(e4m3fn_bits_to_f32(w.codes[static_cast<std::size_t>(i * w.k + j)])) *
         static_cast<double>(w.scales[static_cast<std::size_t>(scale_index(w.kind, w.k, i, j))]);
}

void check_fp8_scales(const char* op, Fp8ScaleKind kind, std::int64_t n, std::int64_t k, const float* scales,
                      std::size_t count) {
  const auto [sr, sc] = fp8_scale_shape(kind, n, k);
  if (count != static_cast<std::size_t>(sr * sc))
    fail(ErrorCode::InvalidArgument, op, ": ", fp8_scale_kind_name(kind), " scales of a [", n, ", ", k, "] weight are [", sr,
         ", ", sc, "] (", sr * sc, " values), got ", count);
  for (std::size_t g = 0; g < count; ++g)
    if (!(std::isfinite(scales[g]) && scales[g] > 0.0f))
      fail(ErrorCode::InvalidArgument, op, ": scale ", g, " is ", scales[g], " (must be finite and > 0)");
}

}  // namespace llmm
