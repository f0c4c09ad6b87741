// gemm_naive: the obviously-right reference kernel. One thread per output element, f32
// accumulation in increasing l, every layout/stride/batch through the DenseArgs formula.
#include <algorithm>

#include "cuda/dense/dense_common.cuh"
#include "cuda/dense/launch.hpp"

namespace llmm::cuda_dense {
namespace {

template <class T>
__global__ void __launch_bounds__(256) gemm_naive_kernel(DenseArgs p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* c = static_cast<T*>(p.c);
  // Grid-stride on every axis: any m, n, batch fit whatever the grid limits.
  for (std::int64_t bz = blockIdx.z; bz < p.batch; bz += gridDim.z) {
    const T* ab = a + bz * p.a_batch;
    const T* bb = b + bz * p.b_batch;
    T* cb = c + bz * p.c_batch;
    for (std::int64_t i = std::int64_t{blockIdx.y} * blockDim.y + threadIdx.y; i < p.m;
         i += std::int64_t{gridDim.y} * blockDim.y) {
      for (std::int64_t j = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < p.n;
           j += std::int64_t{gridDim.x} * blockDim.x) {
        float acc = 0.0f;
        for (std::int64_t l = 0; l < p.k; ++l) {
          const T av = p.a_trans ? ab[l * p.a_ld + i] : ab[i * p.a_ld + l];
          const T bv = p.b_trans ? bb[j * p.b_ld + l] : bb[l * p.b_ld + j];
          acc = fmaf(dev::to_f32(av), dev::to_f32(bv), acc);
        }
        cb[i * p.c_ld + j] = dev::from_f32<T>(acc);
      }
    }
  }
}

}  // namespace

void launch_gemm_naive(const DenseArgs& args, StreamHandle stream) {
  const std::string name = gemm_naive_kernel_name(args);
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0) {
    fail(ErrorCode::Internal, name, ": negative size");
  }
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  const dim3 block(16, 16);
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((args.n + 15) / 16, 1 << 30)),
                  static_cast<unsigned>(std::min<std::int64_t>((args.m + 15) / 16, host::kMaxGridYZ)),
                  static_cast<unsigned>(std::min<std::int64_t>(args.batch, host::kMaxGridYZ)));
  const bool ok = host::with_float_type(args.dtype, [&](auto t) {
    using T = decltype(t);
    gemm_naive_kernel<T><<<grid, block, 0, stream>>>(args);
  });
  if (!ok) fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(args.dtype));
  host::check_launch(name);
}

}  // namespace llmm::cuda_dense
