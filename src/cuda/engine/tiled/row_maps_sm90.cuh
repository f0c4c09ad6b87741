// Row maps of the Hopper tiled engine: which tiles exist, which weights and activation rows a
// tile reads, and where its output rows go. The engine (tiled_sm90a.cuh) is the same for all.
//   DenseRows   c[b] = x[b] . w[b]^T: tiles of batch b, token rows by TMA, output rows in place.
//   ExpertRows  matmul_id's grouped route: tiles of expert e over its routed rows (the moe_map
//               counting sort: counts[e], rows[]), token rows gathered by cp.async, output rows
//               scattered to their routed row.
//   ExpertRowsStaged  the same over rows moe_stage_rows copied into expert order (TMA boxes).
//   ExpertRowsFused   the same, each CTA sorting the routed rows itself from the ids (no
//               moe_map before it: the route is one kernel), for up to kTiledMoeFusedMaxRows;
//               token rows by one TMA box a row (kRowTma), issued by the four producer warps.
// Both give every tile a feature block of the weights (kTiledBM rows of group `group`) loaded
// by TMA, and sweep kTiledFeatureGroup feature blocks together (dense) or one expert's feature
// blocks in a row (MoE) so that what neighbouring CTAs read is shared in L2.
#pragma once
#include <cstdint>

#include "core/engine/tiled_sm90_shape.hpp"
#include "cuda/engine/tiled/wgmma_sm90.cuh"
#include "cuda/moe/expert_id.cuh"

namespace llmm::engine {

struct TileCoord {
  int group = 0;        // batch entry or expert
  int feat0 = 0;        // first weight row (output column)
  int tok0 = 0;         // first token row: within the batch entry, or position in the expert's list
  int rows = 0;         // valid token rows of the tile (<= bn)
  int bn = 0;           // the tile's width: the kernel's BN, or (ExpertRows) a mid or narrow tile's
  std::int64_t row_base = 0;  // ExpertRows: where expert `group`'s rows start in the routed-row list
};

// ---------------------------------------------------------------------------------------------
struct DenseRowsParams {
  int m = 0, n = 0, k = 0, batch = 1;  // tokens, features, reduction, batch entries
  int tiles_tok = 0, tiles_feat = 0, total_tiles = 0;
  bool w_batched = false, x_batched = false;  // else batch coordinate 0 (a broadcast operand)
  void* out = nullptr;                     // c
  std::int64_t out_ld = 0, out_batch = 0;  // elements
  bool vec_ok = false;                 // 4-element vector stores of output rows are aligned
  bool vec8_ok = false;                // 16-byte stores (8 elements of a 16-bit output) are aligned
  // K in parts (tiled_sm90a.cuh): parts > 1 splits each tile's k-blocks into parts of
  // kb_per_part; partials: [tiles][parts][2][64 x BN] f32 slots, counters: [tiles][2], zero.
  int parts = 1, kb_per_part = 0;
  float* partials = nullptr;
  std::uint32_t* counters = nullptr;
};

template <int BN>
struct DenseRows {
  using Params = DenseRowsParams;
  static constexpr bool kGather = false;
  static constexpr bool kRowTma = false;   // the stage's token rows are one box (tma_tokens)
  static constexpr bool kScatter = false;  // output rows follow from the tile: nothing to prefetch
  static constexpr int kMid = 0;           // every tile is BN wide
  static constexpr bool kSplitK = true;    // Params::parts may split K
  static constexpr bool kSched = false;    // tiles in a fixed share a CTA

  const Params& p;
  __device__ DenseRows(const Params& params, std::uint8_t* /*extra*/) : p(params) {}
  __device__ void prologue(int /*tid*/, std::uint8_t* /*ring*/) {}
  __device__ int total_tiles() const { return p.total_tiles; }

