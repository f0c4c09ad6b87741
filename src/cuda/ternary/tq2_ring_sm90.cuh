// The sm_90 streaming engine's one kernel: a producer lane streams 128-row super-bands of TQ2
// codes and their transposed scales through a shared-memory ring (full/empty mbarriers, two
// tensor-map copies a stage); eight consumer warps decode every stage (band_stage,
// tq2_band_stage_sm90.cuh: at n8 tiles <= 4 a warp pair shares 32 rows, each warp half the
// groups; else a warp a 16-row band) against an activation image loaded once by a bulk copy,
// and end each item with the output or, when K is cut into parts, an f32 partial that the last
// part to arrive sums in part order (deterministic, independent of the grid).
//
// The row map is a policy: which weight rows an item streams, which image rows its lanes read
// and which output rows it writes. Instances: tq2_stream_v5 (one weight, the m <= 8 tokens of
// one image, V5Map) and tq2_moe_stream_sm90 (an expert stack, one image row per routed row,
// RoutedMap). A Map provides:
//   Map(const Args&, const Params&)          (Params has `RingParams ring`)
//   kOneSet                                  every item belongs to set 0
//   kWaitBeforeProducer                      the producer reads data of the kernels before (ids)
//   producer_policy()                        the L2 policy of the weight copies
//   bool weights(item, code_row, scale_col)  false: the item streams nothing and writes zeros
//   ImageSpan bind_block(i_begin, i_end)     the image bytes this block reads (all consumers)
//   kConvertsImage, convert_image<TIn>(dst, rows, warp, lane)
//                                            the consumer warps write the block's image rows into
//                                            shared memory themselves instead of loading a staged
//                                            image (no staging kernel before)
//   kMayReloadImage, sliced(), part_span(part)
//                                            sliced() true: the image is one slice a part of K;
//                                            the consumers load part_span(item.part) when the
//                                            item's part changes (after a consumer barrier) and
//                                            bind their lanes again (lanes() then shifts by g0)
//   lanes(item, lane, xoff, coff)            shared-memory offsets of this lane's record columns
//                                            and coefficients (kLanesPerItem: they change per item)
//   tokens(), n(), k(), out(), out_ld()      the item's columns are tokens 0 .. tokens() - 1
//   out_row(item, tok)                       the output (and partial) row of token tok
//   ieee<TIn>(item, tok, row)                the IEEE dot product (non-finite inputs, overflow)
// Item it is (set, super-band s, part): set = it / items_per_set (v5: one set; MoE: the routed
// row), then s-major within a set, or part-major (RingParams::part_major: a sliced image, so a
// block's contiguous items share a part and its slice).
#pragma once
#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/trace_sm90.cuh"
#include "cuda/ternary/tq2_band_stage_sm90.cuh"

