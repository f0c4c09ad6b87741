// One matmul_fp8 case on any context against the float64 reference: random weights quantized
// per tensor / channel / 128-block (scales that differ by row and K block), random x with
// padded rows, a NaN-poisoned y (every output must be written). Where the route quantizes x
// (W8A8: receipt route "cublaslt") the reference uses quantize_fp8_activations' values.
#pragma once
#include <cstdint>
#include <string>

#include "llmm/fp8.hpp"

namespace llmm::test {

struct Fp8Case {
  std::int64_t m = 1, n = 1, k = 16;
  DType dtype = DType::BF16;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  std::int64_t x_pad = 0, y_pad = 0, w_pad = 0;  // extra elements after each row
  std::uint64_t seed = 1;
  bool nonfinite = false;  // NaN and Inf in x rows 0 and 1, a NaN code in weight row 2
};

// Runs the case (EXPECTs inside) and returns the receipt.
Receipt run_fp8_case(Context& ctx, const Fp8Case& c, const MatmulFp8Options& opts);

}  // namespace llmm::test
