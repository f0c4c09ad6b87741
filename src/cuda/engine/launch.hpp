// Launchers of the Hopper tiled engine's instances. Host header, no CUDA headers: raw pointers,
// sizes and strides (already validated by the public op), a launch configuration from
// core/engine/tiled_sm90_plan.hpp, the stream. Each throws llmm::Error(ErrorCode::Cuda) naming
// the kernel when a tensor map or the launch fails, and ErrorCode::Internal when given a problem
// its refusal function rejects (a router bug). None synchronizes or allocates.
#pragma once
#include "core/engine/tiled_sm90_plan.hpp"
#include "cuda/dense/dense_args.hpp"
#include "cuda/moe/moe_args.hpp"
#include "llmm/context.hpp"

namespace llmm::engine {

// c[b] = a[b] . b[b]^T (DenseArgs with !a_trans, b_trans, f16/bf16); `l` from tiled_sm90_dense_launch.
void launch_tiled_sm90_dense(const cuda_dense::DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream);

// The grouped route's GEMM, after launch_moe_map on the same stream (counts and rows written);
// `l` from tiled_sm90_moe_launch.
void launch_tiled_sm90_moe(const cuda_moe::MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream);

}  // namespace llmm::engine
