// Host-side plan of the tq2_dequant_lt route (gemm_tq2 on cuBLASLt): which kernels run, how the
// weight is cut into chunks along N, and the workspace layout. Pure functions of sizes and
// dtypes, no CUDA headers: the router, tq2_workspace_bytes, CPU tests and the CUDA runner all
// use this one plan.
//
// The route, per call (see src/cuda/ternary/tq2_dequant_lt.cpp):
//   1. f32/bf16 input: tq2_rowscale writes each row i as x * 2^-e_i in f16 parts, one power of two
//      e_i per row that puts the row's max |x| in [2^14, 2^15), and alpha[i] = 2^e_i.
//   2. per chunk of weight rows: tq2_dequant writes W[j0 .. j0 + rows) as f16 (code - 1) * scale,
//      then cuBLASLt GEMMs (f32 accumulation, host alpha and beta) into D:
//        Exact f32:  D = hi . W^T, then D = 2^-11 lo . W^T + D (one rounding, as one GEMM would);
//        Fast f32, bf16 -> f32/bf16: D = hi . W^T;
//        f16: D = x . W^T straight from the input (f16 or f32 D), no scaling, done.
//      D is the output chunk itself for an f32 output, else an f32 temp (no f16 x f16 -> bf16
//      cuBLASLt GEMM); then tq2_lt_scale_rows writes out[i][chunk] = alpha[i] * D[i] (in place for
//      f32: exact, a power of two; bf16: one rounding).
// Why one scale per row: with one scale for the whole activation a row 2^30 below the largest
// fell below f16's range and came out as zeros, and a row's result depended on the other rows.
// cuBLASLt's alpha vector scales rows of its column-major D, which are our output features, not
// our tokens, hence the scaling pass after the GEMMs.
// Why f16 and not bf16: (code - 1) * an f16 scale has 11 significant bits, exact in f16 but not in
// bf16 (8), and the tensor cores need both operands in one type. An f32 x is split as
// x * 2^-e_i = hi + lo * 2^-11 (relative error <= 2^-22 for |x| >= 2^-29 of its row's max |x|,
// <= 2^-17 down to 2^-34 of it), so Exact takes two GEMMs (bf16 would need three: its weight
// needs a hi and a lo part too).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "llmm/dtype.hpp"

namespace llmm::cuda_ternary {

inline constexpr std::size_t kTq2LtAlign = 256;  // workspace sections and cuBLASLt operands
// Weight-chunk sizing (bytes of f16 weight): a chunk the size of half the H200's 60 MB L2 stays
// there between tq2_dequant and the GEMM, but each chunk's GEMM must also be large enough to fill
// the chip for several waves (kTq2LtWaveTiles 128 x 256 tiles: 4 waves of 132 SMs); the larger
// of the two wins, capped at kTq2LtMaxChunkBytes.
inline constexpr std::size_t kTq2LtL2ChunkBytes = std::size_t{24} << 20;
inline constexpr std::size_t kTq2LtMaxChunkBytes = std::size_t{128} << 20;
inline constexpr std::int64_t kTq2LtWaveTiles = 4 * 132;
inline constexpr std::int64_t kTq2LtRowUnit = 256;   // automatic chunks: whole 256-row tiles
inline constexpr std::int64_t kTq2LtOverrideUnit = 128;  // forced chunks: 128 rows (256-byte offsets)
// x * 2^-e puts max |x| in [2^14, 2^15); e is clamped so that 2^e and 2^(e - 11) are normal f32.
inline constexpr int kTq2LtTopExp = 14, kTq2LtLoShift = 11, kTq2LtMinExp = -115, kTq2LtMaxExp = 113;

struct Tq2LtPlan {
  int parts = 0;            // f16 activation parts in the workspace: 0 (f16 input read directly), 1, 2
  bool scaled = false;      // parts > 0: tq2_rowscale runs first, tq2_lt_scale_rows after each chunk
  bool via_temp = false;    // bf16 out of a scaled input: GEMMs into an f32 temp (else into out)
  DType gemm_out = DType::F32;  // the GEMMs' D dtype (f32, or f16 for f16 -> f16)
  int gemms = 1;            // GEMMs per chunk (2: Exact's hi and lo)
  std::int64_t chunk_rows = 0, chunks = 0, last_rows = 0;
  std::int64_t temp_ld = 0;  // f32 temp row stride (via_temp only)
  // Workspace layout: byte offsets from a 256-byte aligned base (each section 256-aligned).
  std::size_t alpha_off = 0;    // m floats: 2^e_i of each row (scaled only)
  std::size_t parts_off = 0, part_bytes = 0;  // parts x [m][k] f16, part p at parts_off + p * part_bytes
  std::size_t weight_off = 0;   // [chunk_rows][k] f16
  std::size_t temp_off = 0;     // [m][temp_ld] f32
  std::size_t bytes = 0;
  int kernels = 0;              // launches, cuBLASLt GEMMs included
  std::string rowscale_kernel, dequant_kernel, scale_kernel;  // empty when not run
};

// Plan for m, n, k >= 1 (k % 128 == 0), input f32/f16/bf16, output f32 or the input's dtype.
// chunk_rows > 0 forces the rows per chunk (rounded up to 128, at most n: tests and calibration);
// 0 picks them by the rule above. Throws InvalidArgument on sizes whose bytes overflow.
Tq2LtPlan tq2_lt_plan(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, DType out_dtype, bool exact,
                      std::int64_t chunk_rows = 0);

// The automatic rows per chunk alone (what tq2_lt_plan uses when chunk_rows is 0).
std::int64_t tq2_lt_auto_chunk_rows(std::int64_t m, std::int64_t n, std::int64_t k);

}  // namespace llmm::cuda_ternary
