// gemm_mma: the portable tiled tensor-core GEMM (sm_80+, mma.sync).
//
// One 256-thread block computes a 128x128 tile of C; its 8 warps are 2 (M) x 4 (N), each
// owning 64x32 = 4 x 4 mma tiles of 16x8 with f32 accumulators. K advances in BK slices
// (32 for f16/bf16, 16 for f32) through a 3-stage cp.async ring in shared memory. Transposes
// are absorbed by the shared-memory layout: each operand tile is stored as it lies in global
// memory (K-contiguous or M/N-contiguous), and fragments are read with ldmatrix or
// ldmatrix.trans (16-bit) or plain shared loads (f32). Rows are padded by 16 bytes (K-contig)
// or 8 elements (M/N-contig) so that fragment reads are free of bank conflicts.
//
//   f16/bf16: mma.m16n8k16, f32 in/out accumulation.
//   f32 fast: one mma.m16n8k8.tf32 pass (operands rounded to tf32, 10-bit mantissa).
//   f32 exact: 3xTF32, x = hi + lo with tf32 parts; acc += lo*hi' + hi*lo' + hi*hi'
//              (the lo*lo' term is below f32 rounding), near-f32 accuracy.
#pragma once
#include "core/dense/dense_args.hpp"
#include "cuda/common/mma_sync.cuh"
#include "cuda/dense/dense_common.cuh"

namespace llmm::cuda_dense {

template <class T>
struct MmaTile {
  static constexpr int BM = 128, BN = 128, BK = sizeof(T) == 4 ? 16 : 32;
  static constexpr int STAGES = 3, THREADS = 256;
  static constexpr int WM = 64, WN = 32;       // warp tile
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int VE = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  // Row strides (elements) of a stored tile: K-contiguous rows carry BK (+16 bytes pad),
  // M/N-contiguous rows carry 128 (+8 elements pad).
  static constexpr int LD_K = BK + VE, LD_MN = BM + 8;
  static constexpr int ELEMS_K = BM * LD_K, ELEMS_MN = BK * LD_MN;
  __host__ __device__ static constexpr int a_elems(bool a_trans) { return a_trans ? ELEMS_MN : ELEMS_K; }
  __host__ __device__ static constexpr int b_elems(bool b_trans) { return b_trans ? ELEMS_K : ELEMS_MN; }
  __host__ __device__ static constexpr int smem_bytes(bool a_trans, bool b_trans) {
    return STAGES * (a_elems(a_trans) + b_elems(b_trans)) * static_cast<int>(sizeof(T));
  }
  static_assert(BM == BN, "the stored-tile strides assume square block tiles");
  static_assert((ELEMS_K * sizeof(T)) % 16 == 0 && (ELEMS_MN * sizeof(T)) % 16 == 0);
};

namespace mma_detail {

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::mma_16816;
using ptx::mma_1688_tf32;
using ptx::smem_addr;
using ptx::to_tf32;

// Copies one ROWS x COLS tile (COLS contiguous in global memory) into shared memory with row
// stride LDS, zero outside [row_lim) x [col_lim). vec: 16-byte cp.async (g, ld 16-byte
// aligned); else element loads through registers (any alignment).
template <class T, int ROWS, int COLS, int LDS, int THREADS>
__device__ __forceinline__ void load_tile(T* s, const T* g, std::int64_t ld, std::int64_t row0,
                                          std::int64_t col0, std::int64_t row_lim,
                                          std::int64_t col_lim, bool vec, int tid) {
  constexpr int VE = 16 / static_cast<int>(sizeof(T));
  constexpr int CPR = COLS / VE, CHUNKS = ROWS * CPR;
  static_assert(CHUNKS % THREADS == 0);
  if (vec) {
#pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
      const int c = tid + i * THREADS;
      const int r = c / CPR, cc = (c % CPR) * VE;
      const std::int64_t gr = row0 + r, gc = col0 + cc;
      T* dst = s + r * LDS + cc;
      // Only whole in-range vectors go through cp.async; a partial vector at the edge is read
      // element by element and the rest zero-stored, so no access ever reaches past the
      // matrix (a zero-filling cp.async still names 16 bytes of source, which memcheck flags).
      if (gr < row_lim && gc + VE <= col_lim) {
        cp_async16(dst, g + gr * ld + gc, 16);
      } else if (gr < row_lim && gc < col_lim) {
#pragma unroll
        for (int e = 0; e < VE; ++e) dst[e] = gc + e < col_lim ? g[gr * ld + gc + e] : dev::from_f32<T>(0.0f);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  } else {
#pragma unroll 1
    for (int e = tid; e < ROWS * COLS; e += THREADS) {
      const int r = e / COLS, cc = e % COLS;
      const std::int64_t gr = row0 + r, gc = col0 + cc;
      s[r * LDS + cc] = (gr < row_lim && gc < col_lim) ? g[gr * ld + gc] : dev::from_f32<T>(0.0f);
    }
  }
}

// c(b, i, j) in plain IEEE f32 (sequential FMA over k): the value for an output the 3xTF32
// split turned into NaN (a non-finite operand, or an overflow of a split part).
__device__ __forceinline__ float ieee_dot(const DenseArgs& p, std::int64_t b, std::int64_t i, std::int64_t j) {
  const float* a = static_cast<const float*>(p.a) + b * p.a_batch;
  const float* w = static_cast<const float*>(p.b) + b * p.b_batch;
  float s = 0.0f;
  for (std::int64_t l = 0; l < p.k; ++l) {
    const float x = p.a_trans ? a[l * p.a_ld + i] : a[i * p.a_ld + l];
    const float y = p.b_trans ? w[j * p.b_ld + l] : w[l * p.b_ld + j];
    s = fmaf(x, y, s);
  }
  return s;
}

}  // namespace mma_detail

// A_T / B_T: DenseArgs a_trans / b_trans. SPLIT3: 3xTF32 (f32 only).
template <class T, bool A_T, bool B_T, bool SPLIT3>
__global__ void __launch_bounds__(MmaTile<T>::THREADS, sizeof(T) == 2 ? 2 : 1)
    gemm_mma_kernel(DenseArgs p, bool a_vec, bool b_vec) {
  using C = MmaTile<T>;
  using namespace mma_detail;
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::STAGES;
  constexpr int LDA = A_T ? C::LD_MN : C::LD_K, LDB = B_T ? C::LD_K : C::LD_MN;
  constexpr int A_ELEMS = C::a_elems(A_T), B_ELEMS = C::b_elems(B_T);
  static_assert(!SPLIT3 || sizeof(T) == 4);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem_a = reinterpret_cast<T*>(smem_raw);
  T* const smem_b = smem_a + S * A_ELEMS;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 2) * C::WM, wn = (warp & 3) * C::WN;  // warp tile origin in block
  const int g = lane >> 2, t4 = lane & 3;                          // mma fragment coordinates
  // 16-bit path: element offset of the row this lane hands to ldmatrix (x4: lanes 8q..8q+7
  // address matrix q). A: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15) =
  // a0..a3 of m16n8k16; B: (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15) = b0,b1 of
  // two n8 tiles. Stored transposed ([k][m], [k][n]) they are read with .trans.
  const int a_lane = A_T ? ((lane & 7) + ((lane >> 4) << 3)) * LDA + wm + ((lane >> 3) & 1) * 8
                         : (wm + (lane & 15)) * LDA + (lane >> 4) * 8;
  const int b_lane = B_T ? (wn + (lane & 7) + ((lane >> 4) << 3)) * LDB + ((lane >> 3) & 1) * 8
                         : ((lane & 7) + ((lane >> 3) & 1) * 8) * LDB + wn + (lane >> 4) * 8;

