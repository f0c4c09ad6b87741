// The block skeleton of the decode kernel tq2_stream_v2 (f16 tensor cores; the portable decode
// path): which rows and K groups each warp owns, the K-chunk loop that stages the activation in
// shared memory, the weight batches in flight, and the final fixed-order reduction. An Engine
// supplies the format's part (see tq2_stream_v2.cu):
//
//   kRecBytes            B-record bytes per (column, 128-group) in shared memory
//   kColPad              bytes after each column (bank spreading between columns)
//   rec_offset(word)     offset of a 16-code word's record inside its group
//   convert<SPLIT,NT>    one (token, group) item: activation -> records + a float2 coefficient
//   group<NT>            one group of this lane's codes: decode, mma, add into total[NT][4]
//
// Roles: the weight is the mma A operand (16 rows), activation columns (token m, part s) are the
// B operand in n8 tiles; column c = m * SPLIT + s. A block of 8 warps owns 16 * row_tiles rows:
// row_tiles x k_warps warps, k-warps taking each chunk's groups round-robin. Each warp streams
// its groups' codes (16 rows x 32 bytes) through a private kStages-deep cp.async ring in shared
// memory, so 7 groups (3.5 KB) per warp are in flight without holding registers; lane (g, t4)
// then reads 8 bytes (words 2 t4, 2 t4 + 1) of rows g and g + 8. The block's f16 scales for a
// chunk are staged in shared memory with the activation.
// Included by src/cuda/ternary/tq2_stream_v*.cu only.
#pragma once
#include "cuda/ternary/tq2_common.cuh"

namespace llmm::cuda_ternary::stream {

inline constexpr int kThreads = kTq2V2Threads;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kStages = kTq2StreamStages;  // cp.async ring depth per warp (groups)
inline constexpr int kStageBytes = 512;           // one group of 16 rows
inline constexpr int kScaleRegs = 8;              // scales a thread loads per round
inline constexpr int kScaleRound = kScaleRegs * kThreads;

struct Group {
  uint2 c[2];         // words 2 t4, 2 t4 + 1 of rows g (c[0]) and g + 8 (c[1])
  std::uint32_t s;    // f16 scales of rows g (low half) and g + 8
};

// Loads the activation values k0 .. k0 + 3 of one row as f32.
template <class TIn>
__device__ __forceinline__ float4 load_x4(const TIn* p, bool vec) {
  if constexpr (sizeof(TIn) == 4) {
    if (vec) return __ldg(reinterpret_cast<const float4*>(p));
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
  } else {
    if (vec) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
      const float2 a = cuda_dense::dev::word_to_f32x2(u.x, TIn{}), b = cuda_dense::dev::word_to_f32x2(u.y, TIn{});
      return make_float4(a.x, a.y, b.x, b.y);
    }
    return make_float4(dev::to_f32(p[0]), dev::to_f32(p[1]), dev::to_f32(p[2]), dev::to_f32(p[3]));
  }
}

// Power-of-two scale 2^sh of a group with max |x| = mx, so that mx * 2^sh lies in
// [2^(top - 1), 2^top); clamped so 2^sh and 2^-sh stay normal f32 (a group that small or that
// large only loses bits far below its max). Returns sh.
__device__ __forceinline__ int group_shift(float mx, int top) {
  int e = 0;
  frexpf(mx, &e);  // mx < 2^e (e = 0 for 0; inf/nan give unspecified e, then clamped)
  const int sh = top - e;
  return sh < -100 ? -100 : sh > 100 ? 100 : sh;
}

