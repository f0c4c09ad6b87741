// gemv_wide kernel: y[v, j] = sum_l x[v, l] * w[j, l] for a few vectors v (x = a, w = b^T),
// both K-contiguous with 16-byte aligned rows. Each warp streams kGemvWideRowsPerWarp weight
// rows once per pass for all NV vectors of the pass, x read through L1 (it is small and every
// warp of the SM reads the same stretch of it). f32 accumulators: NV x 4 per thread.
// The weight's storage is a decoder policy (Dec): 16-bit/f32 rows as x's dtype (dense), or
// e4m3 codes with f32 scales (FP8): one 16-byte load gives Dec::kElems weights.
#pragma once
#include "core/dense/dense_kernels.hpp"
#include "cuda/dense/dense_common.cuh"
#include "llmm/fp8.hpp"

namespace llmm::cuda_dense {

inline constexpr int kGemvWideThreads = 128;

struct GemvWideParams {
  DenseArgs args;  // a = x [batch][m][k], b = w [batch][n][k], c = y [batch][m][n]
  int passes;      // vector passes of NV (v0 = pass * NV)
  int k_lanes;     // threads along K per group of weight rows (32, 64, 128)
};

// Weights of x's own type T, rows of args.b (ld b_ld, batch stride b_batch).
template <class T>
struct GemvWeightsOf {
  static constexpr int kElems = dev::kVec16<T>;
  static constexpr bool kScaledPerChunk = false;
  __device__ __forceinline__ static void decode(const uint4& v, float (&f)[kElems]) { dev::unpack16<T>(v, f); }
  __device__ __forceinline__ float chunk_scale(std::int64_t, std::int64_t) const { return 1.0f; }
  __device__ __forceinline__ float row_scale(std::int64_t) const { return 1.0f; }
};

// float8_e4m3fn codes (args.b, ld b_ld in bytes = elements) times f32 scales: per tensor and per
// channel (kBlock false) applied to a row's total, per [128, 128] block (kBlock) to each decoded
// 16-weight chunk (a chunk never straddles two K blocks: 16 | 128). Decoding is exact (every
// e4m3 value is an f16).
template <bool kBlock>
struct GemvWeightsE4m3 {
  static constexpr int kElems = 16;
  static constexpr bool kScaledPerChunk = kBlock;
  const float* scales = nullptr;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  std::int64_t k_blocks = 0;  // the block kind's scale row length, ceil(k / 128)
  __device__ __forceinline__ static void decode(const uint4& v, float (&f)[kElems]) { dev::unpack16<dev::e4m3>(v, f); }
  __device__ __forceinline__ float chunk_scale(std::int64_t row, std::int64_t chunk) const {
    return __ldg(scales + (row / 128) * k_blocks + (chunk * kElems) / 128);
  }
  __device__ __forceinline__ float row_scale(std::int64_t row) const {
    return kind == Fp8ScaleKind::Tensor ? __ldg(scales) : kind == Fp8ScaleKind::Channel ? __ldg(scales + row) : 1.0f;
  }
};

template <class T, class Dec, int NV>
__global__ void __launch_bounds__(kGemvWideThreads) gemv_wide_kernel(GemvWideParams p, Dec dec) {
  constexpr int WE = Dec::kElems;           // weights per 16-byte load
  constexpr int XL = WE / dev::kVec16<T>;   // 16-byte x loads per chunk
  constexpr int R = kGemvWideRowsPerWarp;
  constexpr int NACC = NV * R;
  static_assert(NACC <= 32, "one lane stores each total");
  static_assert(XL >= 1 && WE % dev::kVec16<T> == 0, "a chunk is whole x vectors");
  using W = std::conditional_t<WE == dev::kVec16<T>, T, std::uint8_t>;
  __shared__ float partial[kGemvWideThreads / 32][NACC];

  const DenseArgs& a = p.args;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int kw = p.k_lanes / 32;  // warps per row group
  const int sub = warp % kw, grp = warp / kw;
  const int rows_per_block = (kGemvWideThreads / 32 / kw) * R;
  const int tl = sub * 32 + lane, nt = p.k_lanes;
  const std::int64_t chunks = a.k / WE;  // the gate guarantees k % WE == 0
  const std::int64_t row_blocks = (a.n + rows_per_block - 1) / rows_per_block;
  const std::int64_t tiles = row_blocks * a.batch;

  for (std::int64_t t = blockIdx.y; t < tiles; t += gridDim.y) {  // block-uniform
    const std::int64_t bz = t / row_blocks;
    const std::int64_t row0 = (t - bz * row_blocks) * rows_per_block + grp * R;
    const W* wb = static_cast<const W*>(a.b) + bz * a.b_batch;
    const W* w[R];
    std::int64_t wrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wrow[r] = min(row0 + r, a.n - 1);  // clamp tail
      w[r] = wb + wrow[r] * a.b_ld;
    }
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

      // Each step: R independent 16-byte weight loads in flight per lane, then NV * XL x loads
      // (L1 hits) and NV * R * WE FMAs.
      for (std::int64_t c = tl; c < chunks; c += nt) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r] = dev::ldg16(w[r] + c * WE);
        float wf[R][WE];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          Dec::decode(wv[r], wf[r]);
          if constexpr (Dec::kScaledPerChunk) {
            const float s = dec.chunk_scale(wrow[r], c);
#pragma unroll
            for (int e = 0; e < WE; ++e) wf[r][e] *= s;
          }
        }
#pragma unroll
        for (int v = 0; v < NV; ++v) {
#pragma unroll
          for (int q = 0; q < XL; ++q) {
            constexpr int VE = dev::kVec16<T>;
            float xf[VE];
            dev::unpack16<T>(dev::ldg16(x[v] + c * WE + q * VE), xf);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int e = 0; e < VE; ++e) acc[v][r] = fmaf(xf[e], wf[r][q * VE + e], acc[v][r]);
          }
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
          static_cast<T*>(a.c)[bz * a.c_batch + v * a.c_ld + row] = dev::from_f32<T>(s * dec.row_scale(row));
        }
      }
      __syncthreads();  // partial is reused by the next pass/tile
    }
  }
}

}  // namespace llmm::cuda_dense
