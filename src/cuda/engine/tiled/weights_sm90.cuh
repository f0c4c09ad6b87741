// Weight sources of the Hopper tiled engine (the "decoders"): how a stage's weights reach the
// consumers' wgmmas.
//   TmaWeights  16-bit weights: one TMA box [128 rows][64 k] a stage from a 3D map
//               [group][rows][k], in the 128-byte-swizzled layout the A descriptors read.
//   Tq2Weights  ternary TQ2_0_g128 weights (codes [rows][k/4] and transposed f16 scales
//               [k/128][ld]: the TernaryWeightCache's layout, tq2_args.hpp). The producer's TMA
//               brings a stage's codes (2 KB) and scales (256 B); each consumer thread decodes the
//               f16 A fragment of its two rows, (code - 1) * scale exactly (an f16 scale times
//               -1, 0 or +1 is an f16), for register-A wgmmas. The activation must be f16 too.
//   Tf32x3Weights f32 weights and tokens as 3xTF32 (f32 Exact on tensor cores): both by TMA as
//               f32; the producer splits each stage's token rows in place into x = hi + lo
//               (hi = tf32(x), lo = tf32(x - hi)), the consumers split their weight fragments the
//               same way in registers, and acc += w_lo x_hi + w_hi x_lo + w_hi x_hi (w_lo x_lo is
//               below f32 rounding) through register-A tf32 wgmmas.
// A group is a batch entry (dense) or an expert (MoE): weight row f of group g is row
// g * group_rows + f of the stack.
#pragma once
#include <cuda.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/engine/tiled_sm90_shape.hpp"
#include "cuda/common/mma_sync.cuh"
#include "cuda/engine/tiled/wgmma_sm90.cuh"

namespace llmm::engine {

struct TmaWeightsParams {};
struct TmaWeights {
  using Params = TmaWeightsParams;
  static constexpr bool kDecode = false;
  static constexpr bool kSplit = false;
  static constexpr bool kConvert = false;
  static constexpr bool kFp8Mma = false;
};

struct Tq2WeightsParams {
  // Codes as bytes [groups * group_rows][k / 4], read in boxes of 16 bytes (64 k) x 128 rows.
  CUtensorMap codes;
  // The transposed scales (TernaryWeight::scales_t) as bytes [k / 128][2 * ld], read in boxes of
  // 256 bytes: 128 rows' f16 scales of one k-block. Out of bounds reads as 0.
  CUtensorMap scales;
  std::int64_t group_rows = 0;  // rows of one group (its n)
  std::int64_t group_cols = 0;  // a group's columns in the transposed scales (n rounded up to 8)
  int n = 0;                    // valid rows of a group: rows past it decode to zero
  // nullptr, or device floats the outputs are multiplied by (the power of two that brought a
  // bf16/f32 activation into f16's range): exact unless the product leaves f32's range. One for
  // every output (alpha_per_row false), or one per activation row: alpha[row_base + tok0 + tok]
  // (dense rows: row_base 0; staged expert rows: the staged row's index).
  const float* alpha = nullptr;
  bool alpha_per_row = false;
};

namespace tq2_detail {
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ std::uint32_t and_or(std::uint32_t a, std::uint32_t mask, std::uint32_t bits) {
  std::uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));  // (a & mask) | bits
  return r;
}
}  // namespace tq2_detail

struct Tq2Weights {
  using Params = Tq2WeightsParams;
  static constexpr bool kDecode = true;
  static constexpr bool kSplit = false;
  static constexpr bool kConvert = false;
  static constexpr bool kFp8Mma = false;

  // The producer's elected thread: the codes and scales of stage kb of group `group`'s weight
  // rows feat0 .. feat0 + 127 into the stage's weight part by two TMA copies completing on `bar`
  // (kTiledCodeStageBytes transaction bytes; out-of-bounds parts zero-filled, counted). The
  // scales' box starts 16-byte aligned: feat0 is a multiple of 128 and group_cols of 8.
  __device__ static void copy(const Params& w, std::uint8_t* part, int group, int feat0, int kb, std::uint64_t* bar) {
    const std::int64_t row0 = group * w.group_rows + feat0, col0 = group * w.group_cols + feat0;
    ptx::tensor_copy_2d_g2s(part, &w.codes, kb * (kTiledBK / 4), static_cast<int>(row0), bar);
    ptx::tensor_copy_2d_g2s(part + kTiledCodeBytes, &w.scales, static_cast<int>(col0) * 2, kb >> 1, bar);
  }