// True on every lane when some lane's 4 values hold an Inf or a NaN: the group's coefficient is
// then made NaN, so every output of that token comes out NaN and the epilogue recomputes it in
// IEEE arithmetic (dev::ieee_dot). A power-of-two scale or an integer digit cannot carry Inf/NaN.
__device__ __forceinline__ bool warp_any_nonfinite(const float4& x) {
  const bool bad = !(isfinite(x.x) && isfinite(x.y) && isfinite(x.z) && isfinite(x.w));
  return __any_sync(0xffffffffu, bad);
}
__device__ __forceinline__ float2 mark_nonfinite(float2 c, bool bad) { return bad ? make_float2(__int_as_float(0x7fc00000), 0.0f) : c; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One converted (token, group) item per warp into global memory, for every block of the main
// kernel to copy instead of converting again: records [cols][groups][kRecBytes], then the
// coefficients [groups][8 NT] float2 (unused columns zero). Launched with 256 threads.
template <class E, class TIn, int SPLIT, int NT>
__device__ __forceinline__ void stage_items(const Tq2Args& a, unsigned char* staged, bool in_vec) {
  const int groups = static_cast<int>(a.k / kTq2Group), cols = static_cast<int>(a.m) * SPLIT;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int item = static_cast<int>(blockIdx.x) * kWarps + warp;
  if (item >= static_cast<int>(a.m) * groups) return;  // warp-uniform
  const int m = item / groups, gl = item % groups;
  float2* const coef = reinterpret_cast<float2*>(staged + static_cast<std::size_t>(cols) * groups * E::kRecBytes);
  const TIn* const in = static_cast<const TIn*>(a.in);
  const float4 x = load_x4<TIn>(in + m * a.in_ld + static_cast<std::int64_t>(gl) * kTq2Group + 4 * lane, in_vec);
  E::template convert<SPLIT>(x, lane, m, staged + static_cast<std::size_t>(gl) * E::kRecBytes, groups * E::kRecBytes,
                             coef + gl * 8 * NT);
  if (m == 0 && lane < 8 * NT - cols) coef[gl * 8 * NT + cols + lane] = make_float2(0.0f, 0.0f);
}

// Shared-memory layout: the warps' code rings [8][kStages][512 B], [8 warps][16 rows][8 NT] f32
// partial sums, [chunk groups][8 NT] float2 coefficients, the block's scales [16 row_tiles]
// [chunk groups] f16, then (cols + 1) columns of chunk_groups records (the last one stays zero:
// lanes past the last column read it instead of branching). `staged` (stage_items' output) or null:
// convert in the block.
template <class E, class TIn, class TOut, int SPLIT, int NT>
__device__ __forceinline__ void stream_block(const Tq2Args& a, int row_tiles, int chunk_groups, bool in_vec,
                                             const typename E::Consts& consts, const unsigned char* staged) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int cols = static_cast<int>(a.m) * SPLIT;
  const int col_stride = chunk_groups * E::kRecBytes + E::kColPad;
  const int rows_blk = 16 * row_tiles;
  unsigned char* const ring_all = smem;
  float* const red = reinterpret_cast<float*>(smem + kWarps * kStages * kStageBytes);
  float2* const coef = reinterpret_cast<float2*>(reinterpret_cast<unsigned char*>(red) + kWarps * 16 * 8 * NT * 4);
  std::uint16_t* const sc = reinterpret_cast<std::uint16_t*>(coef + chunk_groups * 8 * NT);
  unsigned char* const xs = reinterpret_cast<unsigned char*>(sc) + ((rows_blk * chunk_groups * 2 + 15) & ~15);

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t4 = lane & 3;
  const int k_shift = row_tiles == 8 ? 0 : row_tiles == 4 ? 1 : row_tiles == 2 ? 2 : 3;  // k_warps = 2^k_shift
  const int k_warps = 1 << k_shift;
  const int rt = warp >> k_shift, kw = warp & (k_warps - 1);
  const std::int64_t groups = a.k / kTq2Group, row_bytes = a.k / 4;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.x) * row_tiles + rt) * 16;
  // Copy lane: row lane / 2 of the warp's 16, 16-byte half lane % 2 (rows past n re-read row
  // n - 1; results dropped).
  const std::uint8_t* ccopy;
  {
    std::int64_t r = n0 + (lane >> 1);
    r = r < a.n ? r : a.n - 1;
    ccopy = a.codes + r * row_bytes + 16 * (lane & 1);
  }
  unsigned char* const ring = ring_all + warp * kStages * kStageBytes;
  const int copy_off = (lane >> 1) * 32 + 16 * (lane & 1);
  const int read_off0 = g * 32 + 8 * t4, read_off1 = (g + 8) * 32 + 8 * t4;
  const int sc_row0 = (rt * 16 + g) * chunk_groups, sc_row1 = (rt * 16 + g + 8) * chunk_groups;
  const std::int64_t nb_rows = static_cast<std::int64_t>(blockIdx.x) * rows_blk;
  const TIn* const in = static_cast<const TIn*>(a.in);

  // B records of this lane: column 8 nt + g, or the zero column `cols`.
  const unsigned char* xb[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = 8 * nt + g < cols ? 8 * nt + g : cols;
    xb[nt] = xs + col * col_stride;
  }
  const int rec0 = E::rec_offset(2 * t4), rec1 = E::rec_offset(2 * t4 + 1);
  for (int i = static_cast<int>(threadIdx.x); i < col_stride / 16; i += kThreads)
    reinterpret_cast<uint4*>(xs + cols * col_stride)[i] = make_uint4(0, 0, 0, 0);

  float total[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) total[nt][e] = 0.0f;

  // Group indices fit 32 bits (k / 128 < 2^31 by the contract): one wide IMAD per address.
  const int chunks = static_cast<int>((groups + chunk_groups - 1) / chunk_groups);
  // Groups of this warp in chunk c: c * chunk_groups + kw + k_warps * i, i < warp_groups(c).
  auto chunk_len = [&](int c) -> int {
    const int rest = static_cast<int>(groups) - c * chunk_groups;
    return rest < chunk_groups ? rest : chunk_groups;
  };
  auto warp_groups = [&](int c) -> int {
    const int len = c < chunks ? chunk_len(c) : 0;
    return kw < len ? (len - kw + k_warps - 1) >> k_shift : 0;
  };
  // Producer cursor over this warp's groups across chunks: (pc, pi) is the next to fetch.
  int pc = 0, pi = 0, pn = warp_groups(0);
  while (pc < chunks && pn == 0) pn = warp_groups(++pc);
  int fetched = 0;
  auto fetch_next = [&]() {  // one cp.async group per call, empty past the end (uniform counting)
    if (pc < chunks) {
      const unsigned grp = static_cast<unsigned>(pc * chunk_groups + kw + k_warps * pi);
      ptx::cp_async16(ring + (fetched % kStages) * kStageBytes + copy_off, ccopy + 32u * grp);
      if (++pi >= pn) {
        pi = 0;
        do pn = warp_groups(++pc); while (pc < chunks && pn == 0);
      }
    }
    ++fetched;
    ptx::cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) fetch_next();
  int used = 0;  // groups consumed so far (ring slot used % kStages)
  for (int c = 0; c < chunks; ++c) {
    const int len = chunk_len(c);
    const int scale_total = rows_blk * len;
    // Scales: element e of the chunk's [rows_blk][len] block, kScaleRound per round.
    auto load_scales = [&](std::uint16_t (&v)[kScaleRegs], int round) {
#pragma unroll
      for (int u = 0; u < kScaleRegs; ++u) {
        const int e = round * kScaleRound + u * kThreads + static_cast<int>(threadIdx.x);
        if (e < scale_total) {
          const int r = e / len, gl = e - r * len;
          std::int64_t row = nb_rows + r;
          row = row < a.n ? row : a.n - 1;
          v[u] = __ldg(a.scales + row * groups + static_cast<std::int64_t>(c) * chunk_groups + gl);
        }
      }
    };
    auto store_scales = [&](const std::uint16_t (&v)[kScaleRegs], int round) {
#pragma unroll
      for (int u = 0; u < kScaleRegs; ++u) {
        const int e = round * kScaleRound + u * kThreads + static_cast<int>(threadIdx.x);
        if (e < scale_total) {
          const int r = e / len;
          sc[r * chunk_groups + (e - r * len)] = v[u];
        }
      }
    };
    std::uint16_t sv[kScaleRegs];
    load_scales(sv, 0);
    __syncthreads();  // the previous chunk's records, coefficients and scales are no longer read
    // Convert: one warp per (token, group) item; lane i owns x[128 grp + 4 i .. + 3]. A warp's
    // items are loaded kConvBatch at a time before any is processed, so their load latencies
    // overlap (this phase runs before the weight stream starts).
    constexpr int kConvBatch = NT >= 3 ? 2 : 4;  // fewer for the wide tiles (registers)
    const int items = staged ? 0 : static_cast<int>(a.m) * len;
    if (staged) {  // copy this chunk's records and coefficients (16 bytes a thread and step)
      const int units = len * E::kRecBytes / 16;
      for (int col = warp; col < cols; col += kWarps) {
        const uint4* src = reinterpret_cast<const uint4*>(
            staged + (static_cast<std::size_t>(col) * groups + static_cast<std::size_t>(c) * chunk_groups) * E::kRecBytes);
        uint4* dst = reinterpret_cast<uint4*>(xs + col * col_stride);
        for (int u = lane; u < units; u += 32) dst[u] = __ldg(src + u);
      }
      const uint4* csrc = reinterpret_cast<const uint4*>(staged + static_cast<std::size_t>(cols) * groups * E::kRecBytes) +
                          static_cast<std::size_t>(c) * chunk_groups * 8 * NT / 2;
      for (int u = static_cast<int>(threadIdx.x); u < len * 8 * NT / 2; u += kThreads)
        reinterpret_cast<uint4*>(coef)[u] = __ldg(csrc + u);
    }
    for (int base = warp; base < items; base += kConvBatch * kWarps) {
      float4 xv[kConvBatch];
#pragma unroll
      for (int u = 0; u < kConvBatch; ++u) {
        const int item = base + u * kWarps;
        if (item < items) {
          const int m = item / len, gl = item % len;
          xv[u] = load_x4<TIn>(in + m * a.in_ld + (static_cast<std::int64_t>(c) * chunk_groups + gl) * kTq2Group + 4 * lane,
                               in_vec);
        }
      }
#pragma unroll
      for (int u = 0; u < kConvBatch; ++u) {
        const int item = base + u * kWarps;
        if (item >= items) break;  // warp-uniform
        const int m = item / len, gl = item % len;
        E::template convert<SPLIT>(xv[u], lane, m, xs + gl * E::kRecBytes, col_stride, coef + gl * 8 * NT);
      }
    }
    if (!staged)
      for (int i = static_cast<int>(threadIdx.x); i < len * (8 * NT - cols); i += kThreads)  // unused columns
        coef[(i / (8 * NT - cols)) * 8 * NT + cols + i % (8 * NT - cols)] = make_float2(0.0f, 0.0f);
    // The block's scales of this chunk: the first round's loads were issued before the
    // conversion (their latency overlaps it); later rounds (long chunks) load and store.
    store_scales(sv, 0);
    for (int round = 1; round * kScaleRound < scale_total; ++round) {
      load_scales(sv, round);
      store_scales(sv, round);
    }
    __syncthreads();

    const int ngc = warp_groups(c);
    for (int i = 0; i < ngc; ++i, ++used) {
      ptx::cp_async_wait<kStages - 2>();  // group `used` has landed (this lane's copy)
      __syncwarp();                        // ... and every lane's; the previous slot is free
      fetch_next();
      const unsigned char* slot = ring + (used % kStages) * kStageBytes;
      const int gl = kw + k_warps * i;
      Group cur;
      cur.c[0] = *reinterpret_cast<const uint2*>(slot + read_off0);
      cur.c[1] = *reinterpret_cast<const uint2*>(slot + read_off1);
      cur.s = static_cast<std::uint32_t>(sc[sc_row0 + gl]) | (static_cast<std::uint32_t>(sc[sc_row1 + gl]) << 16);
      const unsigned char* xg[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) xg[nt] = xb[nt] + gl * E::kRecBytes;
      E::template group<NT>(cur, xg, rec0, rec1, coef + gl * 8 * NT + 2 * t4, consts, total);
    }
  }
  ptx::cp_async_wait<0>();  // nothing left in flight at exit (the tail groups are empty)

  // C fragment: c0, c1 at (row g, columns 2 t4, 2 t4 + 1), c2, c3 at row g + 8.
  float* const mine = red + warp * 16 * 8 * NT;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    mine[g * 8 * NT + 8 * nt + 2 * t4] = total[nt][0];
    mine[g * 8 * NT + 8 * nt + 2 * t4 + 1] = total[nt][1];
    mine[(g + 8) * 8 * NT + 8 * nt + 2 * t4] = total[nt][2];
    mine[(g + 8) * 8 * NT + 8 * nt + 2 * t4 + 1] = total[nt][3];
  }
  __syncthreads();
  TOut* const out = static_cast<TOut*>(a.out);
  const int rows = 16 * row_tiles;
  const std::int64_t nb0 = static_cast<std::int64_t>(blockIdx.x) * rows;
  for (int i = static_cast<int>(threadIdx.x); i < rows * static_cast<int>(a.m); i += kThreads) {
    const int r = i % rows, m = i / rows;  // rows fastest: coalesced stores
    if (nb0 + r >= a.n) continue;
    const int tile = r / 16, rr = r % 16;
    float t = 0.0f;
#pragma unroll
    for (int s = SPLIT - 1; s >= 0; --s) {  // smallest part first
      float p = 0.0f;
      for (int q = 0; q < k_warps; ++q) p += red[((tile * k_warps + q) * 16 + rr) * 8 * NT + m * SPLIT + s];
      t += p;
    }
    if (t != t) t = dev::ieee_dot<TIn>(a, m, nb0 + r);  // a non-finite input (marked) or an overflow
    out[m * a.out_ld + nb0 + r] = dev::from_f32<TOut>(t);
  }
}

// Launch of one instantiation: dynamic shared memory as configured, one block per
// 16 * row_tiles rows.
template <class Kernel>
void launch_stream(Kernel* kernel, const Tq2Args& a, int row_tiles, int smem_bytes, StreamHandle stream,
                   auto... extra) {
  if (smem_bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  const std::int64_t rows = 16 * row_tiles;
  const std::int64_t blocks = (a.n + rows - 1) / rows;
  const unsigned grid = static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
  kernel<<<grid, kThreads, static_cast<std::size_t>(smem_bytes), stream>>>(a, extra...);
}

}  // namespace llmm::cuda_ternary::stream
