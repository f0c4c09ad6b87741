// The Hopper tiled engine: one warp-specialized, persistent wgmma kernel under every tiled
// family; a RowMap (row_maps_sm90.cuh) says which tiles exist and where rows come from and go.
//
//   warpgroup 0   producer (40 registers): per stage, the weights (a Weights policy,
//                 weights_sm90.cuh: a 16-bit box [128 rows][64 k] by TMA, or ternary codes and
//                 scales by TMA, which the consumers decode into register fragments, or FP8
//                 codes by TMA, which each consumer converts into a 16-bit box of its own
//                 before its wgmmas, or with FP8 tokens (W8A8) a 128-k block of codes a
//                 stage beside the tokens' codes and scales: weights_fp8_sm90.cuh) and the
//                 token rows [BN][64 k] by TMA (dense, staged MoE rows), one TMA box a row
//                 (the fused MoE map) or a cp.async gather (MoE after moe_map), into a ring
//                 of stages with full/empty mbarriers;
//   warpgroups 1-2 consumers (232 registers): 64 weight rows each x BN tokens, four
//                 m64nBNk16 wgmmas a stage with one stage in flight (ternary: one k16 slice a
//                 group, three in flight while the next is decoded; tall dense tiles,
//                 DenseRowsTall: 128 weight rows each, eight wgmmas a stage in two halves),
//                 f32 accumulators; then the epilogue (a tall tile's halves in turn):
//                 16-bit outputs converted in registers and written by stmatrix, 64
//                 tokens x 64 features at a time, then 16-byte stores of whole output rows; f32
//                 outputs (and K parts' slots) staged 32 tokens x 64 features of f32 at a time
//                 and stored 4 columns a thread (vectorized where aligned).
// Row maps may mix tile widths (ExpertRows: BN, a mid 128 and a narrow 64): a narrower tile runs
// its own wgmma width on the first columns of the accumulator.
// f32 as 3xTF32 (Tf32x3Weights): the TMA thread's token rows land on a `raw` barrier instead;
// producer warps 1-3 split them in place (rounded rows and remainders) and arrive on `full`; the
// consumers split their weight fragments in registers and issue a stage's twelve m64nBNk8 tf32
// wgmmas (small terms first) into a zeroed stage sum, which is added to the accumulator once the
// stage is done (the tensor cores truncate as they accumulate: summed straight into a long
// accumulator that costs ~100x f32's error; per stage it stays below f32 rounding).
// Work units go in the row map's order, statically (u = blockIdx.x, += gridDim.x) or, for a
// kSched row map given a counter (staged MoE rows), claimed by the producer as CTAs free up and
// passed to the consumers: the producer and the consumers walk the same sequence; the ring
// carries over unit boundaries, so the next unit's loads overlap this unit's epilogue. A unit
// is a tile, or with K in parts (a row map with kSplitK and parts > 1: few tiles for the SMs)
// one K part of a tile: each part's consumers write their f32 accumulators to a workspace slot and count
// themselves in (an integer atomic; the counters are zero at launch); the last to arrive sums
// the parts' slots in part order and stores the tile. Every output element is written once, by
// one thread, from f32 accumulations over K in a fixed order: results are reproducible run to
// run and do not depend on the grid or the other rows of the batch (the parts depend on n and k
// only: the plan's rule). (Stream-K, whole tiles then an even share of the last tiles'
// k-blocks, was a row map here in sessions 24-25: it lost to the tile widths and tall tiles on
// every shape and was retired; docs/performance.md, "Stream-K on the engine".)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/engine/tiled_sm90_shape.hpp"
#include "cuda/engine/tiled/row_maps_sm90.cuh"
#include "cuda/engine/tiled/weights_fp8_sm90.cuh"
#include "cuda/engine/tiled/weights_sm90.cuh"
#include "cuda/engine/tiled/wgmma_sm90.cuh"

namespace llmm::engine {

template <class OutT>
__device__ __forceinline__ void store4(OutT* dst, float4 v, int valid, bool vec) {
  if (vec && valid >= 4) {
    if constexpr (std::is_same_v<OutT, float>) {
      *reinterpret_cast<float4*>(dst) = v;
    } else if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
      uint2 u;
      u.x = *reinterpret_cast<const std::uint32_t*>(&lo);
      u.y = *reinterpret_cast<const std::uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(dst) = u;
    } else {
      const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
      uint2 u;
      u.x = *reinterpret_cast<const std::uint32_t*>(&lo);
      u.y = *reinterpret_cast<const std::uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(dst) = u;
    }
    return;
  }
  const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (e < valid) {
      if constexpr (std::is_same_v<OutT, float>) dst[e] = f[e];
      else if constexpr (std::is_same_v<OutT, __nv_bfloat16>) dst[e] = __float2bfloat16_rn(f[e]);
      else dst[e] = __float2half_rn(f[e]);
    }
  }
}

// Eight 16-bit outputs (packed in v, element 0 lowest) to dst: one 16-byte store where aligned,
// two 8-byte ones where only those are, else one element at a time (valid < 8: a row's end).
template <class OutT>
__device__ __forceinline__ void store8(OutT* dst, uint4 v, int valid, bool vec8, bool vec4) {
  static_assert(sizeof(OutT) == 2, "16-bit outputs only");
  if (valid >= 8 && vec8) {
    *reinterpret_cast<uint4*>(dst) = v;
    return;
  }
  if (valid >= 8 && vec4) {
    reinterpret_cast<uint2*>(dst)[0] = make_uint2(v.x, v.y);
    reinterpret_cast<uint2*>(dst)[1] = make_uint2(v.z, v.w);
    return;
  }
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (e < valid) reinterpret_cast<std::uint16_t*>(dst)[e] = static_cast<std::uint16_t>(w[e >> 1] >> (16 * (e & 1)));
}