  // A consumer thread's share of one stage: the 64 codes of its two fragment rows (r and r + 8)
  // and their scales as f16 pairs.
  struct Stage {
    uint4 ra, rb;
    std::uint32_t sa, sb;
  };
  // Per-thread constants of the decode (q = lane % 4 picks the thread's k pairs): the byte
  // selectors of its pairs (2q, 2q + 1) and (2q + 8, 2q + 9) in a 16-code word, and where the two
  // codes of a pair land as f16 bit patterns (see fragment()).
  struct Lane {
    std::uint32_t sel_lo, sel_hi, mask, magic, bias;
  };
  __device__ static Lane lane_constants(int lane) {
    const int q = lane & 3;
    const std::uint32_t j = static_cast<std::uint32_t>(q >> 1);
    Lane l;
    l.sel_lo = 0x4040u | j | (j << 8);
    l.sel_hi = 0x4040u | (j + 2) | ((j + 2) << 8);
    // Even q: the pair is the byte's low nibble; code 2q at bits 0-1 of the low half, code
    // 2q + 1 at bits 2-3 of the high half: OR-ed into 1024.0 (ulp 1) and 256.0 (ulp 1/4) they
    // read 1024 + c and 256 + c. Odd q: the high nibble, bits 4-5 and 6-7, into 64.0 (ulp 1/16)
    // and 16.0 (ulp 1/64): 64 + c and 16 + c. bias = -(magic + 1) per half: then c - 1, exactly.
    if ((q & 1) == 0) l.mask = 0x000C0003u, l.magic = 0x5C006400u, l.bias = 0xDC04E401u;  // -257, -1025
    else l.mask = 0x00C00030u, l.magic = 0x4C005400u, l.bias = 0xCC40D410u;               // -17, -65
    return l;
  }
  // Thread (warp, lane) of consumer half cw: rows r = 64 cw + 16 warp + lane / 4 and r + 8 of the
  // stage's weight part at shared address `part` (16 bytes of codes a row, a warp reads 2 x 128
  // contiguous bytes); a row at or past `valid_rows` gets scale 0 (decodes to zeros: another
  // expert's rows in a stack).
  __device__ static Stage read(std::uint32_t part, int r, int valid_rows) {
    Stage x;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x.ra.x), "=r"(x.ra.y), "=r"(x.ra.z), "=r"(x.ra.w) : "r"(part + 16 * r));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x.rb.x), "=r"(x.rb.y), "=r"(x.rb.z), "=r"(x.rb.w)
                 : "r"(part + 16 * (r + 8)));
    std::uint16_t sa, sb;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(sa) : "r"(part + kTiledCodeBytes + 2 * r));
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(sb) : "r"(part + kTiledCodeBytes + 2 * (r + 8)));
    const std::uint32_t a = r < valid_rows ? sa : 0u, b = r + 8 < valid_rows ? sb : 0u;
    x.sa = a | (a << 16), x.sb = b | (b << 16);
    return x;
  }
  // (c - 1) * scale for the two codes of a pair, exactly (an f16 scale times -1, 0 or 1).
  __device__ static std::uint32_t pair(std::uint32_t word, std::uint32_t sel, std::uint32_t s2, const Lane& l) {
    const std::uint32_t h = tq2_detail::and_or(tq2_detail::prmt(word, 0u, sel), l.mask, l.magic);
    const __half2 v = __hmul2(__hadd2(*reinterpret_cast<const __half2*>(&h), *reinterpret_cast<const __half2*>(&l.bias)),
                              *reinterpret_cast<const __half2*>(&s2));
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
  // The f16 A fragment of k16 slice kk of the stage (ptx::WgmmaRs's register order).
  __device__ static void fragment(const Stage& x, int kk, const Lane& l, std::uint32_t (&a)[4]) {
    const std::uint32_t wa = kk == 0 ? x.ra.x : kk == 1 ? x.ra.y : kk == 2 ? x.ra.z : x.ra.w;
    const std::uint32_t wb = kk == 0 ? x.rb.x : kk == 1 ? x.rb.y : kk == 2 ? x.rb.z : x.rb.w;
    a[0] = pair(wa, l.sel_lo, x.sa, l);
    a[1] = pair(wb, l.sel_lo, x.sb, l);
    a[2] = pair(wa, l.sel_hi, x.sa, l);
    a[3] = pair(wb, l.sel_hi, x.sb, l);
  }
};

