// fuzz_tq2: TQ2_0_g128 on the host. Random bytes as AoS blocks (32 code bytes, then an f16
// scale) with random n, k -> tq2_aos_bytes, tq2_dequantize and TernaryWeightCache::get_or_upload
// (CPU context), which must accept exactly the well-formed weights (right byte count, no code 3,
// finite scales) and decode them as (code - 1) * scale computed independently here; and random
// finite floats -> tq2_quantize with both scale rules, whose blocks must be well formed.
#include <cmath>
#include <cstring>
#include <vector>

#include "fuzz_util.hpp"
#include "llmm/context.hpp"
#include "llmm/ternary.hpp"
#include "llmm/ternary_formats.hpp"

using namespace llmm;
using fuzz::attempt;
using fuzz::kU64Max;
using fuzz::u128;

namespace {

constexpr std::size_t kBlock = 34;

// IEEE binary16 -> float, written from the format (not the library's converter).
float f16_to_float(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
            : exp == 31 ? (man ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return sign ? -v : v;
}
std::uint16_t scale_bits(const unsigned char* blk) { return static_cast<std::uint16_t>(blk[32] | blk[33] << 8); }
int code_at(const unsigned char* blk, int i) { return (blk[i / 4] >> (2 * (i % 4))) & 3; }

// n * (k / 128) * 34 when n, k are valid sizes and it fits 64 bits.
std::optional<u128> model_aos_bytes(std::int64_t n, std::int64_t k) {
  if (n < 1 || k < 128 || k % 128 != 0) return {};
  const u128 b = static_cast<u128>(n) * static_cast<u128>(k / 128) * kBlock;
  if (static_cast<u128>(n) * static_cast<u128>(k / 128) > kU64Max || b > kU64Max) return {};
  return b;
}

bool well_formed(const std::vector<unsigned char>& aos) {
  for (std::size_t off = 0; off + kBlock <= aos.size(); off += kBlock) {
    for (int i = 0; i < 128; ++i)
      if (code_at(&aos[off], i) == 3) return false;
    if ((scale_bits(&aos[off]) & 0x7c00) == 0x7c00) return false;  // Inf or NaN
  }
  return true;
}

void check_readers(FuzzedDataProvider& in) {
  std::int64_t n, k;
  if (in.ConsumeBool()) {
    n = in.ConsumeIntegralInRange<std::int64_t>(1, 6), k = 128 * in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  } else {
    n = fuzz::edgy<std::int64_t>(in), k = fuzz::edgy<std::int64_t>(in);
  }
  const auto want = model_aos_bytes(n, k);
  auto got_bytes = attempt([&] { return tq2_aos_bytes(n, k); });
  FUZZ_CHECK(got_bytes.has_value() == want.has_value() && (!want || *got_bytes == *want), "tq2_aos_bytes(", n, ", ", k,
             ") = ", got_bytes ? std::to_string(*got_bytes) : "refused");

  // The buffer: exactly the right size (usually) or any size; codes cleaned of 3s and scales made
  // finite on request, then maybe one defect planted, so both outcomes stay reachable.
  std::vector<unsigned char> aos;
  const bool exact = want && *want <= 64 * kBlock && in.ConsumeProbability<float>() < 0.8f;
  const std::size_t len = exact ? static_cast<std::size_t>(*want) : in.ConsumeIntegralInRange<std::size_t>(0, 64 * kBlock);
  aos = in.ConsumeBytes<unsigned char>(len);
  aos.resize(len, 0);
  const bool clean = in.ConsumeBool();
  for (std::size_t off = 0; clean && off + kBlock <= aos.size(); off += kBlock) {
    for (int i = 0; i < 32; ++i) aos[off + i] &= static_cast<unsigned char>(~((aos[off + i] & 0x55) & (aos[off + i] >> 1) & 0x55));
    if ((aos[off + 33] & 0x7c) == 0x7c) aos[off + 33] &= 0xbf;  // exponent 31 -> 15
  }
  if (!aos.empty() && in.ConsumeBool()) {
    const std::size_t at = in.ConsumeIntegralInRange<std::size_t>(0, aos.size() - 1);
    aos[at] |= in.PickValueInArray<unsigned char>({0x03, 0x0c, 0x30, 0xc0, 0x7c});  // a code 3, or an f16 exponent of 31
  }
  const bool ok = want && aos.size() == *want && well_formed(aos);

  fuzz::Refusal why;
  auto w = attempt([&] { return tq2_dequantize(aos.data(), aos.size(), n, k); }, &why);
  FUZZ_CHECK(w.has_value() == ok, "tq2_dequantize ", w ? "accepted" : "refused", " n ", n, " k ", k, " bytes ", aos.size(),
             " -- ", why.message);
  if (!w) FUZZ_CHECK(why.code == ErrorCode::InvalidArgument, why.message);
  if (w) {
    FUZZ_CHECK(w->size() == static_cast<std::size_t>(n * k), "dequantized size");
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t l = 0; l < k; ++l) {
        const unsigned char* blk = &aos[static_cast<std::size_t>((r * (k / 128) + l / 128)) * kBlock];
        const float want_v = static_cast<float>(code_at(blk, static_cast<int>(l % 128)) - 1) * f16_to_float(scale_bits(blk));
        const float got_v = (*w)[static_cast<std::size_t>(r * k + l)];
        FUZZ_CHECK(std::memcmp(&want_v, &got_v, 4) == 0, "W[", r, ", ", l, "] = ", got_v, ", expected ", want_v);
      }
  }

  // The device cache on a CPU context: same acceptance, the SoA layout ternary.hpp describes.
  static const Context ctx = Context::cpu(1);
  TernaryWeightCache cache(ctx);
  const std::uint64_t key = in.ConsumeIntegral<std::uint64_t>();
  auto h = attempt([&] { return cache.get_or_upload(key, aos.data(), aos.size(), n, k); }, &why);
  FUZZ_CHECK(h.has_value() == ok, "get_or_upload ", h ? "accepted" : "refused", " -- ", why.message);
  if (!h) {
    FUZZ_CHECK(why.code == ErrorCode::InvalidArgument && cache.size() == 0 && cache.upload_count() == 0, why.message);
    return;
  }
  const WeightHandle& t = *h;
  const std::int64_t bpr = k / 128;
  FUZZ_CHECK(t && t->key() == key && t->n() == n && t->k() == k && t->device() == DeviceKind::CPU, "handle fields");
  FUZZ_CHECK(t->bytes() == static_cast<std::size_t>(n * k / 4 + n * bpr * 2), "handle bytes ", t->bytes());
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const unsigned char* blk = &aos[static_cast<std::size_t>(r * bpr + b) * kBlock];
      FUZZ_CHECK(std::memcmp(t->codes() + r * (k / 4) + b * 32, blk, 32) == 0, "SoA codes of row ", r, " block ", b);
      FUZZ_CHECK(t->scales()[r * bpr + b] == scale_bits(blk), "SoA scale of row ", r, " block ", b);
    }
  auto again = cache.get_or_upload(key, aos.data(), aos.size(), n, k);
  FUZZ_CHECK(again == t && cache.upload_count() == 1 && cache.size() == 1, "a cached key uploads once");
  if (bpr % 2 == 0)  // the same bytes read as [2n, k/2]: a valid weight, but the key holds [n, k]
    FUZZ_CHECK(!attempt([&] { return cache.get_or_upload(key, aos.data(), aos.size(), 2 * n, k / 2); }),
               "a key cached with other sizes was accepted");
  FUZZ_CHECK(cache.evict(t) && !cache.evict(key) && cache.size() == 0, "evict");
  FUZZ_CHECK(t->codes()[0] == aos[0], "an evicted handle keeps its memory");  // ASan: still alive
}

