// The expert a routed row's id names, on the device: one definition for the MoE kernels and the
// Hopper engine's fused row map (ExpertRowsFused), which read the ids themselves.
#pragma once
#include <cstdint>

#include "core/moe/moe_args.hpp"  // kNoExpert

namespace llmm::cuda_moe::dev {

// The expert of routed row r of a (MoeArgs, or the engine's ExpertRowsParams: any struct with
// ids, ids64 and n_experts), or kNoExpert when its id is outside [0, n_experts) (an i64 id is
// compared whole: 2^32 + 1 is out of range, not expert 1; a negative i32 reads as a huge u32).
template <class Args>
__device__ __forceinline__ std::uint32_t expert_of(const Args& a, std::int64_t r) {
  const std::uint64_t v = a.ids64 ? static_cast<std::uint64_t>(__ldg(static_cast<const long long*>(a.ids) + r))
                                  : __ldg(static_cast<const std::uint32_t*>(a.ids) + r);
  return v < static_cast<std::uint64_t>(a.n_experts) ? static_cast<std::uint32_t>(v) : kNoExpert;
}

}  // namespace llmm::cuda_moe::dev
