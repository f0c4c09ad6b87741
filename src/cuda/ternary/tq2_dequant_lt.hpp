// The tq2_dequant_lt route of gemm_tq2: the weight dequantized to f16 chunk by chunk, cuBLASLt
// GEMMs on tensor cores (plan: core/ternary/tq2_dequant_lt_plan.hpp). Host header.
#pragma once
#include <functional>

#include "core/ternary/tq2_args.hpp"
#include "llmm/matmul.hpp"

namespace llmm::detail {

// Resolves everything first (plan, workspace, cuBLASLt plans and workspace, every kernel name
// through ctx.check_launchable); only then runs `before` and enqueues the kernels on ctx.stream().
// Refuses a caller workspace smaller than tq2_workspace_bytes or not 256-byte aligned.
Receipt run_tq2_dequant_lt(Context& ctx, const cuda_ternary::Tq2Args& args, const std::function<void()>& before);

}  // namespace llmm::detail
