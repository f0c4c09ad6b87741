// Seam between the host-side dense op and the CUDA launchers (src/cuda/dense/dispatch.cpp, or a
// refusal in CPU-only builds). Everything here is already validated and planned.
#pragma once
#include "core/dense/dense_args.hpp"
#include "llmm/matmul.hpp"

namespace llmm::detail {

// Resolves every kernel of the plan (names, cuBLASLt algorithm), asks ctx.check_launchable for
// each, and only then launches. Returns the receipt.
Receipt run_dense_cuda(Context& ctx, const DensePlan& plan, const cuda_dense::DenseArgs& args);

}  // namespace llmm::detail