template <int BN, bool BF16, class OutT, template <int> class RowMapT, class Weights = TmaWeights>
__global__ void __launch_bounds__(kTiledThreads, 1)
    tiled_sm90_kernel(const __grid_constant__ CUtensorMap tm_w, const __grid_constant__ CUtensorMap tm_x,
                      const __grid_constant__ CUtensorMap tm_x_narrow, const typename RowMapT<BN>::Params p,
                      const __grid_constant__ typename Weights::Params wp) {
  using RowMap = RowMapT<BN>;
  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256, "a wgmma width the epilogue takes: 64..256, 16 tokens a stmatrix");
  // Producer warps that write stage memory themselves (a gather) arrive on the full barrier once
  // per warp, after every lane has fenced its writes (one arrival a thread made 128 atomics on
  // one barrier word a stage), beside the TMA thread's expect_tx arrival.
  constexpr bool kThreadsWrite = RowMap::kGather;
  constexpr bool kSplit = Weights::kSplit;
  static_assert(!kSplit || (!RowMap::kGather && !RowMap::kScatter), "the 3xTF32 instance runs dense rows only");
  // FP8 weights (Fp8Weights): a stage brings the codes; each consumer converts its 64 rows into
  // one of its two 16-bit boxes (after the stages) before its wgmmas of the stage.
  constexpr bool kConvert = Weights::kConvert;
  static_assert(!kConvert || (!RowMap::kGather && !RowMap::kRowTma && !RowMap::kSplitK && !kSplit),
                "FP8 weights are converted beside TMA token rows of whole K only");
  // FP8 weights times FP8 tokens (Fp8MmaWeights): a stage is one 128-k block of codes and the
  // tokens' scales; the consumers promote each block's e4m3 wgmma sum into f32.
  constexpr bool kFp8Mma = Weights::kFp8Mma;
  static_assert(!kFp8Mma || (!RowMap::kGather && !RowMap::kRowTma && !kSplit && !kConvert && BN <= 128),
                "W8A8 runs token rows by TMA, at most 128 wide (its block sum beside the accumulator)");
  static_assert(!RowMap::kSched || (!RowMap::kGather && !RowMap::kRowTma && !kSplit && !RowMap::kSplitK),
                "tiles are handed out to the one-thread producer only (no gather, row boxes, splitters or K parts)");
  // With the split, the splitter warps (producer warps 1..kSplitWarps) arrive on full beside the
  // TMA thread.
  constexpr int kSplitWarps = [] {
    if constexpr (kSplit) return Weights::kSplitWarps;
    else return 0;
  }();
  static_assert(kSplitWarps <= 3, "the splitters are producer warps beside the TMA thread's warp 0");
  // One TMA box a token row (RowMap::kRowTma): each producer warp arrives once, expecting its own
  // rows' bytes (warp 0 also the weight box's).
  constexpr std::uint32_t kFullArrivals = kThreadsWrite ? 1 + 4 : RowMap::kRowTma ? 4 : 1 + kSplitWarps;
  // Registers per thread after the split: the producer issues copies and needs few. The block
  // launches with kLaunchRegs a thread, and the consumers' setmaxnreg.inc can only take what the
  // producer's .dec gave back: 128 (L - P) >= 256 (C - L), else the consumers wait forever
  // (seen: a hang with P 96, C 208).
  constexpr int kLaunchRegs = 65536 / kTiledThreads / 8 * 8;  // 168
  constexpr int kProducerRegs = 40;
  constexpr int kConsumerRegs = 232;
  static_assert(128 * (kLaunchRegs - kProducerRegs) >= 256 * (kConsumerRegs - kLaunchRegs),
                "the consumers would wait for registers the producer never releases");
  // Tall tiles (DenseRowsTall): each consumer owns kHalves x 64 weight rows, two m64 wgmmas a
  // k16 step into two accumulator halves; plain dense rows and 16-bit weights only.
  constexpr int kHalves = tile_rows_v<RowMap> / kTiledBM;
  static_assert(kHalves == 1 || (kHalves == 2 && !kSplit && !Weights::kDecode && !kConvert && !kFp8Mma && !RowMap::kGather && !RowMap::kScatter &&
                                 !RowMap::kRowTma && !RowMap::kSplitK && RowMap::kMid == 0 && BN <= 160),
                "tall tiles run 16-bit dense rows of whole K, at most 160 tokens wide (bn accumulators a thread)");
  constexpr TiledSm90Shape S = Weights::kDecode ? tiled_sm90_tq2_shape(BN)
                               : kConvert       ? tiled_sm90_fp8_shape(BN)
                               : kFp8Mma        ? tiled_sm90_w8a8_shape(BN)
                               : kSplit         ? tiled_sm90_f32_shape(BN)
                               : kHalves == 2   ? tiled_sm90_tall_shape(BN)
                                                : tiled_sm90_shape(BN);
  constexpr int kStages = S.stages;
  constexpr int kBK = kSplit ? kTiledF32BK : kFp8Mma ? kTiledW8a8BK : kTiledBK;  // K elements a stage (one 128-byte row)
  extern __shared__ std::uint8_t smem_raw[];
  std::uint8_t* const smem = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  std::uint8_t* const ring = smem;
  float* const epi = reinterpret_cast<float*>(smem + S.ring_bytes());
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem + S.ring_bytes() + S.epi_bytes());
  std::uint64_t* const empty = full + kStages;
  std::uint64_t* const raw = empty + kStages;  // kSplit: the stage's token rows landed, not yet split
  std::uint8_t* const extra = smem + S.ring_bytes() + S.epi_bytes() + S.barrier_bytes();

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid >> 7;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], kFullArrivals);
      ptx::mbar_init(&empty[s], 8);  // lane 0 of each consumer warp
      if constexpr (kSplit) ptx::mbar_init(&raw[s], 1);
    }
    ptx::mbar_init_fence();
    if constexpr (!Weights::kDecode && !kConvert && !kFp8Mma) ptx::prefetch_tensor_map(&tm_w);
    if constexpr (kConvert) ptx::prefetch_tensor_map(&wp.codes);
    if constexpr (kFp8Mma) ptx::prefetch_tensor_map(&wp.codes), ptx::prefetch_tensor_map(&wp.x_scales);
    if constexpr (Weights::kDecode) ptx::prefetch_tensor_map(&wp.codes), ptx::prefetch_tensor_map(&wp.scales);
    if constexpr (!RowMap::kGather) ptx::prefetch_tensor_map(&tm_x);
  }
  // Launched with programmatic dependent launch after another kernel of the route (the MoE
  // instances, after moe_map / moe_stage_rows): everything above overlaps that kernel's tail; the
  // counts, row lists and staged rows are read only past this wait. A no-op otherwise.
  ptx::grid_dependency_wait();
  RowMap map(p, extra);
  // Tile hand-out (kSched row maps given a counter): the producer claims each next unit one tile
  // ahead of its loads and passes it to the consumers, so CTAs that drew short tiles take more,
  // and the tiles running at once stay the ones next to each other in the map's order (an
  // expert's tiles, which read the same weights); else a fixed share a CTA.
  bool sched = false;
  if constexpr (RowMap::kSched) {
    sched = p.tile_counter != nullptr;
    if (sched && tid == 0) map.init_sched();
  }
  map.prologue(tid, ring);  // ExpertRowsFused sorts the routed rows here, in ring memory no copy has written yet
  __syncthreads();
  const int total = map.total_tiles();
  const int kblocks = (p.k + kBK - 1) / kBK;
  // K parts: unit u is part u % parts of tile u / parts, k-blocks [kb0, kb1) (none empty: the
  // plan's kb_per_part leaves every part at least one).
  int parts = 1, kb_per_part = kblocks;
  if constexpr (RowMap::kSplitK)
    if (p.parts > 1) parts = p.parts, kb_per_part = p.kb_per_part;
  const int units = total * parts;
  // This CTA's units: u = blockIdx.x; u < units; u += gridDim.x, or the claimed ones (kSched).
  auto unit_k = [&](int u, int& t, int& part, int& kb0, int& kb1) {
    t = u / parts;
    part = u - t * parts;
    kb0 = part * kb_per_part;
    kb1 = min(kblocks, kb0 + kb_per_part);
  };

  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    ptx::setmaxnreg_dec<kProducerRegs>();
    const int ptid = tid;
    if constexpr (RowMap::kRowTma) {
      // One TMA box a token row (ExpertRowsFused), issued by all four producer warps: one warp's
      // lanes issue their boxes one after another (~52 cycles a box), four warps overlap (~14 a
      // box: llmm-probe-tma-rows, 2026-12-03), so row i goes to warp i % 4. Each warp's lane 0
      // arrives on `full` expecting that warp's rows' bytes (warp 0: and the weight box), before
      // any of them is issued; every copy lands on `full` by its bytes, so no thread waits on its
      // own copies and the ring runs as deep as with staged rows.
      static_assert(!Weights::kDecode && !kSplit && !RowMap::kSplitK, "the row boxes feed 16-bit weights only");
      const int pw = ptid >> 5, lane = ptid & 31;
      int it = 0;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const TileCoord c = map.tile(t);
        map.row_coords(c, pw, lane);
        const int row_bytes = RowMap::row_tma_bytes(c, pw);  // this warp's rows, a stage
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % kStages;
          ptx::mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          std::uint8_t* const st = ring + s * S.stage_bytes();
          if (lane == 0) {
            ptx::mbar_arrive_expect_tx(&full[s], (pw == 0 ? S.a_bytes() : 0) + row_bytes);
            if (pw == 0) ptx::tensor_copy_3d_g2s(st, &tm_w, kb * kBK, c.feat0, map.w_group(c), &full[s]);
          }
          __syncwarp();  // this warp's bytes are expected before its row boxes can land
          map.tma_rows(&tm_x, c, kb * kBK, st + S.a_bytes(), &full[s], pw, lane);
        }
      }
      return;
    } else if constexpr (!kThreadsWrite) {
      if constexpr (kSplit) {
        if (ptid >= 32) {
          // Splitter warps: each stage's token rows once they land, then arrive on full (one
          // arrival a warp, after every lane has fenced its writes into the async proxy).
          const int t = ptid - 32;
          const std::uint32_t ring_addr = ptx::smem_addr(ring);
          int it = 0;
          for (int u = blockIdx.x; u < units; u += gridDim.x) {
            int tt, part, kb0, kb1;
            unit_k(u, tt, part, kb0, kb1);
            for (int kb = kb0; kb < kb1; ++kb, ++it) {
              const int s = it % kStages;
              ptx::mbar_wait(&raw[s], (it / kStages) & 1);
              const std::uint32_t hi = ring_addr + s * S.stage_bytes() + S.a_bytes();
              Weights::split_tokens(hi, hi + S.b_part_bytes(), BN * 8, t);
              ptx::fence_proxy_async_smem();
              __syncwarp();
              if ((ptid & 31) == 0) ptx::mbar_arrive(&full[s]);
            }
          }
          return;
        }
      }
      if (ptid != 0) return;
      int it = 0;
      std::uint32_t next = 0;  // the claim for the next tile (kSched)
      if constexpr (RowMap::kSched)
        if (sched) next = map.claim();
      for (int j = 0, u = blockIdx.x;; ++j, u += gridDim.x) {
        if constexpr (RowMap::kSched)
          if (sched) {
            const std::uint32_t v = next;
            if (v < static_cast<std::uint32_t>(units)) next = map.claim();
            u = map.publish_unit(j, v, units);
          }
        if (u >= units) break;
        int t, part, kb0, kb1;
        unit_k(u, t, part, kb0, kb1);
        const TileCoord c = map.tile(t);
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = it % kStages;
          ptx::mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          std::uint8_t* const st = ring + s * S.stage_bytes();
          if constexpr (Weights::kDecode) {
            ptx::mbar_arrive_expect_tx(&full[s], kTiledCodeStageBytes + c.bn * kTiledBK * 2);
            Weights::copy(wp, st, map.w_group(c), c.feat0, kb, &full[s]);
            map.tma_tokens(&tm_x, &tm_x_narrow, c, kb * kBK, st + S.a_bytes(), &full[s]);
          } else if constexpr (kConvert) {  // the codes, which the consumers convert
            ptx::mbar_arrive_expect_tx(&full[s], kTiledFp8CodeBytes + c.bn * kTiledBK * 2);
            Weights::copy(wp, st, map.w_group(c), c.feat0, kb, &full[s]);
            map.tma_tokens(&tm_x, &tm_x_narrow, c, kb * kBK, st + S.a_bytes(), &full[s]);
          } else if constexpr (kFp8Mma) {  // codes, token codes, and the tokens' scales of this k-block
            ptx::mbar_arrive_expect_tx(&full[s], S.a_bytes() + c.bn * kBK + (BN + Weights::kScaleBoxExtra) * 4);
            Weights::copy(wp, st, map.w_group(c), c.feat0, kb, &full[s]);
            map.tma_tokens(&tm_x, &tm_x_narrow, c, kb * kBK, st + S.a_bytes(), &full[s]);
            Weights::copy_x_scales(wp, st + S.a_bytes() + S.b_bytes(), static_cast<int>(c.row_base) + c.tok0, kb, &full[s]);
          } else if constexpr (kSplit) {  // the tokens go to the splitters first
            ptx::mbar_arrive_expect_tx(&full[s], S.a_bytes());
            ptx::tensor_copy_3d_g2s(st, &tm_w, kb * kBK, c.feat0, map.w_group(c), &full[s]);
            ptx::mbar_arrive_expect_tx(&raw[s], S.b_part_bytes());
            map.tma_tokens(&tm_x, &tm_x_narrow, c, kb * kBK, st + S.a_bytes(), &raw[s]);
          } else {
            ptx::mbar_arrive_expect_tx(&full[s], S.a_bytes() + c.bn * kTiledBK * 2);
            ptx::tensor_copy_3d_g2s(st, &tm_w, kb * kBK, c.feat0, map.w_group(c), &full[s]);
            map.tma_tokens(&tm_x, &tm_x_narrow, c, kb * kBK, st + S.a_bytes(), &full[s]);
          }
        }
      }
    } else {
      // Gathered token rows are used once kLag later iterations have been issued (cp.async groups
      // land in order: wait_group<kLag> leaves only those in flight): then each thread fences its
      // writes into the async proxy that wgmma reads, and each warp arrives. kLag = stages - 2 keeps as many copies in
      // flight as the ring allows without a deadlock: the consumers, waiting on iteration i, have
      // released i - 2, which is what the producer needs to issue i + kLag.
      // (Tried 2026-12-03: warp 0 on the weight copies alone, warps 1..3 gathering: 10-25% slower
      // on every case, m 16 to 4096: the gather is bound by its threads' cp.async issue, not by
      // the weight copies waiting behind them; docs/performance.md.)
      constexpr int kLag = kStages - 2;
      static_assert(!Weights::kDecode, "no instance decodes weights beside a gather yet");
      static_assert(!RowMap::kSplitK, "no gathering row map splits K");
      int it = 0, landed = 0;
      auto land = [&](int i) {
        ptx::fence_proxy_async_smem();
        __syncwarp();
        if ((ptid & 31) == 0) ptx::mbar_arrive(&full[i % kStages]);
      };
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const TileCoord c = map.tile(t);
        map.load_sources(c, ptid);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % kStages;
          ptx::mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          std::uint8_t* const st = ring + s * S.stage_bytes();
          if (ptid == 0) {
            ptx::mbar_arrive_expect_tx(&full[s], S.a_bytes());
            ptx::tensor_copy_3d_g2s(st, &tm_w, kb * kTiledBK, c.feat0, map.w_group(c), &full[s]);
          }
          map.gather_tokens(c, kb, st + S.a_bytes(), ptid);
          ptx::cp_async_commit();
          if (it + 1 - landed > kLag) {
            ptx::cp_async_wait<kLag>();
            land(landed++);
          }
        }
      }
      ptx::cp_async_wait<0>();
      while (landed < it) land(landed++);
    }
    return;
  }

  // -------------------------------------------------------------------- consumers
  ptx::setmaxnreg_inc<kConsumerRegs>();
  using Mma = ptx::Wgmma<BN, BF16>;
  constexpr int kNarrow = BN > kTiledNarrowBN ? kTiledNarrowBN : BN;
  using MmaNarrow = ptx::Wgmma<kNarrow, BF16>;
  // A row map's mid tiles (ExpertRows at BN 256: 128 columns; 0: none), the first kMid columns of acc.
  constexpr int kMid = RowMap::kMid;
  const int cw = wg - 1;           // 64-row half of the weight tile
  const int ctid = tid - 128 * wg;  // 0..127 within the warpgroup
  const int warp = ctid >> 5, lane = ctid & 31;
  float* const stage_out = epi + cw * kTiledEpiTokens * kTiledEpiStride;
  float acc[kHalves * BN / 2];  // tall tiles: half h's at h BN / 2
