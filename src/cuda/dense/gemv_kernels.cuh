// gemv kernels: y[i] = sum_l W(i, l) * x(l) per batch entry (see GemvProblem), f32
// accumulation, deterministic reductions (warp shuffles, then shared memory in fixed order).
#pragma once
#include "core/dense/dense_kernels.hpp"
#include "cuda/dense/dense_common.cuh"

namespace llmm::cuda_dense {

inline constexpr int kGemvRowsThreads = 128;  // 4 warps: 4 / split output rows per block
inline constexpr int kGemvColsThreads = 256;  // split threads along i x 256 / split along l

// "rows": W(i, l) = w[i * w_ld + l], the reduction is contiguous. `split` warps per row, each
// lane streaming 16-byte vectors of the row (WVEC), four in flight; x read through L1 with
// 16-byte loads (XVEC) or element by element at any stride.
template <class T, bool WVEC, bool XVEC>
__global__ void __launch_bounds__(kGemvRowsThreads) gemv_rows_kernel(GemvProblem p) {
  constexpr int VE = dev::kVec16<T>;
  __shared__ float partial[kGemvRowsThreads / 32];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int split = p.split;
  const int rows_per_block = (kGemvRowsThreads / 32) / split;
  const int sub = warp % split, grp = warp / split;
  const int tl = sub * 32 + lane;  // this thread's index along l
  const int nt = split * 32;       // threads along l for one row
  const std::int64_t row_blocks = (p.outputs + rows_per_block - 1) / rows_per_block;
  const std::int64_t tiles = row_blocks * p.batch;

  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // block-uniform
    const std::int64_t bz = t / row_blocks;
    const std::int64_t row = (t - bz * row_blocks) * rows_per_block + grp;
    const bool valid = row < p.outputs;
    const T* w = static_cast<const T*>(p.w) + bz * p.w_batch +
                 (valid ? row : p.outputs - 1) * p.w_ld;  // idle warps re-read a real row
    const T* x = static_cast<const T*>(p.x) + bz * p.x_batch;
    float acc = 0.0f;
    std::int64_t tail = 0;  // first l the vector loop did not cover

    if constexpr (WVEC) {
      const std::int64_t nv = p.len / VE;
      auto load_x = [&](std::int64_t v, float (&xf)[VE]) {
        if constexpr (XVEC) {
          dev::unpack16<T>(dev::ldg16(x + v * VE), xf);
        } else {
#pragma unroll
          for (int e = 0; e < VE; ++e) xf[e] = dev::to_f32(x[(v * VE + e) * p.x_inc]);
        }
      };
      std::int64_t v = tl;
      for (; v + 3 * nt < nv; v += 4 * nt) {  // four independent loads, then their FMAs
        uint4 wv[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) wv[u] = dev::ldg16(w + (v + u * nt) * VE);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          float wf[VE], xf[VE];
          dev::unpack16<T>(wv[u], wf);
          load_x(v + u * nt, xf);
#pragma unroll
          for (int e = 0; e < VE; ++e) acc = fmaf(wf[e], xf[e], acc);
        }
      }
      for (; v < nv; v += nt) {
        float wf[VE], xf[VE];
        dev::unpack16<T>(dev::ldg16(w + v * VE), wf);
        load_x(v, xf);
#pragma unroll
        for (int e = 0; e < VE; ++e) acc = fmaf(wf[e], xf[e], acc);
      }
      tail = nv * VE;
    }
#pragma unroll 4
    for (std::int64_t l = tail + tl; l < p.len; l += nt) {
      acc = fmaf(dev::to_f32(w[l]), dev::to_f32(x[l * p.x_inc]), acc);
    }

    acc = dev::warp_sum(acc);
    if (split > 1) {
      if (lane == 0) partial[warp] = acc;
      __syncthreads();
      acc = 0.0f;
      for (int s = 0; s < split; ++s) acc += partial[grp * split + s];  // fixed order
      __syncthreads();  // partial is reused by the next tile
    }
    if (valid && sub == 0 && lane == 0) {
      static_cast<T*>(p.y)[bz * p.y_batch + row * p.y_inc] = dev::from_f32<T>(acc);
    }
  }
}