  // One block per output tile (blockIdx.x) of one batch entry (blockIdx.z); the launcher
  // splits batches beyond the grid limit into several launches.
  const std::int64_t tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int ktiles = static_cast<int>((p.k + BK - 1) / BK);
  const std::int64_t bz = blockIdx.z;
  const T* const ga = static_cast<const T*>(p.a) + bz * p.a_batch;
  const T* const gb = static_cast<const T*>(p.b) + bz * p.b_batch;
  T* const gc = static_cast<T*>(p.c) + bz * p.c_batch;
  const std::int64_t tile = blockIdx.x;
  // Groups of 8 tile rows walk N together, so neighbouring blocks share A and B in L2.
  constexpr std::int64_t GROUP = 8;
  const std::int64_t group = tile / (GROUP * tiles_n);
  const std::int64_t first_m = group * GROUP;
  const std::int64_t gm = min(tiles_m - first_m, GROUP);
  const std::int64_t in_group = tile - group * GROUP * tiles_n;
  const std::int64_t m0 = (first_m + in_group % gm) * BM, n0 = (in_group / gm) * BN;

  auto load_stage = [&](int stage, int kt) {
    const std::int64_t k0 = std::int64_t{kt} * BK;
    T* sa = smem_a + stage * A_ELEMS;
    T* sb = smem_b + stage * B_ELEMS;
    if constexpr (A_T) {
      load_tile<T, BK, BM, LDA, C::THREADS>(sa, ga, p.a_ld, k0, m0, p.k, p.m, a_vec, tid);
    } else {
      load_tile<T, BM, BK, LDA, C::THREADS>(sa, ga, p.a_ld, m0, k0, p.m, p.k, a_vec, tid);
    }
    if constexpr (B_T) {
      load_tile<T, BN, BK, LDB, C::THREADS>(sb, gb, p.b_ld, n0, k0, p.n, p.k, b_vec, tid);
    } else {
      load_tile<T, BK, BN, LDB, C::THREADS>(sb, gb, p.b_ld, k0, n0, p.k, p.n, b_vec, tid);
    }
  };

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int i = 0; i < C::MT; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<S - 2>();  // stage kt has landed (for this thread) ...
    __syncthreads();         // ... for all threads; stage kt-1 is no longer read
    if (kt + S - 1 < ktiles) load_stage((kt + S - 1) % S, kt + S - 1);
    cp_async_commit();

