// matmul_fp8's portable kernel: the weight decoded to x's dtype (the DequantLt route's image).
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/dense/dense_common.cuh"
#include "cuda/fp8/fp8_kernels.hpp"

namespace llmm::cuda_fp8 {
namespace {

namespace dev = cuda_dense::dev;
namespace host = cuda_dense::host;

constexpr int kThreads = 128;

template <class T>
__global__ void __launch_bounds__(kThreads)
    fp8_dequant_kernel(const std::uint8_t* __restrict__ codes, std::int64_t n, std::int64_t k, std::int64_t w_ld,
                       Fp8ScaleKind kind, const float* __restrict__ scales, T* __restrict__ image) {
  const std::int64_t kb = (k + 127) / 128;
  const std::int64_t total = n * k;
  for (std::int64_t t = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; t < total; t += std::int64_t{gridDim.x} * kThreads) {
    const std::int64_t j = t / k, l = t - j * k;
    const float s = kind == Fp8ScaleKind::Tensor ? scales[0] : kind == Fp8ScaleKind::Channel ? scales[j] : scales[(j / 128) * kb + l / 128];
    const __half_raw h = __nv_cvt_fp8_to_halfraw(codes[j * w_ld + l], __NV_E4M3);
    image[t] = dev::from_f32<T>(__half2float(__half(h)) * s);
  }
}

}  // namespace

std::string dequant_kernel_name(const detail::Fp8LaunchArgs& a) { return std::string("fp8_dequant_") + std::string(dtype_name(a.dtype)); }

void launch_dequant(const detail::Fp8LaunchArgs& a, void* image, StreamHandle s) {
  const std::string name = dequant_kernel_name(a);
  if (a.n * a.k == 0) return;
  const unsigned grid = static_cast<unsigned>(std::clamp<std::int64_t>((a.n * a.k + kThreads * 8 - 1) / (kThreads * 8), 1, 132 * 32));
  host::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    fp8_dequant_kernel<T><<<grid, kThreads, 0, s>>>(a.codes, a.n, a.k, a.w_ld, a.kind, a.scales, static_cast<T*>(image));
  });
  host::check_launch(name);
}

}  // namespace llmm::cuda_fp8
