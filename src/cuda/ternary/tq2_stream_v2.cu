// tq2_stream_v2: decode-shaped ternary GEMM (m = 1..16), memory-bound by design.
//
// v1 (tq2_stream.cu) spent ~3/4 of its instructions converting f32 activations into bf16 parts
// for every weight word (ncu: 2.4 IPC, 3.6 codes per warp instruction, 7x over the memory
// floor). v2 takes all activation work out of the loop:
//
// Per K chunk, the block's 256 threads convert the activation into shared memory once, in the
// order of the mma B fragments: per column (token m, part s) and 16-code word, 8 packed f16
// pairs (x[j], x[j + 8]). Each 128-group of a token is scaled by a power of two sigma (its max
// |x| lands in [2^14, 2^15)) and split into `splits` f16 parts (hi + mid + lo is exact for f32:
// 3 x 11 significand bits; two parts keep 22 bits). Per (group, column) 1 / sigma is kept for
// the epilogue. The codes decode exactly to -1/0/+1 in f16 (decode_word_paired, 2 instructions
// a pair), so each product is exact and the tensor core's f32 sum sees no cancellation.
// (A one-AND decode into f16 subnormals c * 2^(p - 24) was tried first: the tensor core aligns
// products by their exponent fields, so subnormal operands lost up to 10 bits; inputs spread
// over 2^+-20 showed 2^-14 relative errors. Test StreamV2ChunksRowTilesWideRange.)
//
// Roles as in v1: the weight is the mma A operand (16 rows), activation columns are B (n8
// tiles). Lane (g, t4) reads 8 bytes (words 2 t4, 2 t4 + 1) of rows g and g + 8 of each group,
// a batch of groups ahead of the math. Each group's 8 mmas go to a zeroed partial, then
// total += partial / sigma * scale in f32. Warps of a block: row_tiles x k_warps; k-warps take
// the chunk's groups round-robin; partial sums meet in shared memory and are added in a fixed
// order (deterministic, no atomics).
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_common.cuh"

namespace llmm::cuda_ternary {
namespace {

constexpr int kThreads = kTq2V2Threads;
constexpr int kWarps = kThreads / 32;
constexpr int kAhead = 4;  // groups per batch; two batches ping-pong, one loading while one computes

// Position of a 16-code word's 32-byte B record inside its group (words 0..7): the two words a
// lane uses in a group (2 t4, 2 t4 + 1) sit at t4 and 4 + t4, so the four lanes of a quad hit
// different banks.
__device__ __forceinline__ int record_pos(int word) { return (word & 1) * 4 + (word >> 1); }

struct Group {
  uint2 c[2];         // words 2 t4, 2 t4 + 1 of rows g (c[0]) and g + 8 (c[1])
  std::uint32_t s;    // f16 scales of rows g (low half) and g + 8
};

// Constants of the code decode, held in registers: with both the mask and the magic number in
// registers one LOP3 computes (w & mask) | magic (with immediates it takes two).
struct DecodeRegs {
  std::uint32_t mask[5];  // 0x00030003 << 2i
  std::uint32_t magic;    // 0x64006400: f16 1024 in both halves
};

__device__ __forceinline__ std::uint32_t and_or(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));  // (a & b) | c
  return d;
}

// out[j] = (c_j - 1, c_{j+8} - 1) as f16 for the 16 codes of w (code q at bits 2q), exactly:
// (w & mask_i) | 1024 is the f16 value 1024 + c * 4^i; one packed fma with 4^-i and
// -(1024 * 4^-i + 1) gives c - 1 (as decode_word_paired in tq2_common.cuh). 17 instructions.
__device__ __forceinline__ void decode_word(std::uint32_t w, const DecodeRegs& r, std::uint32_t (&out)[8]) {
  constexpr std::uint32_t kScale[5] = {0x3C003C00u, 0x34003400u, 0x2C002C00u, 0x24002400u, 0x1C001C00u};
  constexpr std::uint32_t kBias[5] = {0xE401E401u, 0xDC04DC04u, 0xD410D410u, 0xCC40CC40u, 0xC500C500u};
  const std::uint32_t w6 = w >> 6;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = j <= 4 ? j : j - 3;
    out[j] = dev::fma_f16x2(and_or(j <= 4 ? w : w6, r.mask[i], r.magic), kScale[i], kBias[i]);
  }
}

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

