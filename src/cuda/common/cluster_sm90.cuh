// Thread-block clusters (sm_90): rank, the cluster barrier and reads of another block's shared
// memory (DSMEM). Compiled for any target; the instructions exist on sm_90 and later only, so
// callers reach them only in kernels launched with a cluster on such a device (elsewhere they
// trap).
#pragma once
#include <cstdint>

namespace llmm::ptx {

__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

// Every thread of every block in the cluster arrives, then waits for all: shared-memory writes
// before it (release) are visible to DSMEM reads after it (acquire).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The cluster barrier without memory ordering: for a barrier that only has to keep blocks (and
// their shared memory) alive until every DSMEM read before it has returned its value.
__device__ __forceinline__ void cluster_sync_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The shared-space address `addr` (of this block's layout) in block `rank` of the cluster.
__device__ __forceinline__ std::uint32_t cluster_map_shared(std::uint32_t addr, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
#else
  __trap();
  return 0;
#endif
}

__device__ __forceinline__ float ld_shared_cluster_f32(std::uint32_t cluster_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_addr) : "memory");
  return v;
#else
  __trap();
  return 0.0f;
#endif
}

}  // namespace llmm::ptx
