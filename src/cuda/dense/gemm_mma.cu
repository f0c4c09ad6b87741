// launch_gemm_mma: picks the (dtype, math, layout) instantiation of gemm_mma_kernel.
// 16 instantiations: {f16, bf16, tf32, 3xtf32} x {nn, nt, tn, tt}.
#include <algorithm>

#include "cuda/dense/gemm_mma_kernels.cuh"
#include "cuda/dense/launch.hpp"

namespace llmm::cuda_dense {
namespace {

template <class T, bool A_T, bool B_T, bool SPLIT3>
void launch_one(const DenseArgs& args, bool a_vec, bool b_vec, StreamHandle stream,
                const std::string& name) {
  using C = MmaTile<T>;
  constexpr int smem = C::smem_bytes(A_T, B_T);
  auto* kernel = &gemm_mma_kernel<T, A_T, B_T, SPLIT3>;
  // Above the 48 KB default: opt in. Cheap, not a stream operation (fine under graph capture);
  // set on every launch because the attribute is per device.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::Cuda, name, ": cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(e));
  }
  const std::int64_t tiles = ((args.m + C::BM - 1) / C::BM) * ((args.n + C::BN - 1) / C::BN);
  if (tiles > std::int64_t{0x7fffffff}) {
    fail(ErrorCode::Internal, name, ": ", tiles, " tiles exceed one grid (m ", args.m, " n ",
         args.n, ")");
  }
  // blockIdx.z is the batch entry: batches beyond the grid limit go in several launches, each
  // with its pointers advanced to its first entry.
  for (std::int64_t b0 = 0; b0 < args.batch; b0 += host::kMaxGridYZ) {
    DenseArgs chunk = args;
    chunk.batch = std::min(args.batch - b0, host::kMaxGridYZ);
    chunk.a = static_cast<const T*>(args.a) + b0 * args.a_batch;
    chunk.b = static_cast<const T*>(args.b) + b0 * args.b_batch;
    chunk.c = static_cast<T*>(args.c) + b0 * args.c_batch;
    const dim3 grid(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(chunk.batch));
    kernel<<<grid, C::THREADS, smem, stream>>>(chunk, a_vec, b_vec);
    host::check_launch(name);
  }
}

template <class T, bool SPLIT3>
void launch_layout(const DenseArgs& args, bool a_vec, bool b_vec, StreamHandle stream,
                   const std::string& name) {
  if (args.a_trans) {
    if (args.b_trans) launch_one<T, true, true, SPLIT3>(args, a_vec, b_vec, stream, name);
    else launch_one<T, true, false, SPLIT3>(args, a_vec, b_vec, stream, name);
  } else {
    if (args.b_trans) launch_one<T, false, true, SPLIT3>(args, a_vec, b_vec, stream, name);
    else launch_one<T, false, false, SPLIT3>(args, a_vec, b_vec, stream, name);
  }
}

}  // namespace

void launch_gemm_mma(const DenseArgs& args, StreamHandle stream) {
  const std::string name = gemm_mma_kernel_name(args);
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0) {
    fail(ErrorCode::Internal, name, ": negative size");
  }
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  const bool a_vec = gemm_mma_a_vec16(args), b_vec = gemm_mma_b_vec16(args);
  switch (args.dtype) {
    case DType::F16: launch_layout<__half, false>(args, a_vec, b_vec, stream, name); break;
    case DType::BF16: launch_layout<__nv_bfloat16, false>(args, a_vec, b_vec, stream, name); break;
    case DType::F32:
      if (gemm_mma_uses_3xtf32(args)) launch_layout<float, true>(args, a_vec, b_vec, stream, name);
      else launch_layout<float, false>(args, a_vec, b_vec, stream, name);
      break;
    default: fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(args.dtype));
  }
}

}  // namespace llmm::cuda_dense
