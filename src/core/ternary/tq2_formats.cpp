// Conversions of other tools' ternary formats into TQ2_0_g128 blocks (see llmm/ternary_formats.hpp).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/host_alloc.hpp"
#include "llmm/checked.hpp"
#include "llmm/dtype.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary_formats.hpp"

namespace llmm {
namespace {

constexpr std::int64_t kQkK = 256;

// Bytes of n rows of k weights in blocks of `block_weights` weights of `block_bytes`; checks the
// shape (k a multiple of `k_multiple`: the format's block, or 128 where that is larger).
std::size_t tensor_bytes(const char* who, std::int64_t n, std::int64_t k, std::int64_t block_weights,
                         std::int64_t k_multiple, std::size_t block_bytes) {
  if (n < 1 || k < 1) fail(ErrorCode::InvalidArgument, who, ": n ", n, " and k ", k, " must be >= 1");
  if (k % k_multiple != 0) fail(ErrorCode::InvalidArgument, who, ": k ", k, " is not a multiple of ", k_multiple);
  const std::uint64_t blocks = checked_mul(to_u64(n, "n"), to_u64(k / block_weights, "k"), who);
  return to_usize(checked_mul(blocks, block_bytes, who), who);
}

// Refuses a byte count other than the [n, k] tensor's, and null data.
void check_tensor(const char* who, const char* kind, const void* data, std::size_t bytes, std::int64_t n,
                  std::int64_t k, std::int64_t block_weights, std::int64_t k_multiple, std::size_t block_bytes) {
  const std::size_t want = tensor_bytes(who, n, k, block_weights, k_multiple, block_bytes);
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, who, ": ", bytes, " bytes given, an [", n, ", ", k, "] ", kind, " tensor is ", want,
         " (", k / block_weights, " blocks of ", block_bytes, " bytes a row)");
  if (!data) fail(ErrorCode::InvalidArgument, who, ": null data");
}

std::string f16_hex(std::uint16_t d) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%04x", static_cast<unsigned>(d));
  return hex;
}

void check_scale(const char* who, std::uint16_t d, std::int64_t row, std::int64_t block) {
  if ((d & 0x7c00u) == 0x7c00u)
    fail(ErrorCode::InvalidArgument, who, ": non-finite scale (f16 bits ", f16_hex(d), ") in row ", row, ", block ", block);
}

std::uint16_t scale_at(const std::uint8_t* p) {
  std::uint16_t d;
  std::memcpy(&d, p, 2);
  return d;
}

// Refuses code 3 among `count` bytes of 2-bit codes: +2 x scale in the Q2_0 family, not ternary.
void refuse_plus_two(const char* who, const std::uint8_t* qs, int count, std::int64_t row, std::int64_t block) {
  for (int byte = 0; byte < count; ++byte)
    // A code 3 has both bits of its pair set: (q & (q >> 1)) & 0x55 marks the pairs.
    if ((qs[byte] & (qs[byte] >> 1) & 0x55u) != 0)
      fail(ErrorCode::InvalidArgument, who, ": code 3 (+2) in row ", row, ", block ", block, ", byte ", byte,
           ": TQ2_0_g128 holds ternary weights only (-1, 0, +1 x scale)");
}

// Sets weight j (0..127) of `b` to code c (0, 1, 2).
inline void put(BlockTQ2_128& b, int j, int c) { b.qs[j >> 2] = static_cast<std::uint8_t>(b.qs[j >> 2] | (c << (2 * (j & 3)))); }

std::vector<BlockTQ2_128> blocks_for(std::int64_t n, std::int64_t k, const char* who) {
  return detail::host_vector<BlockTQ2_128>(tq2_aos_bytes(n, k) / kTq2BlockBytes, who);
}

// Digit i (0..4) of a byte in llama.cpp's fixed-point base 3 (TQ1_0, PTQ1_0): the byte times 3^i
// wraps around in uint8 (part of the format), and the top of what is left times 3 is the digit.
inline int base3_digit(std::uint8_t byte, int i) {
  static constexpr std::uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const std::uint8_t q = static_cast<std::uint8_t>(byte * kPow3[i]);
  return (static_cast<std::uint16_t>(q) * 3) >> 8;
}