// `opaque_zero` is 0 at run time; it keeps the decode constants in registers (see DecodeRegs).
template <class TIn, class TOut, int SPLIT, int NT>
__global__ void __launch_bounds__(kThreads, 2)
    tq2_stream_v2_kernel(Tq2Args a, int row_tiles, int chunk_groups, bool in_vec, std::uint32_t opaque_zero) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int cols = static_cast<int>(a.m) * SPLIT;
  const int col_stride = chunk_groups * 256 + 16;  // bytes per column of xs
  float* const red = reinterpret_cast<float*>(smem);                               // [8][16][8 NT]
  float* const coef = reinterpret_cast<float*>(smem + kWarps * 16 * 8 * NT * 4);  // [group][8 NT]: 1 / sigma
  unsigned char* const xs = smem + kWarps * 16 * 8 * NT * 4 + chunk_groups * 8 * NT * 4;  // [cols + 1][...]

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t4 = lane & 3;
  const int k_warps = kWarps / row_tiles;
  const int rt = warp / k_warps, kw = warp % k_warps;
  const std::int64_t groups = a.k / kTq2Group, row_bytes = a.k / 4;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.x) * row_tiles + rt) * 16;
  const std::uint8_t* crow[2];
  const std::uint16_t* srow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows past n re-read row n - 1 (results dropped)
    std::int64_t r = n0 + g + 8 * h;
    r = r < a.n ? r : a.n - 1;
    crow[h] = a.codes + r * row_bytes + 8 * t4;
    srow[h] = a.scales + r * groups;
  }
  const TIn* const in = static_cast<const TIn*>(a.in);
  DecodeRegs dr;
