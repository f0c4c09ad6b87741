// zero_fill: the k == 0 product, all zeros, by cudaMemset2DAsync (a copy-engine node in a graph,
// no kernel). Zero bits are +0.0 in f32, f16 and bf16.
#include <cuda_runtime.h>

#include "cuda/dense/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_dense {

void launch_zero_fill(const DenseArgs& g, StreamHandle stream) {
  const std::string name = zero_fill_name(g);
  if (g.m < 0 || g.n < 0 || g.batch < 0 || g.k != 0) fail(ErrorCode::Internal, name, ": needs k == 0 and sizes >= 0");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const std::size_t es = dtype_size(g.dtype), width = static_cast<std::size_t>(g.n) * es;
  // One row: any row stride; else rows g.c_ld apart (validated >= n).
  const std::size_t pitch = g.m == 1 ? width : static_cast<std::size_t>(g.c_ld) * es;
  // Batches laid end to end are one taller matrix: one memset.
  const bool one = g.batch == 1 || (g.m > 1 && g.c_batch == g.m * g.c_ld);
  const std::int64_t calls = one ? 1 : g.batch, rows = one ? g.m * g.batch : g.m;
  auto* c = static_cast<unsigned char*>(g.c);
  for (std::int64_t b = 0; b < calls; ++b) {
    const cudaError_t e = cudaMemset2DAsync(c + static_cast<std::size_t>(b * g.c_batch) * es, pitch, 0, width,
                                            static_cast<std::size_t>(rows), stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::Cuda, name, ": cudaMemset2DAsync failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    }
  }
}

}  // namespace llmm::cuda_dense