// A ternary tensor of n rows of k / W blocks of `block_bytes` (W = block_weights, 128 or 256),
// each with its f16 scale at `d_at`: fill(src, out, row, block) sets the codes of the W / 128
// TQ2_0_g128 blocks at `out` (zeroed, their scale already set to the block's), or refuses
// naming where. Every block is checked before the result is returned.
template <class Fill>
std::vector<BlockTQ2_128> convert(const char* who, const char* kind, std::int64_t block_weights, std::size_t block_bytes,
                                  std::size_t d_at, const void* data, std::size_t bytes, std::int64_t n, std::int64_t k,
                                  Fill fill) {
  check_tensor(who, kind, data, bytes, n, k, block_weights, block_weights, block_bytes);
  std::vector<BlockTQ2_128> out = blocks_for(n, k, who);
  const auto* p = static_cast<const std::uint8_t*>(data);
  const std::int64_t bpr = k / block_weights, halves = block_weights / kTq2BlockWeights;
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const std::uint8_t* src = p + static_cast<std::size_t>(r * bpr + b) * block_bytes;
      const std::uint16_t d = scale_at(src + d_at);
      check_scale(who, d, r, b);
      BlockTQ2_128* o = &out[static_cast<std::size_t>((r * bpr + b) * halves)];
      for (std::int64_t h = 0; h < halves; ++h) std::memset(o[h].qs, 0, sizeof o[h].qs), o[h].d = d;
      fill(src, o, r, b);
    }
  return out;
}

// The Q2_0 family's 34-byte group-128 block {d, qs[32]}: TQ2_0_g128's codes with the scale first.
std::vector<BlockTQ2_128> from_q2_g128(const char* who, const char* kind, const void* data, std::size_t bytes,
                                       std::int64_t n, std::int64_t k) {
  return convert(who, kind, kTq2BlockWeights, kTq2BlockBytes, 0, data, bytes, n, k,
                 [who](const std::uint8_t* src, BlockTQ2_128* o, std::int64_t r, std::int64_t b) {
                   refuse_plus_two(who, src + 2, 32, r, b);
                   std::memcpy(o->qs, src + 2, 32);
                 });
}

}  // namespace

std::vector<BlockTQ2_128> tq2_from_gguf_tq2_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  constexpr const char* who = "tq2_from_gguf_tq2_0";
  return convert(who, "TQ2_0", kQkK, 66, 64, data, bytes, n, k,
                 [who](const std::uint8_t* src, BlockTQ2_128* o, std::int64_t r, std::int64_t b) {
                   for (int j = 0; j < 256; ++j) {
                     const int byte = 32 * (j / 128) + j % 32, code = (src[byte] >> (2 * ((j % 128) / 32))) & 3;
                     if (code == 3)
                       fail(ErrorCode::InvalidArgument, who, ": invalid code 3 in row ", r, ", block ", b, ", byte ", byte);
                     put(o[j / 128], j % 128, code);
                   }
                 });
}

std::vector<BlockTQ2_128> tq2_from_gguf_tq1_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  return convert("tq2_from_gguf_tq1_0", "TQ1_0", kQkK, 54, 52, data, bytes, n, k,
                 [](const std::uint8_t* src, BlockTQ2_128* o, std::int64_t, std::int64_t) {
                   int codes[256];
                   for (int i = 0; i < 5; ++i)
                     for (int m = 0; m < 32; ++m) codes[32 * i + m] = base3_digit(src[m], i);
                   for (int i = 0; i < 5; ++i)
                     for (int m = 0; m < 16; ++m) codes[160 + 16 * i + m] = base3_digit(src[32 + m], i);
                   for (int i = 0; i < 4; ++i)
                     for (int j = 0; j < 4; ++j) codes[240 + 4 * i + j] = base3_digit(src[48 + j], i);
                   for (int j = 0; j < 256; ++j) put(o[j / 128], j % 128, codes[j]);
                 });
}

