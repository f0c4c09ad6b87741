// The ternary GGUF formats that moved: PrismML's PQ2_0 (type 142) and PTQ1_0 (type 143), and
// upstream ggml's Q2_0 with 64-weight groups (type 42), converted to TQ2_0_g128. Blocks are built
// here by hand and by encoders written from the formats' descriptions (see tq2_formats.cpp for
// the sources read); every weight is checked through tq2_dequantize, and every refusal by message.
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

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kOne = 0x3c00, kTwo = 0x4000, kHalf = 0x3800, kQuarter = 0x3400;

std::vector<float> weights(const std::vector<BlockTQ2_128>& b, std::int64_t n, std::int64_t k) {
  return tq2_dequantize(b.data(), b.size() * sizeof(BlockTQ2_128), n, k);
}

void put_scale(std::uint8_t* at, std::uint16_t d) { std::memcpy(at, &d, 2); }

// Random codes 0..2 of n x k weights and an f16 scale per `group` weights.
struct Codes {
  std::int64_t n, k, group;
  std::vector<int> code;
  std::vector<std::uint16_t> d;
  float value(std::int64_t r, std::int64_t j) const {
    return static_cast<float>(code[static_cast<std::size_t>(r * k + j)] - 1) *
           f16_bits_to_f32(d[static_cast<std::size_t>(r * (k / group) + j / group)]);
  }
};
Codes random_codes(std::int64_t n, std::int64_t k, std::int64_t group, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  Codes c{n, k, group, std::vector<int>(static_cast<std::size_t>(n * k)), {}};
  for (int& x : c.code) x = static_cast<int>(g() % 3);
  for (std::int64_t i = 0; i < n * (k / group); ++i)
    c.d.push_back(f32_to_f16_bits(std::ldexp(static_cast<float>(g() % 999 + 1), -11)));
  return c;
}

void expect_weights(const std::vector<BlockTQ2_128>& got, const Codes& c) {
  const std::vector<float> w = weights(got, c.n, c.k);
  for (std::int64_t r = 0; r < c.n; ++r)
    for (std::int64_t j = 0; j < c.k; ++j)
      ASSERT_EQ(w[static_cast<std::size_t>(r * c.k + j)], c.value(r, j)) << c.n << "x" << c.k << " row " << r << " column " << j;
}

// The Q2_0 family's blocks {d, qs[group / 4]}: weight j at bits 2 (j % 4) of qs[j / 4].
Bytes encode_q2(const Codes& c) {
  Bytes out;
  const std::size_t bb = 2 + static_cast<std::size_t>(c.group / 4);
  for (std::int64_t r = 0; r < c.n; ++r)
    for (std::int64_t b = 0; b < c.k / c.group; ++b) {
      Bytes blk(bb, 0);
      put_scale(blk.data(), c.d[static_cast<std::size_t>(r * (c.k / c.group) + b)]);
      for (std::int64_t j = 0; j < c.group; ++j)
        blk[2 + j / 4] |= static_cast<std::uint8_t>(c.code[static_cast<std::size_t>(r * c.k + b * c.group + j)] << (2 * (j % 4)));
      out.insert(out.end(), blk.begin(), blk.end());
    }
  return out;
}

// A base-3 byte as llama.cpp packs TQ1_0 (and PrismML PTQ1_0): digits most significant first,
// then ceil(value * 256 / 243); a 4-digit byte carries a fifth, zero digit last.
std::uint8_t pack_digits(const int* digit, int count, int stride) {
  int q = 0;
  for (int i = 0; i < count; ++i) q = q * 3 + digit[i * stride];
  if (count == 4) q *= 3;
  return static_cast<std::uint8_t>((q * 256 + 242) / 243);
}

// PTQ1_0 {qs[24], qh[2], d}: qs[m < 16] holds weights m + 16 i, qs[16 + m] weights 80 + m + 8 i,
// qh[h] weights 120 + h + 2 i.
Bytes encode_ptq1_0(const Codes& c) {
  Bytes out;
  for (std::int64_t r = 0; r < c.n; ++r)
    for (std::int64_t b = 0; b < c.k / 128; ++b) {
      const int* w = &c.code[static_cast<std::size_t>(r * c.k + b * 128)];
      std::uint8_t blk[28] = {};
      for (int m = 0; m < 16; ++m) blk[m] = pack_digits(w + m, 5, 16);
      for (int m = 0; m < 8; ++m) blk[16 + m] = pack_digits(w + 80 + m, 5, 8);
      for (int h = 0; h < 2; ++h) blk[24 + h] = pack_digits(w + 120 + h, 4, 2);
      put_scale(blk + 26, c.d[static_cast<std::size_t>(r * (c.k / 128) + b)]);
      out.insert(out.end(), blk, blk + 28);
    }
  return out;
}

}  // namespace

