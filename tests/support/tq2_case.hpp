// Ternary test data built as the seed builds it (LCG codes, its scale formula, its sin input),
// and one gemm_tq2 case end to end against the float64 reference.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmm/ternary.hpp"
#include "support/compare.hpp"

namespace llmm::test {

// The seed's weight: codes from the Numerical Recipes LCG ((lcg >> 16) % 3), 4 a byte LSB first,
// scale 0.05 + 0.003 * (row % 17) + 0.002 * block (rounded to f16).
std::vector<BlockTQ2_128> seed_tq2_blocks(std::int64_t n, std::int64_t k, std::uint32_t lcg_seed);
// The seed's input: sin(col * 0.011 - 0.37) + row * 0.0005, [m, k] row-major.
std::vector<float> seed_tq2_input(std::int64_t m, std::int64_t k);

struct Tq2Case {
  std::int64_t m = 1, n = 40, k = 256;
  Tq2Route route = Tq2Route::Auto;
  Precision precision = Precision::Exact;
  DType in_dtype = DType::F32, out_dtype = DType::F32;
  std::int64_t pad = 0;  // extra elements after each input and output row
  bool seed_input = true;  // the seed's sin input; else random values of varied magnitude
  std::uint64_t seed = 1;
  int wide_exp = 0;         // > 0: random input magnitudes spread over 2^-wide_exp .. 2^wide_exp
  bool zero_group = false;  // input columns 128..255 all zero (a scale group of zeros)
  std::int64_t chunk_rows = 0;    // DequantLt: forced weight rows per dequantized chunk (0: automatic)
  bool caller_workspace = false;  // DequantLt: pass a workspace of exactly tq2_workspace_bytes
  int nonfinite_every = 0;        // > 0: Inf/NaN in some input rows (inject_nonfinite); IEEE classes checked
  Tq2StreamImage stream_image = Tq2StreamImage::Auto;  // StreamV5: where its activation image is made
  int rot_block = 0;  // > 0: the Hadamard rotation with +-1 signs from `seed`; the reference rotates in float64
  std::string describe() const;
};

struct Tq2Outcome {
  Receipt receipt;
  CompareResult cmp;       // against the float64 reference with the precision's tolerance
  double max_abs_err = 0;  // the seed's metric
  bool any_nonzero = false;
  bool padding_untouched = false;
  std::vector<unsigned char> out_bytes;  // the whole output buffer, for determinism checks
};

// The seed's first test: N = 40, K = 256, M in {1, 7, 8, 9, 100}, index-derived input, through the
// host-I/O gemm_tq2 on ctx: every max abs error < 1e-3 and the output not all zero (gtest EXPECTs).
void expect_seed_anti_cap_of_eight(Context& ctx);

// Builds the weight (seed codes), uploads it through `cache`, runs gemm_tq2 (View form) on ctx.
Tq2Outcome run_tq2_case(Context& ctx, TernaryWeightCache& cache, const Tq2Case& c);

}  // namespace llmm::test
