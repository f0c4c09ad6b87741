// moe_grouped: grouped GEMM of the GroupedPrefill route, after moe_map_sort on the stream.
//
// Grid: x = row-tile slots (moe_grouped_row_slots: an upper bound of sum_e ceil(count_e / 64)
// known without reading counts), y = 128-column tiles of n. A block first finds its (expert,
// row tile) from counts by a block-wide scan of ceil(count_e / 64) over the experts (256
// threads x 4 experts, n_experts <= 1024), and the start of the expert's rows by a scan of the
// counts; slots past the last tile exit. It then gathers its <= 64 routed rows
// (rows[start_e + i]) and computes the 64 x 128 output
// tile out[r, n0..n0+127] = in(r) . W(e, n0.., :)^T with mma.sync, 8 warps as 2 (rows) x 4
// (columns), 32 x 32 per warp, f32 accumulators.
//
// Operands go global -> registers -> shared memory (two stages, the next K slice loaded while
// the current one is multiplied): the register stage converts dtypes, zero-fills rows past the
// expert's count, columns past n and the K tail (no global byte outside the operands is read).
// Shared-memory element type TS and math:
//   TS = f16 / bf16, BK = 32: mma.m16n8k16, fragments by ldmatrix (input of the weight dtype,
//        or f32 input rounded once to bf16 when !exact);
//   TS = f32,        BK = 16: mma.m16n8k8.tf32: 16-bit weights are exact in tf32, so f32 input
//        split hi + lo (2 passes) keeps near-f32 accuracy; f32 weights and input: 3xTF32
//        (lo*hi + hi*lo + hi*hi); !exact: one pass. Exact sums each K slice into zeroed
//        registers and adds that into the accumulator (the tf32 mma truncates as it accumulates).
// Rows are padded by 16 bytes (80-byte rows): fragment reads are free of bank conflicts.
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/common/mma_sync.cuh"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int BM = kMoeGroupedBM, BN = kMoeGroupedBN, THREADS = kMoeGroupedThreads;
constexpr int WARP_M = 32, WARP_N = 32, MT = WARP_M / 16, NT = WARP_N / 8;
static_assert(THREADS == 256 && BM == 2 * WARP_M && BN == 4 * WARP_N);
static_assert(THREADS * 4 >= kMoeMapMaxExperts, "the tile scan gives each thread 4 experts");

using ptx::ldmatrix_x4;
using ptx::smem_addr;
using ptx::to_tf32;
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  ptx::mma_16816<T>(d, a, b);
}
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  ptx::mma_1688_tf32(d, a, b);
}

// A warp's f32 accumulators: MT x NT mma tiles, 4 values per lane each.
using AccTile = float[MT][NT][4];
__device__ __forceinline__ void zero_tile(AccTile& t) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) t[i][j][e] = 0.0f;
}
__device__ __forceinline__ void add_tile(AccTile& acc, const AccTile& part) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
}

