// Host side of the sm_90 streaming launches. Programmatic dependent launch (PDL): a kernel launched this way may start while
// the kernel before it on the stream is still running, so it must call ptx::grid_dependency_wait
// (bulk_copy_sm90.cuh) before it reads that kernel's output. One definition for every sm_90
// launcher that chains kernels (the streaming engine's staging kernel and its consumers).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <utility>

namespace llmm::cuda_common {

// Opts `kernel` in to `smem_bytes` of dynamic shared memory and asks for the largest shared-memory
// carveout, so that as many blocks share an SM as their shared memory allows. Without the
// carveout the driver sized the SM's shared memory for one block: session 10's ncu of
// tq2_moe_stream_sm90 (115 KB a block, configured for two per SM) showed "Block Limit Shared Mem
// 1" and two waves of blocks.
template <class... Params>
void set_smem_bytes(void (*kernel)(Params...), int smem_bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

// Whether the chained launches that may fall back to plain ones (the MoE grouped route: moe_map
// -> moe_stage_rows -> the engine) use PDL: on a device of compute capability 9.0 or above, unless
// LLMM_DISABLE_PDL=1 is set (read once; for A/B measurements of what PDL saves).
inline bool pdl_enabled() {
  static const bool disabled = [] {
    const char* v = std::getenv("LLMM_DISABLE_PDL");
    return v != nullptr && v[0] == '1';
  }();
  int dev = 0, major = 0;
  return !disabled && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace llmm::cuda_common