// Finite weights with magnitudes up to ~1e30 (and any finite float), per block.
void check_quantize(FuzzedDataProvider& in) {
  std::int64_t n = in.ConsumeIntegralInRange<std::int64_t>(1, 3), k = 128 * in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  if (in.ConsumeProbability<float>() < 0.1f) {  // bad sizes: must be refused before any read
    n = fuzz::edgy<std::int64_t>(in), k = fuzz::edgy<std::int64_t>(in);
    if (model_aos_bytes(n, k)) return;  // valid: would read n * k floats that we do not have
  }
  const auto rule = in.ConsumeBool() ? Tq2ScaleRule::AbsMean : Tq2ScaleRule::AbsMax;
  const std::size_t count = model_aos_bytes(n, k) ? static_cast<std::size_t>(n * k) : 1;
  std::vector<float> w(count);
  for (std::size_t b = 0; b < count; b += 128) {
    const float mag = std::pow(10.0f, static_cast<float>(in.ConsumeIntegralInRange(-30, 30)));
    const bool raw = in.ConsumeProbability<float>() < 0.2f;
    for (std::size_t i = b; i < std::min(count, b + 128); ++i) {
      float v = in.ConsumeFloatingPointInRange(-1.0f, 1.0f) * mag;
      if (raw) {
        const auto bits = in.ConsumeIntegral<std::uint32_t>();
        std::memcpy(&v, &bits, 4);
        if (!std::isfinite(v)) v = static_cast<float>(bits & 0xffff);  // the API refuses non-finite weights
      }
      w[i] = v;
    }
  }

  fuzz::Refusal why;
  auto q = attempt([&] { return tq2_quantize(w.data(), n, k, rule); }, &why);
  if (!model_aos_bytes(n, k)) {
    FUZZ_CHECK(!q && why.code == ErrorCode::InvalidArgument, "tq2_quantize took n ", n, ", k ", k);
    return;
  }
  // Refused exactly when a block's scale (mean or max |w|, as f32) rounds above the f16 range.
  bool too_large = false;
  for (std::size_t b = 0; b < count; b += 128) {
    double s = 0;
    for (std::size_t i = b; i < b + 128; ++i) s = rule == Tq2ScaleRule::AbsMean ? s + std::fabs(w[i]) : std::max(s, double{std::fabs(w[i])});
    if (rule == Tq2ScaleRule::AbsMean) s /= 128;
    too_large = too_large || static_cast<float>(s) >= 65520.0f;  // rounds to f16 Inf
  }
  FUZZ_CHECK(q.has_value() == !too_large, "tq2_quantize ", q ? "accepted" : "refused", " -- ", why.message);
  if (!q) {
    FUZZ_CHECK(why.code == ErrorCode::InvalidArgument, why.message);
    return;
  }
  FUZZ_CHECK(q->size() == count / 128, "block count");
  for (std::size_t b = 0; b < q->size(); ++b) {
    const BlockTQ2_128& blk = (*q)[b];
    const float d = f16_to_float(blk.d);
    FUZZ_CHECK(std::isfinite(d) && !(blk.d & 0x8000), "block ", b, " scale bits ", blk.d);
    for (int i = 0; i < 128; ++i) {
      const int c = (blk.qs[i / 4] >> (2 * (i % 4))) & 3;
      const float x = w[b * 128 + static_cast<std::size_t>(i)];
      FUZZ_CHECK(c != 3, "code 3 in block ", b);
      FUZZ_CHECK((c != 2 || x > 0) && (c != 0 || x < 0), "code ", c, " for weight ", x, " (scale ", d, ")");
      if (d == 0) FUZZ_CHECK(c == 1, "a zero scale with a nonzero code");
    }
  }
  auto back = attempt([&] { return tq2_dequantize(q->data(), q->size() * kBlock, n, k); }, &why);
  FUZZ_CHECK(back.has_value(), "quantized blocks refused by tq2_dequantize: ", why.message);
  for (float v : *back) FUZZ_CHECK(std::isfinite(v), "dequantize(quantize(w)) is not finite");
}

}  // namespace