  // Tile t: batch entry t / (tiles_tok * tiles_feat); inside it, groups of kTiledFeatureGroup
  // feature blocks (of BM rows), each swept over all token blocks (token block fastest within a
  // group).
  __device__ TileCoord tile(int t) const { return tile_of<kTiledBM>(t); }
  template <int BM>
  __device__ TileCoord tile_of(int t) const {
    const int per_batch = p.tiles_tok * p.tiles_feat;
    TileCoord c;
    c.group = t / per_batch;
    const int r = t - c.group * per_batch;
    const int fg = r / (kTiledFeatureGroup * p.tiles_tok);
    const int within = r - fg * kTiledFeatureGroup * p.tiles_tok;
    const int width = min(kTiledFeatureGroup, p.tiles_feat - fg * kTiledFeatureGroup);
    const int tok_tile = within / width;
    c.feat0 = (fg * kTiledFeatureGroup + (within - tok_tile * width)) * BM;
    c.tok0 = tok_tile * BN;
    c.rows = min(BN, p.m - c.tok0);
    c.bn = BN;
    return c;
  }
  __device__ int w_group(const TileCoord& c) const { return p.w_batched ? c.group : 0; }
  // Element offset of output row `tok` (< c.rows) of the tile, at column 0 (cw: the consumer).
  __device__ std::int64_t out_row(const TileCoord& c, int tok, int /*cw*/) const {
    return static_cast<std::int64_t>(c.group) * p.out_batch + static_cast<std::int64_t>(c.tok0 + tok) * p.out_ld;
  }

  // The token rows of the stage from K element k0: one TMA box [BN rows][128 bytes of k] of x
  // (zero past m and k).
  __device__ void tma_tokens(const void* tm_x, const void* /*tm_x_narrow*/, const TileCoord& c, int k0, void* dst,
                             std::uint64_t* bar) const {
    ptx::tensor_copy_3d_g2s(dst, tm_x, k0, c.tok0, p.x_batched ? c.group : 0, bar);
  }
};

// DenseRows in tall tiles: kTiledTallBM weight rows a tile (each consumer 128: two m64 wgmmas a
// k16 step on the same token columns; tiled_sm90_tall_shape), Params::tiles_feat counted in
// them. K whole (no parts).
template <int BN>
struct DenseRowsTall : DenseRows<BN> {
  static constexpr int kBM = kTiledTallBM;
  static constexpr bool kSplitK = false;
  using DenseRows<BN>::DenseRows;
  __device__ TileCoord tile(int t) const { return this->template tile_of<kTiledTallBM>(t); }
};

// Weight rows a tile of a row map (kBM), kTiledBM for those without the member.
template <class Map>
constexpr int tile_rows_v = [] {
  if constexpr (requires { Map::kBM; }) return Map::kBM;
  else return kTiledBM;
}();

// ---------------------------------------------------------------------------------------------
struct ExpertRowsParams {
  int n = 0, k = 0, top_k = 0, n_experts = 0;
  int tiles_feat = 0;
  const void* in = nullptr;                              // 16-bit tokens
  std::int64_t in_token_stride = 0, in_slot_stride = 0;  // elements
  const std::uint32_t* counts = nullptr;                 // [n_experts] routed rows per expert
  const std::uint32_t* rows = nullptr;                   // routed rows listed by expert
  void* out = nullptr;                                   // [m * top_k, n]
  bool vec_ok = false;                                   // 4-element vector stores of output rows are aligned
  bool vec8_ok = false;                                  // 16-byte stores (16-bit outputs) are aligned
  // The output of list position i goes to out row i instead of its routed row (MoeArgs::out_sorted;
  // moe_map's lists only: the plan never sets it for ExpertRowsFused).
  bool out_sorted = false;
  // ExpertRowsFused: the ids (u32 words, or i64) of the routed rows, and an output row's size in
  // 16-bit words (to zero the rows of out-of-range ids).
  const void* ids = nullptr;
  bool ids64 = false;
  int routed = 0;
  int out_row_halves = 0;  // the plan keeps it below 2^31 (tiled_sm90_moe_fused_refusal)
  // ExpertRowsFused's TMA boxes: the input as a 3D map [k][axis 1][axis 2], its slot and token
  // axes in stride order (fused_rows_map); an axis of stride 0 (a broadcast input) or extent 1 is
  // a map axis of extent 1, coordinate 0.
  bool row_tma_slots = false, row_tma_tokens = false;  // slot / token coordinates are used
  bool row_tma_slot_outer = false;  // the slot axis is the map's third (the larger stride), else its second
  // ExpertRowsStaged: tiles handed out in order from this zeroed word as CTAs free up (the last
  // claim of the launch zeroes it again), or null: a fixed share a CTA (tile blockIdx.x, then
  // every gridDim.x-th).
  std::uint32_t* tile_counter = nullptr;
};

// kOwnMap: ExpertRowsFused (below). Else the lists come from moe_map (p.counts, p.rows).
template <int BN, bool kOwnMap>
struct ExpertRowsT {
  using Params = ExpertRowsParams;
  // kOwnMap: token rows by one TMA box a row (tma_rows), not by the threads' cp.async gather.
  static constexpr bool kRowTma = kOwnMap;
  static constexpr bool kGather = !kRowTma;
  // Tile and row starts per expert (n_experts + 1 each), the source offsets of a tile's rows.
  // Its shared memory after the fixed part: tiled_sm90_moe_extra_bytes (tiled_sm90_shape.hpp), which
  // the host plan also uses: a tile's row sources, each consumer's copy of its output rows, the
  // tile and row starts per expert.
  // Output rows come from the routed-row list: each consumer thread loads its share when a tile
  // starts (the loads fly during the mainloop) and publishes them in shared memory for the
  // epilogue, instead of one dependent global load per stored row.
  static constexpr bool kScatter = true;
  static constexpr bool kSplitK = false;
  static constexpr bool kSched = false;  // ExpertRowsStaged: tiles handed out by Params::tile_counter
  static constexpr int kRowsPerThread = BN / 128;