// "cols": W(i, l) = w[l * w_ld + i], the outputs are contiguous. Each thread owns VE adjacent
// outputs (one 16-byte load per l, four l in flight); the block's 256 / split rows of threads
// split l, then a fixed-order tree in shared memory adds their partial sums.
template <class T, bool WVEC>
__global__ void __launch_bounds__(kGemvColsThreads) gemv_cols_kernel(GemvProblem p) {
  constexpr int VE = WVEC ? dev::kVec16<T> : 1;
  __shared__ float red[kGemvColsThreads * VE];  // [ls][ti * VE]
  const int ti = p.split, ls = kGemvColsThreads / ti;
  const int tx = static_cast<int>(threadIdx.x) % ti, ty = static_cast<int>(threadIdx.x) / ti;
  const int width = ti * VE;
  const std::int64_t col_blocks = (p.outputs + width - 1) / width;
  const std::int64_t tiles = col_blocks * p.batch;

  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // block-uniform
    const std::int64_t bz = t / col_blocks;
    const std::int64_t i0 = (t - bz * col_blocks) * width + tx * VE;
    const T* w = static_cast<const T*>(p.w) + bz * p.w_batch;
    const T* x = static_cast<const T*>(p.x) + bz * p.x_batch;
    float acc[VE];
#pragma unroll
    for (int e = 0; e < VE; ++e) acc[e] = 0.0f;

    if (WVEC && i0 + VE <= p.outputs) {
      std::int64_t l = ty;
      for (; l + 3 * ls < p.len; l += 4 * ls) {
        uint4 wv[4];
        float xl[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          wv[u] = dev::ldg16(w + (l + u * ls) * p.w_ld + i0);
          xl[u] = dev::to_f32(x[(l + u * ls) * p.x_inc]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          float wf[dev::kVec16<T>];
          dev::unpack16<T>(wv[u], wf);
#pragma unroll
          for (int e = 0; e < VE; ++e) acc[e] = fmaf(wf[e], xl[u], acc[e]);
        }
      }
      for (; l < p.len; l += ls) {
        float wf[dev::kVec16<T>];
        dev::unpack16<T>(dev::ldg16(w + l * p.w_ld + i0), wf);
        const float xl = dev::to_f32(x[l * p.x_inc]);
#pragma unroll
        for (int e = 0; e < VE; ++e) acc[e] = fmaf(wf[e], xl, acc[e]);
      }
    } else if (i0 < p.outputs) {  // scalar kernel, or the last partial vector
#pragma unroll 4
      for (std::int64_t l = ty; l < p.len; l += ls) {
        const float xl = dev::to_f32(x[l * p.x_inc]);
        const T* wl = w + l * p.w_ld + i0;
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          if (i0 + e < p.outputs) acc[e] = fmaf(dev::to_f32(wl[e]), xl, acc[e]);
        }
      }
    }

#pragma unroll
    for (int e = 0; e < VE; ++e) red[ty * width + tx * VE + e] = acc[e];
    __syncthreads();
    for (int s = ls / 2; s > 0; s >>= 1) {  // ls is a power of two
      if (ty < s) {
#pragma unroll
        for (int e = 0; e < VE; ++e) red[ty * width + tx * VE + e] += red[(ty + s) * width + tx * VE + e];
      }
      __syncthreads();
    }
    if (ty == 0) {
      T* y = static_cast<T*>(p.y) + bz * p.y_batch;
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        if (i0 + e < p.outputs) y[(i0 + e) * p.y_inc] = dev::from_f32<T>(red[tx * VE + e]);
      }
    }
    __syncthreads();  // red is reused by the next tile
  }
}

}  // namespace llmm::cuda_dense
