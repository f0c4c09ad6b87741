// llmm-probe-tma-rows: can the MoE engine gather token rows with one TMA box per row?
// (docs/performance.md, "The fused MoE map", Next.) The gathering producer writes rows with
// cp.async into the 128-byte-swizzled layout a [rows][64] box would have; a 1-row box written at
// shared offset 128 r lands in that layout only if the copy engine swizzles by the shared address
// (bits 4-6 ^ bits 7-9), not by the row's index within its box. This probe, on one block:
//   1. one 64-row box of a [64][64] 16-bit matrix into buffer B (the reference layout);
//   2. 64 one-row boxes into buffer A, row r of A from matrix row src(r) = (37 r + 11) % 64 (a
//      gather), at offset 128 r;
//   3. A and B copied out; the host checks B against the documented pattern (unit u of row r at
//      u ^ (r % 8)) and A row r against B's pattern applied to matrix row src(r).
// Then it times (clock64, one thread issuing) 256 one-row boxes into one stage, the issue cost a
// 256-row tile would pay per k-block, against one 256-row box, and the same rows issued by 32 and
// by 128 threads together. (Measured 2026-12-03: the layout holds; one thread issues a row box
// every ~44 cycles.) Prints one line each; exit 0 when
// the rows land right, 1 when not, 2 on a CUDA error (a misaligned-address fault says the copy
// engine refuses 128-byte-aligned swizzled targets). A probe of the hardware, not a library test.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/tiled/wgmma_sm90.cuh"

namespace {

constexpr int kRows = 64;       // the layout test's rows (8 KB a buffer)
constexpr int kTimedRows = 256; // the timed stage (32 KB)

__device__ int src_row(int r) { return (37 * r + 11) % kRows; }

__global__ void probe_layout(const __grid_constant__ CUtensorMap tm_rows, const __grid_constant__ CUtensorMap tm_box,
                             std::uint16_t* out_a, std::uint16_t* out_b) {
  extern __shared__ std::uint8_t raw[];
  std::uint8_t* const base = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  std::uint8_t* const a = base;
  std::uint8_t* const b = base + kRows * 128;
  __shared__ std::uint64_t bar;
  if (threadIdx.x == 0) {
    llmm::ptx::mbar_init(&bar, 1);
    llmm::ptx::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    llmm::ptx::mbar_arrive_expect_tx(&bar, 2 * kRows * 128);
    llmm::ptx::tensor_copy_3d_g2s(b, &tm_box, 0, 0, 0, &bar);
    for (int r = 0; r < kRows; ++r) llmm::ptx::tensor_copy_3d_g2s(a + r * 128, &tm_rows, 0, src_row(r), 0, &bar);
  }
  llmm::ptx::mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < kRows * 64; i += blockDim.x) {
    out_a[i] = reinterpret_cast<const std::uint16_t*>(a)[i];
    out_b[i] = reinterpret_cast<const std::uint16_t*>(b)[i];
  }
}

// Cycles for one thread to issue n one-row boxes (rows r, r + 1, ... of a [kTimedRows][64]
// matrix) and for the stage to land, and the same for one n-row box.
__global__ void probe_issue(const __grid_constant__ CUtensorMap tm_rows, const __grid_constant__ CUtensorMap tm_box,
                            long long* cycles) {
  extern __shared__ std::uint8_t raw[];
  std::uint8_t* const st = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  __shared__ std::uint64_t bar[2];
  if (threadIdx.x != 0) return;
  llmm::ptx::mbar_init(&bar[0], 1);
  llmm::ptx::mbar_init(&bar[1], 1);
  llmm::ptx::mbar_init_fence();
  long long t0 = clock64();
  llmm::ptx::mbar_arrive_expect_tx(&bar[0], kTimedRows * 128);
  for (int r = 0; r < kTimedRows; ++r) llmm::ptx::tensor_copy_3d_g2s(st + r * 128, &tm_rows, 0, r, 0, &bar[0]);
  long long t1 = clock64();
  llmm::ptx::mbar_wait(&bar[0], 0);
  long long t2 = clock64();
  llmm::ptx::mbar_arrive_expect_tx(&bar[1], kTimedRows * 128);
  llmm::ptx::tensor_copy_3d_g2s(st, &tm_box, 0, 0, 0, &bar[1]);
  long long t3 = clock64();
  llmm::ptx::mbar_wait(&bar[1], 0);
  long long t4 = clock64();
  cycles[0] = t1 - t0, cycles[1] = t2 - t0, cycles[2] = t3 - t2, cycles[3] = t4 - t2;
}