namespace llmm::cuda_ternary {

struct RingParams {
  int stages = 0, parts = 1, part_groups = 0;
  std::int64_t items = 0, items_per_set = 0;  // items_per_set = super-bands x parts (of one set)
  std::int64_t partial_rows = 0;              // output rows of one part's partial
  bool part_major = false;                    // items (part, s) instead of (s, part)
  std::uint32_t* counters = nullptr;          // [sets][ceil(n / 16)] arrivals of parts (zeroed by the staging kernel)
  float* partials = nullptr;                  // [parts][partial_rows][n] (parts > 1)
  LLMM_TRACE(unsigned long long* trace = nullptr;)  // timeline probes (trace builds only, trace_sm90.cuh)
};

struct RingItem {
  std::int64_t set;
  int s, part, g0, g1;  // super-band, part, its groups [g0, g1)
};

struct ImageSpan {
  const unsigned char* src;  // the staged image's bytes (bulk copy), unless the map converts
  std::uint32_t bytes;
  int smem_off;  // from the 1024-aligned shared-memory base
  int rows;      // image rows (a map that converts them: its convert_image's count)
};

template <bool OneSet, bool MayPartMajor>
__device__ __forceinline__ RingItem ring_item(const RingParams& p, int groups, std::int64_t it) {
  RingItem r;
  r.set = OneSet ? 0 : it / p.items_per_set;
  const std::int64_t rem = it - r.set * p.items_per_set;
  if (MayPartMajor && p.part_major) {
    const std::int64_t supers = p.items_per_set / p.parts;
    r.part = static_cast<int>(rem / supers);
    r.s = static_cast<int>(rem - static_cast<std::int64_t>(r.part) * supers);
  } else {
    r.s = static_cast<int>(rem / p.parts);
    r.part = static_cast<int>(rem - static_cast<std::int64_t>(r.s) * p.parts);
  }
  r.g0 = r.part * p.part_groups;
  r.g1 = min(groups, r.g0 + p.part_groups);
  return r;
}

// The last part to arrive at a (set, band) sums every part's partial, its own included, in part
// order: t = ((0 + p0) + p1) + ... for each of the lane's 2 NT outputs. The loads of kBatch parts
// (all 2 NT outputs each) go out together, then are added in part order, so the warp waits
// ceil(parts / kBatch) L2 round trips (session 15: one output at a time, its loads behind the
// previous output's store, cost short many-part items most of their time). Session 16 run 2:
// batches of <= 16 floats a lane made the many-part rows at m <= 2 (NT 1) 3-7% faster and those at
// m = 8 (NT 4, batches of 2) 3-13% slower, NT 6 / 8 unchanged: so batches at NT <= 2 only.
template <class Map, int NT>
__device__ __forceinline__ void sum_parts(const Map& map, const RingParams& rp, const RingItem& item, std::int64_t row0,
                                          int t4, bool writer, float (&v)[NT][2]) {
  constexpr int kBatch = NT <= 1 ? 8 : NT <= 2 ? 4 : 1;
  const std::int64_t n = map.n(), step = rp.partial_rows * n;
  const float* src[NT];
  bool live[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int tok = 2 * nt + (t4 >> 1);
    const bool use = writer && tok < map.tokens();
    src[nt] = rp.partials + (use ? map.out_row(item, tok) : 0) * n + row0;
    live[nt][0] = use && row0 < n, live[nt][1] = use && row0 + 8 < n;
    v[nt][0] = v[nt][1] = 0.0f;
  }
  if constexpr (kBatch == 1) {  // run 1's loop as it was (its registers: NT 4 whole 107, not 116)
    for (int q = 0; q < rp.parts; ++q) {
      float x[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) x[nt][h] = live[nt][h] ? __ldcg(src[nt] + q * step + 8 * h) : 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) v[nt][0] += x[nt][0], v[nt][1] += x[nt][1];
    }
  } else {
    for (int q0 = 0; q0 < rp.parts; q0 += kBatch) {
      float x[kBatch][NT][2];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            x[b][nt][h] = live[nt][h] && q0 + b < rp.parts ? __ldcg(src[nt] + (q0 + b) * step + 8 * h) : 0.0f;
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (q0 + b < rp.parts)  // parts past the last are not added (+0 would turn a -0 sum into +0)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) v[nt][0] += x[b][nt][0], v[nt][1] += x[b][nt][1];
    }
  }
}