TEST(Tq2PrismFormats, Pq2_0HandBuiltBlockDecodesExactly) {
  // One row of two blocks: d = 1 then d = 0.5; byte 0 of block 0 is 0b10'01'00'10: weights 0..3
  // have codes 2, 0, 1, 2 (+1, -1, 0, +1); every other code is 1 (zero).
  Bytes q(68, 0x55);
  put_scale(q.data(), kOne);
  put_scale(q.data() + 34, kHalf);
  q[2] = 0x92;
  q[34 + 2 + 31] = 0x06;  // block 1, weights 124..127: codes 2, 1, 0, 0
  const std::vector<float> w = weights(tq2_from_pq2_0(q.data(), q.size(), 1, 256), 1, 256);
  const std::vector<float> head = {1.0f, -1.0f, 0.0f, 1.0f, 0.0f};
  for (std::size_t j = 0; j < head.size(); ++j) EXPECT_EQ(w[j], head[j]) << j;
  EXPECT_EQ(w[128 + 124], 0.5f);
  EXPECT_EQ(w[128 + 125], 0.0f);
  EXPECT_EQ(w[128 + 126], -0.5f);
  EXPECT_EQ(w[128 + 127], -0.5f);
  int nonzero = 0;
  for (float x : w) nonzero += x != 0.0f;
  EXPECT_EQ(nonzero, 6);
}

TEST(Tq2PrismFormats, Pq2_0IsLosslessAndTheOldType42Layout) {
  for (const auto& nk : {std::pair<std::int64_t, std::int64_t>{1, 128}, {6, 384}, {13, 2560}}) {
    const Codes c = random_codes(nk.first, nk.second, 128, static_cast<std::uint64_t>(nk.first * nk.second));
    const Bytes q = encode_q2(c);
    const std::vector<BlockTQ2_128> got = tq2_from_pq2_0(q.data(), q.size(), c.n, c.k);
    expect_weights(got, c);
    const std::vector<BlockTQ2_128> old = tq2_from_q2_0_g128(q.data(), q.size(), c.n, c.k);
    ASSERT_EQ(std::memcmp(got.data(), old.data(), got.size() * sizeof(BlockTQ2_128)), 0);
  }
}

TEST(Tq2PrismFormats, Ptq1_0HandBuiltBlockDecodesExactly) {
  // qs[3] = 205 holds digits 2, 1, 0, 1, 2 (194 = 2*81 + 27 + 3 + 2, times 256 / 243 rounded up):
  // weights 3, 19, 35, 51, 67. qs[20] = 255: digits 2 everywhere, weights 84 + 8 i. qh[1] = 73
  // holds 0, 2, 1, 2 (23, times 3, then times 256 / 243 rounded up): weights 121, 123, 125, 127.
  // Every other byte is 0: digit 0, weight -d.
  std::uint8_t blk[28] = {};
  blk[3] = 205;
  blk[20] = 255;
  blk[25] = 73;
  put_scale(blk + 26, kQuarter);
  const std::vector<float> w = weights(tq2_from_ptq1_0(blk, sizeof blk, 1, 128), 1, 128);
  std::vector<float> want(128, -0.25f);
  const int digit3[5] = {2, 1, 0, 1, 2};
  for (int i = 0; i < 5; ++i) want[static_cast<std::size_t>(3 + 16 * i)] = 0.25f * static_cast<float>(digit3[i] - 1);
  for (int i = 0; i < 5; ++i) want[static_cast<std::size_t>(84 + 8 * i)] = 0.25f;
  const int digit_qh[4] = {0, 2, 1, 2};
  for (int i = 0; i < 4; ++i) want[static_cast<std::size_t>(121 + 2 * i)] = 0.25f * static_cast<float>(digit_qh[i] - 1);
  for (std::size_t j = 0; j < 128; ++j) EXPECT_EQ(w[j], want[j]) << "weight " << j;
}

