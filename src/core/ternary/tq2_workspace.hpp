// Device scratch of the ternary routes, in one place: the context's grow-only pool and the rule
// for a caller's workspace (Tq2Options::workspace). Host code.
#pragma once
#include <cstddef>
#include <string>

#include "core/ternary/tq2_args.hpp"
#include "llmm/ternary.hpp"

namespace llmm::detail {

// The CUDA context's grow-only pool for gemm_tq2 (slot "route_workspace": a route's scratch;
// "in"/"out": the host-I/O form's staging). Calls on a context follow each other on its stream,
// so one slot serves every route; growing frees the old buffer through cudaFree, which waits.
BufferPool& ternary_pool(Context& ctx);

// `bytes` of scratch for `route` (what it is for goes into the message, e.g. "m 4, k 3072"): the
// caller's g.workspace, refused when smaller than `bytes` or not 256-byte aligned, else the pool's
// "route_workspace" slot (allocated now, before anything is enqueued).
void* tq2_route_workspace(Context& ctx, const cuda_ternary::Tq2Args& g, std::size_t bytes, Tq2Route route,
                          const std::string& what);

}  // namespace llmm::detail
