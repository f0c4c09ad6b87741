// The layout of the timeline-probe buffer (trace_sm90.cuh), for the kernels and the host tool
// that reads it (bench/trace/ring_trace.cpp). Plain C++: no device code.
#pragma once

namespace llmm::cuda_common {

// Buffer layout (64-bit words): the staging kernel's blocks first (kTraceStageWords each, up to
// kTraceStageBlocks), then the ring kernel's blocks (kTraceRingWords each, up to kTraceRingBlocks).
inline constexpr int kTraceStageBlocks = 64, kTraceStageWords = 4;
inline constexpr int kTraceRingBlocks = 1024, kTraceRingWords = 16;
inline constexpr int kTraceRingBase = kTraceStageBlocks * kTraceStageWords;
inline constexpr int kTraceWords = kTraceRingBase + kTraceRingBlocks * kTraceRingWords;

// Ring-kernel events of one block (word index within its kTraceRingWords).
enum TraceRingEvent : int {
  kEvEntry = 0,          // thread 0 at kernel entry
  kEvProducerFirst = 1,  // the producer issued its first stage's copies
  kEvProducerLast = 2,   // the producer issued its last stage's copies
  kEvDepWait = 3,        // consumer warp 0 past griddepcontrol.wait (the kernels before are done)
  kEvImage = 4,          // consumer warp 0 has the image (copied or converted)
  kEvFirstFull = 5,      // consumer warp 0 found its first stage full
  kEvLastStage = 6,      // consumer warp 0 decoded its last stage
  kEvEnd = 7,            // consumer warp 0 stored its last output
  kEvLastWarpEnd = 8,    // the last consumer warp stored its last output
  kEvSm = 9,             // %smid (not a time)
  kEvItems = 10,         // items of this block (not a time)
  kEvFullWaitNs = 11,    // ns consumer warp 0 spent waiting on full stages (a duration)
  kEvStages = 12,        // stages consumer warp 0 decoded (a count)
};
// Staging-kernel events of one block.
enum TraceStageEvent : int { kEvStageEntry = 0, kEvStageDepWait = 1, kEvStageEnd = 2 };

}  // namespace llmm::cuda_common
