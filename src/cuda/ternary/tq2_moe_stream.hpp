// Launcher of tq2_moe_stream_sm90, the decode route of matmul_id_tq2 (host header, no CUDA
// headers; configuration and names: core/ternary/tq2_moe_stream_plan.hpp). Two kernels on
// `stream`, both with programmatic dependent launch: the activation rows staged into
// `workspace` (exactly Tq2MoeStreamConfig::workspace_bytes, 16-byte aligned), then the streaming
// kernel. Built for sm_90a only. Throws llmm::Error(ErrorCode::Cuda) naming the kernel when a
// launch fails, ErrorCode::Internal for arguments it does not take.
#pragma once
#include <cstddef>

#include "core/ternary/tq2_moe_args.hpp"
#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_ternary {
void launch_tq2_moe_stream_sm90(const Tq2MoeArgs& a, void* workspace, std::size_t workspace_bytes, StreamHandle stream);
// Blocks of the streaming kernel config `c` picks (in / out dtypes) that fit on one SM (the
// occupancy API with its shared memory): the config's blocks_per_sm must fit (tests).
int tq2_moe_stream_resident_blocks(const Tq2MoeStreamConfig& c, DType in_dtype, DType out_dtype);
}  // namespace llmm::cuda_ternary
