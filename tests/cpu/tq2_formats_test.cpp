// Conversions of GGUF TQ2_0 / TQ1_0 and the Hugging Face BitNet packing into TQ2_0_g128: encoders
// written here from the formats' descriptions (llama.cpp's quantize rules), exhaustive digit
// tables, random weights through tq2_dequantize, and every refusal. (python/tests checks the same
// conversions against gguf-py's own quantize/dequantize, an independent implementation.)
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/dtype.hpp"
#include "llmm/ternary.hpp"
#include "llmm/ternary_formats.hpp"
#include "support/expect_error.hpp"

using namespace llmm;
using llmm::test::expect_error;

namespace {

// Random codes 0..2 for n rows of k weights, and f16 scales per 256-weight block.
struct Ternary {
  std::int64_t n, k;
  std::vector<int> code;          // [n][k]
  std::vector<std::uint16_t> d;   // [n][k / 256]
};
Ternary random_ternary(std::int64_t n, std::int64_t k, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  Ternary t{n, k, std::vector<int>(static_cast<std::size_t>(n * k)), {}};
  for (int& c : t.code) c = static_cast<int>(g() % 3);
  for (std::int64_t i = 0; i < n * (k / 256); ++i)
    t.d.push_back(f32_to_f16_bits(std::ldexp(static_cast<float>(g() % 1000 + 1), -12)));
  return t;
}

// GGUF TQ2_0 as llama.cpp's quantize_row_tq2_0_ref lays it out.
std::vector<std::uint8_t> encode_tq2_0(const Ternary& t) {
  std::vector<std::uint8_t> out;
  for (std::int64_t r = 0; r < t.n; ++r)
    for (std::int64_t b = 0; b < t.k / 256; ++b) {
      std::uint8_t blk[66] = {};
      for (int j = 0; j < 256; ++j) blk[32 * (j / 128) + j % 32] |= static_cast<std::uint8_t>(t.code[r * t.k + b * 256 + j] << (2 * ((j % 128) / 32)));
      std::memcpy(blk + 64, &t.d[r * (t.k / 256) + b], 2);
      out.insert(out.end(), blk, blk + 66);
    }
  return out;
}

// GGUF TQ1_0 as llama.cpp's quantize_row_tq1_0_ref lays it out: digits most significant first,
// then the byte is ceil(value * 256 / 243) (the 4-digit qh values carry a fifth, zero digit).
std::uint8_t pack5(const int* dg, int count, int stride) {
  int q = 0;
  for (int i = 0; i < count; ++i) q = q * 3 + dg[i * stride];
  if (count == 4) q *= 3;
  return static_cast<std::uint8_t>((q * 256 + 242) / 243);
}
std::vector<std::uint8_t> encode_tq1_0(const Ternary& t) {
  std::vector<std::uint8_t> out;
  for (std::int64_t r = 0; r < t.n; ++r)
    for (std::int64_t b = 0; b < t.k / 256; ++b) {
      const int* c = &t.code[static_cast<std::size_t>(r * t.k + b * 256)];
      std::uint8_t blk[54] = {};
      for (int m = 0; m < 32; ++m) blk[m] = pack5(c + m, 5, 32);
      for (int m = 0; m < 16; ++m) blk[32 + m] = pack5(c + 160 + m, 5, 16);
      for (int j = 0; j < 4; ++j) blk[48 + j] = pack5(c + 240 + j, 4, 4);
      std::memcpy(blk + 52, &t.d[r * (t.k / 256) + b], 2);
      out.insert(out.end(), blk, blk + 54);
    }
  return out;
}

void expect_same_weights(const std::vector<BlockTQ2_128>& got, const Ternary& t) {
  const std::vector<float> w = tq2_dequantize(got.data(), got.size() * sizeof(BlockTQ2_128), t.n, t.k);
  for (std::int64_t r = 0; r < t.n; ++r)
    for (std::int64_t j = 0; j < t.k; ++j) {
      const float want = static_cast<float>(t.code[r * t.k + j] - 1) * f16_bits_to_f32(t.d[r * (t.k / 256) + j / 256]);
      ASSERT_EQ(w[static_cast<std::size_t>(r * t.k + j)], want) << "row " << r << " column " << j;
    }
}

}  // namespace

TEST(Tq2Formats, GgufTq2_0IsLossless) {
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{1, 256}, {7, 768}, {33, 2560}}) {
    const Ternary t = random_ternary(n, k, static_cast<std::uint64_t>(n * k));
    const std::vector<std::uint8_t> g = encode_tq2_0(t);
    expect_same_weights(tq2_from_gguf_tq2_0(g.data(), g.size(), n, k), t);
  }
}

