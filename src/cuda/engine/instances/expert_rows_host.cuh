// Host side shared by the two MoE instances of the Hopper tiled engine (16-bit experts and
// ternary experts): the expert row map's parameters, the tensor maps of the routed rows
// moe_stage_rows staged in expert order, and of the input's rows for the fused instance.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <utility>

#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/row_maps_sm90.cuh"
#include "core/moe/moe_args.hpp"

namespace llmm::engine {

// ExpertRows / ExpertRowsStaged / ExpertRowsFused parameters for g; vectorized stores where out and n allow
// 4-column stores of OutT.
template <class OutT>
ExpertRowsParams expert_rows_params(const cuda_moe::MoeArgs& g) {
  ExpertRowsParams p;
  p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.top_k = static_cast<int>(g.top_k), p.n_experts = static_cast<int>(g.n_experts);
  p.tiles_feat = static_cast<int>((g.n + kTiledBM - 1) / kTiledBM);
  p.in = g.in;
  p.in_token_stride = g.in_token_stride, p.in_slot_stride = g.in_slot_stride;
  p.counts = g.counts, p.rows = g.rows;
  p.out = g.out;
  p.vec_ok = reinterpret_cast<std::uintptr_t>(g.out) % (4 * sizeof(OutT)) == 0 && g.n % 4 == 0;
  p.vec8_ok = reinterpret_cast<std::uintptr_t>(g.out) % 16 == 0 && g.n * sizeof(OutT) % 16 == 0;
  p.out_sorted = g.out_sorted;
  p.tile_counter = tiled_sm90_sched_env() ? g.tile_counter : nullptr;  // ExpertRowsStaged reads it
  // ExpertRowsFused (the plan keeps m * top_k <= kTiledMoeFusedMaxRows: an int)
  p.ids = g.ids, p.ids64 = g.ids64;
  p.routed = static_cast<int>(g.m * g.top_k);
  p.out_row_halves = static_cast<int>(g.n * static_cast<std::int64_t>(sizeof(OutT)) / 2);  // < 2^31: the fused plan's check
  return p;
}

// The staged rows as one [m * top_k][k] 16-bit matrix (a 3D map with one batch entry), in boxes
// of 64 k x bn rows (wide tiles) and 64 k x kTiledNarrowBN rows (narrow ones).
inline std::pair<CUtensorMap, CUtensorMap> staged_rows_maps(const cuda_moe::MoeArgs& g, std::uint32_t bn, const char* who) {
  const std::uint64_t routed = static_cast<std::uint64_t>(g.m * g.top_k), row = static_cast<std::uint64_t>(g.k) * 2;
  const std::uint64_t dims[3] = {static_cast<std::uint64_t>(g.k), routed, 1};
  const std::uint64_t strides[2] = {row, row * routed};
  const std::uint32_t wide[3] = {kTiledBK, bn, 1}, narrow[3] = {kTiledBK, kTiledNarrowBN, 1};
  return {cuda_common::make_tensor_map_3d_sw128(g.staged, 2, dims, strides, wide, who),
          cuda_common::make_tensor_map_3d_sw128(g.staged, 2, dims, strides, narrow, who)};
}

// ExpertRowsFused's token rows: the input as a 3D map [k][axis 1][axis 2] in boxes of one row
// (64 k), the slot and token axes in stride order; an axis of stride 0 (a broadcast input) or
// extent 1 becomes an axis of extent 1 (coordinate 0: p's row_tma_* flags) with a placeholder
// stride, so that no stride is 0 and they grow with the axes. The plan keeps the used strides
// below 2^40 bytes (tiled_sm90_moe_fused_refusal).
inline CUtensorMap fused_rows_map(const cuda_moe::MoeArgs& g, ExpertRowsParams& p, const char* who) {
  struct Axis { std::uint64_t extent, stride; bool used, slot; };
  Axis s{static_cast<std::uint64_t>(g.top_k), static_cast<std::uint64_t>(g.in_slot_stride) * 2, false, true};
  Axis t{static_cast<std::uint64_t>(g.m), static_cast<std::uint64_t>(g.in_token_stride) * 2, false, false};
  for (Axis* a : {&s, &t}) {
    a->used = a->extent > 1 && a->stride != 0;
    if (!a->used) a->extent = 1;
  }
  const std::uint64_t row = (static_cast<std::uint64_t>(g.k) * 2 + 15) / 16 * 16;
  Axis a1 = s, a2 = t;  // used axes first, the smaller stride first
  if ((!a1.used && a2.used) || (a1.used && a2.used && a2.stride < a1.stride)) std::swap(a1, a2);
  if (!a1.used) a1.stride = row;
  if (!a2.used) a2.stride = a1.stride * a1.extent;
  p.row_tma_slots = s.used, p.row_tma_tokens = t.used, p.row_tma_slot_outer = a2.slot;
  const std::uint64_t dims[3] = {static_cast<std::uint64_t>(g.k), a1.extent, a2.extent};
  const std::uint64_t strides[2] = {a1.stride, a2.stride};
  const std::uint32_t box[3] = {kTiledBK, 1, 1};
  return cuda_common::make_tensor_map_3d_sw128(g.in, 2, dims, strides, box, who);
}

}  // namespace llmm::engine
