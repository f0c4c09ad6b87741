// Launchers of the Hopper tiled engine's instances. Host header, no CUDA headers: raw pointers,
// sizes and strides (already validated by the public op), a launch configuration from
// core/engine/tiled_sm90_plan.hpp, the stream. Each throws llmm::Error(ErrorCode::Cuda) naming
// the kernel when a tensor map or the launch fails, and ErrorCode::Internal when given a problem
// its refusal function rejects (a router bug). None synchronizes or allocates.
#pragma once
#include "core/engine/tiled_sm90_plan.hpp"
#include "core/dense/dense_args.hpp"
#include "core/fp8/fp8_launch.hpp"
#include "core/moe/moe_args.hpp"
#include "core/ternary/tq2_args.hpp"
#include "core/ternary/tq2_moe_args.hpp"
#include "llmm/context.hpp"

namespace llmm::engine {

// c[b] = a[b] . b[b]^T (DenseArgs with !a_trans, b_trans, f16/bf16, or f32 with exact: 3xTF32);
// `l` from tiled_sm90_dense_launch (or _launch_at).
void launch_tiled_sm90_dense(const cuda_dense::DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream);

// The grouped route's GEMM, after launch_moe_map on the same stream (counts and rows written);
// `l` from tiled_sm90_moe_launch.
void launch_tiled_sm90_moe(const cuda_moe::MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream);
// Its FP8 instance (e4m3 weights with g.w_scales, bf16 input, staged rows only), which
// launch_tiled_sm90_moe hands F8E4M3 weights to.
void launch_tiled_sm90_moe_fp8(const cuda_moe::MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream);

// matmul_fp8's tiled_sm90 route: y = x . dequant(w)^T (a.codes [n, k] with a.scales, y [m, n]
// in a.dtype) over x's e4m3 codes, `rows` rows (>= m) of codes_ld bytes at act_codes, and their
// scales [ceil(k / 128)][scales_ld] at act_scales (token-major, scales_ld % 4 == 0): the W8A8
// quantization's output in the workspace (rows = scales_ld = m rounded up to 4, codes_ld = k),
// or the caller's (Fp8ActivationView: rows = m); `l` from tiled_sm90_dense_w8a8_launch.
struct Fp8ActTiles {
  const std::uint8_t* codes = nullptr;
  std::int64_t codes_ld = 0, rows = 0;
  const float* scales = nullptr;
  std::int64_t scales_ld = 0;
};
void launch_tiled_sm90_dense_w8a8(const detail::Fp8LaunchArgs& a, const Fp8ActTiles& x, const TiledSm90Launch& l,
                                  StreamHandle stream);

// out = x . W^T with W [n, k] decoded from g.codes / g.scales_t by the consumers; g.in is the f16
// activation [m, k] (g.in_dtype F16, 16-byte aligned base, in_ld % 8 == 0), g.out f32/f16/bf16;
// alpha: nullptr or device floats [m], alpha[i] multiplying output row i (tq2_rowscale's 2^e).
// `l` from tq2_tiled_sm90_plan.
// With K in parts (l.parts > 1): `slots` (tiled_sm90_tq2_split_slot_bytes) and `counters`
// (tiled_sm90_tq2_split_counter_bytes), which this zeroes on the stream before the kernel.
void launch_tiled_sm90_tq2(const cuda_ternary::Tq2Args& g, const float* alpha, const TiledSm90Launch& l,
                           StreamHandle stream, float* slots = nullptr, std::uint32_t* counters = nullptr);

// matmul_id_tq2's grouped GEMM over a stack of ternary experts, after launch_moe_map and
// launch_moe_stage_rows (or tq2_rowscale_stage) on the same stream (a.g's counts, rows and f16
// staged rows written); alpha: nullptr or device floats [m * top_k], alpha[i] multiplying the
// output of staged row i (its power-of-two scale); `l` from tiled_sm90_tq2_moe_launch.
void launch_tiled_sm90_tq2_moe(const cuda_ternary::Tq2MoeArgs& a, const float* alpha, const TiledSm90Launch& l,
                               StreamHandle stream);

}  // namespace llmm::engine
