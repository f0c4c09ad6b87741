// CPU-only build: CUDA contexts cannot exist, so this is unreachable; it refuses clearly.
#include "core/dense/dense_dispatch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
Receipt run_dense_cuda(Context&, const DensePlan&, const cuda_dense::DenseArgs&) {
  fail(ErrorCode::Unsupported, "matmul: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace llmm::detail
