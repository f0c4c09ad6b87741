// Host side shared by the two MoE instances of the Hopper tiled engine (16-bit experts and
// ternary experts): the expert row map's parameters, and the tensor maps of the routed rows
// moe_stage_rows staged in expert order.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <utility>

#include "cuda/common/tensor_map.hpp"
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

}  // namespace llmm::engine