TEST(Tq2PrismFormats, Ptq1_0IsLosslessForEveryDigitPattern) {
  // Every 5-digit pattern in a qs byte (3^5 = 243 of them over the 24 bytes of 11 rows) and every
  // 4-digit pattern in a qh byte (81 over the 2 bytes of 41 rows).
  Codes c = random_codes(41, 128, 128, 7);
  for (int v = 0; v < 243; ++v) {
    const int r = v / 24, byte = v % 24;
    for (int i = 4, x = v; i >= 0; --i, x /= 3) {
      const int j = byte < 16 ? byte + 16 * i : 80 + (byte - 16) + 8 * i;
      c.code[static_cast<std::size_t>(r * 128 + j)] = x % 3;
    }
  }
  for (int v = 0; v < 81; ++v) {
    const int r = v / 2, h = v % 2;
    for (int i = 3, x = v; i >= 0; --i, x /= 3) c.code[static_cast<std::size_t>(r * 128 + 120 + h + 2 * i)] = x % 3;
  }
  Bytes q = encode_ptq1_0(c);
  expect_weights(tq2_from_ptq1_0(q.data(), q.size(), c.n, c.k), c);
  const Codes big = random_codes(9, 1280, 128, 8);
  q = encode_ptq1_0(big);
  expect_weights(tq2_from_ptq1_0(q.data(), q.size(), big.n, big.k), big);
}

TEST(Tq2PrismFormats, Q2_0Group64WithEqualScalesIsLossless) {
  for (const auto& nk : {std::pair<std::int64_t, std::int64_t>{1, 128}, {7, 512}, {12, 2560}}) {
    Codes c = random_codes(nk.first, nk.second, 64, static_cast<std::uint64_t>(nk.second + nk.first));
    for (std::size_t i = 1; i < c.d.size(); i += 2) c.d[i] = c.d[i - 1];  // the pairs share a scale
    const Bytes q = encode_q2(c);
    expect_weights(tq2_from_q2_0_g64(q.data(), q.size(), c.n, c.k), c);
  }
}

TEST(Tq2PrismFormats, Q2_0Group64AllZeroHalfTakesTheOtherScale) {
  // Row 0: block 0 all zeros with d = 0 (what the reference quantizer writes for zero weights),
  // block 1 codes 2 and 0 with d = 0.5. Row 1: block 2 has codes, block 3 is zeros with d = 2.
  Bytes q(4 * 18, 0x55);
  put_scale(q.data(), 0);
  put_scale(q.data() + 18, kHalf);
  q[18 + 2] = 0x52;  // weights 64, 65: codes 2, 0
  put_scale(q.data() + 36, kOne);
  q[36 + 2 + 15] = 0x15;  // weights 60..63 of row 1: codes 1, 1, 1, 0
  put_scale(q.data() + 54, kTwo);
  const std::vector<BlockTQ2_128> b = tq2_from_q2_0_g64(q.data(), q.size(), 2, 128);
  EXPECT_EQ(b[0].d, kHalf);
  EXPECT_EQ(b[1].d, kOne);
  const std::vector<float> w = weights(b, 2, 128);
  for (std::size_t j = 0; j < 256; ++j) {
    const float want = j == 64 ? 0.5f : j == 65 ? -0.5f : j == 128 + 63 ? -1.0f : 0.0f;
    EXPECT_EQ(w[j], want) << "weight " << j;
  }
}