TEST(Tq2Formats, GgufTq1_0IsLosslessForEveryDigitPattern) {
  // Every 5-digit and 4-digit pattern appears: 3^5 = 243 values over the qs bytes of 8 rows.
  Ternary t = random_ternary(8, 256, 5);
  for (int v = 0; v < 243; ++v) {
    const int r = v / 32, m = v % 32;
    for (int i = 0, x = v; i < 5; ++i, x /= 3) t.code[static_cast<std::size_t>(r * 256 + 32 * (4 - i) + m)] = x % 3;
  }
  for (int v = 0; v < 81; ++v) {
    const int r = v / 4, j = v % 4;
    if (r >= 8) break;
    for (int i = 0, x = v; i < 4; ++i, x /= 3) t.code[static_cast<std::size_t>(r * 256 + 240 + 4 * (3 - i) + j)] = x % 3;
  }
  std::vector<std::uint8_t> g = encode_tq1_0(t);
  expect_same_weights(tq2_from_gguf_tq1_0(g.data(), g.size(), 8, 256), t);
  const Ternary big = random_ternary(17, 1024, 9);
  g = encode_tq1_0(big);
  expect_same_weights(tq2_from_gguf_tq1_0(g.data(), g.size(), 17, 1024), big);
}

TEST(Tq2Formats, BitnetPackingIsLosslessUpToTheScale) {
  const std::int64_t out = 12, in = 256;
  std::mt19937_64 g(3);
  std::vector<int> code(static_cast<std::size_t>(out * in));
  for (int& c : code) c = static_cast<int>(g() % 3);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(out / 4 * in), 0);
  for (std::int64_t r = 0; r < out; ++r)  // the Hugging Face rule: row r in packed row r % (out / 4)
    for (std::int64_t c = 0; c < in; ++c)
      packed[static_cast<std::size_t>((r % (out / 4)) * in + c)] |= static_cast<std::uint8_t>(code[r * in + c] << (2 * (r / (out / 4))));
  const float ws = 2.7f;  // the layer divides by it
  const std::vector<BlockTQ2_128> b = tq2_from_bitnet(packed.data(), packed.size(), out, in, ws);
  const std::vector<float> w = tq2_dequantize(b.data(), b.size() * 34, out, in);
  const float d = f16_bits_to_f32(f32_to_f16_bits(1.0f / ws));
  EXPECT_LE(std::fabs(d * ws - 1.0f), std::ldexp(1.0f, -11));
  for (std::int64_t i = 0; i < out * in; ++i) ASSERT_EQ(w[static_cast<std::size_t>(i)], static_cast<float>(code[i] - 1) * d) << i;
}

TEST(Tq2Formats, BadInputIsRefusedNamingWhere) {
  const Ternary t = random_ternary(2, 512, 1);
  std::vector<std::uint8_t> g = encode_tq2_0(t);
  expect_error([&] { tq2_from_gguf_tq2_0(g.data(), g.size() - 1, 2, 512); }, ErrorCode::InvalidArgument,
               "263 bytes given, an [2, 512] TQ2_0 tensor is 264");
  expect_error([&] { tq2_from_gguf_tq2_0(g.data(), g.size(), 2, 384); }, ErrorCode::InvalidArgument, "k 384 is not a multiple of 256");
  std::vector<std::uint8_t> bad = g;
  bad[66 + 5] |= 0x30;  // row 0, block 1, byte 5: a code 3 at shift 4
  expect_error([&] { tq2_from_gguf_tq2_0(bad.data(), bad.size(), 2, 512); }, ErrorCode::InvalidArgument,
               "invalid code 3 in row 0, block 1, byte 5");
  bad = g;
  bad[66 * 2 + 64] = 0x00, bad[66 * 2 + 65] = 0x7c;  // row 1, block 0: d = +Inf
  expect_error([&] { tq2_from_gguf_tq2_0(bad.data(), bad.size(), 2, 512); }, ErrorCode::InvalidArgument,
               "non-finite scale (f16 bits 0x7c00) in row 1, block 0");
  std::vector<std::uint8_t> g1 = encode_tq1_0(t);
  expect_error([&] { tq2_from_gguf_tq1_0(g1.data(), g1.size() + 54, 2, 512); }, ErrorCode::InvalidArgument, "TQ1_0 tensor is 216");
  g1[54 + 53] = 0xfe;  // row 0, block 1: d = NaN
  expect_error([&] { tq2_from_gguf_tq1_0(g1.data(), g1.size(), 2, 512); }, ErrorCode::InvalidArgument,
               "non-finite scale (f16 bits 0xfe");
  std::vector<std::uint8_t> p(3 * 128, 0x55);
  expect_error([&] { tq2_from_bitnet(p.data(), p.size(), 10, 128, 1.0f); }, ErrorCode::InvalidArgument, "multiple of 4");
  expect_error([&] { tq2_from_bitnet(p.data(), p.size(), 12, 128, 0.0f); }, ErrorCode::InvalidArgument, "finite and > 0");
  expect_error([&] { tq2_from_bitnet(p.data(), p.size(), 12, 128, 1e-9f); }, ErrorCode::InvalidArgument, "normal f16 range");
  expect_error([&] { tq2_from_bitnet(p.data(), p.size() - 1, 12, 128, 1.0f); }, ErrorCode::InvalidArgument, "383 bytes given");
  p[128 + 7] = 0xc1;  // packed row 1, column 7, bits 6: code 3
  expect_error([&] { tq2_from_bitnet(p.data(), p.size(), 12, 128, 1.0f); }, ErrorCode::InvalidArgument,
               "invalid code 3 at packed row 1, column 7, bits 6");
}

