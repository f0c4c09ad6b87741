// Launcher of matmul_id_tq2's reference kernel (host header, no CUDA headers): every output row
// of a, zero rows for out-of-range ids. Throws llmm::Error(ErrorCode::Cuda) naming the kernel
// when the launch fails, ErrorCode::Internal for arguments it does not take.
#pragma once
#include <string>

#include "core/ternary/tq2_moe_args.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_ternary {
std::string tq2_moe_naive_kernel_name(const Tq2MoeArgs& a);  // tq2_moe_naive_<in>_<out>
void launch_tq2_moe_naive(const Tq2MoeArgs& a, StreamHandle stream);
}  // namespace llmm::cuda_ternary
