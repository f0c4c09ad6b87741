// PTX building blocks of the Hopper (sm_90) streaming kernels: shared-memory mbarriers, bulk and
// tensor-map copies global -> shared that complete on an mbarrier (the copy engine: no registers,
// no per-lane address work; measured, one instruction costs the SM ~40-80 cycles, so each should
// move kilobytes, not a 256-byte row), and programmatic dependent launch (PDL) controls.
// One definition each. Included by *_sm90a.cu only (the instructions need sm_90).
#pragma once
#include <cstdint>

#include "cuda/common/mma_sync.cuh"  // smem_addr
#include "cuda/common/pdl_device.cuh"

namespace llmm::ptx {

// --- mbarrier (shared::cta, 64-bit) -----------------------------------------------------------

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the copy engine) and the other
// threads; follow with a block barrier.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` more transaction bytes for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts its phase
// "parity 1" as completed, so a producer's first wait on an empty slot passes).
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  const std::uint32_t addr = smem_addr(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// --- bulk copy -------------------------------------------------------------------------------

// `bytes` (a multiple of 16) from global `src` (16-byte aligned) to shared `dst` (16-byte
// aligned); completion counts `bytes` transaction bytes on `bar`. The L2 policy evicts these
// lines first: a weight streamed once should not push the activation or the outputs out of L2.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar,
                                              std::uint64_t l2_policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_policy)
      : "memory");
}
// One box of a 2D tensor map (coordinates innermost first, in elements) to shared `dst` (128-byte
// aligned, 1024 with swizzle); completion counts the whole box's bytes on `bar` (out-of-bounds
// elements are zero-filled and counted too). `tmap` is the kernel's __grid_constant__ parameter.
__device__ __forceinline__ void tensor_copy_2d_g2s(void* dst, const void* tmap, int c0, int c1, std::uint64_t* bar,
                                                   std::uint64_t l2_policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(tmap), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "l"(l2_policy)
      : "memory");
}
__device__ __forceinline__ std::uint64_t l2_evict_last_policy() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// Normal priority: a line several blocks may read (an expert that several routed rows use).
__device__ __forceinline__ std::uint64_t l2_evict_normal_policy() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// --- programmatic dependent launch: grid_dependency_wait, grid_launch_dependents (pdl_device.cuh)

// Named barrier over `threads` threads (a multiple of 32) of the block, id 1..15 (0 is
// __syncthreads'): lets the consumer warps meet without the producer.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace llmm::ptx
