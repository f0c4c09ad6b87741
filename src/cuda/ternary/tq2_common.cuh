// Device helpers shared by the ternary kernels: tensor-core and cp.async wrappers, exact
// decoding of 2-bit codes into 16-bit -1/0/+1 values, 16-bit packing of f32 activations.
// Included by src/cuda/ternary/*.cu only.
#pragma once
#include "cuda/common/mma_sync.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/dense/dense_common.cuh"  // to_f32, from_f32, ldg16, check_launch
#include "core/ternary/tq2_args.hpp"

namespace llmm::cuda_ternary::dev {

using llmm::cuda_dense::dev::from_f32;
using llmm::cuda_dense::dev::ldg16;
using llmm::cuda_dense::dev::to_f32;

__device__ __forceinline__ float f16_bits_to_f32(std::uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Shared PTX wrappers (cuda/common/mma_sync.cuh) under the names these kernels use.
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_addr;
template <class TM>
__device__ __forceinline__ void mma16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  ptx::mma_16816<TM>(d, a0, a1, a2, a3, b0, b1);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) { ptx::cp_async16(dst, src, 16); }
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) { ptx::ldmatrix_x4<false>(r, addr); }

// 16 bytes from a possibly unaligned address, byte by byte (fallback of the 16-byte loads).
__device__ __forceinline__ uint4 load16_bytes(const std::uint8_t* p) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<std::uint32_t>(p[4 * i]) | (static_cast<std::uint32_t>(p[4 * i + 1]) << 8) |
           (static_cast<std::uint32_t>(p[4 * i + 2]) << 16) |
           (static_cast<std::uint32_t>(p[4 * i + 3]) << 24);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 16-bit bit pattern of (c - 1) for one code c in 0..3 (3 is never stored; it decodes to +2,
// as in every other ternary kernel) in TM.
template <class TM>
__device__ __forceinline__ std::uint32_t code_bits(std::uint32_t c) {
  // f16: -1 0xBC00, +1 0x3C00, +2 0x4000; bf16: -1 0xBF80, +1 0x3F80, +2 0x4000.
  constexpr std::uint32_t one = std::is_same_v<TM, __half> ? 0x3C00u : 0x3F80u;
  return c == 1 ? 0u : c == 0 ? (one | 0x8000u) : c == 2 ? one : 0x4000u;
}

// Natural order: the 32-bit word of (code 2p, code 2p + 1) of the 4 codes of `byte`, p = 0, 1.
template <class TM>
__device__ __forceinline__ uint2 decode_byte_natural(std::uint32_t byte) {
  return make_uint2(code_bits<TM>(byte & 3u) | (code_bits<TM>((byte >> 2) & 3u) << 16),
                    code_bits<TM>((byte >> 4) & 3u) | (code_bits<TM>((byte >> 6) & 3u) << 16));
}

__device__ __forceinline__ std::uint32_t fma_f16x2(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ std::uint32_t fma_bf16x2(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Paired order, the stream kernel's hot decode: out[j] = (c_j - 1, c_{j+8} - 1) for the 16
// codes c_0..c_15 of word w (code q at bits 2q..2q+1), low half first.
// Magic-number decode: OR-ing a code shifted to mantissa bit 2i into the bits of 2^E (E = 10 for
// f16, 7 for bf16: ulp 1) gives exactly 2^E + c * 4^i; one packed fma with 4^-i and
// -(2^E * 4^-i + 1) then gives c - 1 exactly (the product is exact, the sum is an integer
// of at most 2 bits, so the single rounding is exact). Two instructions per pair of codes.
// f16 form: mantissa has 10 bits, so positions i = 0..4 of w, then of w >> 6 for codes 5..7.
// (Functions, not arrays: indexed with unrolled constants they fold to immediates in device code.)
__device__ __forceinline__ constexpr std::uint32_t f16_decode_scale(int i) {  // 4^-i: 1 .. 1/256
  constexpr std::uint32_t k[5] = {0x3C003C00u, 0x34003400u, 0x2C002C00u, 0x24002400u, 0x1C001C00u};
  return k[i];
}
__device__ __forceinline__ constexpr std::uint32_t f16_decode_bias(int i) {  // -1025, -257, -65, -17, -5
  constexpr std::uint32_t k[5] = {0xE401E401u, 0xDC04DC04u, 0xD410D410u, 0xCC40CC40u, 0xC500C500u};
  return k[i];
}

template <class TM>
__device__ __forceinline__ void decode_word_paired(std::uint32_t w, std::uint32_t (&out)[8]) {
  if constexpr (std::is_same_v<TM, __half>) {
    const std::uint32_t w6 = w >> 6;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = j <= 4 ? j : j - 3;
      const std::uint32_t src = j <= 4 ? w : w6;
      const std::uint32_t v = (src & (0x00030003u << (2 * i))) | 0x64006400u;
      out[j] = fma_f16x2(v, f16_decode_scale(i), f16_decode_bias(i));
    }
  } else {
    // bf16 mantissa has 7 bits: positions i = 0..2 of w, w >> 6 and w >> 12.
    constexpr std::uint32_t kScale[3] = {0x3F803F80u, 0x3E803E80u, 0x3D803D80u};  // 1, 1/4, 1/16
    constexpr std::uint32_t kBias[3] = {0xC301C301u, 0xC204C204u, 0xC110C110u};   // -129, -33, -9
    const std::uint32_t w6 = w >> 6, w12 = w >> 12;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = j < 3 ? j : j < 6 ? j - 3 : j - 6;
      const std::uint32_t src = j < 3 ? w : j < 6 ? w6 : w12;
      const std::uint32_t v = (src & (0x00030003u << (2 * i))) | 0x43004300u;
      out[j] = fma_bf16x2(v, kScale[i], kBias[i]);
    }
  }
}

// The f16 decode above with its masks (0x00030003 << 2i) and magic number (0x64006400) held in
// registers by the caller: one LOP3 then computes (w & mask) | magic, which with two immediates
// takes two. 17 instructions per 16 codes instead of 25.
struct F16DecodeRegs {
  std::uint32_t mask[5];
  std::uint32_t magic;
};
// `opaque_zero` must be 0 at run time and unknown to the compiler (a kernel argument), so the
// constants stay in registers.
__device__ __forceinline__ F16DecodeRegs make_f16_decode_regs(std::uint32_t opaque_zero) {
  F16DecodeRegs r;
#pragma unroll
  for (int i = 0; i < 5; ++i) r.mask[i] = (0x00030003u << (2 * i)) | opaque_zero;
  r.magic = 0x64006400u | opaque_zero;
  return r;
}
__device__ __forceinline__ void decode_word_paired_f16(std::uint32_t w, const F16DecodeRegs& r,
                                                       std::uint32_t (&out)[8]) {
  const std::uint32_t w6 = w >> 6;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int i = j <= 4 ? j : j - 3;
    std::uint32_t v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(j <= 4 ? w : w6), "r"(r.mask[i]), "r"(r.magic));  // (a&b)|c
    out[j] = fma_f16x2(v, f16_decode_scale(i), f16_decode_bias(i));
  }
}

