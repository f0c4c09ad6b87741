// Element types and host-side 16-bit float conversions (no CUDA headers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace llmm {

// I32 and I64 exist for index arrays (expert ids as frameworks produce them); kernels take them
// only where an op says so. F8E4M3 is float8_e4m3fn (1 sign, 4 exponent bits with bias 7, 3
// mantissa bits; no infinity, NaN = S.1111.111, largest finite 448): FP8 weights, with scales.
enum class DType : std::uint8_t { F32, F16, BF16, U8, U32, I32, I64, F8E4M3 };

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::U32: return 4;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F8E4M3: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
    case DType::U32: return "u32";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F8E4M3: return "f8e4m3";
  }
  return "?";
}

constexpr bool is_float(DType t) noexcept {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// Dtypes matmul_id takes for expert ids (an id outside [0, n_experts) gives a zero row).
constexpr bool is_expert_id(DType t) noexcept { return t == DType::U32 || t == DType::I32 || t == DType::I64; }

// Unit roundoff of a floating type (half an ulp at 1.0): 2^-24, 2^-11, 2^-8.
constexpr double unit_roundoff(DType t) noexcept {
  switch (t) {
    case DType::F32: return 5.9604644775390625e-08;
    case DType::F16: return 4.8828125e-04;
    case DType::BF16: return 3.90625e-03;
    default: return 0.0;
  }
}

// IEEE binary16 and bfloat16 conversions, round to nearest even; NaN stays NaN
// (quiet), infinities and signed zeros are kept, f16 subnormals are produced and read.
std::uint16_t f32_to_f16_bits(float x) noexcept;
float f16_bits_to_f32(std::uint16_t h) noexcept;
std::uint16_t f32_to_bf16_bits(float x) noexcept;
float bf16_bits_to_f32(std::uint16_t h) noexcept;

// float8_e4m3fn conversions, bit-exact with ml_dtypes' float8_e4m3fn: round to nearest even,
// subnormals produced and read, -0 kept, NaN -> NaN of the same sign (0x7F / 0xFF, decoded to
// the quiet NaN of that sign). A finite
// value that rounds above 448 (|x| > 464) and an infinity become NaN, as ml_dtypes' cast does;
// with `saturate` they become +-448 instead (a quantizer's clamp; NaN stays NaN).
std::uint8_t f32_to_e4m3fn_bits(float x, bool saturate = false) noexcept;
float e4m3fn_bits_to_f32(std::uint8_t b) noexcept;
inline constexpr float kE4M3Max = 448.0f;

// FP8 weights' scale granularity (fp8.hpp): one f32 scale per tensor, per output row (channel)
// or per [kFp8Block, kFp8Block] block.
enum class Fp8ScaleKind { Tensor, Channel, Block128 };
inline constexpr std::int64_t kFp8Block = 128;

// Storage types for host code: a bit pattern with explicit conversions.
struct f16 {
  std::uint16_t bits = 0;
  static f16 from_float(float x) noexcept { return f16{f32_to_f16_bits(x)}; }
  float to_float() const noexcept { return f16_bits_to_f32(bits); }
};
struct bf16 {
  std::uint16_t bits = 0;
  static bf16 from_float(float x) noexcept { return bf16{f32_to_bf16_bits(x)}; }
  float to_float() const noexcept { return bf16_bits_to_f32(bits); }
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

// Reads element i of a float-typed buffer as double; writes a double rounded to the type.
double load_as_double(const void* base, DType t, std::int64_t index) noexcept;
void store_from_double(void* base, DType t, std::int64_t index, double v) noexcept;

}  // namespace llmm
