// Seam between matmul_id and the CUDA launchers (src/cuda/moe/dispatch.cpp; a refusal in
// CPU-only builds). Everything is validated; every kernel of the route is resolved and offered
// to ctx.check_launchable before the first launch.
#pragma once
#include "core/moe/moe_args.hpp"
#include "llmm/moe.hpp"

namespace llmm::detail {
Receipt run_matmul_id_cuda(Context& ctx, MatmulIdRoute route, const cuda_moe::MoeArgs& args,
                           MatmulIdGroupedKernel grouped_kernel);
}  // namespace llmm::detail