// Two floats -> packed bf16 pair (lo in the low half), round to nearest even.
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float bf16_lo_f32(std::uint32_t p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf16_hi_f32(std::uint32_t p) { return __uint_as_float(p & 0xffff0000u); }

// Part `part` (0 = hi, 1 = mid, 2 = lo) of the exact split of two floats into bf16 pieces:
// x = hi + mid + lo exactly for normal f32 (each residual is exact in f32 and the last has at
// most 8 significant bits). PARTS = 1: just the rounded pair.
template <int PARTS>
__device__ __forceinline__ std::uint32_t bf16_part(float lo, float hi, int part) {
  std::uint32_t p = pack_bf16x2(lo, hi);
#pragma unroll
  for (int q = 1; q < PARTS; ++q) {
    lo -= bf16_lo_f32(p);
    hi -= bf16_hi_f32(p);
    const std::uint32_t next = pack_bf16x2(lo, hi);
    p = part >= q ? next : p;
  }
  return p;
}

// out(i, j) as plain IEEE f32 arithmetic gives it: a sequential FMA over k of in(i, l) and the
// decoded W(j, l). The split and scaled paths cannot carry Inf or NaN through (an Inf hi part
// leaves a NaN lo part; an int8 digit has no NaN), so they make a NaN result instead (v2/v3
// mark a non-finite activation group with a NaN coefficient) and the epilogue recomputes that
// output here: NaN and +-Inf come out as IEEE arithmetic makes them. Finite inputs never take
// this path unless a split overflowed, and then this is the IEEE value too. Slow (one thread
// reads the row), and only for such outputs.
template <class TIn>
__device__ __forceinline__ float ieee_dot_row(const TIn* x, const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t k) {
  float s = 0.0f;
  for (std::int64_t l = 0; l < k; ++l) {
    const int code = (codes[l >> 2] >> (2 * (l & 3))) & 3;
    const float w = static_cast<float>(code - 1) * f16_bits_to_f32(scales[l >> 7]);
    s = fmaf(to_f32(x[l]), w, s);
  }
  return s;
}
template <class TIn>
__device__ __forceinline__ float ieee_dot(const Tq2Args& a, std::int64_t i, std::int64_t j) {
  return ieee_dot_row(static_cast<const TIn*>(a.in) + i * a.in_ld, a.codes + j * (a.k / 4), a.scales + j * (a.k / 128), a.k);
}

}  // namespace llmm::cuda_ternary::dev

namespace llmm::cuda_ternary {

// Calls f(TIn{}, TOut{}) for a's (input, output) dtypes: input f32, f16 or bf16, output f32 or
// the input's dtype (gemm_tq2 has refused anything else). The streaming launchers' dispatch.
template <class F>
void with_in_out(const Tq2Args& a, F&& f) {
  const bool same = a.out_dtype == a.in_dtype;
  switch (a.in_dtype) {
    case DType::F32: f(float{}, float{}); break;
    case DType::F16: same ? f(__half{}, __half{}) : f(__half{}, float{}); break;
    default: same ? f(__nv_bfloat16{}, __nv_bfloat16{}) : f(__nv_bfloat16{}, float{}); break;
  }
}

// Calls f(std::integral_constant<int, NT>) for NT = n_tiles clamped to 1..4: the n8 tiles of
// digit columns (ceil(4 m / 8)) the sm_90 streaming kernels are instantiated for.
template <class F>
void with_n_tiles(int n_tiles, F&& f) {
  switch (n_tiles) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace llmm::cuda_ternary