std::vector<BlockTQ2_128> tq2_from_q2_0_g128(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  return from_q2_g128("tq2_from_q2_0_g128", "Q2_0 (group 128)", data, bytes, n, k);
}

// The layouts of PQ2_0, PTQ1_0 and upstream Q2_0 were read from (none of their code is copied):
//  - type ids: PrismML-Eng/llama.cpp ggml/include/ggml.h (GGML_TYPE_Q2_0 = 42, GGML_TYPE_PQ2_0 =
//    142, GGML_TYPE_PTQ1_0 = 143); ggml-org/llama.cpp ggml/include/ggml.h for upstream's 42;
//  - Q2_0 (group 64): ggml-org/llama.cpp ggml/src/ggml-common.h (block_q2_0: d, qs[QK2_0 / 4],
//    QK2_0 = 64) and ggml/src/ggml-quants.c (dequantize_row_q2_0: value (code - 1) * d, codes
//    00 = -1, 01 = 0, 10 = +1, 11 = +2);
//  - PQ2_0: PrismML-Eng/llama.cpp ggml/src/ggml-quants.c (dequantize_row_pq2_0: the same decode
//    with 128 weights a block) and ggml-common.h (the 34-byte block, first named Q2_0_G128);
//  - PTQ1_0: block_ptq1_0 {qs[24], qh[2], d} and dequantize_row_ptq1_0's order (stages of 16 and
//    8 qs bytes, then qh), as transcribed in cool-japan/oxibonsai
//    crates/oxibonsai-core/src/quant_prism.rs and in OpenCL and C# readers of the fork's files,
//    which agree; the base-3 digit is TQ1_0's (ggml-quants.c, dequantize_row_tq1_0).
std::vector<BlockTQ2_128> tq2_from_pq2_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  return from_q2_g128("tq2_from_pq2_0", "PQ2_0", data, bytes, n, k);
}

std::vector<BlockTQ2_128> tq2_from_ptq1_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  return convert("tq2_from_ptq1_0", "PTQ1_0", kTq2BlockWeights, 28, 26, data, bytes, n, k,
                 [](const std::uint8_t* src, BlockTQ2_128* o, std::int64_t, std::int64_t) {
                   for (int i = 0; i < 5; ++i)
                     for (int m = 0; m < 16; ++m) put(*o, 16 * i + m, base3_digit(src[m], i));
                   for (int i = 0; i < 5; ++i)
                     for (int m = 0; m < 8; ++m) put(*o, 80 + 8 * i + m, base3_digit(src[16 + m], i));
                   for (int i = 0; i < 4; ++i)
                     for (int h = 0; h < 2; ++h) put(*o, 120 + 2 * i + h, base3_digit(src[24 + h], i));
                 });
}

namespace {

constexpr std::size_t kQ2G64Bytes = 18;

// True when every code of a group-64 block is 1 (weight 0): its scale does not matter.
bool all_zero_codes(const std::uint8_t* qs) {
  for (int i = 0; i < 16; ++i)
    if (qs[i] != 0x55) return false;
  return true;
}

// The one scale of a TQ2_0_g128 block made of group-64 blocks `lo` and `lo + 1` of row `row`.
std::uint16_t merged_scale(const char* who, const std::uint8_t* lo, const std::uint8_t* hi, std::int64_t row,
                           std::int64_t lo_block) {
  const std::uint16_t d_lo = scale_at(lo), d_hi = scale_at(hi);
  if (d_lo == d_hi || all_zero_codes(hi + 2)) return d_lo;
  if (all_zero_codes(lo + 2)) return d_hi;
  fail(ErrorCode::InvalidArgument, who, ": Q2_0 (group 64) row ", row, ", blocks ", lo_block, " and ", lo_block + 1,
       " have different scales (f16 bits ", f16_hex(d_lo), " = ", f16_bits_to_f32(d_lo), " and ", f16_hex(d_hi), " = ",
       f16_bits_to_f32(d_hi), "): a TQ2_0_g128 block has one scale for 128 weights (a group-64 variant is not implemented)");
}

}  // namespace

