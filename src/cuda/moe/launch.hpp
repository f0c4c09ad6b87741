// Launchers of the expert-ID (MoE) CUDA kernels. Host header, no CUDA headers: raw pointers,
// sizes and strides come in a MoeArgs (already validated by llmm::matmul_id), kernels go on
// `stream`. Every launcher throws llmm::Error(ErrorCode::Cuda, ...) naming the kernel when the
// launch fails, and ErrorCode::Internal when given arguments it does not take (a router bug:
// dtypes outside moe_dtypes_supported, null pointers, n_experts above moe_map_max_experts() on
// the grouped route, missing scratch). None synchronizes or allocates; all are deterministic.
// Names and configurations: core/moe/moe_kernels.hpp.
#pragma once
#include "core/moe/moe_kernels.hpp"
#include "core/moe/moe_args.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_moe {

// One kernel over every routed row (decode, MayRepeat routing): out[r, :] for all r < m*top_k,
// zeros for ids >= n_experts (no weight address formed). Launches nothing when m*top_k == 0
// or n == 0.
void launch_moe_direct(const MoeArgs& args, StreamHandle stream);

// Grouped route, step 1: counts[e] and rows[e * row_capacity + i] (increasing routed row r),
// and zero output rows for ids >= n_experts. Requires n_experts <= moe_map_max_experts(),
// counts and rows non-null, m * top_k < 2^32. Launches nothing when m*top_k == 0.
void launch_moe_map(const MoeArgs& args, StreamHandle stream);

// Grouped route, optional step between the map and the GEMM: staged[i] = the input row of
// rows[i] for every listed row (requires a.staged with room for m * top_k rows of k elements,
// k * element size a multiple of 16, 16-byte aligned input rows and strides).
void launch_moe_stage_rows(const MoeArgs& args, StreamHandle stream);
std::int64_t moe_stage_rows_blocks(const MoeArgs& args) noexcept;

// Grouped route, step 2 (same stream, after launch_moe_map): every routed row of an in-range
// expert gets its whole output row. Grid from m, top_k, n_experts and n only.
void launch_moe_grouped(const MoeArgs& args, StreamHandle stream);

}  // namespace llmm::cuda_moe
