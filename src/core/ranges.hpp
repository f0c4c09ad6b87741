// Byte-range hulls of the strided operands kernels take (capture mode, LaunchRecord): pure
// host arithmetic on already-validated sizes, so no overflow checks are needed here.
#pragma once
#include <cstdint>

#include "core/ternary/tq2_args.hpp"
#include "llmm/context.hpp"
#include "llmm/dtype.hpp"

namespace llmm::detail {

// Elements [0, count) of `t` at p.
inline ByteRange elems_range(const void* p, DType t, std::int64_t count) {
  return {p, count > 0 ? static_cast<std::size_t>(count) * dtype_size(t) : 0};
}

// A [batch][rows][cols] operand with row stride ld and batch stride bs (elements; bs 0 broadcasts).
inline ByteRange matrix_range(const void* p, DType t, std::int64_t batch, std::int64_t bs, std::int64_t rows,
                              std::int64_t cols, std::int64_t ld) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return {p, 0};
  return elems_range(p, t, (batch - 1) * bs + (rows - 1) * ld + cols);
}

// A ternary GEMM's operands: reads the input, codes and scales, writes the output.
inline LaunchRanges tq2_ranges(const cuda_ternary::Tq2Args& g) {
  return LaunchRanges{{matrix_range(g.in, g.in_dtype, 1, 0, g.m, g.k, g.in_ld), elems_range(g.codes, DType::U8, g.n * (g.k / 4)),
                       elems_range(g.scales, DType::F16, g.n * (g.k / 128))},
                      {matrix_range(g.out, g.out_dtype, 1, 0, g.m, g.n, g.out_ld)}};
}

}  // namespace llmm::detail