// ---------------------------------------------------------------------------------------------
struct Tf32x3Params {
  // The operands as the caller gave them (x [batch][m][k], w [batch][n][k], element strides, a
  // batch stride of 0 broadcasting): an output the split makes non-finite is recomputed from them.
  const float* x = nullptr;
  const float* w = nullptr;
  std::int64_t x_ld = 0, x_batch = 0, w_ld = 0, w_batch = 0;
  int k = 0;
};

struct Tf32x3Weights {
  using Params = Tf32x3Params;
  static constexpr bool kDecode = false;
  static constexpr bool kSplit = true;
  static constexpr bool kConvert = false;
  static constexpr bool kFp8Mma = false;
  static constexpr int kSplitWarps = 3;  // producer warps 1..3 split the token rows

  __device__ static void split(std::uint32_t v, std::uint32_t& hi, std::uint32_t& lo) {
    hi = ptx::to_tf32(__uint_as_float(v));
    lo = ptx::to_tf32(__uint_as_float(v) - __uint_as_float(hi));
  }

  // Producer splitter thread t of kSplitWarps * 32: the stage's token rows (`units` 16-byte units,
  // 4 floats each, as TMA wrote them at `hi`) become their tf32 roundings in place and their
  // remainders at the same offsets from `lo`. Elementwise, so the swizzle does not matter.
  __device__ static void split_tokens(std::uint32_t hi, std::uint32_t lo, int units, int t) {
#pragma unroll 2
    for (int u = t; u < units; u += kSplitWarps * 32) {
      std::uint32_t v[4], h[4], l[4];
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(hi + 16 * u));
#pragma unroll
      for (int e = 0; e < 4; ++e) split(v[e], h[e], l[e]);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(hi + 16 * u), "r"(h[0]), "r"(h[1]), "r"(h[2]), "r"(h[3]) : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(lo + 16 * u), "r"(l[0]), "r"(l[1]), "r"(l[2]), "r"(l[3]) : "memory");
    }
  }

  // Consumer lane `lane` of warp `warp` in half cw: the byte offset, from a stage's weight box, of
  // the row it hands ldmatrix (matrix lane / 8: rows +8 for odd matrices, the k8 slice's second
  // 16-byte unit for matrices 2 and 3), and that row's swizzle (row % 8).
  struct Lane {
    std::uint32_t row_off;
    int unit_hi, swz;
  };
  __device__ static Lane lane_constants(int cw, int warp, int lane) {
    const int row = 64 * cw + 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
    return Lane{static_cast<std::uint32_t>(row * 128), lane >> 4, lane & 7};
  }
  // The tf32 A fragments (ptx::WgmmaTf32Rs's register order) of k8 slice kk of the weight box at
  // shared address `box`, split: one ldmatrix.x4 gives (r, q), (r + 8, q), (r, q + 4), (r + 8, q + 4)
  // as 32-bit words (the b16 pairs of a word are one f32).
  __device__ static void fragments(std::uint32_t box, int kk, const Lane& l, std::uint32_t (&hi)[4], std::uint32_t (&lo)[4]) {
    std::uint32_t v[4];
    ptx::ldmatrix_x4(v, box + l.row_off + (((2 * kk + l.unit_hi) ^ l.swz) << 4));
#pragma unroll
    for (int e = 0; e < 4; ++e) split(v[e], hi[e], lo[e]);
  }

  // out[group][row][col] in plain IEEE f32 (sequential FMA over k), for an output the split made
  // NaN or infinite: a non-finite operand (Inf - tf32(Inf) is NaN), or a part that rounded past
  // FLT_MAX. Slow, and only for those outputs.
  __device__ static float ieee_dot(const Params& w, int group, std::int64_t row, std::int64_t col) {
    const float* x = w.x + group * w.x_batch + row * w.x_ld;
    const float* y = w.w + group * w.w_batch + col * w.w_ld;
    float s = 0.0f;
    for (int l = 0; l < w.k; ++l) s = fmaf(__ldg(x + l), __ldg(y + l), s);
    return s;
  }
};

}  // namespace llmm::engine
