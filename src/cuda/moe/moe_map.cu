// moe_map: the row map of the grouped route (a stable counting sort of the routed rows by
// expert), plus the zero rows of out-of-range ids.
//
// Block 0 (1024 threads):
//   1. histogram: every warp reads 32 ids at a time (coalesced); lanes with the same expert
//      find each other with __match_any_sync and the lowest one adds their number to the
//      expert's count in shared memory (integer adds: the same counts on every run);
//   2. exclusive scan of the counts -> each expert's first position in `rows`;
//   3. scatter in increasing routed-row order: ids are staged into shared memory a chunk of
//      4096 at a time (double-buffered: the other 31 warps stage chunk c+1 while warp 0 ranks
//      chunk c), and warp 0 ranks 32 ids per step: a lane's position is its expert's next free
//      slot plus the number of lower lanes with the same id, and the lowest such lane advances
//      the slot. No atomics in the positions, so `rows` is the same on every run.
// Every in-range routed row lands exactly once whatever the ids repeat, so the lists need
// m * top_k words in all (row_capacity). Blocks 1.. zero the output rows of out-of-range ids
// (one warp per routed row, grid-stride).
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int kWarps = kMoeMapThreads / 32;

__global__ void __launch_bounds__(kMoeMapThreads) moe_map_kernel(MoeArgs a) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const std::int64_t routed = a.m * a.top_k;

  if (blockIdx.x > 0) {  // zero rows of out-of-range ids
    const std::int64_t warps = static_cast<std::int64_t>(gridDim.x - 1) * kWarps;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x - 1) * kWarps + warp; r < routed; r += warps) {
      if (dev::expert_of(a, r) != kNoExpert) continue;
      for (std::int64_t j = lane; j < a.n; j += 32) dev::store_out(a.out, a.out_dtype, r * a.n + j, 0.0f);
    }
    return;
  }

  __shared__ std::uint32_t s_next[kMoeMapMaxExperts];  // counts, then each expert's next position
  __shared__ std::uint32_t s_warp_sum[kWarps];
  __shared__ std::uint32_t s_ids[2][kMoeMapChunk];
  const int n_experts = static_cast<int>(a.n_experts);
  for (int e = tid; e < n_experts; e += kMoeMapThreads) s_next[e] = 0;
  __syncthreads();

  // --- 1. Histogram (warp-uniform loop bounds: __match_any_sync needs the whole warp).
  const std::uint32_t lower_lanes = (1u << lane) - 1u;
  for (std::int64_t base = static_cast<std::int64_t>(warp) * 32; base < routed; base += kMoeMapThreads) {
    const std::int64_t r = base + lane;
    const std::uint32_t x = r < routed ? dev::expert_of(a, r) : kNoExpert;
    const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
    if (x != kNoExpert && (peers & lower_lanes) == 0) atomicAdd(&s_next[x], static_cast<std::uint32_t>(__popc(peers)));
  }
  __syncthreads();

  // --- 2. Counts out, exclusive scan in place (one expert per thread; n_experts <= 1024): a
  // warp scan, then warp 0 scans the warps' totals.
  auto warp_incl_scan = [&](std::uint32_t v) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const std::uint32_t u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += u;
    }
    return v;
  };
  const std::uint32_t count = tid < n_experts ? s_next[tid] : 0u;
  if (tid < n_experts) a.counts[tid] = count;
  const std::uint32_t incl = warp_incl_scan(count);
  const int used_warps = (n_experts + 31) / 32;
  if (used_warps > 1) {
    if (lane == 31) s_warp_sum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const std::uint32_t total = lane < used_warps ? s_warp_sum[lane] : 0u;
      s_warp_sum[lane] = warp_incl_scan(total) - total;  // exclusive: the warps before
    }
    __syncthreads();
  }
  if (tid < n_experts) s_next[tid] = incl - count + (used_warps > 1 ? s_warp_sum[warp] : 0u);  // own expert only

  // --- 3. Stable scatter.
  auto stage = [&](int buf, std::int64_t c, int first, int stride) {  // chunk c -> s_ids[buf]
    const std::int64_t c0 = c * kMoeMapChunk;
    for (int i = first; i < kMoeMapChunk; i += stride) s_ids[buf][i] = c0 + i < routed ? dev::expert_of(a, c0 + i) : kNoExpert;
  };
  stage(0, 0, tid, kMoeMapThreads);
  __syncthreads();
  const std::int64_t chunks = (routed + kMoeMapChunk - 1) / kMoeMapChunk;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const int buf = static_cast<int>(c & 1);
    if (warp == 0) {
      const std::int64_t c0 = c * kMoeMapChunk;
      const int len = static_cast<int>(min(static_cast<std::int64_t>(kMoeMapChunk), routed - c0));
      for (int j = 0; j < len; j += 32) {  // warp-uniform
        const int i = j + lane;
        const std::uint32_t x = i < len ? s_ids[buf][i] : kNoExpert;
        const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
        const bool in_range = x != kNoExpert;
        const std::uint32_t rank = __popc(peers & lower_lanes);
        const std::uint32_t base = in_range ? s_next[x] : 0u;
        __syncwarp();  // every lane has read its position before the leaders advance them
        if (in_range) {
          const std::int64_t pos = static_cast<std::int64_t>(base) + rank;  // < routed <= row_capacity
          if (pos < a.row_capacity) a.rows[pos] = static_cast<std::uint32_t>(c0 + i);
          if (rank == 0) s_next[x] = base + static_cast<std::uint32_t>(__popc(peers));
        }
        __syncwarp();
      }
    } else if (c + 1 < chunks) {
      stage(buf ^ 1, c + 1, tid - 32, kMoeMapThreads - 32);
    }
    __syncthreads();  // chunk c+1 staged; chunk c's buffer free for chunk c+2
  }
}

}  // namespace

void launch_moe_map(const MoeArgs& a, StreamHandle s) {
  const std::string name = moe_map_kernel_name(a);
  host::check_common(a, name);
  host::require(a.n_experts >= 1 && a.n_experts <= moe_map_max_experts(), name,
                "n_experts outside 1..moe_map_max_experts()");
  host::require(a.counts != nullptr && a.rows != nullptr, name, "null grouped scratch");
  host::require(a.row_capacity >= a.m * a.top_k, name, "row_capacity < m * top_k");
  if (a.m == 0 || a.top_k == 0) return;
  const std::int64_t blocks = 1 + moe_map_zero_blocks(a);
  moe_map_kernel<<<static_cast<unsigned>(blocks), kMoeMapThreads, 0, s>>>(a);
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
