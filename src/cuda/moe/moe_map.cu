// moe_map: the row map of the grouped route (a stable counting sort of the routed rows by
// expert), plus the zero rows of out-of-range ids.
//
// The routed rows are cut into chunks (moe_map_grid: one chunk up to 1024 rows, else chunks of
// ~1024 rows, at most 256 of them and 32768 / n_experts). Each sorting block of moe_map_sort (1024 threads, 32
// warps) sorts one chunk with per-warp counters, the warps at once: warp w owns the contiguous
// segment w of the chunk and a row of counters cnt[w][e] in shared memory (min(32, ceil(len / 32))
// warps: segments of at least 32 ids).
//   1. histogram: each warp reads its segment 32 ids a step (coalesced); lanes with the same
//      expert find each other with __match_any_sync and the lowest adds their number to the
//      warp's own counter (no other warp touches it: no atomics);
//   2. thread e walks expert e's column over the warps (exclusive prefix: where warp w's rows of
//      e go among the chunk's rows of e); with several chunks it adds expert e's rows in the
//      chunks before (moe_map_count's histograms, block_counts[chunk][e]) and sums e's total over
//      all chunks; the block scans the totals, so cnt[w][e] becomes the first position of warp
//      w's rows of expert e in `rows`; block 0 writes counts[e];
//   3. scatter: each warp walks its segment again, a lane's position being its warp's next
//      slot for its expert plus the number of lower lanes with the same id.
// Every in-range routed row lands exactly once, in increasing routed-row order per expert
// (chunks in order, segments in order, rows in order inside a segment), whatever the ids
// repeat; the same on every run (moe_map_count's shared-memory atomics only count). Shared
// memory: 32 x n_experts u32 (dynamic; 128 KiB at the 1024-expert limit). On sm_90 the kernels
// chain by programmatic dependent launch (moe_map_count -> moe_map_sort -> the route's next
// kernel): each starts early and waits for the one before where it reads its output. Blocks past the
// sorting ones zero the output rows of out-of-range ids (one warp per routed row, grid-stride).
// (Until 2026-11-30 one warp ranked every id serially: 300 us for the 32768 routed rows of
// Qwen3 at m = 4096; until 2026-12-03 one block sorted them all: 72 us, the __match_any_sync
// throughput of one SM; docs/performance.md.)
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/common/launch_pdl.cuh"
#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int kWarps = kMoeMapThreads / 32;

// Dynamic shared memory of the sorting block: the per-warp counters.
std::size_t map_smem_bytes(std::int64_t n_experts) { return static_cast<std::size_t>(kWarps) * n_experts * 4; }

// Chunk c's expert histogram: block_counts[c * n_experts + e]. Shared-memory atomics only count
// (the sum does not depend on their order); ids are read coalesced, 1024 a step.
__global__ void __launch_bounds__(kMoeMapThreads) moe_map_count_kernel(MoeArgs a, std::int64_t chunk) {
  extern __shared__ std::uint32_t s_hist[];  // [n_experts]
  const int tid = static_cast<int>(threadIdx.x);
  const int n_experts = static_cast<int>(a.n_experts);
  ptx::grid_launch_dependents();  // moe_map_sort waits for this grid's completion before reading block_counts
  for (int e = tid; e < n_experts; e += kMoeMapThreads) s_hist[e] = 0;
  __syncthreads();
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * chunk, hi = min(a.m * a.top_k, lo + chunk);
  for (std::int64_t r = lo + tid; r < hi; r += kMoeMapThreads)
    if (const std::uint32_t e = dev::expert_of(a, r); e != kNoExpert) atomicAdd(&s_hist[e], 1u);
  __syncthreads();
  for (int e = tid; e < n_experts; e += kMoeMapThreads)
    a.block_counts[static_cast<std::int64_t>(blockIdx.x) * n_experts + e] = s_hist[e];
}