// The same 256 one-row boxes issued by `blockDim.x` threads together (rows tid, tid + blockDim.x,
// ...): whether the copy engine takes them faster than one thread issues them.
__global__ void probe_issue_threads(const __grid_constant__ CUtensorMap tm_rows, long long* cycles) {
  extern __shared__ std::uint8_t raw[];
  std::uint8_t* const st = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  __shared__ std::uint64_t bar;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    llmm::ptx::mbar_init(&bar, 1);
    llmm::ptx::mbar_init_fence();
  }
  __syncthreads();
  long long t0 = clock64();
  if (tid == 0) llmm::ptx::mbar_arrive_expect_tx(&bar, kTimedRows * 128);
  __syncthreads();
  for (int r = tid; r < kTimedRows; r += blockDim.x) llmm::ptx::tensor_copy_3d_g2s(st + r * 128, &tm_rows, 0, r, 0, &bar);
  __syncthreads();
  long long t1 = clock64();
  llmm::ptx::mbar_wait(&bar, 0);
  long long t2 = clock64();
  if (tid == 0) cycles[0] = t1 - t0, cycles[1] = t2 - t0;
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("probe-tma-rows: CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  using llmm::cuda_common::make_tensor_map_3d_sw128;
  std::vector<std::uint16_t> m(kTimedRows * 64);
  for (int r = 0; r < kTimedRows; ++r)
    for (int c = 0; c < 64; ++c) m[r * 64 + c] = static_cast<std::uint16_t>(r * 64 + c);  // distinct: its own index
  std::uint16_t *dm = nullptr, *da = nullptr, *db = nullptr;
  long long* dc = nullptr;
  if (!ok(cudaMalloc(&dm, m.size() * 2), "cudaMalloc") || !ok(cudaMalloc(&da, kRows * 128), "cudaMalloc") ||
      !ok(cudaMalloc(&db, kRows * 128), "cudaMalloc") || !ok(cudaMalloc(&dc, 4 * sizeof(long long)), "cudaMalloc"))
    return 2;
  if (!ok(cudaMemcpy(dm, m.data(), m.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy")) return 2;
  try {
    const std::uint64_t dims[3] = {64, kTimedRows, 1}, strides[2] = {128, 128ull * kTimedRows};
    const std::uint32_t one[3] = {64, 1, 1}, box64[3] = {64, kRows, 1}, box256[3] = {64, kTimedRows, 1};
    const CUtensorMap tm_one = make_tensor_map_3d_sw128(dm, 2, dims, strides, one, "probe-tma-rows");
    const CUtensorMap tm_64 = make_tensor_map_3d_sw128(dm, 2, dims, strides, box64, "probe-tma-rows");
    const CUtensorMap tm_256 = make_tensor_map_3d_sw128(dm, 2, dims, strides, box256, "probe-tma-rows");
    const int smem1 = 2 * kRows * 128 + 1024, smem2 = kTimedRows * 128 + 1024;
    if (!ok(cudaFuncSetAttribute(probe_issue, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2), "cudaFuncSetAttribute"))
      return 2;
    probe_layout<<<1, 128, smem1>>>(tm_one, tm_64, da, db);
    if (!ok(cudaDeviceSynchronize(), "probe_layout")) return 2;
    std::vector<std::uint16_t> a(kRows * 64), b(kRows * 64);
    if (!ok(cudaMemcpy(a.data(), da, a.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy") ||
        !ok(cudaMemcpy(b.data(), db, b.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy"))
      return 2;
    int box_bad = 0, rows_bad = 0;
    for (int r = 0; r < kRows; ++r) {
      const int s = (37 * r + 11) % kRows;
      for (int u = 0; u < 8; ++u)
        for (int e = 0; e < 8; ++e) {
          const int from = (u ^ (r % 8)) * 8 + e;  // the documented pattern: unit u of line r holds unit u ^ (r % 8)
          box_bad += b[r * 64 + u * 8 + e] != m[r * 64 + from];
          rows_bad += a[r * 64 + u * 8 + e] != m[s * 64 + from];
        }
    }
    std::printf("probe-tma-rows: 64-row box in the documented 128-byte pattern: %s (%d of 4096 elements off)\n",
                box_bad ? "NO" : "yes", box_bad);
    std::printf("probe-tma-rows: 64 gathered one-row boxes at offset 128 r land in the same layout: %s (%d of 4096 off)\n",
                rows_bad ? "NO" : "yes", rows_bad);
    probe_issue<<<1, 32, smem2>>>(tm_one, tm_256, dc);
    if (!ok(cudaDeviceSynchronize(), "probe_issue")) return 2;
    long long c[4];
    if (!ok(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost), "cudaMemcpy")) return 2;
    std::printf("probe-tma-rows: 256 one-row boxes: %lld cycles to issue, %lld to land; one 256-row box: %lld / %lld\n", c[0],
                c[1], c[2], c[3]);
    if (!ok(cudaFuncSetAttribute(probe_issue_threads, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2), "cudaFuncSetAttribute"))
      return 2;
    for (const int threads : {32, 128}) {
      probe_issue_threads<<<1, threads, smem2>>>(tm_one, dc);
      if (!ok(cudaDeviceSynchronize(), "probe_issue_threads")) return 2;
      if (!ok(cudaMemcpy(c, dc, 2 * sizeof(long long), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 2;
      std::printf("probe-tma-rows: 256 one-row boxes issued by %d threads: %lld cycles to issue, %lld to land\n", threads, c[0], c[1]);
    }
    return box_bad || rows_bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("probe-tma-rows: %s\n", e.what());
    return 2;
  }
}
