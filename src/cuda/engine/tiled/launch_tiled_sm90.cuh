// Host side of one tiled-engine launch, shared by the instances: the shared-memory opt-in and
// the launch itself, each failure named after the kernel.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "core/engine/tiled_sm90_plan.hpp"
#include "cuda/dense/dense_common.cuh"
#include "llmm/error.hpp"

namespace llmm::engine {

template <class Params>
void launch_tiled_sm90(void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params), const CUtensorMap& tm_w,
                       const CUtensorMap& tm_x, const CUtensorMap& tm_x_narrow, const Params& p, const TiledSm90Launch& l,
                       StreamHandle stream, const std::string& name) {
  // Per device and cheap (not a stream operation, fine under graph capture): set every launch.
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem_bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::Cuda, name, ": cannot reserve ", l.smem_bytes, " bytes of shared memory: ", cudaGetErrorString(e));
  }
  kernel<<<l.grid, kTiledThreads, l.smem_bytes, stream>>>(tm_w, tm_x, tm_x_narrow, p);
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::engine