// PrismML's Q2_0 with 128-weight groups ({d, qs[32]}, weight j at bits 2 (j % 4) of qs[j / 4],
// value (code - 1) d), written here from that description: every weight keeps its code and
// scale; code 3 (+2 in that format, not ternary), a non-finite d and a wrong size are refused.
TEST(Tq2Formats, PrismQ2_0Group128IsLosslessAndRefusesPlusTwo) {
  std::mt19937_64 g(11);
  for (const auto& nk : {std::pair<std::int64_t, std::int64_t>{1, 128}, {5, 384}, {9, 2560}}) {
    const std::int64_t n = nk.first, k = nk.second;  // plain locals: lambdas below capture them
    std::vector<int> code(static_cast<std::size_t>(n * k));
    for (int& c : code) c = static_cast<int>(g() % 3);
    std::vector<std::uint16_t> d;
    for (std::int64_t i = 0; i < n * (k / 128); ++i) d.push_back(f32_to_f16_bits(std::ldexp(static_cast<float>(g() % 999 + 1), -11)));
    std::vector<std::uint8_t> q;
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t b = 0; b < k / 128; ++b) {
        std::uint8_t blk[34] = {};
        std::memcpy(blk, &d[static_cast<std::size_t>(r * (k / 128) + b)], 2);
        for (int j = 0; j < 128; ++j) blk[2 + j / 4] |= static_cast<std::uint8_t>(code[static_cast<std::size_t>(r * k + b * 128 + j)] << (2 * (j % 4)));
        q.insert(q.end(), blk, blk + 34);
      }
    const std::vector<BlockTQ2_128> got = tq2_from_q2_0_g128(q.data(), q.size(), n, k);
    const std::vector<float> w = tq2_dequantize(got.data(), got.size() * sizeof(BlockTQ2_128), n, k);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t j = 0; j < k; ++j)
        ASSERT_EQ(w[static_cast<std::size_t>(r * k + j)],
                  static_cast<float>(code[static_cast<std::size_t>(r * k + j)] - 1) *
                      f16_bits_to_f32(d[static_cast<std::size_t>(r * (k / 128) + j / 128)]))
            << n << "x" << k << " row " << r << " column " << j;
    if (n != 5) continue;
    expect_error([&] { tq2_from_q2_0_g128(q.data(), q.size() - 1, n, k); }, ErrorCode::InvalidArgument,
                 "509 bytes given, an [5, 384] Q2_0 (group 128) tensor is 510");
    expect_error([&] { tq2_from_q2_0_g128(q.data(), q.size(), n, 320); }, ErrorCode::InvalidArgument,
                 "not a multiple of 128");
    std::vector<std::uint8_t> bad = q;
    bad[34 * 4 + 2 + 9] |= 0x0c;  // row 1, block 1, byte 9: a code 3 at bits 2
    expect_error([&] { tq2_from_q2_0_g128(bad.data(), bad.size(), n, k); }, ErrorCode::InvalidArgument,
                 "code 3 (+2) in row 1, block 1, byte 9: TQ2_0_g128 holds ternary weights only");
    bad = q;
    bad[34 * 3] = 0x01, bad[34 * 3 + 1] = 0xfc;  // row 1, block 0: d = NaN
    expect_error([&] { tq2_from_q2_0_g128(bad.data(), bad.size(), n, k); }, ErrorCode::InvalidArgument,
                 "non-finite scale (f16 bits 0xfc01) in row 1, block 0");
  }
}
