// gemv_wide kernel: y[v, j] = sum_l x[v, l] * w[j, l] for a few vectors v (x = a, w = b^T),
// both K-contiguous with 16-byte aligned rows. Each warp streams kGemvWideRowsPerWarp weight
// rows once per pass for all NV vectors of the pass, x read through L1 (it is small and every
// warp of the SM reads the same stretch of it). f32 accumulators: NV x 4 per thread.
#pragma once
#include "core/dense/dense_kernels.hpp"
#include "cuda/dense/dense_common.cuh"

namespace llmm::cuda_dense {

inline constexpr int kGemvWideThreads = 128;

struct GemvWideParams {
  DenseArgs args;  // a = x [batch][m][k], b = w [batch][n][k], c = y [batch][m][n]
  int passes;      // vector passes of NV (v0 = pass * NV)
  int k_lanes;     // threads along K per group of weight rows (32, 64, 128)
};

template <class T, int NV>
__global__ void __launch_bounds__(kGemvWideThreads) gemv_wide_kernel(GemvWideParams p) {
  constexpr int VE = dev::kVec16<T>;
  constexpr int R = kGemvWideRowsPerWarp;
  constexpr int NACC = NV * R;
  static_assert(NACC <= 32, "one lane stores each total");
  __shared__ float partial[kGemvWideThreads / 32][NACC];

  const DenseArgs& a = p.args;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int kw = p.k_lanes / 32;  // warps per row group
  const int sub = warp % kw, grp = warp / kw;
  const int rows_per_block = (kGemvWideThreads / 32 / kw) * R;
  const int tl = sub * 32 + lane, nt = p.k_lanes;
  const std::int64_t kvecs = a.k / VE;  // the gate guarantees k % VE == 0
  const std::int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
  const std::int64_t tiles = row_blocks * a.batch;

  for (std::int64_t t = blockIdx.y; t < tiles; t += gridDim.y) {  // block-uniform
    const std::int64_t bz = t / row_blocks;
    const std::int64_t row0 = (t - bz * row_blocks) * rows_per_block + grp * R;
    const T* wb = static_cast<const T*>(a.b) + bz * a.b_batch;
    const T* w[R];
#pragma unroll
    for (int r = 0; r < R; ++r) w[r] = wb + min(row0 + r, a.n - 1) * a.b_ld;  // clamp tail
    const T* xb = static_cast<const T*>(a.a) + bz * a.a_batch;

    for (int pass = blockIdx.x; pass < p.passes; pass += gridDim.x) {  // block-uniform
      const std::int64_t v0 = std::int64_t{pass} * NV;
      const T* x[NV];
#pragma unroll
      for (int v = 0; v < NV; ++v) x[v] = xb + min(v0 + v, a.m - 1) * a.a_ld;

      float acc[NV][R];
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[v][r] = 0.0f;

      // Each step: R independent 16-byte weight loads in flight per lane, then NV x loads
      // (L1 hits) and NV * R * VE FMAs.
      for (std::int64_t c = tl; c < kvecs; c += nt) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r] = dev::ldg16(w[r] + c * VE);
        float wf[R][VE];
#pragma unroll
        for (int r = 0; r < R; ++r) dev::unpack16<T>(wv[r], wf[r]);
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          float xf[VE];
          dev::unpack16<T>(dev::ldg16(x[v] + c * VE), xf);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < VE; ++e) acc[v][r] = fmaf(xf[e], wf[r][e], acc[v][r]);
        }
      }

      // Warp totals, then the kw warps of a row group added in warp order (deterministic).
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float s = dev::warp_sum(acc[v][r]);
          if (lane == 0) partial[warp][v * R + r] = s;
        }
      __syncthreads();
      if (sub == 0 && lane < NACC) {
        float s = 0.0f;
        for (int q = 0; q < kw; ++q) s += partial[grp * kw + q][lane];
        const std::int64_t v = v0 + lane / R, row = row0 + lane % R;
        if (v < a.m && row < a.n) {
          static_cast<T*>(a.c)[bz * a.c_batch + v * a.c_ld + row] = dev::from_f32<T>(s);
        }
      }
      __syncthreads();  // partial is reused by the next pass/tile
    }
  }
}

}  // namespace llmm::cuda_dense
