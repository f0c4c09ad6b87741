// Launchers of matmul_fp8's own kernels (host header, no CUDA headers). Arguments are validated
// and planned by llmm::matmul_fp8; each launcher throws llmm::Error(Cuda) naming the kernel when
// the launch fails. None synchronizes or allocates.
#pragma once
#include <cstdint>
#include <string>

#include "core/fp8/fp8_launch.hpp"

namespace llmm::cuda_fp8 {

// The streaming gemv with the e4m3 decoder (gemv_wide_kernel): y = x . dequant(w)^T for m <= 16.
std::string gemv_e4m3_kernel_name(const detail::Fp8LaunchArgs& a, int vecs, int k_lanes);
void launch_gemv_e4m3(const detail::Fp8LaunchArgs& a, int vecs, int k_lanes, int grid_x, StreamHandle s);

// The streaming decode on tensor cores (gemv_mma_e4m3_kernel): m <= 16, f16/bf16 x, k % 16 == 0,
// 16-byte aligned rows; k_warps warps along K per 16-row tile (1, 2, 4, 8).
std::string gemv_mma_e4m3_kernel_name(const detail::Fp8LaunchArgs& a, int k_warps);
void launch_gemv_mma_e4m3(const detail::Fp8LaunchArgs& a, int k_warps, StreamHandle s);

// The W8A8 route's operand preparation, one kernel: x quantized per token (groups of 128 for the
// block kind, whole rows otherwise; quantize_fp8_activations' rule, bit for bit) into the
// workspace's codes [m, k] and scales [groups][m]; the weight scales as cuBLASLt reads them
// (block kind: rows padded to layout.w_scale_ld; tensor kind: broadcast to n channels); for the
// TiledSm90 route (layout.act_groups128) groups of 128 for every kind and no weight scales.
std::string quantize_kernel_name(const detail::Fp8LaunchArgs& a, bool groups128 = false);  // groups128: TiledSm90's
void launch_quantize(const detail::Fp8LaunchArgs& a, const detail::Fp8WorkspaceLayout& layout, StreamHandle s);

// DequantLt's weight image: image[j, l] = e4m3(code) * scale in x's dtype, [n, k] contiguous.
std::string dequant_kernel_name(const detail::Fp8LaunchArgs& a);
void launch_dequant(const detail::Fp8LaunchArgs& a, void* image, StreamHandle s);

}  // namespace llmm::cuda_fp8