  const Params& p;
  std::uint64_t* sched_full;   // [kTiledSchedDepth]: a claimed tile number is in its slot
  std::uint64_t* sched_empty;  // [kTiledSchedDepth]: the 8 consumer warps have read it
  int* sched_tile;             // [kTiledSchedDepth]
  std::int64_t* src;  // [BN]: element offsets of a tile's token rows in `in` (-1: none)
  std::uint32_t* out_rows;  // [2][BN]: each consumer's copy of the tile's routed rows
  int* tile_start;    // [n_experts + 1]: first token tile of each expert
  int* row_start;     // [n_experts + 1]: first position of each expert in `rows`

  __device__ ExpertRowsT(const Params& params, std::uint8_t* extra) : p(params) {
    sched_full = reinterpret_cast<std::uint64_t*>(extra);
    sched_empty = sched_full + kTiledSchedDepth;
    sched_tile = reinterpret_cast<int*>(sched_empty + kTiledSchedDepth);
    extra += kTiledSchedBytes;
    src = reinterpret_cast<std::int64_t*>(extra);
    out_rows = reinterpret_cast<std::uint32_t*>(extra + BN * 8);
    tile_start = reinterpret_cast<int*>(extra + BN * 8 + 2 * BN * 4);
    row_start = tile_start + p.n_experts + 1;
  }
  // kOwnMap: the CTA's sorted list, [routed] u16 after row_start (derived, not held: the
  // producer has 40 registers).
  __device__ std::uint16_t* own_rows() const { return reinterpret_cast<std::uint16_t*>(row_start + p.n_experts + 1); }
  // Position i of the routed-row list, expert by expert.
  __device__ std::uint32_t row_at(std::int64_t i) const {
    if constexpr (kOwnMap) return own_rows()[i];
    else return p.rows[i];
  }

  // Tile classes (tiled_sm90_expert_split): wide tiles of BN, then at most one mid tile of
  // kMid, then narrow tiles of kNarrow, decided on the device from the counts (a hot expert gets
  // wide tiles, a cold one narrow ones, in one launch: the host cannot see the routing).
  static constexpr int kNarrow = BN > kTiledNarrowBN ? kTiledNarrowBN : BN;
  static constexpr int kMid = tiled_sm90_mid_bn(BN);  // 128 at BN 256; 0: no mid class
  __device__ static void split(int count, int& wide, int& mid, int& narrow) {
    const ExpertTileSplit s = tiled_sm90_expert_split(count, BN);
    wide = s.wide, mid = s.mid, narrow = s.narrow;
  }

  __device__ void prologue(int tid, std::uint8_t* ring) {
    if constexpr (kOwnMap) own_map(tid, ring);
    else scan_experts(tid, p.counts);
  }

