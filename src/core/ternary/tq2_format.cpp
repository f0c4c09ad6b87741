// TQ2_0_g128 on the host: sizes, dequantize (with code-3 detection), quantize.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/host_alloc.hpp"
#include "core/ternary/tq2_block.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm {

namespace detail {
void check_tq2_block(const unsigned char* blk, const char* who, std::int64_t row, std::int64_t block) {
  for (int i = 0; i < 32; ++i) {
    const std::uint8_t q = blk[i];
    if (((q & 0x55) & (q >> 1) & 0x55) != 0)  // some 2-bit field is 0b11
      fail(ErrorCode::InvalidArgument, who, ": invalid code 3 in row ", row, ", block ", block, ", byte ", i);
  }
  std::uint16_t d;
  std::memcpy(&d, blk + 32, 2);
  if ((d & 0x7c00u) == 0x7c00u) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%04x", static_cast<unsigned>(d));
    fail(ErrorCode::InvalidArgument, who, ": non-finite scale (f16 bits ", hex, ") in row ", row, ", block ", block);
  }
}
}  // namespace detail

std::size_t tq2_aos_bytes(std::int64_t n, std::int64_t k) {
  if (n < 1 || k < 1) fail(ErrorCode::InvalidArgument, "tq2: n ", n, " and k ", k, " must be >= 1");
  if (k % kTq2BlockWeights != 0)
    fail(ErrorCode::InvalidArgument, "tq2: k ", k, " is not a multiple of ", kTq2BlockWeights);
  std::uint64_t blocks = checked_mul(to_u64(n, "tq2 n"), to_u64(k / kTq2BlockWeights, "tq2 k"), "tq2 blocks");
  return to_usize(checked_mul(blocks, kTq2BlockBytes, "tq2 bytes"), "tq2 bytes");
}

std::vector<float> tq2_dequantize(const void* aos, std::size_t bytes, std::int64_t n, std::int64_t k) {
  std::size_t want = tq2_aos_bytes(n, k);
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, "tq2_dequantize: ", bytes, " bytes given, an [", n, ", ", k, "] weight is ", want);
  if (aos == nullptr) fail(ErrorCode::InvalidArgument, "tq2_dequantize: null data");
  const std::int64_t bpr = k / kTq2BlockWeights;
  std::vector<float> w = detail::host_vector<float>(
      to_usize(checked_mul(to_u64(n, "tq2 n"), to_u64(k, "tq2 k"), "tq2_dequantize weights"), "tq2_dequantize"),
      "tq2_dequantize");
  const auto* p = static_cast<const unsigned char*>(aos);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const unsigned char* src = p + static_cast<std::size_t>(r * bpr + b) * kTq2BlockBytes;
      detail::check_tq2_block(src, "tq2_dequantize", r, b);
      BlockTQ2_128 blk;
      std::memcpy(&blk, src, kTq2BlockBytes);
      float d = f16_bits_to_f32(blk.d);
      for (int byte = 0; byte < 32; ++byte)
        for (int j = 0; j < 4; ++j) {
          const int code = (blk.qs[byte] >> (2 * j)) & 3;
          w[static_cast<std::size_t>(r * k + b * kTq2BlockWeights + byte * 4 + j)] = static_cast<float>(code - 1) * d;
        }
    }
  return w;
}

std::vector<BlockTQ2_128> tq2_quantize(const float* w, std::int64_t n, std::int64_t k, Tq2ScaleRule rule) {
  (void)tq2_aos_bytes(n, k);
  if (w == nullptr) fail(ErrorCode::InvalidArgument, "tq2_quantize: null data");
  const std::int64_t bpr = k / kTq2BlockWeights;
  std::vector<BlockTQ2_128> out = detail::host_vector<BlockTQ2_128>(tq2_aos_bytes(n, k) / kTq2BlockBytes, "tq2_quantize");
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const float* x = w + r * k + b * kTq2BlockWeights;
      double s = 0;
      for (int i = 0; i < kTq2BlockWeights; ++i) {
        if (!std::isfinite(x[i]))
          fail(ErrorCode::InvalidArgument, "tq2_quantize: non-finite weight at row ", r, ", column ", b * kTq2BlockWeights + i);
        s = rule == Tq2ScaleRule::AbsMean ? s + std::fabs(x[i]) : std::max(s, static_cast<double>(std::fabs(x[i])));
      }
      if (rule == Tq2ScaleRule::AbsMean) s /= kTq2BlockWeights;
      BlockTQ2_128& blk = out[static_cast<std::size_t>(r * bpr + b)];
      blk.d = f32_to_f16_bits(static_cast<float>(s));
      if ((blk.d & 0x7c00u) == 0x7c00u)  // rounded to Inf: decoding would give Inf and NaN
        fail(ErrorCode::InvalidArgument, "tq2_quantize: row ", r, ", block ", b, " (columns ", b * kTq2BlockWeights, "..",
             b * kTq2BlockWeights + kTq2BlockWeights - 1, "): its scale ", s,
             rule == Tq2ScaleRule::AbsMean ? " (mean |w|)" : " (max |w|)",
             " exceeds the f16 range (65504); scale the weight down and fold the factor into the layer");
      float d = f16_bits_to_f32(blk.d);  // codes against the scale actually stored
      for (int byte = 0; byte < 32; ++byte) {
        std::uint8_t q = 0;
        for (int j = 0; j < 4; ++j) {
          int t = 0;
          if (d > 0) t = static_cast<int>(std::clamp(std::nearbyint(x[byte * 4 + j] / d), -1.0f, 1.0f));
          q = static_cast<std::uint8_t>(q | ((t + 1) << (2 * j)));
        }
        blk.qs[byte] = q;
      }
    }
  return out;
}

}  // namespace llmm