std::vector<BlockTQ2_128> tq2_from_q2_0_g64(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  constexpr const char* who = "tq2_from_q2_0_g64";
  check_tensor(who, "Q2_0 (group 64)", data, bytes, n, k, 64, kTq2BlockWeights, kQ2G64Bytes);
  std::vector<BlockTQ2_128> out = blocks_for(n, k, who);
  const auto* p = static_cast<const std::uint8_t*>(data);
  const std::int64_t bpr = k / 64;
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; b += 2) {
      const std::uint8_t* lo = p + static_cast<std::size_t>(r * bpr + b) * kQ2G64Bytes;
      const std::uint8_t* hi = lo + kQ2G64Bytes;
      check_scale(who, scale_at(lo), r, b);
      check_scale(who, scale_at(hi), r, b + 1);
      refuse_plus_two(who, lo + 2, 16, r, b);
      refuse_plus_two(who, hi + 2, 16, r, b + 1);
      BlockTQ2_128& o = out[static_cast<std::size_t>(r * (bpr / 2) + b / 2)];
      o.d = merged_scale(who, lo, hi, r, b);
      std::memcpy(o.qs, lo + 2, 16);  // weight j < 64 at qs[j / 4] in both layouts
      std::memcpy(o.qs + 16, hi + 2, 16);
    }
  return out;
}

std::vector<BlockTQ2_128> tq2_from_bitnet(const std::uint8_t* packed, std::size_t bytes, std::int64_t out_rows,
                                          std::int64_t in, float weight_scale) {
  constexpr const char* who = "tq2_from_bitnet";
  if (out_rows < 4 || out_rows % 4 != 0)
    fail(ErrorCode::InvalidArgument, who, ": out ", out_rows, " must be a positive multiple of 4 (4 rows a packed byte)");
  const std::size_t aos = tq2_aos_bytes(out_rows, in);  // in % 128, sizes
  (void)aos;
  const std::size_t want = to_usize(checked_mul(to_u64(out_rows / 4, "out"), to_u64(in, "in"), who), who);
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, who, ": ", bytes, " bytes given, a packed [", out_rows / 4, ", ", in,
         "] uint8 tensor is ", want);
  if (!packed) fail(ErrorCode::InvalidArgument, who, ": null data");
  if (!std::isfinite(weight_scale) || !(weight_scale > 0.0f))
    fail(ErrorCode::InvalidArgument, who, ": weight_scale ", weight_scale, " must be finite and > 0");
  const std::uint16_t d = f32_to_f16_bits(1.0f / weight_scale);
  if ((d & 0x7c00u) == 0x7c00u || (d & 0x7c00u) == 0)
    fail(ErrorCode::InvalidArgument, who, ": 1 / weight_scale = ", 1.0f / weight_scale,
         " is outside the normal f16 range (6.1e-05 .. 65504)");
  std::vector<BlockTQ2_128> out = blocks_for(out_rows, in, who);
  const std::int64_t prow = out_rows / 4, bpr = in / kTq2BlockWeights;
  for (auto& blk : out) std::memset(blk.qs, 0, sizeof blk.qs), blk.d = d;
  for (std::int64_t pr = 0; pr < prow; ++pr)
    for (std::int64_t c = 0; c < in; ++c) {
      const std::uint8_t byte = packed[static_cast<std::size_t>(pr * in + c)];
      for (int s = 0; s < 4; ++s) {
        const int code = (byte >> (2 * s)) & 3;
        if (code == 3)
          fail(ErrorCode::InvalidArgument, who, ": invalid code 3 at packed row ", pr, ", column ", c, ", bits ", 2 * s);
        const std::int64_t r = s * prow + pr;
        put(out[static_cast<std::size_t>(r * bpr + c / kTq2BlockWeights)], static_cast<int>(c % kTq2BlockWeights), code);
      }
    }
  return out;
}

}  // namespace llmm