  // Every thread of the block: exclusive scans of counts[e] and of each expert's tiles, in chunks
  // of the block's width (a deterministic, fixed-order scan).
  __device__ void scan_experts(int tid, const std::uint32_t* counts) {
    __shared__ int warp_sums[2][kTiledThreads / 32];
    __shared__ int running[2];
    const int lane = tid & 31, warp = tid >> 5;
    if (tid == 0) running[0] = running[1] = 0;
    __syncthreads();
    for (int base = 0; base < p.n_experts; base += kTiledThreads) {
      const int e = base + tid;
      const int cnt = e < p.n_experts ? static_cast<int>(counts[e]) : 0;
      int wide, mid, narrow;
      split(cnt, wide, mid, narrow);
      const int tl = wide + mid + narrow;
      int ic = cnt, it = tl;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int uc = __shfl_up_sync(0xffffffffu, ic, o), ut = __shfl_up_sync(0xffffffffu, it, o);
        if (lane >= o) ic += uc, it += ut;
      }
      if (lane == 31) warp_sums[0][warp] = ic, warp_sums[1][warp] = it;
      __syncthreads();
      int oc = running[0], ot = running[1];
      for (int w = 0; w < warp; ++w) oc += warp_sums[0][w], ot += warp_sums[1][w];
      if (e < p.n_experts) row_start[e] = oc + ic - cnt, tile_start[e] = ot + it - tl;
      __syncthreads();
      if (tid == kTiledThreads - 1) running[0] = oc + ic, running[1] = ot + it;
      __syncthreads();
    }
    if (tid == 0) row_start[p.n_experts] = running[0], tile_start[p.n_experts] = running[1];
    __syncthreads();
  }
  // The expert of routed row r, or kNoExpert (cuda/moe/expert_id.cuh).
  __device__ std::uint32_t expert_of(int r) const { return cuda_moe::dev::expert_of(p, r); }

  // kOwnMap, every thread of the block: moe_map's stable counting sort of the p.routed rows
  // (src/cuda/moe/moe_map.cu has the argument), here in the CTA: warp w of the `sorters` ranks
  // the contiguous segment w, 32 ids a step, with its own counters cnt[w][e] (lanes with the same
  // id find each other with __match_any_sync); a column walk turns them into each warp's first
  // position per expert, the expert scan (scan_experts) adds the experts before; the scatter
  // writes each in-range row's number at its position. Expert e's rows land in increasing
  // routed-row order, the same list moe_map writes. The counters and totals borrow the ring,
  // which no copy has written yet. Then the CTA zeroes its share of the rows of out-of-range ids
  // (one warp a row, rows spread over the grid: every such row written once).
  __device__ void own_map(int tid, std::uint8_t* ring) {
    constexpr int kWarps = kTiledThreads / 32;
    const int lane = tid & 31, warp = tid >> 5, n_experts = p.n_experts, routed = p.routed;
    std::uint32_t* const cnt = reinterpret_cast<std::uint32_t*>(ring);  // [kWarps][n_experts]
    std::uint32_t* const totals = cnt + kWarps * n_experts;              // [n_experts]
    const int sorters = min(kWarps, (routed + 31) / 32);
    for (int i = tid; i < sorters * n_experts; i += kTiledThreads) cnt[i] = 0;
    __syncthreads();
    const int seg = (routed + sorters - 1) / sorters;
    const int lo = warp < sorters ? min(routed, warp * seg) : routed, hi = min(routed, lo + seg);
    std::uint32_t* const mine = cnt + warp * n_experts;
    const std::uint32_t lower_lanes = (1u << lane) - 1u;
    // 1. Per-warp histogram (warp-uniform bounds: __match_any_sync needs the whole warp).
    for (int base = lo; base < hi; base += 32) {
      const std::uint32_t x = base + lane < hi ? expert_of(base + lane) : cuda_moe::kNoExpert;
      const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
      if (x != cuda_moe::kNoExpert && (peers & lower_lanes) == 0) mine[x] += static_cast<std::uint32_t>(__popc(peers));
      __syncwarp();
    }
    __syncthreads();
    // 2. Expert e's column: cnt[w][e] = its rows in the segments before w; totals[e].
    for (int e = tid; e < n_experts; e += kTiledThreads) {
      std::uint32_t c = 0;
      for (int w = 0; w < sorters; ++w) {
        const std::uint32_t v = cnt[w * n_experts + e];
        cnt[w * n_experts + e] = c;
        c += v;
      }
      totals[e] = c;
    }
    __syncthreads();
    scan_experts(tid, totals);  // row_start, tile_start (ends with a block barrier)
    for (int e = tid; e < n_experts; e += kTiledThreads)
      for (int w = 0; w < sorters; ++w) cnt[w * n_experts + e] += static_cast<std::uint32_t>(row_start[e]);
    __syncthreads();
    // 3. Stable scatter, every warp on its own segment and counters.
    for (int base = lo; base < hi; base += 32) {
      const std::uint32_t x = base + lane < hi ? expert_of(base + lane) : cuda_moe::kNoExpert;
      const std::uint32_t peers = __match_any_sync(0xffffffffu, x);
      const std::uint32_t rank = __popc(peers & lower_lanes);
      const std::uint32_t pos0 = x != cuda_moe::kNoExpert ? mine[x] : 0u;
      __syncwarp();  // every lane has read its position before the leaders advance them
      if (x != cuda_moe::kNoExpert) {
        own_rows()[pos0 + rank] = static_cast<std::uint16_t>(base + lane);
        if (rank == 0) mine[x] = pos0 + static_cast<std::uint32_t>(__popc(peers));
      }
      __syncwarp();
    }
    // 4. Zero rows of out-of-range ids: this CTA's share.
    std::uint16_t* const out16 = static_cast<std::uint16_t*>(p.out);
    for (int r = static_cast<int>(blockIdx.x) * kWarps + warp; r < routed; r += static_cast<int>(gridDim.x) * kWarps) {
      if (expert_of(r) != cuda_moe::kNoExpert) continue;
      for (int j = lane; j < p.out_row_halves; j += 32) out16[static_cast<std::int64_t>(r) * p.out_row_halves + j] = 0;
    }
    // The ring's generic writes are ordered before the copies that will write it (async proxy).
    ptx::fence_proxy_async_smem();
    __syncthreads();
  }