// (kMoeMapThreads, 1): given only the block size, ptxas (13.0) kept it to 32 registers and spilled.
__global__ void __launch_bounds__(kMoeMapThreads, 1) moe_map_kernel(MoeArgs a, MoeMapGrid grid) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const std::int64_t routed = a.m * a.top_k;
  const std::int64_t block = blockIdx.x;
  ptx::grid_launch_dependents();  // the route's next kernel may start: it waits for this grid first
  // The engine's tile counter starts each route at zero (every kernel before this launch is done:
  // the map's first kernel is an ordinary launch).
  if (block == 0 && tid == 0 && a.tile_counter) *a.tile_counter = 0;

  if (block >= grid.blocks) {  // zero rows of out-of-range ids
    const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) - grid.blocks) * kWarps;
    for (std::int64_t r = (block - grid.blocks) * kWarps + warp; r < routed; r += warps) {
      if (dev::expert_of(a, r) != kNoExpert) continue;
      for (std::int64_t j = lane; j < a.n; j += 32) dev::store_out(a.out, a.out_dtype, r * a.n + j, 0.0f);
    }
    return;
  }

  extern __shared__ std::uint32_t s_cnt[];  // [kWarps][n_experts]
  __shared__ std::uint32_t s_warp_sum[kWarps];
  const int n_experts = static_cast<int>(a.n_experts);
  // This block's chunk [c0, c1), in segments of at least 32 ids: few routed rows use few warps
  // (and counters to clear and walk).
  const std::int64_t c0 = block * grid.chunk, c1 = min(routed, c0 + grid.chunk), len = c1 - c0;
  const int sorters = static_cast<int>(min(static_cast<std::int64_t>(kWarps), (len + 31) / 32));
  for (int i = tid; i < sorters * n_experts; i += kMoeMapThreads) s_cnt[i] = 0;
  __syncthreads();

  const std::int64_t seg = (len + sorters - 1) / sorters;
  const std::int64_t lo = warp < sorters ? min(c1, c0 + warp * seg) : c1, hi = min(c1, lo + seg);
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

  // Expert tid's rows in the other chunks (moe_map_count's histograms; this chunk's own is counted
  // above): in the chunks before this one, and in all others.
  std::uint32_t before = 0, others = 0;
  if (grid.blocks > 1) {
    ptx::grid_dependency_wait();  // moe_map_count is complete and its writes are visible
    if (tid < n_experts) {
      const std::uint32_t* bc = a.block_counts + tid;
      for (std::int64_t b = 0; b < block; ++b) before += bc[b * n_experts];
      others = before;
      for (std::int64_t b = block + 1; b < grid.blocks; ++b) others += bc[b * n_experts];
    }
  }

  // --- 2. Positions: thread e walks expert e's column, adds the other chunks' rows of e, then the
  // block scans the experts' totals.
  std::uint32_t count = 0;  // rows of expert tid in all chunks
  if (tid < n_experts) {
    for (int w = 0; w < sorters; ++w) {
      const std::uint32_t c = s_cnt[w * n_experts + tid];
      s_cnt[w * n_experts + tid] = count;  // rows of expert tid in the segments before w
      count += c;
    }
    count += others;
    if (block == 0) a.counts[tid] = count;
  }
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
    // rows of the experts before tid, then of expert tid in the chunks before this one
    const std::uint32_t first = incl - count + s_warp_sum[warp] + before;
    for (int w = 0; w < sorters; ++w) s_cnt[w * n_experts + tid] += first;
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
  const std::vector<std::string> names = moe_map_kernel_names(a);
  const std::string& name = names.back();
  host::check_common(a, name);
  host::require(a.n_experts >= 1 && a.n_experts <= moe_map_max_experts(), name,
                "n_experts outside 1..moe_map_max_experts()");
  host::require(a.counts != nullptr && a.rows != nullptr, name, "null grouped scratch");
  host::require(a.row_capacity >= a.m * a.top_k, name, "row_capacity < m * top_k");
  if (a.m == 0 || a.top_k == 0) return;
  const MoeMapGrid grid = moe_map_grid(a);
  host::require(grid.blocks == 1 || grid.blocks * a.n_experts <= a.block_count_words, name,
                "block_counts smaller than the sorting grid");
  if (grid.blocks > 1) {
    moe_map_count_kernel<<<static_cast<unsigned>(grid.blocks), kMoeMapThreads, a.n_experts * 4, s>>>(a, grid.chunk);
    host::check_launch(names.front());
  }
  const std::size_t smem = map_smem_bytes(a.n_experts);
  if (smem > 48 * 1024)  // a failure here fails the launch, which check_launch reports
    cudaFuncSetAttribute(moe_map_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const std::int64_t blocks = grid.blocks + moe_map_zero_blocks(a);
  if (grid.blocks > 1 && cuda_common::pdl_enabled())
    cuda_common::launch_pdl(moe_map_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMoeMapThreads), smem, s, a, grid);
  else
    moe_map_kernel<<<static_cast<unsigned>(blocks), kMoeMapThreads, smem, s>>>(a, grid);
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
