// gemm_tq2's tiled_sm90 and tiled_sm90_splitk routes: the Hopper tiled engine with the TQ2 decoder
// (plan: core/ternary/tq2_tiled_sm90_plan.hpp). Host header.
#pragma once
#include <functional>

#include "core/ternary/tq2_args.hpp"
#include "llmm/matmul.hpp"

namespace llmm::detail {

// Resolves the plan, the workspace (bf16 and f32 inputs; split: K in parts) and every kernel name through
// ctx.check_launchable; only then runs `before` and enqueues on ctx.stream(). Refuses (Unsupported)
// an f16 input that is not 16-byte aligned or whose row stride is not a multiple of 8, and a
// caller workspace smaller than tq2_workspace_bytes or not 256-byte aligned.
Receipt run_tq2_tiled_sm90(Context& ctx, const cuda_ternary::Tq2Args& args, const std::function<void()>& before,
                           bool split);

}  // namespace llmm::detail