    const T* sa = smem_a + (kt % S) * A_ELEMS;
    const T* sb = smem_b + (kt % S) * B_ELEMS;
    if constexpr (sizeof(T) == 2) {
      // Shared-space byte addresses: stage base + this lane's ldmatrix row + constants.
      constexpr int ES = static_cast<int>(sizeof(T));
      const std::uint32_t a_addr = smem_addr(sa) + a_lane * ES;
      const std::uint32_t b_addr = smem_addr(sb) + b_lane * ES;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        std::uint32_t bfr[C::NT][2];
#pragma unroll
        for (int np = 0; np < C::NT / 2; ++np) {
          // B_T: stored [n][k], rows +16 per pair; else [k][n], columns +16 per pair.
          const int off = B_T ? np * 16 * LDB + kk : kk * LDB + np * 16;
          std::uint32_t r[4];
          ldmatrix_x4<!B_T>(r, b_addr + off * ES);
          bfr[2 * np][0] = r[0];
          bfr[2 * np][1] = r[1];
          bfr[2 * np + 1][0] = r[2];
          bfr[2 * np + 1][1] = r[3];
        }
        // One A fragment at a time keeps register pressure at 2 blocks per SM.
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt) {
          // A_T: stored [k][m], rows kk.., columns +16 per mt; else [m][k], rows +16 per mt.
          const int off = A_T ? kk * LDA + mt * 16 : mt * 16 * LDA + kk;
          std::uint32_t af[4];
          ldmatrix_x4<A_T>(af, a_addr + off * ES);
#pragma unroll
          for (int nt = 0; nt < C::NT; ++nt) mma_16816<T>(acc[mt][nt], af, bfr[nt]);
        }
      }
    } else {
      auto a_at = [&](int m, int k) { return A_T ? sa[k * LDA + m] : sa[m * LDA + k]; };
      auto b_at = [&](int k, int n) { return B_T ? sb[n * LDB + k] : sb[k * LDB + n]; };
#pragma unroll
      for (int kk = 0; kk < BK; kk += 8) {
        std::uint32_t bh[C::NT][2], bl[C::NT][2];
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt) {
          const int n = wn + nt * 8 + g;
          const float v[2] = {b_at(kk + t4, n), b_at(kk + t4 + 4, n)};
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            bh[nt][i] = to_tf32(v[i]);
            if constexpr (SPLIT3) bl[nt][i] = to_tf32(v[i] - __uint_as_float(bh[nt][i]));
          }
        }
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt) {
          const int m = wm + mt * 16 + g;
          const float v[4] = {a_at(m, kk + t4), a_at(m + 8, kk + t4), a_at(m, kk + t4 + 4),
                              a_at(m + 8, kk + t4 + 4)};
          std::uint32_t ah[4], al[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            ah[i] = to_tf32(v[i]);
            if constexpr (SPLIT3) al[i] = to_tf32(v[i] - __uint_as_float(ah[i]));
          }
#pragma unroll
          for (int nt = 0; nt < C::NT; ++nt) {
            if constexpr (SPLIT3) {  // small terms first
              mma_1688_tf32(acc[mt][nt], al, bh[nt]);
              mma_1688_tf32(acc[mt][nt], ah, bl[nt]);
            }
            mma_1688_tf32(acc[mt][nt], ah, bh[nt]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups remain; leave none in flight

  // Epilogue: each thread holds rows g, g+8 and column pairs 2*t4, 2*t4+1 of each tile.
#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::int64_t row = m0 + wm + mt * 16 + g + half * 8;
      if (row >= p.m) continue;
      T* crow = gc + row * p.c_ld;
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt) {
        const std::int64_t col = n0 + wn + nt * 8 + 2 * t4;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= p.n) continue;
          float v = acc[mt][nt][2 * half + e];
          // 3xTF32 cannot carry Inf through (Inf - tf32(Inf) makes a NaN lo part) and a hi part
          // can round up past FLT_MAX: such an output is NaN, and is recomputed in IEEE f32.
          if constexpr (SPLIT3) {
            if (v != v) v = ieee_dot(p, bz, row, col + e);
          }
          crow[col + e] = dev::from_f32<T>(v);
        }
      }
    }
  }
}

}  // namespace llmm::cuda_dense