  __device__ int total_tiles() const { return tile_start[p.n_experts] * p.tiles_feat; }

  // Tile hand-out (kSched maps with p.tile_counter). One thread, before the block's first barrier:
  __device__ void init_sched() const {
    for (int s = 0; s < kTiledSchedDepth; ++s) ptx::mbar_init(&sched_full[s], 1), ptx::mbar_init(&sched_empty[s], 8);
    ptx::mbar_init_fence();
  }
  // The producer thread claims the counter's next value one tile ahead (claim: its round trip
  // flies while the current tile's stages are issued) and publishes the value it claimed before
  // as its j-th unit (units once every tile is taken) in slot j % depth. Every CTA claims until
  // it draws a value >= units, once, so a launch makes exactly units + gridDim.x claims; the one
  // that drew the last value was the launch's last and zeroes the counter for the next launch.
  __device__ std::uint32_t claim() const { return atomicAdd(p.tile_counter, 1u); }
  __device__ int publish_unit(int j, std::uint32_t v, int units) const {
    const int s = j % kTiledSchedDepth;
    ptx::mbar_wait(&sched_empty[s], ((j / kTiledSchedDepth) & 1) ^ 1);
    if (v == static_cast<std::uint32_t>(units) + gridDim.x - 1) atomicExch(p.tile_counter, 0u);
    const int u = v < static_cast<std::uint32_t>(units) ? static_cast<int>(v) : units;
    sched_tile[s] = u;
    ptx::mbar_arrive(&sched_full[s]);  // release: the number is seen by whoever sees the phase
    return u;
  }
  // A consumer warp's j-th unit (every lane), its slot released once the whole warp has read it.
  __device__ int take_unit(int j, int lane) const {
    const int s = j % kTiledSchedDepth;
    ptx::mbar_wait(&sched_full[s], (j / kTiledSchedDepth) & 1);
    const int u = sched_tile[s];
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(&sched_empty[s]);
    return u;
  }

