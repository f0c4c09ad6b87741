// The workspace of matmul's tiled_sm90_streamk route: the f32 parts of the tiles cut between two
// CTAs and the tiles' counters, one buffer per context (it has one stream: launches on it never
// overlap). Host header, no CUDA headers.
#pragma once
#include <cstdint>

#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_dense {

struct StreamKWorkspace {
  float* slots = nullptr;
  std::uint32_t* counters = nullptr;
  void* base = nullptr;     // the whole buffer (capture ranges)
  std::uint64_t bytes = 0;
};

// The workspace for launch `l` (tiled_sm90_dense_streamk_launch): the context's buffer, grown
// when `l` needs more (after the stream drains, so no launch in flight loses it), its counters
// zeroed when it is allocated; every launch leaves them zero. Allocating is not allowed while the
// stream captures a graph: then it throws Unsupported (make one call of the shape first).
StreamKWorkspace streamk_workspace(Context& ctx, const engine::TiledSm90Launch& l);

}  // namespace llmm::cuda_dense