TEST(Tq2PrismFormats, Q2_0Group64RefusesWhatOneTernaryBlockCannotHold) {
  const Codes c = random_codes(2, 256, 64, 21);
  Bytes q = encode_q2(c);
  for (std::size_t i = 0; i < 8; ++i) put_scale(q.data() + 18 * i, kOne);
  ASSERT_NO_THROW(tq2_from_q2_0_g64(q.data(), q.size(), 2, 256));
  Bytes bad = q;
  put_scale(bad.data() + 18 * 7, kTwo);  // row 1, block 3 (blocks 2 and 3 make TQ2 block 1)
  expect_error([&] { tq2_from_q2_0_g64(bad.data(), bad.size(), 2, 256); }, ErrorCode::InvalidArgument,
               "tq2_from_q2_0_g64: Q2_0 (group 64) row 1, blocks 2 and 3 have different scales (f16 bits 0x3c00 = 1 and "
               "0x4000 = 2): a TQ2_0_g128 block has one scale for 128 weights (a group-64 variant is not implemented)");
  bad = q;
  bad[18 + 2 + 4] |= 0xc0;  // row 0, block 1, byte 4: code 3 at bits 6
  expect_error([&] { tq2_from_q2_0_g64(bad.data(), bad.size(), 2, 256); }, ErrorCode::InvalidArgument,
               "code 3 (+2) in row 0, block 1, byte 4: TQ2_0_g128 holds ternary weights only (-1, 0, +1 x scale)");
  bad = q;
  put_scale(bad.data() + 18 * 3, 0x7e00);  // row 0, block 3: NaN
  expect_error([&] { tq2_from_q2_0_g64(bad.data(), bad.size(), 2, 256); }, ErrorCode::InvalidArgument,
               "non-finite scale (f16 bits 0x7e00) in row 0, block 3");
  expect_error([&] { tq2_from_q2_0_g64(q.data(), q.size() - 1, 2, 256); }, ErrorCode::InvalidArgument,
               "143 bytes given, an [2, 256] Q2_0 (group 64) tensor is 144 (4 blocks of 18 bytes a row)");
  expect_error([&] { tq2_from_q2_0_g64(q.data(), 3 * 18, 1, 192); }, ErrorCode::InvalidArgument,
               "k 192 is not a multiple of 128");
  expect_error([&] { tq2_from_q2_0_g64(nullptr, q.size(), 2, 256); }, ErrorCode::InvalidArgument, "null data");
}

TEST(Tq2PrismFormats, Pq2_0AndPtq1_0RefuseBadInputNamingWhere) {
  const Codes c = random_codes(3, 256, 128, 31);
  const Bytes q2 = encode_q2(c), t1 = encode_ptq1_0(c);
  expect_error([&] { tq2_from_pq2_0(q2.data(), q2.size() + 1, 3, 256); }, ErrorCode::InvalidArgument,
               "tq2_from_pq2_0: 205 bytes given, an [3, 256] PQ2_0 tensor is 204 (2 blocks of 34 bytes a row)");
  expect_error([&] { tq2_from_pq2_0(q2.data(), q2.size(), 3, 200); }, ErrorCode::InvalidArgument, "k 200 is not a multiple of 128");
  Bytes bad = q2;
  bad[34 * 5 + 2 + 30] |= 0x03;  // row 2, block 1, byte 30: code 3
  expect_error([&] { tq2_from_pq2_0(bad.data(), bad.size(), 3, 256); }, ErrorCode::InvalidArgument,
               "tq2_from_pq2_0: code 3 (+2) in row 2, block 1, byte 30");
  bad = q2;
  put_scale(bad.data() + 34 * 2, 0xfc00);  // row 1, block 0: -Inf
  expect_error([&] { tq2_from_pq2_0(bad.data(), bad.size(), 3, 256); }, ErrorCode::InvalidArgument,
               "non-finite scale (f16 bits 0xfc00) in row 1, block 0");
  expect_error([&] { tq2_from_ptq1_0(t1.data(), t1.size() - 28, 3, 256); }, ErrorCode::InvalidArgument,
               "tq2_from_ptq1_0: 140 bytes given, an [3, 256] PTQ1_0 tensor is 168 (2 blocks of 28 bytes a row)");
  expect_error([&] { tq2_from_ptq1_0(t1.data(), t1.size(), 0, 256); }, ErrorCode::InvalidArgument, "n 0 and k 256 must be >= 1");
  expect_error([&] { tq2_from_ptq1_0(t1.data(), t1.size(), 6, 64); }, ErrorCode::InvalidArgument, "k 64 is not a multiple of 128");
  bad = t1;
  put_scale(bad.data() + 28 * 3 + 26, 0x7c01);  // row 1, block 1: NaN
  expect_error([&] { tq2_from_ptq1_0(bad.data(), bad.size(), 3, 256); }, ErrorCode::InvalidArgument,
               "tq2_from_ptq1_0: non-finite scale (f16 bits 0x7c01) in row 1, block 1");
}