// Two floats -> one 32-bit word of two TS values (first in the low half).
template <class TS>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<TS, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// One 16-byte shared-memory chunk (CH = 16 / sizeof(TS) values of TS) from the CH values of TG
// at p[k0..], of which `valid` (0..CH) lie inside the row: the rest are zero and never read.
// vec: p (and so p + k0, k0 a multiple of CH) is aligned for one CH * sizeof(TG)-byte read.
// FP8 codes (TG = e4m3) are decoded and multiplied by `scale` (their group's), then rounded once
// to TS.
template <class TS, class TG>
__device__ __forceinline__ uint4 stage_chunk(const TG* p, std::int64_t k0, int valid, bool vec, float scale = 1.0f) {
  constexpr int CH = static_cast<int>(16 / sizeof(TS));
  if (p == nullptr || valid <= 0) return make_uint4(0, 0, 0, 0);
  const TG* s = p + k0;
  const bool full = vec && valid == CH;
  if constexpr (std::is_same_v<TS, TG>) {
    if (full) return dev::ldg16(s);
  }
  float f[CH];
  bool done = false;
  if constexpr (dev::kIsE4m3<TG>) {
    static_assert(CH == 8, "e4m3 weights stage into 16-bit chunks");
    if (full) {  // 8 codes: one 8-byte load
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(s));
      float g[16];
      dev::unpack16<TG>(make_uint4(v.x, v.y, 0, 0), g);
#pragma unroll
      for (int i = 0; i < CH; ++i) f[i] = g[i];
      done = true;
    }
  } else if constexpr (sizeof(TG) == 4) {  // CH f32 values: one or two 16-byte loads
    if (full) {
      dev::load_f32<TG, CH>(s, f);
      done = true;
    }
  } else if constexpr (sizeof(TS) == 4) {  // 4 values of 16 bits into an f32 chunk: 8 bytes
    if (full) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(s));
      const float2 p0 = dev::word_to_f32x2(v.x, TG{}), p1 = dev::word_to_f32x2(v.y, TG{});
      f[0] = p0.x;
      f[1] = p0.y;
      f[2] = p1.x;
      f[3] = p1.y;
      done = true;
    }
  }
  if (!done) {  // partial chunk or unaligned operand: element by element
#pragma unroll
    for (int i = 0; i < CH; ++i) f[i] = i < valid ? dev::to_f32(s[i]) : 0.0f;
  }
  if constexpr (dev::kIsE4m3<TG>) {
#pragma unroll
    for (int i = 0; i < CH; ++i) f[i] *= scale;
  }
  if constexpr (sizeof(TS) == 4) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  } else {
    return make_uint4(pack2<TS>(f[0], f[1]), pack2<TS>(f[2], f[3]), pack2<TS>(f[4], f[5]), pack2<TS>(f[6], f[7]));
  }
}

