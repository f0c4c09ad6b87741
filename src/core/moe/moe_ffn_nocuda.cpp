// CPU-only build: CUDA contexts cannot exist, so these are unreachable; they refuse clearly.
#include "core/moe/moe_ffn_launch.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_moe {
std::string moe_ffn_gated_kernel_name(const MoeGatedArgs&) { return "moe_ffn_gated"; }
void launch_moe_ffn_gated(const MoeGatedArgs&, StreamHandle) {
  fail(ErrorCode::Unsupported, "moe_ffn: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
std::string moe_ffn_combine_kernel_name(const MoeCombineArgs&) { return "moe_ffn_combine"; }
void launch_moe_ffn_combine(const MoeCombineArgs&, StreamHandle) {
  fail(ErrorCode::Unsupported, "moe_ffn: llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace llmm::cuda_moe
