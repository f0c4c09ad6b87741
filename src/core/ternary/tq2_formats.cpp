// Conversions of other tools' ternary formats into TQ2_0_g128 blocks (see llmm/ternary_formats.hpp).
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/host_alloc.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary_formats.hpp"

namespace llmm {
namespace {

constexpr std::int64_t kQkK = 256;

// Bytes of n rows of k weights in blocks of 256 weights of `block_bytes`; checks the shape.
std::size_t gguf_bytes(const char* who, std::int64_t n, std::int64_t k, std::size_t block_bytes) {
  if (n < 1 || k < 1) fail(ErrorCode::InvalidArgument, who, ": n ", n, " and k ", k, " must be >= 1");
  if (k % kQkK != 0) fail(ErrorCode::InvalidArgument, who, ": k ", k, " is not a multiple of ", kQkK);
  const std::uint64_t blocks = checked_mul(to_u64(n, "n"), to_u64(k / kQkK, "k"), who);
  return to_usize(checked_mul(blocks, block_bytes, who), who);
}

void check_scale(const char* who, std::uint16_t d, std::int64_t row, std::int64_t block) {
  if ((d & 0x7c00u) == 0x7c00u) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%04x", static_cast<unsigned>(d));
    fail(ErrorCode::InvalidArgument, who, ": non-finite scale (f16 bits ", hex, ") in row ", row, ", block ", block);
  }
}

// Sets weight j (0..127) of `b` to code c (0, 1, 2).
inline void put(BlockTQ2_128& b, int j, int c) { b.qs[j >> 2] = static_cast<std::uint8_t>(b.qs[j >> 2] | (c << (2 * (j & 3)))); }

std::vector<BlockTQ2_128> blocks_for(std::int64_t n, std::int64_t k, const char* who) {
  return detail::host_vector<BlockTQ2_128>(tq2_aos_bytes(n, k) / kTq2BlockBytes, who);
}

// A GGUF ternary tensor of n rows of k / 256 blocks of `block_bytes`, each with its f16 scale at
// `d_at`: decode(src, codes, row, block) writes a block's 256 codes (0..2, or refuses naming
// where); each 128-weight half becomes one TQ2_0_g128 block with the same scale.
template <class Decode>
std::vector<BlockTQ2_128> from_gguf(const char* who, const char* kind, std::size_t block_bytes, std::size_t d_at,
                                    const void* data, std::size_t bytes, std::int64_t n, std::int64_t k, Decode decode) {
  const std::size_t want = gguf_bytes(who, n, k, block_bytes);
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, who, ": ", bytes, " bytes given, an [", n, ", ", k, "] ", kind, " tensor is ", want,
         " (", k / kQkK, " blocks of ", block_bytes, " bytes a row)");
  if (!data) fail(ErrorCode::InvalidArgument, who, ": null data");
  std::vector<BlockTQ2_128> out = blocks_for(n, k, who);
  const auto* p = static_cast<const std::uint8_t*>(data);
  const std::int64_t bpr = k / kQkK;
  int codes[256];
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const std::uint8_t* src = p + static_cast<std::size_t>(r * bpr + b) * block_bytes;
      std::uint16_t d;
      std::memcpy(&d, src + d_at, 2);
      check_scale(who, d, r, b);
      decode(src, codes, r, b);
      for (int half = 0; half < 2; ++half) {
        BlockTQ2_128& o = out[static_cast<std::size_t>((r * bpr + b) * 2 + half)];
        std::memset(o.qs, 0, sizeof o.qs);
        o.d = d;
        for (int j = 0; j < 128; ++j) put(o, j, codes[128 * half + j]);
      }
    }
  return out;
}

}  // namespace

std::vector<BlockTQ2_128> tq2_from_gguf_tq2_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  constexpr const char* who = "tq2_from_gguf_tq2_0";
  return from_gguf(who, "TQ2_0", 66, 64, data, bytes, n, k,
                   [who](const std::uint8_t* src, int (&codes)[256], std::int64_t r, std::int64_t b) {
                     for (int j = 0; j < 256; ++j) {
                       const int byte = 32 * (j / 128) + j % 32, code = (src[byte] >> (2 * ((j % 128) / 32))) & 3;
                       if (code == 3)
                         fail(ErrorCode::InvalidArgument, who, ": invalid code 3 in row ", r, ", block ", b, ", byte ", byte);
                       codes[j] = code;
                     }
                   });
}

std::vector<BlockTQ2_128> tq2_from_gguf_tq1_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  static constexpr std::uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  // Digit i of a byte in llama.cpp's fixed-point base 3 (uint8 wrap-around is part of the format).
  auto digit = [](std::uint8_t byte, int i) {
    const std::uint8_t q = static_cast<std::uint8_t>(byte * kPow3[i]);
    return (static_cast<std::uint16_t>(q) * 3) >> 8;
  };
  return from_gguf("tq2_from_gguf_tq1_0", "TQ1_0", 54, 52, data, bytes, n, k,
                   [&](const std::uint8_t* src, int (&codes)[256], std::int64_t, std::int64_t) {
                     for (int i = 0; i < 5; ++i)
                       for (int m = 0; m < 32; ++m) codes[32 * i + m] = digit(src[m], i);
                     for (int i = 0; i < 5; ++i)
                       for (int m = 0; m < 16; ++m) codes[160 + 16 * i + m] = digit(src[32 + m], i);
                     for (int i = 0; i < 4; ++i)
                       for (int j = 0; j < 4; ++j) codes[240 + 4 * i + j] = digit(src[48 + j], i);
                   });
}

std::vector<BlockTQ2_128> tq2_from_q2_0_g128(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k) {
  constexpr const char* who = "tq2_from_q2_0_g128";
  if (n < 1 || k < 1) fail(ErrorCode::InvalidArgument, who, ": n ", n, " and k ", k, " must be >= 1");
  const std::size_t want = tq2_aos_bytes(n, k);  // k % 128, sizes: the same 34 bytes a block as ours
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, who, ": ", bytes, " bytes given, an [", n, ", ", k, "] Q2_0 (group 128) tensor is ",
         want, " (", k / kTq2BlockWeights, " blocks of 34 bytes a row)");
  if (!data) fail(ErrorCode::InvalidArgument, who, ": null data");
  std::vector<BlockTQ2_128> out = blocks_for(n, k, who);
  const auto* p = static_cast<const std::uint8_t*>(data);
  const std::int64_t bpr = k / kTq2BlockWeights;
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const std::size_t i = static_cast<std::size_t>(r * bpr + b);
      const std::uint8_t* src = p + i * kTq2BlockBytes;
      std::uint16_t d;
      std::memcpy(&d, src, 2);
      check_scale(who, d, r, b);
      for (int byte = 0; byte < 32; ++byte) {
        const std::uint8_t q = src[2 + byte];
        // A code 3 has both bits of its pair set: (q & (q >> 1)) & 0x55 marks the pairs.
        if ((q & (q >> 1) & 0x55u) != 0)
          fail(ErrorCode::InvalidArgument, who, ": code 3 (+2) in row ", r, ", block ", b, ", byte ", byte,
               ": TQ2_0_g128 holds ternary weights only");
      }
      std::memcpy(out[i].qs, src + 2, 32);
      out[i].d = d;
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