// TS: shared-memory / math element type; TA, TW: input and weight dtypes in global memory.
// SPLIT_A / SPLIT_W (TS = float only): split the operand into tf32 hi + lo.
template <class TS, class TA, class TW, bool SPLIT_A, bool SPLIT_W>
__global__ void __launch_bounds__(THREADS, 2) moe_grouped_kernel(MoeArgs a, bool in_vec, bool w_vec) {
  constexpr bool MMA16 = sizeof(TS) == 2;
  constexpr int CH = static_cast<int>(16 / sizeof(TS));  // TS values per 16-byte chunk
  constexpr int BK = 4 * CH;                             // 32 (16-bit) or 16 (f32)
  constexpr int LD = BK + CH;                            // row stride: 80 bytes
  static_assert(!MMA16 || (!SPLIT_A && !SPLIT_W));
  __shared__ __align__(16) TS s_a[2][BM * LD];
  __shared__ __align__(16) TS s_b[2][BN * LD];
  __shared__ std::uint32_t s_rows[BM];
  __shared__ int s_warp_tiles[THREADS / 32];
  __shared__ std::uint32_t s_warp_rows[THREADS / 32];
  __shared__ int s_expert, s_tile;
  __shared__ std::uint32_t s_count, s_first;

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const std::int64_t routed = a.m * a.top_k, cap = a.row_capacity;

  // --- 1. Which (expert, row tile) is slot blockIdx.x, and where the expert's rows start in the
  // lists: exclusive scans of tiles and of rows per expert (32-bit: the counts of a map sum to
  // at most m * top_k < 2^32; a corrupted scratch can misplace rows but never read past the
  // lists: positions are checked against row_capacity and rows against m * top_k below).
  int tiles_of[4], mine = 0;
  std::uint32_t rows_of[4], mine_rows = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int e = tid * 4 + j;
    rows_of[j] = e < a.n_experts ? __ldg(a.counts + e) : 0u;
    tiles_of[j] = static_cast<int>((static_cast<std::int64_t>(rows_of[j]) + BM - 1) / BM);
    mine += tiles_of[j];
    mine_rows += rows_of[j];
  }
  int incl = mine;
  std::uint32_t incl_rows = mine_rows;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    const std::uint32_t vr = __shfl_up_sync(0xffffffffu, incl_rows, o);
    if (lane >= o) incl += v, incl_rows += vr;
  }
  if (lane == 31) s_warp_tiles[warp] = incl, s_warp_rows[warp] = incl_rows;
  if (tid == 0) s_expert = -1;
  __syncthreads();
  int start = incl - mine;
  std::uint32_t first = incl_rows - mine_rows;
  for (int w = 0; w < warp; ++w) start += s_warp_tiles[w], first += s_warp_rows[w];
  const int slot = static_cast<int>(blockIdx.x);
  if (slot >= start && slot < start + mine) {  // exactly one thread
    int rest = slot - start;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (rest >= 0 && rest < tiles_of[j]) {
        s_expert = tid * 4 + j;
        s_tile = rest;
        s_count = rows_of[j];
        s_first = first;
      }
      rest -= tiles_of[j];
      first += rows_of[j];
    }
  }
  __syncthreads();
  const int expert = s_expert;
  if (expert < 0) return;  // block-uniform: a slot past the last tile
  const std::int64_t count = s_count, row0 = static_cast<std::int64_t>(s_tile) * BM;
  if (tid < BM) {
    std::uint32_t r = dev::kNoRow;
    const std::int64_t pos = static_cast<std::int64_t>(s_first) + row0 + tid;
    if (row0 + tid < count && pos < cap) {
      r = __ldg(a.rows + pos);
      if (static_cast<std::int64_t>(r) >= routed) r = dev::kNoRow;  // corrupt map: skip the row
    }
    s_rows[tid] = r;
  }
  __syncthreads();

  // --- 2. This thread's staging rows: input row lrow, weight rows lrow and lrow + 64.
  const int lrow = tid >> 2, lcol = (tid & 3) * CH;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.y) * BN;
  const TA* pa = nullptr;
  if (const std::uint32_t r = s_rows[lrow]; r != dev::kNoRow) {
    const std::int64_t tok = static_cast<std::int64_t>(r) / a.top_k, sl = static_cast<std::int64_t>(r) - tok * a.top_k;
    pa = static_cast<const TA*>(a.in) + tok * a.in_token_stride + sl * a.in_slot_stride;
  }
  const TW* wexp = static_cast<const TW*>(a.w) + static_cast<std::int64_t>(expert) * a.expert_stride;
  const TW* pb0 = n0 + lrow < a.n ? wexp + (n0 + lrow) * a.k : nullptr;
  const TW* pb1 = n0 + 64 + lrow < a.n ? wexp + (n0 + 64 + lrow) * a.k : nullptr;

  uint4 ra, rb0, rb1;
  auto load = [&](std::int64_t kt) {
    const std::int64_t k0 = kt * BK + lcol;
    const int valid = static_cast<int>(max(std::int64_t{0}, min(static_cast<std::int64_t>(CH), a.k - k0)));
    ra = stage_chunk<TS, TA>(pa, k0, valid, in_vec);
    if constexpr (dev::kIsE4m3<TW>) {  // every scale kind folded into the staged 16-bit weight
      auto sc = [&](const TW* p, std::int64_t row) {
        if (p == nullptr || valid <= 0) return 1.0f;
        return a.w_scale_kind == 2 ? dev::w_block_scale(a, static_cast<std::uint32_t>(expert), row, k0)
                                   : dev::w_total_scale(a, static_cast<std::uint32_t>(expert), row);
      };
      rb0 = stage_chunk<TS, TW>(pb0, k0, valid, w_vec, sc(pb0, n0 + lrow));
      rb1 = stage_chunk<TS, TW>(pb1, k0, valid, w_vec, sc(pb1, n0 + 64 + lrow));
    } else {
      rb0 = stage_chunk<TS, TW>(pb0, k0, valid, w_vec);
      rb1 = stage_chunk<TS, TW>(pb1, k0, valid, w_vec);
    }
  };
  auto store = [&](int buf) {
    *reinterpret_cast<uint4*>(&s_a[buf][lrow * LD + lcol]) = ra;
    *reinterpret_cast<uint4*>(&s_b[buf][lrow * LD + lcol]) = rb0;
    *reinterpret_cast<uint4*>(&s_b[buf][(lrow + 64) * LD + lcol]) = rb1;
  };

  // --- 3. Main loop.
  const int wm = (warp >> 2) * WARP_M, wn = (warp & 3) * WARP_N;
  const int g = lane >> 2, t4 = lane & 3;
  AccTile acc;
  zero_tile(acc);

  auto compute = [&](int buf) {
    const TS* sa = s_a[buf];
    const TS* sb = s_b[buf];
    if constexpr (MMA16) {
      // ldmatrix rows: A matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15) = a0..a3;
      // B ([n][k]) matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15) = b0,b1 of two
      // n8 tiles.
      const std::uint32_t a_addr = smem_addr(sa + (wm + (lane & 15)) * LD + (lane >> 4) * 8);
      const std::uint32_t b_addr = smem_addr(sb + (wn + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        std::uint32_t bf[NT][2];
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          std::uint32_t r[4];
          ldmatrix_x4(r, b_addr + (np * 16 * LD + kk) * 2);
          bf[2 * np][0] = r[0];
          bf[2 * np][1] = r[1];
          bf[2 * np + 1][0] = r[2];
          bf[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          std::uint32_t af[4];
          ldmatrix_x4(af, a_addr + (mt * 16 * LD + kk) * 2);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma16816<TS>(acc[mt][nt], af, bf[nt]);
        }
      }
    } else {
      // Exact (split operands): the tf32 mma accumulates with truncation, so summed straight
      // into acc its error grew with K (1.7e-5 abs at K = 2048 on the Qwen3 example against
      // 1.3e-7 for the direct route). Each k-tile sums into zeroed registers and is added into
      // acc with one rounded add. Fast (one tf32 pass) is limited by tf32 rounding: it keeps acc.
      constexpr bool kPromote = SPLIT_A || SPLIT_W;
      AccTile part;
      AccTile& dst = kPromote ? part : acc;
      if constexpr (kPromote) zero_tile(part);
#pragma unroll
      for (int kk = 0; kk < BK; kk += 8) {
        std::uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const TS* p = sb + (wn + nt * 8 + g) * LD + kk + t4;
          const float v[2] = {p[0], p[4]};
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            bh[nt][i] = to_tf32(v[i]);
            bl[nt][i] = SPLIT_W ? to_tf32(v[i] - __uint_as_float(bh[nt][i])) : 0u;
          }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const TS* p = sa + (wm + mt * 16 + g) * LD + kk + t4;
          const float v[4] = {p[0], p[8 * LD], p[4], p[8 * LD + 4]};
          std::uint32_t ah[4], al[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            ah[i] = to_tf32(v[i]);
            al[i] = SPLIT_A ? to_tf32(v[i] - __uint_as_float(ah[i])) : 0u;
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {  // small terms first
            if constexpr (SPLIT_A) mma1688_tf32(dst[mt][nt], al, bh[nt]);
            if constexpr (SPLIT_W) mma1688_tf32(dst[mt][nt], ah, bl[nt]);
            mma1688_tf32(dst[mt][nt], ah, bh[nt]);
          }
        }
      }
      if constexpr (kPromote) add_tile(acc, part);
    }
  };

  const std::int64_t ktiles = (a.k + BK - 1) / BK;
  load(0);
  store(0);
  __syncthreads();
  for (std::int64_t kt = 0; kt < ktiles; ++kt) {
    const int buf = static_cast<int>(kt & 1);
    const bool more = kt + 1 < ktiles;
    if (more) load(kt + 1);  // global reads in flight during the MMAs
    compute(buf);
    if (more) store(buf ^ 1);  // that buffer was last read before the previous barrier
    __syncthreads();
  }

  // --- 4. Epilogue: lane holds rows g, g + 8 and columns 2*t4, 2*t4 + 1 of each 16x8 tile.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::uint32_t r = s_rows[wm + mt * 16 + half * 8 + g];
      if (r == dev::kNoRow) continue;
      const std::int64_t base = static_cast<std::int64_t>(r) * a.n;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const std::int64_t col = n0 + wn + nt * 8 + 2 * t4;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= a.n) continue;
          float v = acc[mt][nt][2 * half + e];
          if constexpr (SPLIT_A || SPLIT_W) {  // Inf/NaN through a tf32 split: NaN, recomputed in IEEE f32
            if (v != v) v = dev::ieee_dot<TA, TW>(a, r, static_cast<std::uint32_t>(expert), col + e);
          }
          dev::store_out(a.out, a.out_dtype, base + col + e, v);
        }
      }
    }
  }
}