// Consumer warps in pairs (two 16-row tiles a warp, half the groups; tq2_band_stage_sm90.cuh) up
// to this many n8 tiles, i.e. on every narrow kernel (m <= 8), for row maps that ask for them
// (Map::kWarpPairs): a row's sum is then (groups 0, 1 of each stage) + (groups 2, 3) at every m
// there, so v5 stays batch-invariant across m = 1..8. The wide kernels (m = 9..16, invariant
// among themselves) keep a warp a 16-row band: their accumulators would double. The ternary
// experts' map keeps a warp a band everywhere: its items are short (down's 6 groups split 4 / 2
// in a pair) and each pays the pair's exchange; with pairs they ran 2-4% slower (session 18).
inline constexpr int kTq2RingPairMaxTiles = 4;
// Registers: the planners put two blocks on an SM only at n8 tiles <= 2 (or 3, whole image),
// where ptxas must stay at <= 96 (two 288-thread blocks; see tq2_stream_v5_config). The pairs'
// kernels at NT 2 came out at 98-99 without a cap (session 18) and 92-95 with it, no spills;
// wider ones may use what 288 threads can (224).
template <int NT>
inline constexpr int kTq2RingMaxRegs = NT <= 3 ? 96 : 224;

// Overlap: band_stage's straight-line variant (see tq2_band_stage_sm90.cuh for when it pays).
template <class Map, class TIn, class TOut, int NT, bool Overlap>
__global__ void __launch_bounds__(kTq2V5Threads, 1) __maxnreg__(kTq2RingMaxRegs<NT>)
    tq2_ring_sm90_kernel(const typename Map::Args a, const typename Map::Params p,
                         const __grid_constant__ CUtensorMap codes_map, const __grid_constant__ CUtensorMap scales_map) {
  constexpr int kConsumers = kTq2V5Consumers, kG = kTq2V5StageGroups;
  constexpr int kTiles = Map::kWarpPairs && NT <= kTq2RingPairMaxTiles ? 2 : 1;  // 16-row tiles a consumer warp decodes (BandLane)
  static_assert(kTq2V5Rows == 16 * kConsumers, "a band of 16 rows per consumer warp");
  static_assert(kTq2V5StageBytes % 1024 == 0, "stages stay 1024-byte aligned (swizzled copy targets)");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  const RingParams& rp = p.ring;
  Map map(a, p);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem);
  std::uint64_t* const empty = full + rp.stages;
  std::uint64_t* const x_full = empty + rp.stages;
  unsigned char* const ring = smem + 1024;
  const int groups = static_cast<int>(map.k() / kTq2Group);
  const std::int64_t i_begin = rp.items * blockIdx.x / gridDim.x, i_end = rp.items * (blockIdx.x + 1) / gridDim.x;

  if (threadIdx.x == 0) {
    for (int s = 0; s < rp.stages; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], kConsumers);
    }
    ptx::mbar_init(x_full, 1);
    ptx::mbar_init_fence();
  }
  __syncthreads();
  LLMM_TRACE(if (threadIdx.x == 0) {
    cuda_common::trace_ring(rp.trace, cuda_common::kEvEntry);
    cuda_common::trace_ring_value(rp.trace, cuda_common::kEvSm, cuda_common::sm_id());
    cuda_common::trace_ring_value(rp.trace, cuda_common::kEvItems, static_cast<unsigned long long>(i_end - i_begin));
  })
  ptx::grid_launch_dependents();
  // Weights are never written by kernels; a map whose producer reads ids waits for the kernels
  // ahead on the stream first, else streaming starts before they have finished.
  if constexpr (Map::kWaitBeforeProducer) ptx::grid_dependency_wait();

  if (warp == kConsumers) {
    if (lane != 0) return;
    const std::uint64_t policy = map.producer_policy();
    int slot = 0;
    std::uint32_t parity = 0;
    LLMM_TRACE(bool first = true;)
    for (std::int64_t it = i_begin; it < i_end; ++it) {
      const RingItem item = ring_item<Map::kOneSet, Map::kMayReloadImage>(rp, groups, it);
      int code_row, scale_col;
      if (!map.weights(item, code_row, scale_col)) continue;
      for (int gs = item.g0; gs < item.g1; gs += kG) {
        ptx::mbar_wait(&empty[slot], parity ^ 1u);
        unsigned char* const st = ring + slot * kTq2V5StageBytes;
        ptx::mbar_arrive_expect_tx(&full[slot], kTq2V5StageBytes);  // out-of-bounds parts of a box count too
        ptx::tensor_copy_2d_g2s(st, &codes_map, 32 * gs, code_row, &full[slot], policy);
        ptx::tensor_copy_2d_g2s(st + kTq2V5CodeBytes, &scales_map, scale_col, gs, &full[slot], policy);
        if (++slot == rp.stages) slot = 0, parity ^= 1u;
        LLMM_TRACE(if (first) cuda_common::trace_ring(rp.trace, cuda_common::kEvProducerFirst), first = false;)
      }
    }
    LLMM_TRACE(cuda_common::trace_ring(rp.trace, cuda_common::kEvProducerLast);)
    return;  // the consumers wait for every copy issued here before they finish
  }

  // Consumers. The activation and the output may belong to the kernels before this one.
  if constexpr (!Map::kWaitBeforeProducer) ptx::grid_dependency_wait();
  LLMM_TRACE(if (threadIdx.x == 0) cuda_common::trace_ring(rp.trace, cuda_common::kEvDepWait);)
  const ImageSpan span = map.bind_block(i_begin, i_end);
  bool reloads = false;  // a sliced image: loaded below, a part at a time
  if constexpr (Map::kMayReloadImage) reloads = map.sliced();
  if constexpr (Map::kConvertsImage) {
    // The consumer warps write the block's image rows themselves (the first stages' weights are
    // in flight meanwhile), then meet at a named barrier: the producer warp is not in it.
    map.template convert_image<TIn>(smem + span.smem_off, span.rows, warp, lane);
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumers) : "memory");
  } else if (!reloads) {
    if (threadIdx.x == 0) {
      ptx::mbar_arrive_expect_tx(x_full, span.bytes);
      ptx::bulk_copy_g2s(smem + span.smem_off, span.src, span.bytes, x_full, ptx::l2_evict_last_policy());
    }
    ptx::mbar_wait(x_full, 0);
  }
  LLMM_TRACE(if (threadIdx.x == 0 && !reloads) cuda_common::trace_ring(rp.trace, cuda_common::kEvImage);)

  const int t4 = lane & 3;
  const BandLane<kTiles> bl(warp, lane);
  const bool writer = (t4 & 1) == 0;  // after the pair sum below, even lanes hold a token's value
  TOut* const out = static_cast<TOut*>(map.out());
  const unsigned char* xb[NT];  // this lane's record columns (group 0) and coefficients
  const float2* cf;
  // Maps give shared-memory offsets and the pointers are formed here, from smem: formed inside a
  // map (pointer outputs), the decode's record addresses became 64-bit generic arithmetic in the
  // PTX (no immediate offsets) and v5 at m = 1 ran 4.5% slower (measured, session 11).
  const auto bind_lanes = [&](const RingItem& item) {
    int xoff[NT], coff;
    map.lanes(item, lane, xoff, coff);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xb[nt] = smem + xoff[nt];
    cf = reinterpret_cast<const float2*>(smem + coff);
  };
  if constexpr (!Map::kLanesPerItem) bind_lanes(RingItem{});
  int slot = 0;
  std::uint32_t parity = 0;
  [[maybe_unused]] int loaded_part = -1;     // the part whose slice is in shared memory (sliced image)
  [[maybe_unused]] std::uint32_t loads = 0;  // slices loaded: x_full's phase
  LLMM_TRACE(bool first_full = true; unsigned full_wait_ns = 0, stages_seen = 0;)
  for (std::int64_t it = i_begin; it < i_end; ++it) {
    const RingItem item = ring_item<Map::kOneSet, Map::kMayReloadImage>(rp, groups, it);
    if constexpr (Map::kMayReloadImage) {
      // Every consumer warp walks the same items, so all of them meet here on a part change.
      if (reloads && item.part != loaded_part) {
        if (loaded_part >= 0) asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumers) : "memory");  // the old slice is read
        if (threadIdx.x == 0) {
          const ImageSpan ps = map.part_span(item.part);
          ptx::mbar_arrive_expect_tx(x_full, ps.bytes);
          ptx::bulk_copy_g2s(smem + ps.smem_off, ps.src, ps.bytes, x_full, ptx::l2_evict_last_policy());
        }
        ptx::mbar_wait(x_full, loads & 1u);
        LLMM_TRACE(if (threadIdx.x == 0 && loads == 0) cuda_common::trace_ring(rp.trace, cuda_common::kEvImage);)
        ++loads, loaded_part = item.part;
        bind_lanes(item);  // the slice's group 0 is the part's first group
      }
    }
    int code_row, scale_col;
    if (!map.weights(item, code_row, scale_col)) {  // streams nothing: zeros (every part writes the same)
      const int band = kConsumers * item.s + warp;
      const std::int64_t row0 = 16 * static_cast<std::int64_t>(band) + bl.row;  // C rows g, g + 8: band_row
      if (16 * static_cast<std::int64_t>(band) >= map.n()) continue;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int tok = 2 * nt + (t4 >> 1);
        if (!writer || tok >= map.tokens()) continue;
        const std::int64_t orow = map.out_row(item, tok);
        for (int h = 0; h < 2; ++h)
          if (row0 + 8 * h < map.n()) out[orow * map.out_ld() + row0 + 8 * h] = dev::from_f32<TOut>(0.0f);
      }
      continue;
    }
    if constexpr (Map::kLanesPerItem) bind_lanes(item);
    float total[kTiles][NT][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) total[t][nt][0] = total[t][nt][1] = total[t][nt][2] = total[t][nt][3] = 0.0f;
    int last_slot = 0;  // pairs: the item's last stage is released after the pair's exchange, which uses it
    for (int gs = item.g0; gs < item.g1; gs += kG) {
      LLMM_TRACE(const unsigned wait0 = cuda_common::global_ns_lo();)
      ptx::mbar_wait(&full[slot], parity);
      LLMM_TRACE(if (first_full && threadIdx.x == 0) cuda_common::trace_ring(rp.trace, cuda_common::kEvFirstFull);
                 if (!first_full) full_wait_ns += cuda_common::global_ns_lo() - wait0;  // the first wait is the image's tail
                 first_full = false, ++stages_seen;)
      band_stage<NT, Overlap, kTiles>(ring + slot * kTq2V5StageBytes, gs, item.g1, bl, xb, cf, total);
      __syncwarp();
      if (lane == 0 && (kTiles == 1 || gs + kG < item.g1)) ptx::mbar_arrive(&empty[slot]);
      last_slot = slot;
      if (++slot == rp.stages) slot = 0, parity ^= 1u;
    }
    LLMM_TRACE(if (threadIdx.x == 0) cuda_common::trace_ring(rp.trace, cuda_common::kEvLastStage);)
    const std::int64_t n = map.n();
    const int band = kConsumers * item.s + warp;
    // C fragment of tile t: total[t][nt][0, 1] at mma row g (weight row 16 band + band_row(g)
    // for the warp's own tile), columns 8 nt + 2 t4 (+ 1), [2, 3] at mma row g + 8 (weight row
    // + 8). A column is digit c % 4 of token c / 4: lanes t4 and t4 ^ 1 hold the four digits of
    // token 2 nt + t4 / 2; the even lane sums (d0 + d1) + (d2 + d3).
    float vt[kTiles][NT][2];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float lo = total[t][nt][0] + total[t][nt][1], hi = total[t][nt][2] + total[t][nt][3];
        vt[t][nt][0] = lo + __shfl_xor_sync(0xffffffffu, lo, 1);
        vt[t][nt][1] = hi + __shfl_xor_sync(0xffffffffu, hi, 1);
      }
    float v[NT][2];
    if constexpr (kTiles == 2) {
      // The pair's halves: warp w holds its groups' sums of both tiles; it keeps tile w % 2 (rows
      // 16 w ..) and hands the other to warp w ^ 1. Every row is (groups 0, 1 of each stage) +
      // (groups 2, 3): the same sum whichever warp adds it, at every m. The exchange goes through
      // the item's last stage, in the codes of the pair's own 32 rows (4 KB that no other warp
      // reads; [warp % 2][nt][row half][16 even lanes] f32, <= 1 KB), so it costs no shared
      // memory: the first barrier says both warps have read those codes, and each warp releases
      // the stage to the producer only after reading its partner's values, behind a proxy fence
      // (the copies that refill the stage write after these generic stores and loads).
      static_assert(2 * NT * 2 * 16 * 4 <= 32 * 128, "the pair's exchange fits in its rows' codes");
      float* const xch = reinterpret_cast<float*>(ring + last_slot * kTq2V5StageBytes + (warp >> 1) * 32 * 128);
      const int h = warp & 1, bar = 2 + (warp >> 1);
      if (item.g0 >= item.g1) __trap();  // every item has groups (ring_item), so a stage to exchange in
      ptx::named_barrier_sync(bar, 64);
      if (writer)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) xch[((h * NT + nt) * 2 + c) * 16 + (lane >> 1)] = h ? vt[0][nt][c] : vt[1][nt][c];
      ptx::named_barrier_sync(bar, 64);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c)  // selects, not vt[h]: a runtime index would put vt in local memory
          v[nt][c] = (h ? vt[1][nt][c] : vt[0][nt][c]) + xch[(((h ^ 1) * NT + nt) * 2 + c) * 16 + (lane >> 1)];
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&empty[last_slot]);
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) v[nt][0] = vt[0][nt][0], v[nt][1] = vt[0][nt][1];
    }
    if (16 * static_cast<std::int64_t>(band) >= n) continue;  // warp-uniform: rows past n (after the pair's exchange)
    const std::int64_t row0 = 16 * static_cast<std::int64_t>(band) + bl.row;  // C rows g, g + 8: band_row
    if (rp.parts > 1) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int tok = 2 * nt + (t4 >> 1);
        if (!writer || tok >= map.tokens()) continue;
        float* const dst = rp.partials + (item.part * rp.partial_rows + map.out_row(item, tok)) * n;
        if (row0 < n) dst[row0] = v[nt][0];
        if (row0 + 8 < n) dst[row0 + 8] = v[nt][1];
      }
      __threadfence();
      __syncwarp();
      std::uint32_t arrived = 0;
      if (lane == 0) arrived = atomicAdd(&rp.counters[item.set * ((n + 15) / 16) + band], 1u);
      if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<std::uint32_t>(rp.parts - 1)) continue;
      __threadfence();  // every other part's partial is visible now
      sum_parts<Map, NT>(map, rp, item, row0, t4, writer, v);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = 2 * nt + (t4 >> 1);
      if (!writer || tok >= map.tokens()) continue;
      const std::int64_t orow = map.out_row(item, tok);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = row0 + 8 * h;
        if (row >= n) continue;
        float t = v[nt][h];
        if (t != t) t = map.template ieee<TIn>(item, tok, row);  // a non-finite input (marked) or an overflow
        out[orow * map.out_ld() + row] = dev::from_f32<TOut>(t);
      }
    }
  }
  LLMM_TRACE(if (lane == 0 && warp == 0) {
    cuda_common::trace_ring(rp.trace, cuda_common::kEvEnd);
    cuda_common::trace_ring_value(rp.trace, cuda_common::kEvFullWaitNs, full_wait_ns);
    cuda_common::trace_ring_value(rp.trace, cuda_common::kEvStages, stages_seen);
  } else if (lane == 0 && warp == kConsumers - 1) cuda_common::trace_ring(rp.trace, cuda_common::kEvLastWarpEnd);)
}

}  // namespace llmm::cuda_ternary