  // Tile t: expert token tile t / tiles_feat (experts in order), feature block t % tiles_feat.
  __device__ TileCoord tile(int t) const {
    const int et = t / p.tiles_feat;
    TileCoord c;
    int lo = 0, hi = p.n_experts - 1;  // the last expert whose first tile is <= et has tiles
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (tile_start[mid] <= et) lo = mid;
      else hi = mid - 1;
    }
    c.group = lo;
    c.feat0 = (t - et * p.tiles_feat) * kTiledBM;
    const int count = row_start[lo + 1] - row_start[lo], j = et - tile_start[lo];
    int wide, mid, narrow;
    split(count, wide, mid, narrow);
    c.bn = j < wide ? BN : j < wide + mid ? kMid : kNarrow;  // wide tiles first, then mid, then narrow
    c.tok0 = j < wide ? j * BN : j < wide + mid ? wide * BN : wide * BN + mid * kMid + (j - wide - mid) * kNarrow;
    c.row_base = row_start[lo];
    c.rows = min(c.bn, count - c.tok0);
    return c;
  }
  __device__ int w_group(const TileCoord& c) const { return c.group; }
  // Consumer thread ctid, when tile c starts: the out rows of its rows ctid + 128 i of the tile
  // (0 past the end): their routed rows, or with out_sorted their list positions.
  __device__ void prefetch_out_rows(const TileCoord& c, int ctid, std::uint32_t (&ids)[kRowsPerThread]) const {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int tok = ctid + 128 * i;
      const std::int64_t pos = c.row_base + c.tok0 + tok;
      ids[i] = tok >= c.rows ? 0u : p.out_sorted ? static_cast<std::uint32_t>(pos) : row_at(pos);
    }
  }
  // In the epilogue, between the consumer's own barriers: publish them, then read them back.
  __device__ void publish_out_rows(int cw, int ctid, const std::uint32_t (&ids)[kRowsPerThread]) const {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) out_rows[cw * BN + ctid + 128 * i] = ids[i];
  }
  __device__ std::int64_t out_row(const TileCoord& /*c*/, int tok, int cw) const {
    return static_cast<std::int64_t>(out_rows[cw * BN + tok]) * p.n;
  }

  // Producer warpgroup, at the start of each tile: the source offsets of its token rows.
  __device__ void load_sources(const TileCoord& c, int ptid) {
    ptx::named_barrier_sync(1, 128);  // the previous tile's offsets are no longer read
    for (int i = ptid; i < c.bn; i += 128) {
      std::int64_t off = -1;
      if (i < c.rows) {
        const std::uint32_t r = row_at(c.row_base + c.tok0 + i);
        const std::uint32_t t = r / static_cast<std::uint32_t>(p.top_k), s = r - t * static_cast<std::uint32_t>(p.top_k);
        off = static_cast<std::int64_t>(t) * p.in_token_stride + static_cast<std::int64_t>(s) * p.in_slot_stride;
      }
      src[i] = off;
    }
    ptx::named_barrier_sync(1, 128);
  }
  // kRowTma, lane `lane` of producer warp `pw` when tile c starts: the TMA coordinates (the map's
  // second and third axes: slot and token, in stride order) of its rows 4 lane + pw + 128 i, in
  // its own entries of src (only this thread reads them back, so no barrier: the previous tile's
  // reads of them are this thread's own, earlier).
  __device__ void row_coords(const TileCoord& c, int pw, int lane) const {
    int2* const xy = reinterpret_cast<int2*>(src);
    for (int i = 4 * lane + pw; i < c.rows; i += 128) {
      const std::uint32_t r = row_at(c.row_base + c.tok0 + i);
      const std::uint32_t t = r / static_cast<std::uint32_t>(p.top_k), s = r - t * static_cast<std::uint32_t>(p.top_k);
      const int sc = p.row_tma_slots ? static_cast<int>(s) : 0, tc = p.row_tma_tokens ? static_cast<int>(t) : 0;
      xy[i] = p.row_tma_slot_outer ? make_int2(tc, sc) : make_int2(sc, tc);
    }
  }
  // kRowTma: this thread's valid rows of the stage at K element k0, one box [1 row][64 k] each
  // into row i's 128 bytes (the 128-byte swizzle follows the shared address, so a row box at
  // offset 128 i lands as row i of a [BN][64] box would: llmm-probe-tma-rows, measured
  // 2026-12-03), K past k zero-filled by the copy. Rows past the tile's last are not written (as
  // in gather_tokens). row_tma_bytes: what they bring to `bar`, a stage.
  __device__ static int row_tma_bytes(const TileCoord& c, int pw) {
    return (c.rows > pw ? (c.rows - pw + 3) >> 2 : 0) * (kTiledBK * 2);  // rows pw, pw + 4, ...: one box each
  }
  __device__ void tma_rows(const void* tm_in, const TileCoord& c, int k0, std::uint8_t* dst, std::uint64_t* bar, int pw,
                           int lane) const {
    const int2* const xy = reinterpret_cast<const int2*>(src);
#pragma unroll 1
    for (int i = 4 * lane + pw; i < c.rows; i += 128) {
      const int2 q = xy[i];
      ptx::tensor_copy_3d_g2s(dst + i * 128, tm_in, k0, q.x, q.y, bar);
    }
  }

  // Producer warpgroup: this thread's share of the stage's token rows (the tile's valid rows), 16
  // bytes per cp.async, into the 128-byte-swizzled layout TMA would have written (unit u of row r
  // at u ^ (r % 8)); K past k (k % 8 == 0) is zero-filled. Rows past the tile's last are not
  // written: whatever the stage held there only reaches accumulator columns of no routed row
  // (each wgmma column is its own token's dot product), which are never stored. (Until
  // 2026-12-03 they were zero-filled: 512 cp.async a narrow stage for one row.)
  __device__ void gather_tokens(const TileCoord& c, int kb, std::uint8_t* dst, int ptid) const {
    const std::uint16_t* in = static_cast<const std::uint16_t*>(p.in);
#pragma unroll 1
    for (int idx = ptid; idx < c.rows * 8; idx += 128) {
      const int row = idx >> 3, unit = idx & 7;
      const std::int64_t off = src[row];
      const int kk = kb * kTiledBK + unit * 8;
      const bool ok = off >= 0 && kk < p.k;
      ptx::cp_async16(dst + row * 128 + ((unit ^ (row & 7)) << 4), ok ? in + off + kk : in, ok ? 16 : 0);
    }
  }
};

