// Shared device helpers of the dense kernels: element conversions, 16-byte vector unpacking,
// and the host-side launch check. Included by the dense .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "llmm/dtype.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_dense::dev {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// A float8_e4m3fn code (FP8 weights): decoded exactly through f16 (every e4m3 value is one).
struct e4m3 {
  std::uint8_t bits;
};
__device__ __forceinline__ float to_f32(e4m3 x) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3))); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Sum over the 32 lanes of a warp; every lane gets the total (butterfly, fixed order).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Elements of T in one 16-byte vector.
template <class T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// Read-only 16-byte load (p must be 16-byte aligned).
__device__ __forceinline__ uint4 ldg16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// One 32-bit word holding two 16-bit values (low half first in memory) -> two floats.
__device__ __forceinline__ float2 word_to_f32x2(std::uint32_t w, __half) {
  __half2 h;
  static_assert(sizeof(h) == 4);
  memcpy(&h, &w, 4);
  return __half22float2(h);
}
__device__ __forceinline__ float2 word_to_f32x2(std::uint32_t w, __nv_bfloat16) {
  // bf16 -> f32 is exact: the bf16 bits are the top half of the f32 bits.
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// 16 bytes of T -> kVec16<T> floats, in memory order.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& v, float (&f)[kVec16<T>]) {
  if constexpr (sizeof(T) == 1) {  // e4m3: two codes a conversion
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffffu), __NV_E4M3)));
      const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), __NV_E4M3)));
      f[4 * i] = lo.x, f[4 * i + 1] = lo.y, f[4 * i + 2] = hi.x, f[4 * i + 3] = hi.y;
    }
  } else if constexpr (sizeof(T) == 4) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  } else {
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = word_to_f32x2(w[i], T{});
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}

}  // namespace llmm::cuda_dense::dev

namespace llmm::cuda_dense::host {

// Throws ErrorCode::Cuda naming `kernel` when the launch just made failed.
inline void check_launch(const std::string& kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    fail(ErrorCode::Cuda, kernel, ": kernel launch failed: ", cudaGetErrorName(e), " (",
         cudaGetErrorString(e), ")");
  }
}

// Calls f(T{}) with the CUDA element type of a float dtype; false for other dtypes.
template <class F>
bool with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return true;
    case DType::F16: f(__half{}); return true;
    case DType::BF16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

// Multiprocessors of the current device (0 when the query fails: callers then assume 132).
inline int current_sm_count() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return v;
}

inline constexpr std::int64_t kMaxGridYZ = 65535;

}  // namespace llmm::cuda_dense::host
