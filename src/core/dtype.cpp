// Host f16/bf16 conversions (round to nearest even) and typed element access.
#include "llmm/dtype.hpp"

#include <cmath>
#include <limits>
#include <cstring>

namespace llmm {
namespace {

std::uint32_t bits_of(float x) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(std::uint32_t u) noexcept {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// double -> float rounding to odd: the odd one of the two floats around v when v is not a
// float. Rounding that float to a type with at least 2 fewer bits is then the correctly
// rounded double -> f16/bf16 (no double rounding).
float round_to_odd(double v) noexcept {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v || (bits_of(f) & 1u)) return f;
  return std::nextafter(f, static_cast<double>(f) < v ? INFINITY : -INFINITY);
}

}  // namespace

std::uint16_t f32_to_bf16_bits(float x) noexcept {
  std::uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  // Round to nearest even on the 16 dropped bits; overflow rounds to Inf as it should.
  std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float bf16_bits_to_f32(std::uint16_t h) noexcept { return float_of(static_cast<std::uint32_t>(h) << 16); }

std::uint16_t f32_to_f16_bits(float x) noexcept {
  std::uint32_t u = bits_of(x);
  std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a >= 0x38800000u) {  // normal f16 (>= 2^-14)
    std::uint32_t mant = a & 0x7fffffu;
    std::uint32_t exp = (a >> 23) - 127 + 15;
    std::uint32_t h = (exp << 10) | (mant >> 13);
    std::uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: correct
    return static_cast<std::uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal f16: value = m * 2^-24, m = round(a_value * 2^24).
  std::uint32_t exp = a >> 23;                       // biased f32 exponent, 102..112
  std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand
  std::uint32_t shift = 126 - exp;                   // 14..24: bits dropped below 2^-24
  std::uint32_t m = mant >> shift;
  std::uint32_t rest = mant & ((1u << shift) - 1u);
  std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) ++m;
  return static_cast<std::uint16_t>(sign | m);
}

float f16_bits_to_f32(std::uint16_t h) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);  // exact: subnormal or zero
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

std::uint8_t f32_to_e4m3fn_bits(float x, bool saturate) noexcept {
  const std::uint8_t sign = (bits_of(x) >> 24) & 0x80u;
  if (std::isnan(x)) return sign | 0x7Fu;
  const float a = std::fabs(x);
  // 464 is halfway between 448 (mantissa 110) and the would-be 480 (111, NaN's pattern): a tie
  // goes to the even 448; anything above rounds past the largest finite value.
  if (a > 464.0f) return sign | (saturate ? 0x7Eu : 0x7Fu);
  if (a < 0x1p-6f) {  // subnormal: multiples of 2^-9 (code 8, rounded up to 2^-6, is the smallest normal)
    return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exponent e - 1, significand 2f
  int exponent = e - 1;
  int mantissa = static_cast<int>(std::nearbyint((2.0f * f - 1.0f) * 8.0f));  // exact scaling, then RNE
  if (mantissa == 8) mantissa = 0, ++exponent;
  return sign | static_cast<std::uint8_t>(((exponent + 7) << 3) | mantissa);
}

float e4m3fn_bits_to_f32(std::uint8_t b) noexcept {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exponent = (b >> 3) & 0xF, mantissa = b & 7;
  if (exponent == 15 && mantissa == 7) return std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

double load_as_double(const void* base, DType t, std::int64_t i) noexcept {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F16: return f16_bits_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BF16: return bf16_bits_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::U8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::U32: return static_cast<const std::uint32_t*>(base)[i];
    case DType::I32: return static_cast<const std::int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case DType::F8E4M3: return e4m3fn_bits_to_f32(static_cast<const std::uint8_t*>(base)[i]);
  }
  return 0.0;
}

void store_from_double(void* base, DType t, std::int64_t i, double v) noexcept {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::F16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16_bits(round_to_odd(v)); break;
    case DType::BF16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16_bits(round_to_odd(v)); break;
    case DType::U8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v); break;
    case DType::U32: static_cast<std::uint32_t*>(base)[i] = static_cast<std::uint32_t>(v); break;
    case DType::I32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    case DType::I64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); break;
    case DType::F8E4M3: static_cast<std::uint8_t*>(base)[i] = f32_to_e4m3fn_bits(round_to_odd(v)); break;
  }
}

}  // namespace llmm
