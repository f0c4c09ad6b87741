// MatmulIdScratch: one allocation, counts then the routed-row lists (u32 words), then on CUDA the
// map's block histograms (kMapBlockCountWords), the engine's tile counter (one word) and the
// staged rows.

#include "core/host_alloc.hpp"
#include "core/moe/moe_kernels.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/moe.hpp"

namespace llmm {

MatmulIdScratch::MatmulIdScratch(const Context& ctx, std::uint32_t max_experts, std::uint32_t max_tokens,
                                 std::uint32_t max_top_k, std::uint64_t staged_row_bytes)
    : max_experts_(max_experts),
      max_tokens_(max_tokens),
      max_top_k_(max_top_k ? max_top_k : max_experts),
      device_(ctx.kind()),
      device_index_(ctx.arch().device_index) {
  static_assert(kMapBlockCountWords == cuda_moe::kMoeMapBlockCountWords, "the map's histogram room (moe_map_grid)");
  if (max_experts == 0 || max_tokens == 0)
    fail(ErrorCode::InvalidArgument, "MatmulIdScratch: capacities must be nonzero (experts ", max_experts, ", tokens ",
         max_tokens, ")");
  const std::uint64_t list_words = checked_add(
      max_experts, checked_mul(max_tokens, max_top_k_, "MatmulIdScratch routed rows"), "MatmulIdScratch size");
  // The CPU backend sorts on the host: no block histograms there.
  const std::uint64_t words =
      device_ == DeviceKind::CUDA ? checked_add(list_words, kMapBlockCountWords + 1, "MatmulIdScratch size") : list_words;
  const std::size_t bytes = to_usize(checked_mul(words, 4, "MatmulIdScratch bytes"), "MatmulIdScratch bytes");
  // The staged rows start 256-byte aligned after the lists (TMA wants 16; 256 keeps rows of
  // multiple-of-16 sizes aligned whatever the lists' length). The CPU backend never stages.
  std::size_t staged_off = 0;
  if (staged_row_bytes > 0 && device_ == DeviceKind::CUDA) {
    staged_off = to_usize(checked_add(bytes, 255, "MatmulIdScratch bytes") / 256 * 256, "MatmulIdScratch bytes");
    staged_bytes_ = to_usize(checked_mul(checked_mul(max_tokens, max_top_k_, "MatmulIdScratch staged rows"), staged_row_bytes,
                                         "MatmulIdScratch staged bytes"),
                             "MatmulIdScratch staged bytes");
    staged_row_bytes_ = staged_row_bytes;
  }
  if (device_ == DeviceKind::CUDA) {
    device_mem_ = DeviceBuffer(staged_bytes_ ? to_usize(checked_add(staged_off, staged_bytes_, "MatmulIdScratch bytes"),
                                                        "MatmulIdScratch bytes")
                                             : bytes,
                               device_index_);
    counts_ = static_cast<std::uint32_t*>(device_mem_.data());
    if (staged_bytes_) staged_ = static_cast<unsigned char*>(device_mem_.data()) + staged_off;
  } else {
    host_mem_ = detail::host_vector<std::uint32_t>(to_usize(words, "MatmulIdScratch"), "MatmulIdScratch");
    counts_ = host_mem_.data();
  }
  rows_ = counts_ + max_experts;  // one allocation: counts then lists (4-byte words)
  if (device_ == DeviceKind::CUDA) block_counts_ = counts_ + list_words;
}

}  // namespace llmm
