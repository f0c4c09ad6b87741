// moe_map_distinct: the row map of the grouped route, plus the zero rows of out-of-range ids.
//
// Block 0 (1024 threads) builds counts[e] and rows[e * row_capacity + i] in increasing routed
// row order: ids are staged into shared memory a chunk of 4096 at a time (double-buffered: the
// other 31 warps stage chunk c+1 while warp 0 ranks chunk c), and warp 0 ranks 32 ids per step
// with __match_any_sync: a lane's position is its expert's running count (shared memory) plus
// the number of lower lanes with the same id, and the lowest such lane advances the count. No
// atomics, so the result is the same on every run. Blocks 1.. zero the output rows of ids >=
// n_experts (one warp per routed row, grid-stride). Positions at or past row_capacity are not
// stored (cannot happen for ids distinct per token and row_capacity >= m); counts[e] is the
// true count and the grouped kernel clamps it to row_capacity.
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

__global__ void __launch_bounds__(kMoeMapThreads) moe_map_kernel(MoeArgs a) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const std::int64_t routed = a.m * a.top_k;

  if (blockIdx.x > 0) {  // zero rows of out-of-range ids
    const std::int64_t warps = static_cast<std::int64_t>(gridDim.x - 1) * (kMoeMapThreads / 32);
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x - 1) * (kMoeMapThreads / 32) + warp;
         r < routed; r += warps) {
      if (static_cast<std::int64_t>(__ldg(a.ids + r)) < a.n_experts) continue;
      for (std::int64_t j = lane; j < a.n; j += 32) dev::store_out(a.out, a.out_dtype, r * a.n + j, 0.0f);
    }
    return;
  }

  __shared__ std::uint32_t s_count[kMoeMapMaxExperts];
  __shared__ std::uint32_t s_ids[2][kMoeMapChunk];
  const std::uint32_t n_experts = static_cast<std::uint32_t>(a.n_experts);
  for (int e = tid; e < static_cast<int>(n_experts); e += kMoeMapThreads) s_count[e] = 0;
  // Threads first, first + stride, ... copy chunk c into s_ids[buf] (kNoRow past the end).
  auto stage = [&](int buf, std::int64_t c, int first, int stride) {
    const std::int64_t c0 = c * kMoeMapChunk;
    for (int i = first; i < kMoeMapChunk; i += stride) {
      s_ids[buf][i] = c0 + i < routed ? __ldg(a.ids + c0 + i) : dev::kNoRow;
    }
  };
  stage(0, 0, tid, kMoeMapThreads);
  __syncthreads();

  const std::int64_t chunks = (routed + kMoeMapChunk - 1) / kMoeMapChunk;
  const std::uint32_t lower_lanes = (1u << lane) - 1u;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const int buf = static_cast<int>(c & 1);
    if (warp == 0) {
      const std::int64_t c0 = c * kMoeMapChunk;
      const int len = static_cast<int>(min(static_cast<std::int64_t>(kMoeMapChunk), routed - c0));
      for (int j = 0; j < len; j += 32) {  // warp-uniform
        const int i = j + lane;
        const std::uint32_t x = i < len ? s_ids[buf][i] : dev::kNoRow;
        const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
        const bool in_range = x < n_experts;
        const std::uint32_t rank = __popc(peers & lower_lanes);
        const std::uint32_t base = in_range ? s_count[x] : 0u;
        __syncwarp();  // every lane has read its count before the leaders advance them
        if (in_range) {
          const std::int64_t pos = static_cast<std::int64_t>(base) + rank;
          if (pos < a.row_capacity) {
            a.rows[static_cast<std::int64_t>(x) * a.row_capacity + pos] = static_cast<std::uint32_t>(c0 + i);
          }
          if (rank == 0) s_count[x] = base + static_cast<std::uint32_t>(__popc(peers));
        }
        __syncwarp();
      }
    } else if (c + 1 < chunks) {
      stage(buf ^ 1, c + 1, tid - 32, kMoeMapThreads - 32);
    }
    __syncthreads();  // chunk c+1 staged; chunk c's buffer free for chunk c+2
  }
  for (int e = tid; e < static_cast<int>(n_experts); e += kMoeMapThreads) a.counts[e] = s_count[e];
}

}  // namespace

void launch_moe_map(const MoeArgs& a, StreamHandle s) {
  const std::string name = moe_map_kernel_name(a);
  host::check_common(a, name);
  host::require(a.n_experts >= 1 && a.n_experts <= moe_map_max_experts(), name,
                "n_experts outside 1..moe_map_max_experts()");
  host::require(a.counts != nullptr && a.rows != nullptr, name, "null grouped scratch");
  host::require(a.row_capacity >= 1, name, "row_capacity < 1");
  host::require(a.row_capacity <= std::int64_t{0x7fffffffffffffff} / a.n_experts, name,
                "n_experts * row_capacity overflows");
  if (a.m == 0 || a.top_k == 0) return;
  const std::int64_t blocks = 1 + moe_map_zero_blocks(a);
  moe_map_kernel<<<static_cast<unsigned>(blocks), kMoeMapThreads, 0, s>>>(a);
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
