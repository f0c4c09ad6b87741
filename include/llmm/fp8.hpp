// FP8 e4m3 weights with f32 scales (DeepSeek-V3 / Qwen3 FP8 checkpoints): a [n, k] matrix of
// float8_e4m3fn codes whose value is code * scale, the scale per tensor, per output row (channel)
// or per [128, 128] block (DeepSeek's weight_scale_inv layout, [ceil(n / 128), ceil(k / 128)]).
// Host quantization and dequantization, the float64 reference of x . w^T on such weights, and
// the op llmm::matmul_fp8 (y = x . dequant(w)^T) with its pure planner.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "llmm/context.hpp"
#include "llmm/matmul.hpp"
#include "llmm/reference.hpp"
#include "llmm/view.hpp"

namespace llmm {

// Fp8ScaleKind and kFp8Block live in dtype.hpp (moe.hpp's FP8 experts name them too).
const char* fp8_scale_kind_name(Fp8ScaleKind k) noexcept;

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

// Per-token activation quantization, the W8A8 route's first step (bit-exact with its kernel):
// for each row i of x [m, k] and group g of `group` columns (128, or k for one group a row),
// scale = max(amax / 448, smallest positive float) (1 for an all-zero group; NaN when the group
// holds a NaN or an infinity, so the token's outputs become NaN), code = e4m3(x / scale) rounded
// to nearest even, saturated at +-448. scales[g * m + i] (the token index fastest: cuBLASLt's
// layout), codes [m, k] row-major.
struct Fp8Activations {
  std::int64_t m = 0, k = 0, group = 0;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
};
Fp8Activations quantize_fp8_activations(const View& x, std::int64_t group);

// ---------------------------------------------------------------------------------------------
// The op: y [m, n] = x [m, k] . dequant(w)^T.

// An FP8 weight as the op takes it: codes [n, k] F8E4M3 (innermost stride 1, row stride >= k),
// scales F32 of fp8_scale_shape(kind, n, k), contiguous, on the op's device.
struct Fp8WeightView {
  View codes;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  View scales;
};

enum class Fp8Route {
  Auto,      // plan_matmul_fp8's choice (the default)
  Cpu,       // float64 reference (CPU contexts)
  Stream,    // m <= 16: the streaming gemv with the e4m3 weight decoder; x unquantized (exact
             // products, f32 accumulation)
  CublasLt,  // W8A8: x quantized per token (1 x 128 groups with block scales, whole rows
             // otherwise), cuBLASLt FP8 tensor cores with f32 scales (Fast only)
  DequantLt, // the weight decoded into the context's workspace in x's dtype, then llmm::matmul:
             // x unquantized (any layout)
  StreamMma, // m <= 16, f16/bf16 x: the weights streamed once and widened to x's type for
             // tensor-core mma (f32 accumulation); x unquantized
  TiledSm90, // W8A8 on the Hopper tiled engine (sm_90, Fast only): x quantized per token and 128
             // channels for every scale kind, e4m3 wgmmas summed over one 128-k block at a time
             // and promoted into f32 times the weight's and x's scales; taken when asked for by
             // name (Auto does not route to it until it wins its A/B)
};
const char* fp8_route_name(Fp8Route r) noexcept;

struct MatmulFp8Options {
  // Fast (the default) lets the route quantize x to e4m3 (W8A8, what FP8 serving runs); Exact
  // keeps x as given (the weight is the only FP8 operand).
  Precision precision = Precision::Fast;
  Fp8Route force_route = Fp8Route::Auto;
};

struct MatmulFp8Desc {
  std::int64_t m = 0, n = 0, k = 0;
  DType x_dtype = DType::BF16;  // y has it too
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  Precision precision = Precision::Fast;
  bool stream_aligned = false;  // x, codes: 16-byte aligned base and rows (the stream route)
  bool lt_aligned = false;      // codes rows and y rows 16-byte aligned, k % 16 == 0 (cuBLASLt FP8)
  // Whether cuBLASLt's FP8 GEMM has an algorithm for this shape, strides, output dtype and scale
  // kind: matmul_fp8 asks the device library (once per shape, kept in the context); a caller of
  // plan_matmul_fp8 without a context leaves it true.
  bool lt_served = true;
  // x given in e4m3 with its 1 x 128 scales (Fp8ActivationView; x_dtype is then y's dtype): only
  // the routes that multiply e4m3 codes take it (tiled_sm90), and only where x_tma_aligned (the
  // codes' base and rows 16-byte aligned, the scales token-major: stride {1, ld}, ld % 4 == 0,
  // base 16-byte aligned).
  bool x_e4m3 = false;
  bool x_tma_aligned = false;
};

struct Fp8Plan {
  Fp8Route route = Fp8Route::Cpu;
  std::string reason;
  int gemv_vecs = 0, gemv_k_lanes = 0, gemv_grid_x = 0;  // Stream's configuration
  int mma_k_warps = 0;                                   // StreamMma's warps along K per 16-row tile
  std::size_t workspace_bytes = 0;                       // from the context's per-stream pool
};

// Pure. `force` other than Auto returns that route when it takes the problem, else throws
// Unsupported naming why.
Fp8Plan plan_matmul_fp8(const MatmulFp8Desc& desc, const ArchInfo& arch, Fp8Route force = Fp8Route::Auto);
// The plan matmul_fp8 makes on ctx for dense row-major operands (codes rows of k bytes, y rows of
// n): lt_served asked of the context's cuBLASLt where the other cublaslt gates pass.
Fp8Plan plan_matmul_fp8(Context& ctx, MatmulFp8Desc desc, Fp8Route force = Fp8Route::Auto);

// y[i, j] = sum_l x[i, l] * code(j, l) * scale(j, l) (x quantized first on the CublasLt route).
// x [m, k] f32/f16/bf16 (innermost stride 1), y [m, n] of x's dtype; f32 accumulation (float64
// on the CPU backend). Workspace: the context's own, per stream (grow-only; refused during graph
// capture when it must grow). Throws llmm::Error before anything is enqueued on any invalid
// argument (shapes, dtypes, devices, overlaps, scale shape; scale values are the caller's: they
// are read by the kernels, not checked on the host).
Receipt matmul_fp8(Context& ctx, const View& x, const Fp8WeightView& w, const View& y, const MatmulFp8Options& opts = {});

// Activations already quantized to e4m3 by the caller, with f32 scales per token and 128
// channels (DeepGEMM's and vLLM's per_token_group_quant_fp8 groups; quantize_fp8_activations with
// group 128 gives them): x(i, l) = e4m3(codes[i, l]) * scales[i, l / 128].
struct Fp8ActivationView {
  View codes;   // [m, k] F8E4M3, innermost stride 1
  View scales;  // F32 [m, ceil(k / 128)], any strides on the CPU; on CUDA token-major (strides
                // {1, ld}, ld % 4 == 0, 16-byte aligned base: DeepGEMM's TMA-aligned layout)
};

// y [m, n] = x . dequant(w)^T with x given in e4m3 (above); y f32/f16/bf16 (its dtype is the
// output's). The routes that multiply e4m3 codes take it: the CPU backend (float64; any
// precision) and, on CUDA, tiled_sm90 under Precision::Fast. The scale values are read as they
// are (a NaN scale makes its token's outputs NaN; the weight's scales are checked as above).
// Throws llmm::Error before anything is enqueued on any invalid argument.
Receipt matmul_fp8(Context& ctx, const Fp8ActivationView& x, const Fp8WeightView& w, const View& y,
                   const MatmulFp8Options& opts = {});

namespace cpu {
// out[i, j] = sum_l x[i, l] * value(j, l) in float64 for x a 2-D float view [m, k] (any strides),
// with abs_sum for error bounds: the oracle of x . w^T on FP8 weights (batch 1).
MatmulF64 matmul_fp8_f64(const View& x, const Fp8Weight& w, int threads = 0);
}  // namespace cpu

}  // namespace llmm
