// CPU-only build: CUDA contexts cannot exist, so this is unreachable; it refuses clearly.
#include "core/moe/moe_dispatch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
Receipt run_matmul_id_cuda(Context&, MatmulIdRoute, const cuda_moe::MoeArgs&, MatmulIdGroupedKernel) {
  fail(ErrorCode::Unsupported, "matmul_id: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
void launch_moe_direct_fused(Context&, const cuda_moe::MoeArgs&) {
  fail(ErrorCode::Unsupported, "moe_ffn: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace llmm::detail
