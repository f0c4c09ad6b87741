// moe_map: the row map of the grouped route (a stable counting sort of the routed rows by
// expert), plus the zero rows of out-of-range ids.
//
// Block 0 (1024 threads, 32 warps) sorts with per-warp counters, the warps at once: warp w owns
// the contiguous segment w of the routed rows and a row of counters cnt[w][e] in shared memory
// (min(32, ceil(m * top_k / 32)) warps: segments of at least 32 ids).
//   1. histogram: each warp reads its segment 32 ids a step (coalesced); lanes with the same
//      expert find each other with __match_any_sync and the lowest adds their number to the
//      warp's own counter (no other warp touches it: no atomics);
//   2. thread e walks expert e's column over the warps (exclusive prefix: where warp w's rows of
//      e go among e's rows) and the block scans the experts' totals: cnt[w][e] becomes the
//      first position of warp w's rows of expert e in `rows`; counts[e] is written;
//   3. scatter: each warp walks its segment again, a lane's position being its warp's next
//      slot for its expert plus the number of lower lanes with the same id.
// Every in-range routed row lands exactly once, in increasing routed-row order per expert
// (segments in order, rows in order inside a segment), whatever the ids repeat; the same on
// every run. The lists need m * top_k words in all (row_capacity). Shared memory: 32 x n_experts
// u32 (dynamic; 128 KiB at the 1024-expert limit). Blocks 1.. zero the output rows of
// out-of-range ids (one warp per routed row, grid-stride).
// (Until 2026-11-30 one warp ranked every id serially: 300 us for the 32768 routed rows of
// Qwen3 at m = 4096, 15-23% of the grouped route; docs/performance.md.)
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int kWarps = kMoeMapThreads / 32;

// Dynamic shared memory of the sorting block: the per-warp counters.
std::size_t map_smem_bytes(std::int64_t n_experts) { return static_cast<std::size_t>(kWarps) * n_experts * 4; }

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

  extern __shared__ std::uint32_t s_cnt[];  // [kWarps][n_experts]
  __shared__ std::uint32_t s_warp_sum[kWarps];
  const int n_experts = static_cast<int>(a.n_experts);
  // Segments of at least 32 ids: few routed rows use few warps (and counters to clear and walk).
  const int sorters = static_cast<int>(min(static_cast<std::int64_t>(kWarps), (routed + 31) / 32));
  for (int i = tid; i < sorters * n_experts; i += kMoeMapThreads) s_cnt[i] = 0;
  __syncthreads();

  const std::int64_t seg = (routed + sorters - 1) / sorters;
  const std::int64_t lo = warp < sorters ? min(routed, warp * seg) : routed, hi = min(routed, lo + seg);
  std::uint32_t* const mine = s_cnt + warp * n_experts;
  const std::uint32_t lower_lanes = (1u << lane) - 1u;
  // The warp's next id, loaded a step ahead so the global load overlaps the ranking.
  auto id_at = [&](std::int64_t r) { return r < hi ? dev::expert_of(a, r) : kNoExpert; };

  // --- 1. Per-warp histogram (warp-uniform loop bounds: __match_any_sync needs the whole warp).
  std::uint32_t x = id_at(lo + lane);
  for (std::int64_t base = lo; base < hi; base += 32) {
    const std::uint32_t next = id_at(base + 32 + lane);
    const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
    if (x != kNoExpert && (peers & lower_lanes) == 0) mine[x] += static_cast<std::uint32_t>(__popc(peers));
    __syncwarp();  // the counters written this step are seen by the lanes of the next
    x = next;
  }
  __syncthreads();

  // --- 2. Positions: thread e walks expert e's column, then the block scans the experts' totals.
  std::uint32_t count = 0;
  if (tid < n_experts)
    for (int w = 0; w < sorters; ++w) {
      const std::uint32_t c = s_cnt[w * n_experts + tid];
      s_cnt[w * n_experts + tid] = count;  // rows of expert tid in the segments before w
      count += c;
    }
  if (tid < n_experts) a.counts[tid] = count;
  auto warp_incl_scan = [&](std::uint32_t v) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const std::uint32_t u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += u;
    }
    return v;
  };
  const std::uint32_t incl = warp_incl_scan(count);
  if (lane == 31) s_warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const std::uint32_t total = s_warp_sum[lane];
    s_warp_sum[lane] = warp_incl_scan(total) - total;  // the experts of the warps before
  }
  __syncthreads();
  if (tid < n_experts) {
    const std::uint32_t before = incl - count + s_warp_sum[warp];  // rows of the experts before tid
    for (int w = 0; w < sorters; ++w) s_cnt[w * n_experts + tid] += before;
  }
  __syncthreads();

  // --- 3. Stable scatter, every warp on its own segment and counters.
  x = id_at(lo + lane);
  for (std::int64_t base = lo; base < hi; base += 32) {
    const std::uint32_t next = id_at(base + 32 + lane);
    const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
    const bool in_range = x != kNoExpert;
    const std::uint32_t rank = __popc(peers & lower_lanes);
    const std::uint32_t pos0 = in_range ? mine[x] : 0u;
    __syncwarp();  // every lane has read its position before the leaders advance them
    if (in_range) {
      const std::int64_t pos = static_cast<std::int64_t>(pos0) + rank;  // < routed <= row_capacity
      if (pos < a.row_capacity) a.rows[pos] = static_cast<std::uint32_t>(base + lane);
      if (rank == 0) mine[x] = pos0 + static_cast<std::uint32_t>(__popc(peers));
    }
    __syncwarp();
    x = next;
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
  const std::size_t smem = map_smem_bytes(a.n_experts);
  if (smem > 48 * 1024)  // a failure here fails the launch, which check_launch reports
    cudaFuncSetAttribute(moe_map_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const std::int64_t blocks = 1 + moe_map_zero_blocks(a);
  moe_map_kernel<<<static_cast<unsigned>(blocks), kMoeMapThreads, smem, s>>>(a);
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
