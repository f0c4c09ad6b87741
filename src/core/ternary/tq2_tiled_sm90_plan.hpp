// Host-side plan of gemm_tq2's tiled_sm90 route (the Hopper tiled engine with the TQ2 decoder,
// src/cuda/engine): which kernels run and the workspace they share. Pure
// functions of sizes and dtypes; the router, tq2_workspace_bytes, CPU tests and the CUDA runner
// use this one plan.
//
// The route, per call:
//   f16 input:   the engine reads the input itself (16-byte aligned base and row stride), no
//                workspace: one kernel.
//   bf16 input, or f32 with Fast precision: tq2_rowscale writes each row i as x * 2^-e_i in
//                f16 into the workspace, e_i such that the row's max |x| lands in [2^14, 2^15):
//                exact for bf16 (8 significant bits) down to 2^-28 of the row's max |x|, f32
//                rounded to 11 bits (Fast); the engine's epilogue multiplies row i by 2^e_i (m
//                device floats before the copy). Two kernels. (Session 8-11: one scale for the
//                whole activation, from two kernels; per row it is one kernel, and a row's
//                scale no longer depends on the other rows.)
// The split route (tiled_sm90_splitk: K in parts, for few feature tiles) adds the parts' f32
// slots and the tiles' counters to the workspace (any input dtype), and zeroes the counters
// (cudaMemsetAsync) before the engine runs.
// The weight is decoded to f16 (code - 1) * scale, exact, so every product is exact and the
// accumulation is f32, in one fixed order per output (batch-invariant, run-to-run identical).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_ternary {

struct Tq2TiledSm90Plan {
  bool scaled = false;      // tq2_rowscale runs, the engine reads its f16 copy
  // Workspace layout (scaled only): byte offsets from a 256-byte aligned base.
  std::size_t alpha_off = 0;  // m floats: 2^e of each row
  std::size_t part_off = 0;   // [m][k] f16
  // Split only: the engine's slots and counters (tiled_sm90_tq2_split_slot_bytes / _counter_bytes).
  std::size_t slots_off = 0, counters_off = 0, counter_bytes = 0;
  std::size_t bytes = 0;
  engine::TiledSm90Launch launch;
  std::string rowscale_kernel, engine_kernel;  // the first empty unless scaled
};

// Plan for a problem tiled_sm90_tq2_refusal accepts (throws InvalidArgument naming the reason
// otherwise); sm_count 0 = 132. split: the tiled_sm90_splitk route (tiled_sm90_tq2_split_launch).
Tq2TiledSm90Plan tq2_tiled_sm90_plan(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out, bool exact,
                                     int sm_count, bool split = false);

}  // namespace llmm::cuda_ternary