template <int BN>
struct ExpertRows : ExpertRowsT<BN, false> {
  using ExpertRowsT<BN, false>::ExpertRowsT;
};
template <int BN>
struct ExpertRowsFused : ExpertRowsT<BN, true> {
  using ExpertRowsT<BN, true>::ExpertRowsT;
};

// The same tiles over input rows already copied into expert order (moe_stage_rows: staged row i =
// the input row of rows[i]), so that a tile's tokens are BN consecutive staged rows loaded by one
// TMA box like dense. Rows past the expert's last belong to the next expert or lie past the
// routed rows (zero-filled); their accumulator columns are never stored.
template <int BN>
struct ExpertRowsStaged : ExpertRowsT<BN, false> {
  static constexpr bool kGather = false;
  static constexpr bool kSched = true;
  using ExpertRowsT<BN, false>::ExpertRowsT;
  // tm_x: boxes of BN rows; tm_x_narrow: boxes of kTiledNarrowBN rows, for narrow tiles, and two
  // of them for a mid tile (rows of 128 bytes, so the second box's 8 KB continue the first's
  // swizzle pattern: the 128-byte swizzle follows the shared-memory address bits).
  __device__ void tma_tokens(const void* tm_x, const void* tm_x_narrow, const TileCoord& c, int k0, void* dst,
                             std::uint64_t* bar) const {
    const int row0 = static_cast<int>(c.row_base) + c.tok0;
    if (c.bn == BN) {
      ptx::tensor_copy_3d_g2s(dst, tm_x, k0, row0, 0, bar);
      return;
    }
    ptx::tensor_copy_3d_g2s(dst, tm_x_narrow, k0, row0, 0, bar);
    if (c.bn > kTiledNarrowBN)
      ptx::tensor_copy_3d_g2s(static_cast<std::uint8_t*>(dst) + kTiledNarrowBN * 128, tm_x_narrow, k0, row0 + kTiledNarrowBN, 0, bar);
  }
};

}  // namespace llmm::engine
