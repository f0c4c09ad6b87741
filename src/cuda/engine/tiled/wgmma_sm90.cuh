// PTX building blocks of the Hopper tiled engine beyond bulk_copy_sm90.cuh: wgmma shared-memory
// descriptors and group control, warpgroup register reallocation, 3D tensor-map copies and the
// generic-to-async proxy fence. Included by *_sm90a.cu only.
#pragma once
#include <cstdint>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/engine/tiled/wgmma_ops_sm90.cuh"

namespace llmm::ptx {

// Descriptor of a K-major operand tile in shared memory written with the 128-byte swizzle (rows
// of 128 bytes, 8-row groups 1024 bytes apart): start address >> 4, leading byte offset 1 (unused
// by swizzled K-major layouts), stride byte offset 1024 >> 4, layout type 1 (128-byte swizzle).
// The tile base must be 1024-byte aligned; the k-th 16-element slice of a row starts 32 bytes
// further, which the swizzle resolves per row: add 2 * k to the descriptor.
__device__ __forceinline__ std::uint64_t wgmma_desc_sw128_addr(std::uint32_t smem_address) {
  const std::uint64_t addr = smem_address;
  return ((addr & 0x3FFFF) >> 4) | (std::uint64_t{1} << 16) | (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}
__device__ __forceinline__ std::uint64_t wgmma_desc_sw128(const void* tile) { return wgmma_desc_sw128_addr(smem_addr(tile)); }

// Orders this thread's register and shared-memory accesses before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across a wgmma boundary.
template <int R>
__device__ __forceinline__ void wgmma_fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Warpgroup register reallocation (the whole warpgroup executes it).
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// One box of a 3D tensor map (coordinates innermost first) to shared `dst`, completing on `bar`;
// out-of-bounds elements are zero-filled and counted.
__device__ __forceinline__ void tensor_copy_3d_g2s(void* dst, const void* tmap, int c0, int c1, int c2, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}
// The same for a 2D map, without an L2 hint.
__device__ __forceinline__ void tensor_copy_2d_g2s(void* dst, const void* tmap, int c0, int c1, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(tmap), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// Bytes of dynamic shared memory this block was launched with.
__device__ __forceinline__ std::uint32_t dynamic_smem_bytes() {
  std::uint32_t r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void prefetch_tensor_map(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// Four 8x8 b16 matrices to shared memory, transposed: register i of each lane holds its two
// elements (row lane / 4, columns 2 (lane % 4) + 0, 1) of matrix i, as an mma fragment does;
// lanes 8 i .. 8 i + 7 give the addresses of matrix i's 8 stored rows (16 bytes each), stored row
// r holding the fragment's column r.
__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t addr, std::uint32_t r0, std::uint32_t r1, std::uint32_t r2,
                                                  std::uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(std::uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// Makes this thread's generic-proxy shared-memory writes (st.shared, landed cp.async) visible to
// the async proxy (wgmma operand reads, TMA).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace llmm::ptx