#pragma unroll
  for (int i = 0; i < kHalves * BN / 2; ++i) acc[i] = 0.0f;
  float alpha = 1.0f;  // Tq2Weights: the activation's power-of-two scale, undone at the store
  bool alpha_rows = false;  // or one scale per token row (alpha_of below)
  if constexpr (Weights::kDecode) {
    alpha_rows = wp.alpha != nullptr && wp.alpha_per_row;
    if (wp.alpha && !alpha_rows) alpha = *wp.alpha;
  }
  // Token row tok of tile c is row row_base + tok0 + tok of the (dense or staged) activation:
  // row_base is 0 for dense rows, the expert's first staged row for ExpertRows.
  auto alpha_of = [&](const TileCoord& c, int tok) {
    if constexpr (Weights::kDecode)
      if (alpha_rows) return __ldg(wp.alpha + c.row_base + c.tok0 + tok);
    return alpha;
  };

  int it = 0;
  for (int j = 0, u = blockIdx.x;; ++j, u += gridDim.x) {
    if constexpr (RowMap::kSched)
      if (sched) u = map.take_unit(j, lane);
    if (u >= units) break;
    int t, part, kb0, kb1;
    unit_k(u, t, part, kb0, kb1);
    const TileCoord c = map.tile(t);
    std::uint32_t out_ids[RowMap::kScatter ? BN / 128 : 1];
    if constexpr (RowMap::kScatter) map.prefetch_out_rows(c, ctid, out_ids);
    if constexpr (Weights::kDecode) {
      // Register-A wgmmas, one group a k16 slice, three left in flight while the next slice is
      // decoded: slice kk's registers were last read by the group four commits back, which
      // wait<3> retires; at kk = 3 the previous stage's four groups are done and it is released.
      using MmaRs = ptx::WgmmaRs<BN>;
      using MmaRsNarrow = ptx::WgmmaRs<kNarrow>;
      const typename Weights::Lane lc = Weights::lane_constants(lane);
      const int r = 64 * cw + 16 * warp + (lane >> 2);
      const int valid_rows = wp.n - c.feat0;  // rows of this group left from the tile's first
      const std::uint32_t ring_addr = ptx::smem_addr(ring);
      int s = it % kStages, prev = (it + kStages - 1) % kStages;  // stepped, not divided, below
      std::uint32_t phase = (it / kStages) & 1;
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        ptx::mbar_wait(&full[s], phase);
        const std::uint32_t st = ring_addr + s * S.stage_bytes();
        const std::uint64_t db = ptx::wgmma_desc_sw128_addr(st + S.a_bytes());
        const typename Weights::Stage x = Weights::read(st, r, valid_rows);
        std::uint32_t a[4][4];
#pragma unroll
        for (int kk = 0; kk < kTiledBK / 16; ++kk) {
          ptx::wgmma_wait<3>();
          if (kk == 3 && kb > kb0 && lane == 0) ptx::mbar_arrive(&empty[prev]);
          Weights::fragment(x, kk, lc, a[kk]);
          if (c.bn == BN) {
            ptx::wgmma_fence();
            MmaRs::mma(acc, a[kk], db + 2 * kk, kb > kb0 || kk > 0);
            ptx::wgmma_commit();
          } else if (kMid != 0 && c.bn == kMid) {
            if constexpr (kMid != 0) {
              using MmaRsMid = ptx::WgmmaRs<kMid>;
              float(&mid)[kMid / 2] = *reinterpret_cast<float(*)[kMid / 2]>(acc);
              ptx::wgmma_fence();
              MmaRsMid::mma(mid, a[kk], db + 2 * kk, kb > kb0 || kk > 0);
              ptx::wgmma_commit();
            }
          } else if constexpr (kNarrow != BN) {
            float(&narrow)[kNarrow / 2] = *reinterpret_cast<float(*)[kNarrow / 2]>(acc);
            ptx::wgmma_fence();
            MmaRsNarrow::mma(narrow, a[kk], db + 2 * kk, kb > kb0 || kk > 0);
            ptx::wgmma_commit();
          }
        }
        prev = s;
        if (++s == kStages) s = 0, phase ^= 1;
      }
    } else if constexpr (kFp8Mma) {
      // A stage: four e4m3 wgmmas into the block sum `part` (k32 each: one 128-k block), its
      // tokens' scales read from the stage while they run, then the wait, the stage's release
      // and acc += part x (weight scale x token scale), per accumulator element. One block in
      // flight a consumer: the other consumer's wgmmas fill the tensor cores meanwhile.
      using MmaF8 = ptx::WgmmaE4m3<BN>;
      using MmaF8Narrow = ptx::WgmmaE4m3<kNarrow>;
      const int q2 = 2 * (lane & 3);
      Fp8MmaTileScales ws = Weights::tile_scales(wp, map.w_group(c), c.feat0 + 64 * cw + 16 * warp + (lane >> 2), kb0);
      const std::uint32_t ring_addr = ptx::smem_addr(ring);
      float part[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;  // promoted into from the tile's first block
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        const int s = it % kStages;
        ptx::mbar_wait(&full[s], (it / kStages) & 1);
        const std::uint32_t st = ring_addr + s * S.stage_bytes();
        const std::uint64_t da = ptx::wgmma_desc_sw128_addr(st + cw * (64 * 128));
        const std::uint64_t db = ptx::wgmma_desc_sw128_addr(st + S.a_bytes());
        const bool wide = c.bn == BN;
        if (wide) {
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kTiledW8a8BK / 32; ++kk) MmaF8::mma(part, da + 2 * kk, db + 2 * kk, kk > 0);
          ptx::wgmma_commit();
        } else if constexpr (kNarrow != BN) {
          float(&narrow)[kNarrow / 2] = *reinterpret_cast<float(*)[kNarrow / 2]>(part);
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kTiledW8a8BK / 32; ++kk) MmaF8Narrow::mma(narrow, da + 2 * kk, db + 2 * kk, kk > 0);
          ptx::wgmma_commit();
        }
        if (kb > kb0) Weights::advance(wp, ws, kb);
        float2 xs[BN / 8];  // the scales of token columns 8 j + q2 and + 1 (the box starts x_scale_shift rows early)
        const std::uint32_t sc =
            st + S.a_bytes() + S.b_bytes() + 4 * (q2 + Weights::x_scale_shift(static_cast<int>(c.row_base) + c.tok0));
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          asm volatile("ld.shared.f32 %0, [%1];" : "=f"(xs[j].x) : "r"(sc + 32 * j));
          asm volatile("ld.shared.f32 %0, [%1];" : "=f"(xs[j].y) : "r"(sc + 32 * j + 4));
        }
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_regs(part);
        __syncwarp();  // every lane's reads of the stage are done before lane 0 releases it
        if (lane == 0) ptx::mbar_arrive(&empty[s]);
        const int cols = wide ? BN / 8 : kNarrow / 8;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          if (j >= cols) break;
          acc[4 * j + 0] = fmaf(part[4 * j + 0], xs[j].x * ws.w0, acc[4 * j + 0]);
          acc[4 * j + 1] = fmaf(part[4 * j + 1], xs[j].y * ws.w0, acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(part[4 * j + 2], xs[j].x * ws.w1, acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(part[4 * j + 3], xs[j].y * ws.w1, acc[4 * j + 3]);
        }
      }
    } else if constexpr (kSplit) {
      // 3xTF32 (DenseRows only: every tile is BN wide). A stage: its twelve wgmmas into `part`
      // (small terms first), then, while they run, the next stage's weight fragments loaded and
      // split into the other fragment buffer; then the wait, the stage's release and acc += part
      // (per-stage promotion): between two stages' wgmmas only the adds. The loop is unrolled
      // by two so that the buffers stay registers.
      using MmaT = ptx::WgmmaTf32Rs<BN>;
      const typename Weights::Lane lc = Weights::lane_constants(cw, warp, lane);
      const std::uint32_t ring_addr = ptx::smem_addr(ring);
      float part[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      std::uint32_t h0[4][4], l0[4][4], h1[4][4], l1[4][4];
      auto stage_addr = [&](int i) { return ring_addr + (i % kStages) * S.stage_bytes(); };
      auto load = [&](int i, std::uint32_t(&hi)[4][4], std::uint32_t(&lo)[4][4]) {
        ptx::mbar_wait(&full[i % kStages], (i / kStages) & 1);
#pragma unroll
        for (int kk = 0; kk < kTiledF32BK / 8; ++kk) Weights::fragments(stage_addr(i), kk, lc, hi[kk], lo[kk]);
      };
      auto issue = [&](int i, const std::uint32_t(&hi)[4][4], const std::uint32_t(&lo)[4][4]) {
        const std::uint64_t dh = ptx::wgmma_desc_sw128_addr(stage_addr(i) + S.a_bytes());
        const std::uint64_t dl = ptx::wgmma_desc_sw128_addr(stage_addr(i) + S.a_bytes() + S.b_part_bytes());
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kTiledF32BK / 8; ++kk) {
          MmaT::mma(part, lo[kk], dh + 2 * kk, kk > 0);
          MmaT::mma(part, hi[kk], dl + 2 * kk, 1);
        }
#pragma unroll
        for (int kk = 0; kk < kTiledF32BK / 8; ++kk) MmaT::mma(part, hi[kk], dh + 2 * kk, 1);
        ptx::wgmma_commit();
      };
      auto finish = [&](int i) {
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_regs(part);
        if (lane == 0) ptx::mbar_arrive(&empty[i % kStages]);
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[j] += part[j];
      };
      const int n = kb1 - kb0;
      load(it, h0, l0);
      for (int j = 0; j < n; j += 2) {
        issue(it + j, h0, l0);
        if (j + 1 < n) load(it + j + 1, h1, l1);
        finish(it + j);
        if (j + 1 == n) break;
        issue(it + j + 1, h1, l1);
        if (j + 2 < n) load(it + j + 2, h0, l0);
        finish(it + j + 1);
      }
      it += n;
    } else {
      [[maybe_unused]] std::conditional_t<kConvert, Fp8TileScales, int> fs{};
      if constexpr (kConvert) fs = Weights::tile_scales(wp, map.w_group(c), c.feat0 + 64 * cw, kb0, ctid);
      for (int kb = kb0; kb < kb1; ++kb, ++it) {
        const int s = it % kStages;
        ptx::mbar_wait(&full[s], (it / kStages) & 1);
        const std::uint8_t* const st = ring + s * S.stage_bytes();
        std::uint64_t da = ptx::wgmma_desc_sw128(st + cw * kHalves * (64 * 128));
        if constexpr (kConvert) {
          // This consumer's 64 rows of codes into box it % 2 (boxes after the stages), which the
          // wgmmas of stage it - 2 read: the first barrier waits for every warp's wait<1> of the
          // last stage (they are done), the second for every warp's converted rows.
          const std::uint32_t box = ptx::smem_addr(ring) + kStages * S.stage_bytes() + (2 * cw + (it & 1)) * Weights::kHalfBoxBytes;
          if (kb > kb0) Weights::advance(wp, fs, kb);
          ptx::named_barrier_sync(2 + cw, 128);
          Weights::template convert<BF16>(ptx::smem_addr(st) + cw * Weights::kHalfCodeBytes, box, fs, ctid);
          ptx::fence_proxy_async_smem();
          ptx::named_barrier_sync(2 + cw, 128);
          da = ptx::wgmma_desc_sw128_addr(box);
        }
        const std::uint64_t db = ptx::wgmma_desc_sw128(st + S.a_bytes());
        // Each path fences and commits its own wgmmas: ptxas serializes wgmmas whose warpgroup
        // arrive it has to insert itself inside a branch (C7520).
        if constexpr (kHalves == 2) {  // tall: both halves a k16 step (alternate accumulators)
          float(&a0)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(acc);
          float(&a1)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(acc + BN / 2);
          const std::uint64_t da1 = ptx::wgmma_desc_sw128(st + (2 * cw + 1) * (64 * 128));
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kTiledBK / 16; ++kk) {
            Mma::mma(a0, da + 2 * kk, db + 2 * kk, kb > kb0 || kk > 0);
            Mma::mma(a1, da1 + 2 * kk, db + 2 * kk, kb > kb0 || kk > 0);
          }
          ptx::wgmma_commit();
        } else if (c.bn == BN) {
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kTiledBK / 16; ++kk) Mma::mma(acc, da + 2 * kk, db + 2 * kk, kb > kb0 || kk > 0);
          ptx::wgmma_commit();
        } else if (kMid != 0 && c.bn == kMid) {  // a mid tile: the first kMid columns of acc
          if constexpr (kMid != 0) {
            using MmaMid = ptx::Wgmma<kMid, BF16>;
            float(&mid)[kMid / 2] = *reinterpret_cast<float(*)[kMid / 2]>(acc);
            ptx::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kTiledBK / 16; ++kk) MmaMid::mma(mid, da + 2 * kk, db + 2 * kk, kb > kb0 || kk > 0);
            ptx::wgmma_commit();
          }
        } else if constexpr (kNarrow != BN) {  // a narrow tile: the first kNarrow columns of acc
          float(&narrow)[kNarrow / 2] = *reinterpret_cast<float(*)[kNarrow / 2]>(acc);
          ptx::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kTiledBK / 16; ++kk) MmaNarrow::mma(narrow, da + 2 * kk, db + 2 * kk, kb > kb0 || kk > 0);
          ptx::wgmma_commit();
        }
        ptx::wgmma_wait<1>();  // the previous stage's wgmmas are done: release it
        if (kb > kb0 && lane == 0) ptx::mbar_arrive(&empty[(it - 1) % kStages]);
      }
    }
    if constexpr (!kSplit && !kFp8Mma) {  // the split and W8A8 loops have released every stage already
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_regs(acc);
      if (lane == 0) ptx::mbar_arrive(&empty[(it - 1) % kStages]);
    }
    // ---- epilogue: 32 tokens at a time through shared memory, then whole output rows
    const int fr = 16 * warp + (lane >> 2);  // feature row of acc[4j], +8 for acc[4j + 2]
    const int q2 = 2 * (lane & 3);           // token column of acc[4j], +1 for acc[4j + 1]
    const int feat_base = c.feat0 + cw * kHalves * 64;  // tall: two halves of 64
    OutT* const out = static_cast<OutT*>(p.out);
    // K in parts: this part's 64 x BN sums go to its slot ([token][64 features] f32) instead.
    constexpr std::int64_t kSlot = 64 * BN;  // floats
    bool to_slot = false;
    float* slots = nullptr;  // part 0's slot of this tile and consumer; part j's at + j 2 kSlot
    if constexpr (RowMap::kSplitK) {
      to_slot = parts > 1;
      if (to_slot) slots = p.partials + (static_cast<std::int64_t>(t) * parts * 2 + cw) * kSlot;
    }
    // 16-bit outputs (not to a slot): converted in registers, written to shared memory by
    // stmatrix (4 instructions a warp for 64 tokens x 16 features, against 64 scalar f32 stores
    // the f32 staging below takes), then 16-byte stores of whole output rows. The conversion is
    // the one the f32 staging does after it: the outputs are bitwise the same.
    constexpr bool kEpi16 = sizeof(OutT) == 2;
    bool epi16 = false;
    if constexpr (kEpi16) epi16 = !to_slot;
    // Tall tiles: each half's 64 feature rows in turn, through the same staging.
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      const int feat_h = feat_base + 64 * half;
      float* const acc_h = acc + half * (BN / 2);
      if (epi16) {
        if constexpr (kEpi16) {
          const std::uint32_t st16 = ptx::smem_addr(epi) + cw * kTiledEpi16Bytes;
          // This lane's stmatrix row: matrix mi = lane / 8 holds features 8 (mi % 2) of the warp's 16
          // for tokens 8 (mi / 2) of an n8 pair, stored row mr = lane % 8 its token.
          const int mi = lane >> 3, mr = lane & 7;
          const int unit = 2 * warp + (mi & 1);
#pragma unroll
          for (int chunk = 0; chunk < (BN + kTiledEpi16Tokens - 1) / kTiledEpi16Tokens; ++chunk) {
            if (chunk * kTiledEpi16Tokens >= c.bn) break;  // a mid or narrow tile's columns end here (uniform)
            ptx::named_barrier_sync(2 + cw, 128);          // the previous chunk (and tile) has been read
            if constexpr (RowMap::kScatter)
              if (chunk == 0) map.publish_out_rows(cw, ctid, out_ids);
#pragma unroll
            for (int jj = 0; jj < kTiledEpi16Tokens / 8; jj += 2) {
              const int j = chunk * (kTiledEpi16Tokens / 8) + jj;
              if (8 * j >= BN) break;  // a width that is not a multiple of 64 (e.g. 144): its last chunk is partial
              float v[8];
#pragma unroll
              for (int e = 0; e < 8; ++e) v[e] = acc_h[4 * j + e];
              if constexpr (Weights::kDecode) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                  for (int q = 0; q < 2; ++q) {  // token column 8 (j + h) + q2 + q: acc_h[4 (j + h) + q], [+ 2]
                    const int tok = 8 * (j + h) + q2 + q;
                    const float a = tok < c.rows ? alpha_of(c, tok) : 1.0f;
                    v[4 * h + q] *= a, v[4 * h + q + 2] *= a;
                  }
              }
              std::uint32_t r[4];
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                if constexpr (std::is_same_v<OutT, __nv_bfloat16>) {
                  const __nv_bfloat162 h2 = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
                  r[e] = *reinterpret_cast<const std::uint32_t*>(&h2);
                } else {
                  const __half2 h2 = __floats2half2_rn(v[2 * e], v[2 * e + 1]);
                  r[e] = *reinterpret_cast<const std::uint32_t*>(&h2);
                }
              }
              const int tl = 8 * (jj + (mi >> 1)) + mr;  // token row within the chunk
              ptx::stmatrix_x4_trans(st16 + tl * 128 + ((unit ^ mr) << 4), r[0], r[1], r[2], r[3]);
            }
            ptx::named_barrier_sync(2 + cw, 128);
#pragma unroll
            for (int i = 0; i < kTiledEpi16Tokens * 8 / 128; ++i) {
              const int idx = ctid + 128 * i;
              const int row = idx >> 3, u = idx & 7;
              const int tok = chunk * kTiledEpi16Tokens + row;
              const int f = feat_h + 8 * u;
              if (tok < c.rows && f < p.n) {
                const uint4 v = ptx::ld_shared_v4(st16 + row * 128 + ((u ^ (row & 7)) << 4));
                store8(out + map.out_row(c, tok, cw) + f, v, min(8, p.n - f), p.vec8_ok, p.vec_ok);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int chunk = 0; chunk < (BN + kTiledEpiTokens - 1) / kTiledEpiTokens; ++chunk) {
          if (chunk * kTiledEpiTokens >= c.bn) break;  // a narrow tile's columns end here (uniform)
          [[maybe_unused]] std::uint32_t bad = 0;      // kSplit: this thread's non-finite outputs, 4 i + j
          ptx::named_barrier_sync(2 + cw, 128);  // the previous chunk (and tile) has been read
          if constexpr (RowMap::kScatter)
            if (chunk == 0) map.publish_out_rows(cw, ctid, out_ids);
#pragma unroll
          for (int jj = 0; jj < kTiledEpiTokens / 8; ++jj) {
            const int j = chunk * (kTiledEpiTokens / 8) + jj;
            if (8 * j >= BN) break;  // BN not a multiple of 32: the last chunk is partial
            float* const r0 = stage_out + (8 * jj + q2) * kTiledEpiStride + fr;
            r0[0] = acc_h[4 * j + 0];
            r0[kTiledEpiStride] = acc_h[4 * j + 1];
            r0[8] = acc_h[4 * j + 2];
            r0[kTiledEpiStride + 8] = acc_h[4 * j + 3];
          }
          ptx::named_barrier_sync(2 + cw, 128);
#pragma unroll
          for (int i = 0; i < kTiledEpiTokens * 16 / 128; ++i) {
            const int idx = ctid + 128 * i;
            const int row = idx >> 4, col = (idx & 15) * 4;
            const int tok = chunk * kTiledEpiTokens + row;
            const int f = feat_h + col;
            if (tok < c.rows && f < p.n) {
              float4 v = *reinterpret_cast<const float4*>(stage_out + row * kTiledEpiStride + col);
              if (to_slot) {
                __stcg(reinterpret_cast<float4*>(slots + part * 2 * kSlot + tok * 64 + col), v);
                continue;
              }
              if constexpr (Weights::kDecode) {
                const float a = alpha_of(c, tok);
                v.x *= a, v.y *= a, v.z *= a, v.w *= a;
              }
              if constexpr (kSplit) {  // outputs the split cannot carry: recomputed below
                const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
                  if (!isfinite(e[j])) bad |= 1u << (4 * i + j);
              }
              store4(out + map.out_row(c, tok, cw) + f, v, min(4, p.n - f), p.vec_ok);
            }
          }
          if constexpr (kSplit) {
            // In IEEE f32, one output at a time (rare: non-finite inputs or a part past FLT_MAX), in
            // a loop kept out of the unrolled stores above so that it exists once a chunk.
#pragma unroll 1
            while (bad) {
              const int b = __ffs(bad) - 1;
              bad &= bad - 1;
              const int idx = ctid + 128 * (b >> 2), tok = chunk * kTiledEpiTokens + (idx >> 4);
              const int f = feat_h + (idx & 15) * 4 + (b & 3);
              if (f < p.n) out[map.out_row(c, tok, cw) + f] = Weights::ieee_dot(wp, c.group, c.tok0 + tok, f);
            }
          }
        }
      }
    }
    if constexpr (RowMap::kSplitK) {
      if (to_slot) {
        // Counted in once every slot write is fenced; the last part of the tile to arrive sums
        // the parts' slots in part order and stores the tile.
        __threadfence();
        ptx::named_barrier_sync(2 + cw, 128);  // the slot writes fenced, stage_out read
        int* const last = reinterpret_cast<int*>(stage_out);
        if (ctid == 0) *last = atomicAdd(p.counters + 2 * t + cw, 1u) == static_cast<unsigned>(parts - 1);
        ptx::named_barrier_sync(2 + cw, 128);
        if (!*last) continue;  // uniform; the next unit's first barrier comes after every read of *last
        __threadfence();       // every other part's slot is visible now
        // Latency, not bandwidth, bounds this sum: each thread keeps 8 float4 of two parts in
        // flight (16 loads) rather than one dependent load a part.
        constexpr int kU = 8;
        const int vecs = c.rows * 16;  // float4s of this consumer's rows x 64 features
#pragma unroll 1
        for (int base = ctid; base < vecs; base += 128 * kU) {
          float4 v[kU];
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            const int idx = base + 128 * u;
            v[u] = idx < vecs ? __ldcg(reinterpret_cast<const float4*>(slots + (idx >> 4) * 64 + (idx & 15) * 4))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
          }
#pragma unroll 1
          for (int j = 1; j < parts; j += 2) {
            const bool two = j + 1 < parts;
            float4 w0[kU], w1[kU];
#pragma unroll
            for (int u = 0; u < kU; ++u) {
              const int idx = base + 128 * u;
              const float* const e = slots + (idx >> 4) * 64 + (idx & 15) * 4;
              w0[u] = idx < vecs ? __ldcg(reinterpret_cast<const float4*>(e + j * 2 * kSlot)) : v[u];
              w1[u] = idx < vecs && two ? __ldcg(reinterpret_cast<const float4*>(e + (j + 1) * 2 * kSlot)) : v[u];
            }
#pragma unroll
            for (int u = 0; u < kU; ++u) {  // part order: v + p_j, then + p_(j+1)
              v[u].x += w0[u].x, v[u].y += w0[u].y, v[u].z += w0[u].z, v[u].w += w0[u].w;
              if (two) v[u].x += w1[u].x, v[u].y += w1[u].y, v[u].z += w1[u].z, v[u].w += w1[u].w;
            }
          }
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            const int idx = base + 128 * u, tok = idx >> 4, col = (idx & 15) * 4, f = feat_base + col;
            if (idx >= vecs || f >= p.n) continue;
            float4 o = v[u];
            if constexpr (Weights::kDecode) {
              const float a = alpha_of(c, tok);
              o.x *= a, o.y *= a, o.z *= a, o.w *= a;
            }
            store4(out + map.out_row(c, tok, cw) + f, o, min(4, p.n - f), p.vec_ok);
          }
        }
      }
    }
  }
}

}  // namespace llmm::engine