#pragma unroll
  for (int i = 0; i < 5; ++i) dr.mask[i] = (0x00030003u << (2 * i)) | opaque_zero;
  dr.magic = 0x64006400u | opaque_zero;

  // B records of this lane: column 8 nt + g, or the all-zero column `cols` past the last one.
  const unsigned char* xb[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = 8 * nt + g < cols ? 8 * nt + g : cols;
    xb[nt] = xs + col * col_stride;
  }
  const int rec0 = record_pos(2 * t4) * 32, rec1 = record_pos(2 * t4 + 1) * 32;
  // The zero column, written once (conversions never touch it).
  for (int i = static_cast<int>(threadIdx.x); i < col_stride / 16; i += kThreads)
    reinterpret_cast<uint4*>(xs + cols * col_stride)[i] = make_uint4(0, 0, 0, 0);

  float total[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) total[nt][e] = 0.0f;

  const std::int64_t chunks = (groups + chunk_groups - 1) / chunk_groups;
  // Groups of this warp in chunk c: c * chunk_groups + kw + k_warps * i.
  auto chunk_len = [&](std::int64_t c) -> int {
    const std::int64_t rest = groups - c * chunk_groups;
    return static_cast<int>(rest < chunk_groups ? rest : chunk_groups);
  };
  auto warp_groups = [&](std::int64_t c) -> int {
    const int len = c < chunks ? chunk_len(c) : 0;
    return kw < len ? (len - kw + k_warps - 1) / k_warps : 0;
  };
  // Loads batch b (kAhead groups) of chunk c; groups past the warp's list read nothing.
  // 32-bit group index (k / 128 < 2^31 by the contract) so addresses cost one wide IMAD each.
  auto load_batch = [&](std::int64_t c, int b, Group (&dst)[kAhead]) {
    const int ng = warp_groups(c);
    const unsigned first = static_cast<unsigned>(c * chunk_groups + kw + k_warps * b * kAhead);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (b * kAhead + u < ng) {
        const unsigned grp = first + static_cast<unsigned>(k_warps * u);
        dst[u].c[0] = __ldg(reinterpret_cast<const uint2*>(crow[0]) + 4u * grp);
        dst[u].c[1] = __ldg(reinterpret_cast<const uint2*>(crow[1]) + 4u * grp);
        dst[u].s = static_cast<std::uint32_t>(__ldg(srow[0] + grp)) | (static_cast<std::uint32_t>(__ldg(srow[1] + grp)) << 16);
      }
    }
  };
  auto compute_batch = [&](int b, int ngc, const Group (&cur)[kAhead]) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int i = b * kAhead + u;
      if (i >= ngc) break;  // warp-uniform
      const int gl = kw + k_warps * i;
      float part[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[nt][e] = 0.0f;
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        std::uint32_t ra[8], rb[8];
        decode_word(w ? cur[u].c[0].y : cur[u].c[0].x, dr, ra);
        decode_word(w ? cur[u].c[1].y : cur[u].c[1].x, dr, rb);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const unsigned char* rec = xb[nt] + gl * 256 + (w ? rec1 : rec0);
          const uint4 b0 = *reinterpret_cast<const uint4*>(rec);
          const uint4 b1 = *reinterpret_cast<const uint4*>(rec + 16);
          const std::uint32_t bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
          for (int q = 0; q < 4; ++q)
            dev::mma16816<__half>(part[nt], ra[2 * q], rb[2 * q], ra[2 * q + 1], rb[2 * q + 1], bb[2 * q], bb[2 * q + 1]);
        }
      }
      const float d0 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur[u].s & 0xffffu));
      const float d1 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur[u].s >> 16));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 cf = *reinterpret_cast<const float2*>(&coef[gl * 8 * NT + 8 * nt + 2 * t4]);
        total[nt][0] = fmaf(part[nt][0] * cf.x, d0, total[nt][0]);
        total[nt][1] = fmaf(part[nt][1] * cf.y, d0, total[nt][1]);
        total[nt][2] = fmaf(part[nt][2] * cf.x, d1, total[nt][2]);
        total[nt][3] = fmaf(part[nt][3] * cf.y, d1, total[nt][3]);
      }
    }
  };

  Group buf0[kAhead], buf1[kAhead];
  load_batch(0, 0, buf0);
  for (std::int64_t c = 0; c < chunks; ++c) {
    const int len = chunk_len(c);
    __syncthreads();  // the previous chunk's xs and coef are no longer read
    // Convert: one warp per (token, group) of the chunk; lane i owns x[128 grp + 4 i .. + 3].
    // A warp's items are loaded kConvBatch at a time before any is processed, so their global
    // load latencies overlap (this phase runs before the weight stream starts).
    constexpr int kConvBatch = NT >= 3 ? 2 : 4;  // fewer for the wide tiles (registers)
    const int items = static_cast<int>(a.m) * len;
    for (int base = warp; base < items; base += kConvBatch * kWarps) {
      float4 xv[kConvBatch];
#pragma unroll
      for (int u = 0; u < kConvBatch; ++u) {
        const int item = base + u * kWarps;
        if (item < items) {
          const int m = item / len, gl = item % len;
          const std::int64_t k0 = (c * chunk_groups + gl) * kTq2Group + 4 * lane;
          xv[u] = load_x4<TIn>(in + m * a.in_ld + k0, in_vec);
        }
      }
#pragma unroll
      for (int u = 0; u < kConvBatch; ++u) {
        const int item = base + u * kWarps;
        if (item >= items) break;  // warp-uniform
        const int m = item / len, gl = item % len;
        const float4 x = xv[u];
        float mx = fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        // sigma = 2^sh with max |x| * sigma in [2^14, 2^15): the f16 parts keep their full 11
        // bits down to 2^-24 / 2^15 of the group's max. Clamped so sigma and 1 / sigma stay
        // normal f32.
        int e = 0;
        frexpf(mx, &e);  // mx < 2^e (e = 0 for 0; inf/nan give unspecified e, then clamped)
        int sh = 15 - e;
        sh = sh < -100 ? -100 : sh > 100 ? 100 : sh;
        const float sigma = ldexpf(1.0f, sh), inv = ldexpf(1.0f, -sh);
        const float v[4] = {x.x, x.y, x.z, x.w};
        const int kin = 4 * lane;  // code index inside the group
        unsigned char* const rec = xs + gl * 256 + record_pos(kin >> 4) * 32;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int q = (kin + t) & 15;
          const int j = q & 7, half = q >> 3;
          float r = v[t] * sigma;
#pragma unroll
          for (int s = 0; s < SPLIT; ++s) {
            const __half h = __float2half_rn(r);
            r -= __half2float(h);
            *reinterpret_cast<__half*>(rec + (m * SPLIT + s) * col_stride + j * 4 + half * 2) = h;
          }
        }
        if (lane < SPLIT) coef[gl * 8 * NT + m * SPLIT + lane] = inv;
      }
    }
    for (int i = static_cast<int>(threadIdx.x); i < len * (8 * NT - cols); i += kThreads)  // unused columns
      coef[(i / (8 * NT - cols)) * 8 * NT + cols + i % (8 * NT - cols)] = 0.0f;
    __syncthreads();

    // Batches ping-pong between buf0 and buf1: the next batch (possibly the next chunk's first)
    // is in flight while this one is decoded.
    const int ngc = warp_groups(c);
    const int nb = (ngc + kAhead - 1) / kAhead;
    if (nb == 0) load_batch(c + 1, 0, buf0);  // nothing here: fetch the next chunk's first batch
    for (int b = 0; b < nb; b += 2) {
      if (b + 1 < nb) load_batch(c, b + 1, buf1);
      else load_batch(c + 1, 0, buf1);
      compute_batch(b, ngc, buf0);
      if (b + 1 >= nb) {  // odd count: the next chunk's first batch is in buf1
#pragma unroll
        for (int u = 0; u < kAhead; ++u) buf0[u] = buf1[u];
        break;
      }
      if (b + 2 < nb) load_batch(c, b + 2, buf0);
      else load_batch(c + 1, 0, buf0);
      compute_batch(b + 1, ngc, buf1);
    }
  }

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
    out[m * a.out_ld + nb0 + r] = dev::from_f32<TOut>(t);
  }
}