template <class TS, class TA, class TW, bool SPLIT_A = false, bool SPLIT_W = false>
void launch_one(const MoeArgs& a, const MoeGroupedConfig& c, dim3 grid, StreamHandle s) {
  moe_grouped_kernel<TS, TA, TW, SPLIT_A, SPLIT_W><<<grid, THREADS, 0, s>>>(a, c.in_vec, c.w_vec);
}

}  // namespace

void launch_moe_grouped(const MoeArgs& a, StreamHandle s) {
  const std::string name = moe_grouped_kernel_name(a);
  host::check_common(a, name);
  host::require(a.n_experts >= 1 && a.n_experts <= moe_map_max_experts(), name,
                "n_experts outside 1..moe_map_max_experts()");
  host::require(a.counts != nullptr && a.rows != nullptr, name, "null grouped scratch");
  host::require(a.row_capacity >= a.m * a.top_k, name, "row_capacity < m * top_k");
  const std::int64_t slots = moe_grouped_row_slots(a), col_tiles = moe_grouped_col_tiles(a);
  if (slots == 0 || col_tiles == 0) return;
  host::require(slots <= 0x7fffffff && col_tiles <= 65535, name, "grid too large (m * top_k or n)");
  const MoeGroupedConfig c = moe_grouped_config(a);
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(col_tiles));
  const bool in32 = a.in_dtype == DType::F32;
  switch (c.math) {
    case MoeGroupedMath::F16:
      host::require(a.w_dtype == DType::F16 && a.in_dtype == DType::F16, name, "f16 math dtypes");
      launch_one<__half, __half, __half>(a, c, grid, s);
      break;
    case MoeGroupedMath::BF16:
      if (a.w_dtype == DType::F8E4M3) {  // FP8: weights decoded and scaled into bf16 stages
        if (in32) launch_one<__nv_bfloat16, float, dev::e4m3>(a, c, grid, s);
        else if (a.in_dtype == DType::F16) launch_one<__nv_bfloat16, __half, dev::e4m3>(a, c, grid, s);
        else launch_one<__nv_bfloat16, __nv_bfloat16, dev::e4m3>(a, c, grid, s);
        break;
      }
      host::require(a.w_dtype == DType::BF16, name, "bf16 math dtypes");
      if (in32) launch_one<__nv_bfloat16, float, __nv_bfloat16>(a, c, grid, s);
      else launch_one<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(a, c, grid, s);
      break;
    case MoeGroupedMath::TF32:
      host::require(in32, name, "tf32 math needs f32 input");
      if (a.w_dtype == DType::F16) launch_one<float, float, __half>(a, c, grid, s);
      else if (a.w_dtype == DType::F32) launch_one<float, float, float>(a, c, grid, s);
      else host::require(false, name, "tf32 math weight dtype");
      break;
    case MoeGroupedMath::TF32x2:
      host::require(in32, name, "2xtf32 math needs f32 input");
      if (a.w_dtype == DType::F16) launch_one<float, float, __half, true, false>(a, c, grid, s);
      else if (a.w_dtype == DType::BF16) launch_one<float, float, __nv_bfloat16, true, false>(a, c, grid, s);
      else host::require(false, name, "2xtf32 math weight dtype");
      break;
    case MoeGroupedMath::TF32x3:
      host::require(in32 && a.w_dtype == DType::F32, name, "3xtf32 math dtypes");
      launch_one<float, float, float, true, true>(a, c, grid, s);
      break;
  }
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
