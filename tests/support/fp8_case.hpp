// One matmul_fp8 case on any context against the float64 reference: random weights quantized
// per tensor / channel / 128-block (scales that differ by row and K block), random x with
// padded rows, a NaN-poisoned y (every output must be written). Where the route quantizes x
// (W8A8: receipt route "cublaslt" or "tiled_sm90"), or where x is given in e4m3, the reference
// uses quantize_fp8_activations' values.
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
  // x given in e4m3 (the Fp8ActivationView overload): x quantized on the host by
  // quantize_fp8_activations (group 128), its scales token-major ([groups][ld], ld = m rounded up
  // to 4 plus x_scale_pad) or, with x_scales_row_major, [m][groups]; y of `dtype`.
  bool x_e4m3 = false, x_scales_row_major = false;
  std::int64_t x_scale_pad = 0;
};

// Runs the case (EXPECTs inside) and returns the receipt.
Receipt run_fp8_case(Context& ctx, const Fp8Case& c, const MatmulFp8Options& opts);

}  // namespace llmm::test
