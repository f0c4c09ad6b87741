// The expert FFN of a Mixture-of-Experts block in one call:
//   out[t, :] = sum_{s < top_k} topk_weights[t, s] * (W_down[e] . act(g, u) + b_down[e])
//   g = W_gate[e] . x[t] + b_gate[e],  u = W_up[e] . x[t] + b_up[e]
// with e = ids[t, s] (an id outside [0, n_experts) contributes zero, its bias too), W_gate / W_up
// the first / last `inter` rows of w_gate_up[e] (vLLM's w13 and transformers' gate_up_proj
// layout; MoeGateLayout::Interleaved: the even / odd rows, gpt-oss's), the biases optional, and
// the sum over s in slot order (fixed, no atomics: the same bits on every run). Without a gate
// (MoeFfnOptions::gated false, vLLM's "_no_mul" activations) w_gate_up holds `inter` rows and
// act(h) replaces act(g, u).
// On CUDA: the gate_up matmul_id (its output rounded to x's dtype), the activation with the
// gate_up bias (one rounding to x's dtype), the down matmul_id (its rows rounded to x's dtype,
// f32 for an f32 x), then the weighted sum over the slots with the down bias in f32 and one
// rounding to x's dtype; where a GEMM takes the direct route (decode), the activation and the slot
// sum run in its epilogue instead (MoeFfnOptions::fuse_decode: two kernels in all, gate, up and
// the down rows unrounded). Intermediates and the grouped route's scratch come from the
// context's grow-only workspace (per stream): no scratch to size. The receipt's kernel string
// joins every kernel of the first pass in launch order. On CPU contexts: the float64
// reference, with no intermediate rounding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmm/context.hpp"
#include "llmm/matmul.hpp"
#include "llmm/moe.hpp"
#include "llmm/ternary.hpp"
#include "llmm/view.hpp"

namespace llmm {

// Activations: gated act(g, u) = f(g) * u (SwigluOai its own form); without a gate act(h) = f(h).
// NaN propagates through every one (the clamps and relu keep a NaN).
enum class MoeActivation {
  Silu,       // f(g) = g / (1 + exp(-g)): SwiGLU (Qwen, Mixtral, DeepSeek, Llama-4)
  GeluTanh,   // f(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))): GeGLU, tanh approximation
  GeluErf,    // f(g) = 0.5 g (1 + erf(g / sqrt(2))): GeGLU, exact
  Relu2,      // f(g) = max(g, 0)^2 (squared ReLU; Nemotron's non-gated experts)
  SwigluOai,  // gpt-oss's clamped SwiGLU, gated only: g' = min(g, limit), u' = clamp(u, -limit,
              // limit), act = (u' + 1) g' / (1 + exp(-alpha g'))
};
const char* moe_activation_name(MoeActivation a) noexcept;

// Where a gated expert's gate and up rows sit in w_gate_up[e] (2 * inter rows).
enum class MoeGateLayout {
  Halves,       // gate rows [0, inter), up rows [inter, 2 inter): vLLM's w13, transformers' gate_up_proj
  Interleaved,  // gate row 2 i, up row 2 i + 1: gpt-oss checkpoints (vLLM's "swigluoai")
};
const char* moe_gate_layout_name(MoeGateLayout l) noexcept;

struct MoeFfnOptions {
  MoeActivation activation = MoeActivation::Silu;
  bool gated = true;  // false: w_gate_up is [n_experts, inter, hidden] and act(h) = f(h)
  MoeGateLayout gate_layout = MoeGateLayout::Halves;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // SwigluOai only (gpt-oss's values); limit > 0
  // Optional expert biases (gpt-oss): [n_experts, rows of w_gate_up] and [n_experts, hidden], f32,
  // f16 or bf16, contiguous, on the context's device; in the layout of w_gate_up's rows.
  std::optional<View> bias_gate_up, bias_down;
  Precision precision = Precision::Exact;    // f32 x on tensor cores: Exact keeps f32 accuracy
  MatmulIdRoute route = MatmulIdRoute::Auto;  // both GEMMs (Auto: suggest_matmul_id_route's)
  // Where a GEMM takes the direct route (decode), the activation runs in gate_up's epilogue and
  // the slot sum in down's (gate, up and the down rows then stay f32, not rounded to x's dtype
  // between kernels). false: the four-kernel composition. Off by default until its GPU tests and
  // A/B rows have run (docs/STATUS.md).
  bool fuse_decode = false;
};

// Tokens per pass: a larger call runs in passes of this many tokens (in order, on one stream), so
// the workspace stays bounded: kMoeFfnPassTokens x top_k x (3 inter + hidden) x the size of x's
// dtype bytes, plus the grouped route's scratch.
inline constexpr std::uint32_t kMoeFfnPassTokens = 4096;

// x [m, hidden] (f32, f16 or bf16, innermost stride 1, any row stride); w_gate_up [n_experts,
// 2 * inter, hidden] (inter rows without a gate) and w_down [n_experts, hidden, inter], each expert a row-major matrix (any
// expert stride), of one dtype: x's, or 16-bit with an f32 x; ids [m, top_k] u32 / i32 / i64 and
// topk_weights [m, top_k] f32 / f16 / bf16, contiguous; out [m, hidden] of x's dtype, contiguous,
// overlapping no input. Every size, dtype and overlap is checked (InvalidArgument naming the
// values) before anything is enqueued or written. m or top_k of 0: nothing runs (out untouched
// when m is 0; zeros when top_k is 0). Enqueues on ctx's stream; never synchronises. The first
// call of a size allocates workspace: warm up outside CUDA-graph capture (a call that would grow
// it during capture is refused).
Receipt moe_ffn(Context& ctx, const View& x, const View& w_gate_up, const View& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts = {});

// The same FFN on ternary expert stacks (TernaryWeightCache::get_or_upload_experts): w_gate_up
// of [n_experts, 2 * inter, hidden] and w_down of [n_experts, hidden, inter] TQ2_0_g128 weights,
// on ctx's device; the GEMMs are matmul_id_tq2's (its Auto route: opts.route must be Auto); x
// f32, f16 or bf16. On CPU contexts the float64 reference of the decoded weights.
Receipt moe_ffn(Context& ctx, const View& x, const WeightHandle& w_gate_up, const WeightHandle& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts = {});

// The same FFN on FP8 e4m3 experts (llmm::Fp8Experts: codes [n_experts, 2 * inter, hidden] and
// [n_experts, hidden, inter], f32 scales per tensor / channel / 128-block of each expert, as
// DeepSeek-V3 and Qwen3 FP8 checkpoints store them); x f32, f16 or bf16; the GEMMs are
// matmul_id's FP8 routes (direct, or the grouped mma.sync kernel). On CPU contexts the float64
// reference of the dequantized weights.
Receipt moe_ffn(Context& ctx, const View& x, const Fp8Experts& w_gate_up, const Fp8Experts& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts = {});

}  // namespace llmm
