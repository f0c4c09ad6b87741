// Timeline probes for the sm_90 streaming kernels, built only with the CMake option
// LLMM_RING_TRACE (off by default: without it no kernel carries probe code). A probe stores
// %globaltimer (ns, one clock for the whole GPU) into a device buffer that llmm-ring-trace (bench/trace) arms
// before the call it wants to see (tq2_ring_trace_arm, launch.hpp); a null buffer stores nothing.
// Why: ncu times each kernel alone and hides where a small decode call's ~5 us of fixed cost
// sits between the staging kernel, the weight copies, the image and the consumers' decode.
#pragma once
#include <cstdint>

#include "cuda/common/trace_layout.hpp"

namespace llmm::cuda_common {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The low 32 bits (wraps every 4.3 s): durations in fewer registers.
__device__ __forceinline__ unsigned global_ns_lo() {
  unsigned t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ void trace_ring(unsigned long long* buf, int event) {
  if (buf && blockIdx.x < kTraceRingBlocks) buf[kTraceRingBase + blockIdx.x * kTraceRingWords + event] = global_ns();
}
__device__ __forceinline__ void trace_ring_value(unsigned long long* buf, int event, unsigned long long v) {
  if (buf && blockIdx.x < kTraceRingBlocks) buf[kTraceRingBase + blockIdx.x * kTraceRingWords + event] = v;
}
__device__ __forceinline__ void trace_stage(unsigned long long* buf, int event) {
  if (buf && blockIdx.x < kTraceStageBlocks) buf[blockIdx.x * kTraceStageWords + event] = global_ns();
}

// The latest of the calls of all warps (a block's end where its warps leave at different points).
__device__ __forceinline__ void trace_stage_last(unsigned long long* buf, int event) {
  if (buf && blockIdx.x < kTraceStageBlocks) atomicMax(&buf[blockIdx.x * kTraceStageWords + event], global_ns());
}

}  // namespace llmm::cuda_common

// LLMM_TRACE(stmt): stmt in trace builds, nothing otherwise.
#if defined(LLMM_RING_TRACE) && LLMM_RING_TRACE
#define LLMM_TRACE(...) __VA_ARGS__
#else
#define LLMM_TRACE(...)
#endif
