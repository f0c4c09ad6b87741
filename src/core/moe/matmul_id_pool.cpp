#include "core/moe/matmul_id_pool.hpp"

#include <algorithm>
#include <bit>
#include <memory>
#include <string>

#include "core/runtime.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

bool holds(const MatmulIdScratch& s, std::uint32_t experts, std::uint32_t tokens, std::uint32_t top_k,
           std::uint64_t staged_row_bytes) {
  if (s.max_experts() < experts || s.max_tokens() < tokens || s.max_top_k() < top_k) return false;
  if (staged_row_bytes == 0) return true;
  // The engine stages when the room holds every routed row at this row size.
  const std::uint64_t routed = static_cast<std::uint64_t>(tokens) * top_k;
  return s.staged() && s.staged_bytes() / staged_row_bytes >= routed;
}

// Tokens rounded up to a power of two (at least 16), so a growing m regrows O(log m) times.
std::uint32_t pow2_at_least(std::uint32_t v) {
  return v > (1u << 31) ? UINT32_MAX : std::bit_ceil(std::max(v, 16u));
}

}  // namespace

MatmulIdScratch& matmul_id_pool_scratch(Context& ctx, std::uint32_t n_experts, std::uint32_t tokens, std::uint32_t top_k,
                                        std::uint64_t staged_row_bytes, const char* op) {
  auto& slot = ctx.cache_slot("matmul_id.scratch." + std::to_string(reinterpret_cast<std::uintptr_t>(ctx.stream())));
  auto* have = static_cast<MatmulIdScratch*>(slot.get());
  if (have && holds(*have, n_experts, tokens, top_k, staged_row_bytes)) return *have;
  std::uint32_t experts = n_experts, rows = pow2_at_least(tokens), slots = top_k;
  std::uint64_t row_bytes = staged_row_bytes;
  if (have) {
    experts = std::max(experts, have->max_experts()), rows = std::max(rows, have->max_tokens());
    slots = std::max(slots, have->max_top_k()), row_bytes = std::max(row_bytes, have->staged_row_bytes());
  }
  // Memory cannot be had (nor freed) while the stream is captured into a graph: say so, rather
  // than let cudaMalloc invalidate the capture.
  if (ctx.is_cuda() && cuda_stream_capturing(ctx.arch().device_index, ctx.stream()))
    fail(ErrorCode::InvalidArgument, op, ": the grouped route needs the context's scratch ",
         have ? "grown" : "made", " (", n_experts, " experts, ", tokens, " tokens x top_k ", top_k,
         staged_row_bytes ? ", rows staged" : "", ") during CUDA-graph capture, where memory cannot be allocated: run ",
         "one call of this size or larger on this stream before capturing, or pass a MatmulIdScratch");
  slot.reset();  // the old one first: its memory goes back before the new one is asked for
  slot = std::make_shared<MatmulIdScratch>(ctx, experts, rows, slots, row_bytes);
  return *static_cast<MatmulIdScratch*>(slot.get());
}

}  // namespace llmm::detail
