// FP8 e4m3 weights with f32 scales (DeepSeek-V3 / Qwen3 FP8 checkpoints): a [n, k] matrix of
// float8_e4m3fn codes whose value is code * scale, the scale per tensor, per output row (channel)
// or per [128, 128] block (DeepSeek's weight_scale_inv layout, [ceil(n / 128), ceil(k / 128)]).
// Host quantization and dequantization, and the float64 reference of x . w^T on such weights:
// the oracle of the FP8 kernels (not yet written: no op routes FP8 yet).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "llmm/reference.hpp"
#include "llmm/view.hpp"

namespace llmm {

enum class Fp8ScaleKind { Tensor, Channel, Block128 };
const char* fp8_scale_kind_name(Fp8ScaleKind k) noexcept;

inline constexpr std::int64_t kFp8Block = 128;

// The scale array's shape for a [n, k] weight: {1, 1}, {n, 1} or {ceil(n / 128), ceil(k / 128)}.
std::pair<std::int64_t, std::int64_t> fp8_scale_shape(Fp8ScaleKind kind, std::int64_t n, std::int64_t k);

// codes [n, k] row-major (float8_e4m3fn bits) and scales (fp8_scale_shape, row-major).
struct Fp8Weight {
  std::int64_t n = 0, k = 0;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
};

// Quantizes a row-major f32 [n, k] (row stride ld >= k): each scale group's scale is its largest
// |w| / 448 (1 for an all-zero group; never below the smallest positive float), each code w /
// scale rounded to nearest even and saturated at +-448. Refuses (InvalidArgument, naming the row
// and column) a non-finite weight, and n or k < 0.
Fp8Weight quantize_fp8(const float* w, std::int64_t n, std::int64_t k, std::int64_t ld, Fp8ScaleKind kind);

// The value of weight (i, j): e4m3(code) * its group's scale, in float64 (exact: a product of a
// 4-bit significand and an f32).
double fp8_weight_value(const Fp8Weight& w, std::int64_t i, std::int64_t j);

// Checks a scale array against the kind and the weight's shape (count, finite, > 0), naming op.
void check_fp8_scales(const char* op, Fp8ScaleKind kind, std::int64_t n, std::int64_t k, const float* scales,
                      std::size_t count);

namespace cpu {
// out[i, j] = sum_l x[i, l] * value(j, l) in float64 for x a 2-D float view [m, k] (any strides),
// with abs_sum for error bounds: the oracle of x . w^T on FP8 weights (batch 1).
MatmulF64 matmul_fp8_f64(const View& x, const Fp8Weight& w, int threads = 0);
}  // namespace cpu

}  // namespace llmm