// Other tools' formats: random bytes with small random shapes. A conversion either refuses with
// InvalidArgument or returns blocks that tq2_dequantize accepts (no code 3, finite scales) with
// the right count; a GGUF conversion keeps each 256-block's scale on both of its halves; the
// Q2_0 group-128 one is the same 34 bytes with the scale moved to the end.
void check_formats(FuzzedDataProvider& in) {
  const int which = in.ConsumeIntegralInRange(0, 3);
  const std::int64_t n = in.ConsumeIntegralInRange<std::int64_t>(-1, 9);
  const std::int64_t k = 128 * in.ConsumeIntegralInRange<std::int64_t>(-1, 9);
  const float scale = in.ConsumeFloatingPoint<float>();
  const std::vector<std::uint8_t> bytes = in.ConsumeRemainingBytes<std::uint8_t>();
  fuzz::Refusal why;
  auto got = attempt(
      [&] {
        if (which == 0) return tq2_from_gguf_tq2_0(bytes.data(), bytes.size(), n, k);
        if (which == 1) return tq2_from_gguf_tq1_0(bytes.data(), bytes.size(), n, k);
        if (which == 3) return tq2_from_q2_0_g128(bytes.data(), bytes.size(), n, k);
        return tq2_from_bitnet(bytes.data(), bytes.size(), n, k, scale);
      },
      &why);
  if (!got) {
    FUZZ_CHECK(why.code == ErrorCode::InvalidArgument, "format conversion refused with ", why.message);
    return;
  }
  FUZZ_CHECK(got->size() * kBlock == tq2_aos_bytes(n, k), "wrong block count");
  auto w = attempt([&] { return tq2_dequantize(got->data(), got->size() * kBlock, n, k); }, &why);
  FUZZ_CHECK(w.has_value(), "a converted weight does not decode: ", why.message);
  if (which == 3)
    for (std::size_t b = 0; b < got->size(); ++b) {
      const unsigned char* src = bytes.data() + b * kBlock;
      FUZZ_CHECK(std::memcmp((*got)[b].qs, src + 2, 32) == 0 && (*got)[b].d == static_cast<std::uint16_t>(src[0] | src[1] << 8),
                 "Q2_0 block ", b, " is not the source block reordered");
    }
  if (which < 2) {
    const std::size_t block = which == 0 ? 66 : 54, d_at = which == 0 ? 64 : 52;
    for (std::size_t b = 0; b < got->size(); ++b) {
      const unsigned char* src = bytes.data() + (b / 2) * block + d_at;
      FUZZ_CHECK((*got)[b].d == static_cast<std::uint16_t>(src[0] | src[1] << 8), "scale not kept in block ", b);
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: check_readers(in); break;
    case 1: check_quantize(in); break;
    default: check_formats(in); break;
  }
  return 0;
}
