// Overflow-checked size arithmetic: every byte extent in llmm is computed with these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>

#include "llmm/error.hpp"

namespace llmm {

// `what` names the quantity being computed, for the error message.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorCode::InvalidArgument, what, ": ", a, " * ", b, " overflows 64 bits");
  return r;
}

inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(ErrorCode::InvalidArgument, what, ": ", a, " + ", b, " overflows 64 bits");
  return r;
}

inline std::size_t to_usize(std::uint64_t v, const char* what) {
  if (v > std::numeric_limits<std::size_t>::max())
    fail(ErrorCode::InvalidArgument, what, ": ", v, " does not fit in size_t");
  return static_cast<std::size_t>(v);
}

// A size or stride narrowed for a kernel argument: v as u32 / int, or InvalidArgument naming the
// op and the quantity ("matmul_id: n 4294967297 is outside 0..4294967295"). Never a plain cast.
inline std::uint32_t narrow_u32(std::int64_t v, const char* op, const char* what) {
  if (v < 0 || v > static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()))
    fail(ErrorCode::InvalidArgument, op, ": ", what, " ", v, " is outside 0..", std::numeric_limits<std::uint32_t>::max());
  return static_cast<std::uint32_t>(v);
}
inline int narrow_int(std::int64_t v, const char* op, const char* what) {
  if (v < 0 || v > static_cast<std::int64_t>(std::numeric_limits<int>::max()))
    fail(ErrorCode::InvalidArgument, op, ": ", what, " ", v, " is outside 0..", std::numeric_limits<int>::max());
  return static_cast<int>(v);
}

// A non-negative int64 as u64 (sizes and strides are int64 in views).
inline std::uint64_t to_u64(std::int64_t v, const char* what) {
  if (v < 0) fail(ErrorCode::InvalidArgument, what, ": ", v, " is negative");
  return static_cast<std::uint64_t>(v);
}

}  // namespace llmm
