// Seam between gemm_tq2 and the CUDA launchers (src/cuda/ternary/dispatch.cpp; a refusal in
// CPU-only builds). Arguments are validated and the route planned.
#pragma once
#include <functional>

#include "core/ternary/tq2_args.hpp"
#include "llmm/ternary.hpp"

namespace llmm::detail {
// Resolves the route's kernel and lets the context refuse it; only then runs `before` (e.g. the
// host-I/O form's input copy) and launches.
Receipt run_tq2_cuda(Context& ctx, Tq2Route route, const cuda_ternary::Tq2Args& args,
                     const std::function<void()>& before = {});
}  // namespace llmm::detail
