// Seam between matmul_id and the CUDA launchers (src/cuda/moe/dispatch.cpp; a refusal in
// CPU-only builds). Everything is validated; every kernel of the route is resolved and offered
// to ctx.check_launchable before the first launch.
#pragma once
#include "core/moe/moe_args.hpp"
#include "llmm/moe.hpp"

namespace llmm::detail {
Receipt run_matmul_id_cuda(Context& ctx, MatmulIdRoute route, const cuda_moe::MoeArgs& args,
                           MatmulIdGroupedKernel grouped_kernel);

// The direct kernel with a fused epilogue (args.fusion, moe_ffn's decode): enqueues it and notes
// the launch. Its name (moe_direct_kernel_name) was offered to check_launchable by the caller,
// with every other kernel of the call, before the first launch.
void launch_moe_direct_fused(Context& ctx, const cuda_moe::MoeArgs& args);
}  // namespace llmm::detail