template <class TIn, class TOut, int SPLIT, int NT>
void launch_one(const Tq2Args& a, const Tq2StreamV2Config& c, StreamHandle stream) {
  auto* kernel = &tq2_stream_v2_kernel<TIn, TOut, SPLIT, NT>;
  if (c.smem_bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem_bytes);
  const std::int64_t rows = 16 * c.row_tiles;
  const std::int64_t blocks = (a.n + rows - 1) / rows;
  const unsigned grid = static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
  kernel<<<grid, kThreads, static_cast<std::size_t>(c.smem_bytes), stream>>>(
      a, c.row_tiles, c.chunk_groups, tq2_input_vec16(a), 0u);
}

template <class TIn, class TOut, int SPLIT>
void launch_nt(const Tq2Args& a, const Tq2StreamV2Config& c, StreamHandle stream) {
  if constexpr (SPLIT == 3) {
    launch_one<TIn, TOut, 3, 1>(a, c, stream);  // m <= 2
  } else if constexpr (SPLIT == 2) {
    switch (c.n_tiles) {
      case 1: launch_one<TIn, TOut, 2, 1>(a, c, stream); break;
      case 2: launch_one<TIn, TOut, 2, 2>(a, c, stream); break;
      case 3: launch_one<TIn, TOut, 2, 3>(a, c, stream); break;
      default: launch_one<TIn, TOut, 2, 4>(a, c, stream); break;
    }
  } else {
    if (c.n_tiles == 1) launch_one<TIn, TOut, 1, 1>(a, c, stream);
    else launch_one<TIn, TOut, 1, 2>(a, c, stream);
  }
}

}  // namespace

void launch_tq2_stream_v2(const Tq2Args& a, StreamHandle stream) {
  // Default SM count on purpose, as in v1: the launched configuration is the named one.
  const auto c = tq2_stream_v2_config(a);
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v2: arguments outside the kernel's contract (m ", a.m, ")");
  const std::string name = tq2_stream_v2_kernel_name(a);
  const bool same_out = a.out_dtype == a.in_dtype;
  switch (a.in_dtype) {
    case DType::F32:
      if (c->splits == 3) launch_nt<float, float, 3>(a, *c, stream);
      else if (c->splits == 2) launch_nt<float, float, 2>(a, *c, stream);
      else launch_nt<float, float, 1>(a, *c, stream);
      break;
    case DType::F16:
      if (same_out) launch_nt<__half, __half, 1>(a, *c, stream);
      else launch_nt<__half, float, 1>(a, *c, stream);
      break;
    default:
      if (same_out) launch_nt<__nv_bfloat16, __nv_bfloat16, 1>(a, *c, stream);
      else launch_nt<__nv_bfloat16, float, 1>(a, *c, stream);
      break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
