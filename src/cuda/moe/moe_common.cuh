// Shared device helpers of the MoE kernels (on top of the dense ones: conversions, 16-byte
// loads, warp_sum) and the host-side argument checks of the launchers. MoE .cu files only.
#pragma once
#include <cstdint>
#include <string>

#include "core/moe/moe_kernels.hpp"
#include "cuda/common/pdl_device.cuh"  // ptx::grid_launch_dependents / grid_dependency_wait (the launchers use PDL on sm_90)
#include "cuda/moe/expert_id.cuh"  // expert_of
#include "cuda/dense/dense_common.cuh"
#include "core/moe/moe_args.hpp"

namespace llmm::cuda_moe::dev {

using cuda_dense::dev::from_f32;
using cuda_dense::dev::ldg16;
using cuda_dense::dev::to_f32;
using cuda_dense::dev::unpack16;
using cuda_dense::dev::warp_sum;
using cuda_dense::dev::word_to_f32x2;

inline constexpr std::uint32_t kNoRow = 0xffffffffu;

using cuda_dense::dev::e4m3;
template <class TW>
inline constexpr bool kIsE4m3 = std::is_same_v<TW, e4m3>;

// FP8 weights' scales (MoeArgs): the block kind's scale of weight (e, j, l), applied to decoded
// weights; the tensor and channel kinds' scale of output column j, applied to its total (1 for
// the block kind).
__device__ __forceinline__ float w_block_scale(const MoeArgs& a, std::uint32_t e, std::int64_t j, std::int64_t l) {
  const std::int64_t kb = (a.k + 127) / 128;
  return __ldg(a.w_scales + static_cast<std::int64_t>(e) * a.w_scale_expert_stride + (j / 128) * kb + l / 128);
}
__device__ __forceinline__ float w_total_scale(const MoeArgs& a, std::uint32_t e, std::int64_t j) {
  const float* s = a.w_scales + static_cast<std::int64_t>(e) * a.w_scale_expert_stride;
  return a.w_scale_kind == 0 ? __ldg(s) : a.w_scale_kind == 1 ? __ldg(s + j) : 1.0f;
}

// out[idx] = v in the output dtype (f32, f16 or bf16; a runtime switch keeps instantiations
// few: the branch is uniform across the grid).
__device__ __forceinline__ void store_out(void* out, DType t, std::int64_t idx, float v) {
  switch (t) {
    case DType::F16: static_cast<__half*>(out)[idx] = __float2half_rn(v); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(out)[idx] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(out)[idx] = v; break;
  }
}

// out(r, j) in plain IEEE f32 (sequential FMA over k) for expert e: the value of an output that
// a split path (2xTF32 / 3xTF32) turned into NaN, since an Inf hi part leaves a NaN lo part.
template <class TI, class TW>
__device__ __forceinline__ float ieee_dot(const MoeArgs& a, std::int64_t r, std::uint32_t e, std::int64_t j) {
  const std::int64_t tok = r / a.top_k, slot = r - tok * a.top_k;
  const TI* x = static_cast<const TI*>(a.in) + tok * a.in_token_stride + slot * a.in_slot_stride;
  const TW* w = static_cast<const TW*>(a.w) + static_cast<std::int64_t>(e) * a.expert_stride + j * a.k;
  float s = 0.0f;
  for (std::int64_t l = 0; l < a.k; ++l) s = fmaf(to_f32(x[l]), to_f32(w[l]), s);
  return s;
}

// N consecutive values of T at p (16-byte aligned, N * sizeof(T) a multiple of 16) as floats.
template <class T, int N>
__device__ __forceinline__ void load_f32(const T* p, float (&f)[N]) {
  constexpr int PER = static_cast<int>(16 / sizeof(T));
  static_assert(N % PER == 0);
#pragma unroll
  for (int i = 0; i < N / PER; ++i) {
    float tmp[PER];
    unpack16<T>(ldg16(p + i * PER), tmp);
#pragma unroll
    for (int e = 0; e < PER; ++e) f[i * PER + e] = tmp[e];
  }
}

}  // namespace llmm::cuda_moe::dev

namespace llmm::cuda_moe::host {

using cuda_dense::host::check_launch;

inline void require(bool ok, const std::string& kernel, const char* what) {
  if (!ok) fail(ErrorCode::Internal, kernel, ": unsupported arguments: ", what);
}

// Checks common to every MoE launcher (sizes, dtypes, pointers of the direct product).
inline void check_common(const MoeArgs& a, const std::string& kernel) {
  require(a.m >= 0 && a.n >= 0 && a.k >= 0 && a.top_k >= 0 && a.n_experts >= 0, kernel,
          "negative size");
  require(moe_dtypes_supported(a), kernel,
          "dtypes (weights f32/f16/bf16, input f32 or the weight dtype, output f32 or the input dtype)");
  require(a.m == 0 || a.top_k == 0 || a.m <= (std::int64_t{0xffffffff} / a.top_k), kernel,
          "m * top_k must be below 2^32");
  require(a.ids != nullptr && a.out != nullptr, kernel, "null ids or output");
  require(a.k == 0 || a.n_experts == 0 || (a.w != nullptr && a.in != nullptr), kernel, "null weights or input");
  require(a.expert_stride >= 0 && a.in_token_stride >= 0 && a.in_slot_stride >= 0, kernel,
          "negative stride");
}

}  // namespace llmm::cuda_moe::host
