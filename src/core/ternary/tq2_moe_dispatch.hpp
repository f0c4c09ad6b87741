// Seam between matmul_id_tq2 and the CUDA launchers (src/cuda/ternary/tq2_moe_dispatch.cpp; a
// refusal in CPU-only builds). Arguments are validated and the route planned.
#pragma once
#include "core/ternary/tq2_moe_args.hpp"
#include "llmm/ternary_moe.hpp"

namespace llmm::detail {
// Resolves every kernel of the route and lets the context refuse any of them, then launches.
Receipt run_matmul_id_tq2_cuda(Context& ctx, Tq2MoeRoute route, const cuda_ternary::Tq2MoeArgs& args);
}  // namespace llmm::detail
