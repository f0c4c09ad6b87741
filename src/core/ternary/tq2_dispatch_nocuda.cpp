// CPU-only build: CUDA contexts cannot exist, so this is unreachable; it refuses clearly.
#include "core/ternary/tq2_dispatch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
Receipt run_tq2_cuda(Context&, Tq2Route, const cuda_ternary::Tq2Args&, const std::function<void()>&) {
  fail(ErrorCode::Unsupported, "gemm_tq2: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace llmm::detail
