// The context's own scratch for grouped matmul_id calls made without one: grow-only, one per
// stream of the context (a Python context is rebound to each call's stream, and two streams must
// not share one scratch). Host code.
#pragma once
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/moe.hpp"

namespace llmm::detail {

// A scratch with room for n_experts experts, tokens x top_k routed rows and, when staged_row_bytes
// > 0, every routed row staged at that many bytes: the one this context keeps for its current
// stream, grown (tokens to a power of two, every capacity to the larger of old and new) when too
// small. Throws OutOfMemory when the memory cannot be had, InvalidArgument (naming op) when it
// must grow during CUDA-graph capture.
MatmulIdScratch& matmul_id_pool_scratch(Context& ctx, std::uint32_t n_experts, std::uint32_t tokens, std::uint32_t top_k,
                                        std::uint64_t staged_row_bytes, const char* op = "matmul_id");

}  // namespace llmm::detail
