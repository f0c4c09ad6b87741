// Launchers of the ternary (TQ2_0_g128) CUDA kernels. Host header, no CUDA headers: raw pointers
// and sizes come in a Tq2Args (already validated by the caller), kernels go on `stream`. Every
// launcher throws llmm::Error(ErrorCode::Cuda, ...) naming the kernel when the launch fails, and
// ErrorCode::Internal when given arguments it does not take (a router bug). None synchronizes or
// allocates; all are deterministic (fixed-order reductions, no atomics) and write every output
// element. Names and eligibility: core/ternary/tq2_kernels.hpp.
#pragma once
#include "core/ternary/tq2_kernels.hpp"
#include "core/ternary/tq2_args.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_ternary {

// Decode kernel v2 for m = 1..16 (tq2_stream_v2_supports): streams every code byte once,
// tensor cores (mma.sync m16n8k16) with the weight rows as the A operand and the activation
// columns as B, f32 accumulation; the activation converted once per block into shared memory in
// B-fragment order (from m = 3 staged by a first kernel into args.workspace), codes decoded
// exactly to f16 -1/0/+1 (see tq2_stream_v2.cu and tq2_stream_skeleton.cuh).
void launch_tq2_stream_v2(const Tq2Args& args, StreamHandle stream);


// Decode kernel v4 for m <= 2 on sm_90 (tq2_stream_v4_supports): v3's int8-digit decoder on the
// streaming engine: tq2_stage_v4 converts the activation once into args.workspace
// (tq2_stream_v4_stage_bytes), then persistent blocks with a producer lane filling a copy-engine
// ring; both launched with programmatic dependent launch (see tq2_stream_v4_sm90a.cu). Built for
// sm_90a only.
void launch_tq2_stream_v4(const Tq2Args& args, StreamHandle stream);

// Decode kernel v5 for m <= 16 on sm_90 (tq2_stream_v5_supports): v4's decoder and staged image,
// warp-owned row bands, stages of 128 rows x 4 groups with their transposed scales, K parts
// summed by the last to arrive (see tq2_stream_v5_sm90a.cu). args.workspace holds
// tq2_stream_v5_workspace_bytes. Built for sm_90a only.
void launch_tq2_stream_v5(const Tq2Args& args, StreamHandle stream);
// Blocks of the kernel tq2_stream_v5_config picks for args that fit on one SM (the occupancy API,
// with the config's shared memory), or 0 where v5 does not run: the config's blocks_per_sm must
// fit, else its grid of sm_count x blocks_per_sm runs in two waves (registers past 96 at two
// 288-thread blocks did that silently; the GPU tests check every config against it).
int tq2_stream_v5_resident_blocks(const Tq2Args& args);

#if defined(LLMM_RING_TRACE) && LLMM_RING_TRACE
// Trace builds only (llmm-ring-trace, bench/trace/ring_trace.cpp): the device buffer (cuda_common::kTraceWords 64-bit words,
// zeroed by the caller) that the next tq2_stream_v5 launches write their timeline into; null
// stops it. Not thread-safe: a tool's knob, not an API.
void tq2_ring_trace_arm(unsigned long long* buf);
#endif

// Prefill kernel, any m (tq2_tiled_supports): 128x128 tiles, cp.async ring, mma.sync m16n8k16.
// f16 -> f16 mma, bf16 -> bf16 mma, f32 Fast -> one bf16 pass, f32 Exact -> bf16 hi + lo passes.
void launch_tq2_tiled(const Tq2Args& args, StreamHandle stream);

}  // namespace llmm::cuda_ternary
