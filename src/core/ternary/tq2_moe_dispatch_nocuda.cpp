// CPU-only build: CUDA contexts cannot exist, so this is unreachable; it refuses clearly.
#include "core/ternary/tq2_moe_dispatch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
Receipt run_matmul_id_tq2_cuda(Context&, Tq2MoeRoute, const cuda_ternary::Tq2MoeArgs&) {
  fail(ErrorCode::Unsupported, "matmul_id_tq2: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace llmm::detail
