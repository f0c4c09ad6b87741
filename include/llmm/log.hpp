// What llmm decided, per call: with the level above 0, every op (matmul, matmul_id, gemm_tq2)
// writes one line to stderr naming the op, its problem (sizes, dtypes, layout), the route and why
// the planner chose it, and the kernels it launched, e.g.
//   llmm: matmul batch 1 m 4096 n 14336 k 4096 bf16 nt exact -> route cublaslt (tiled-class shape:
//   ...), 1 kernel: cublaslt_bf16_nt
// The level starts from the environment variable LLMM_LOG (unset or 0: off; 1: one line a call),
// read once; set_log_level overrides it. Off, it costs one relaxed atomic load a call.
#pragma once

namespace llmm {

void set_log_level(int level) noexcept;
int log_level() noexcept;

}  // namespace llmm
