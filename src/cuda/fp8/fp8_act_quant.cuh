// The activation quantization of the W8A8 routes, on the device: quantize_fp8_activations' rule
// (include/llmm/fp8.hpp) bit for bit: matmul_fp8's operand preparation (the cublaslt and
// tiled_sm90 routes), and the MoE staging copy of docs/wip/moe_w8a8.patch.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>
#include <limits>

namespace llmm::cuda_fp8 {

// A group's scale from its largest magnitude: NaN when a value is not finite, 1 for an all-zero
// group, else amax / 448 (at least the smallest subnormal).
__device__ __forceinline__ float fp8_act_scale(float amax, bool finite) {
  return !finite ? __int_as_float(0x7fc00000)
         : amax == 0.0f ? 1.0f
                        : fmaxf(amax / 448.0f, std::numeric_limits<float>::denorm_min());
}

// v / s as an e4m3 code, rounded to nearest even, saturated to +-448.
__device__ __forceinline__ std::uint32_t fp8_act_code(float v, float s) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(v / s, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace llmm::cuda_fp8
