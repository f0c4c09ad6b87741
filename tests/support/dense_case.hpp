// One dense matmul test case end to end: random padded operands, poisoned output, llmm::matmul
// on the given context (uploading for CUDA), comparison against the float64 reference, and a
// check that no byte outside the logical output (row and batch padding) was written.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "llmm/matmul.hpp"
#include "support/compare.hpp"

namespace llmm::test {

struct DenseCase {
  DType dtype = DType::F32;
  std::int64_t batch = 1, m = 1, n = 1, k = 1;
  bool ta = false, tb = false;
  std::int64_t pad = 0;           // extra elements after each row (and 3x after each matrix)
  bool a_bcast = false, b_bcast = false;  // batch stride 0
  Precision precision = Precision::Exact;
  DenseRoute route = DenseRoute::Auto;
  int nonfinite_every = 0;  // > 0: Inf/NaN in some rows of a and b (inject_nonfinite); IEEE classes checked
  std::uint64_t seed = 1;
  std::optional<Tolerance> tolerance;  // instead of dense_tolerance (a stricter bound)
  std::string describe() const;
};

struct DenseOutcome {
  Receipt receipt;
  CompareResult cmp;
  bool padding_untouched = false;
  std::vector<unsigned char> out_bytes;  // the whole output buffer, for determinism checks
};

// The tolerance for a dtype and precision mode: product rounding (tf32 or 3xtf32 for f32 on
// tensor cores) plus k * 2^-24 for f32 accumulation, and one rounding of the output type.
Tolerance dense_tolerance(DType dtype, Precision precision, std::int64_t k);

DenseOutcome run_dense_case(Context& ctx, const DenseCase& c);

// An [m, n] problem (x . w^T, 16-bit) for which the Hopper engine's plan takes tile width `bn`
// at `bm` weight rows (engine::kTiledDenseWidths at 128, kTiledTallWidths at 256) on `sm_count`
// SMs, with tails in both: m not a multiple of bn, n not of 128; the smallest m over a few n.
// nullopt when there is none (a test should fail then).
struct MN { std::int64_t m = 0, n = 0; };
std::optional<MN> tiled_sm90_width_shape(int bn, int sm_count, int bm = 128);

}  // namespace llmm::test
