// MoE instance of the Hopper tiled engine (matmul_id's grouped route): expert weights by TMA (a
// 3D map [expert][n][k]), the routed rows of each expert gathered from the input by cp.async in
// the order moe_map listed them (or, fused, by one TMA box a row in the order each CTA sorted
// them itself), or loaded by TMA from rows staged in expert order; each output row written to its
// routed row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/instances/expert_rows_host.cuh"
#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

using cuda_moe::MoeArgs;

template <int BN, class T, class OutT>
void launch_bn(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  const std::uint64_t dims[3] = {static_cast<std::uint64_t>(g.k), static_cast<std::uint64_t>(g.n),
                                 static_cast<std::uint64_t>(g.n_experts)};
  const std::uint64_t strides[2] = {static_cast<std::uint64_t>(g.k) * 2, static_cast<std::uint64_t>(g.expert_stride) * 2};
  const std::uint32_t box[3] = {kTiledBK, kTiledBM, 1};
  const CUtensorMap tm_w = cuda_common::make_tensor_map_3d_sw128(g.w, 2, dims, strides, box, name.c_str());
  ExpertRowsParams p = expert_rows_params<OutT>(g);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if (l.fused) {  // the route's only kernel: it sorts the routed rows from the ids itself, one TMA box a row
    const CUtensorMap tm_rows = fused_rows_map(g, p, name.c_str());
    launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, OutT, ExpertRowsFused>, tm_w, tm_rows, tm_w, p, TmaWeightsParams{}, l,
                      stream, name);
    return;
  }
  if (!l.staged) {
    // l.pdl: after moe_map (or moe_stage_rows) of the same route on the stream
    launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, OutT, ExpertRows>, tm_w, tm_w, tm_w, p, TmaWeightsParams{}, l, stream, name,
                      l.pdl && cuda_common::pdl_enabled());
    return;
  }
  const auto [tm_x, tm_n] = staged_rows_maps(g, BN, name.c_str());
  launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, OutT, ExpertRowsStaged>, tm_w, tm_x, tm_n, p, TmaWeightsParams{}, l, stream, name,
                    l.pdl && cuda_common::pdl_enabled());
}

template <class T, class OutT>
void launch_t(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  // One instance: wide tiles of 256 tokens, narrow ones of 64 for experts with few rows.
  if (l.bn != 256) fail(ErrorCode::Internal, name, ": no instance with bn ", l.bn);
  launch_bn<256, T, OutT>(g, l, stream, name);
}

}  // namespace

void launch_tiled_sm90_moe(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream) {
  if (g.w_dtype == DType::F8E4M3) return launch_tiled_sm90_moe_fp8(g, l, stream);
  const std::string name = tiled_sm90_moe_kernel_name(g, l);
  if (g.m * g.top_k == 0 || g.n == 0) return;
  if (g.w_dtype != g.in_dtype || g.k % 8 != 0 || (!l.fused && (!g.counts || !g.rows)) ||
      (l.fused && (l.staged || g.m * g.top_k > kTiledMoeFusedMaxRows || !g.ids)) ||
      (l.staged && (!g.staged || g.staged_bytes / (g.k * 2) < g.m * g.top_k)) || (l.fused && g.out_sorted) ||
      (g.presorted && !l.staged))
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  const bool f32_out = g.out_dtype == DType::F32;
  if (g.w_dtype == DType::BF16) {
    if (f32_out) launch_t<__nv_bfloat16, float>(g, l, stream, name);
    else launch_t<__nv_bfloat16, __nv_bfloat16>(g, l, stream, name);
  } else if (g.w_dtype == DType::F16) {
    if (f32_out) launch_t<__half, float>(g, l, stream, name);
    else launch_t<__half, __half>(g, l, stream, name);
  } else {
    fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(g.w_dtype));
  }
}

}  // namespace llmm::engine
