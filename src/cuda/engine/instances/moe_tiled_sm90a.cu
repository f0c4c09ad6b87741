// MoE instance of the Hopper tiled engine (matmul_id's grouped route): expert weights by TMA (a
// 3D map [expert][n][k]), the routed rows of each expert gathered from the input by cp.async in
// the order moe_map listed them, each output row written to its routed row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/tensor_map.hpp"
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
  const CUtensorMap tm_w = cuda_common::make_tensor_map_u16_3d_sw128(g.w, dims, strides, box, name.c_str());
  ExpertRowsParams p;
  p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.top_k = static_cast<int>(g.top_k), p.n_experts = static_cast<int>(g.n_experts);
  p.tiles_feat = static_cast<int>((g.n + kTiledBM - 1) / kTiledBM);
  p.in = g.in;
  p.in_token_stride = g.in_token_stride, p.in_slot_stride = g.in_slot_stride;
  p.counts = g.counts, p.rows = g.rows;
  p.out = g.out;
  p.vec_ok = reinterpret_cast<std::uintptr_t>(g.out) % (4 * sizeof(OutT)) == 0 && g.n % 4 == 0;
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if (!l.staged) {
    launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, OutT, ExpertRows>, tm_w, tm_w, tm_w, p, TmaWeightsParams{}, l, stream, name);
    return;
  }
  // The staged rows as one [m * top_k][k] matrix (a 3D map with one batch entry).
  const std::uint64_t routed = static_cast<std::uint64_t>(g.m * g.top_k), row = static_cast<std::uint64_t>(g.k) * 2;
  const std::uint64_t xdims[3] = {static_cast<std::uint64_t>(g.k), routed, 1};
  const std::uint64_t xstrides[2] = {row, row * routed};
  const std::uint32_t xbox[3] = {kTiledBK, BN, 1}, nbox[3] = {kTiledBK, kTiledNarrowBN, 1};
  const CUtensorMap tm_x = cuda_common::make_tensor_map_u16_3d_sw128(g.staged, xdims, xstrides, xbox, name.c_str());
  const CUtensorMap tm_n = cuda_common::make_tensor_map_u16_3d_sw128(g.staged, xdims, xstrides, nbox, name.c_str());
  launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, OutT, ExpertRowsStaged>, tm_w, tm_x, tm_n, p, TmaWeightsParams{}, l, stream, name);
}

template <class T, class OutT>
void launch_t(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  // One instance: wide tiles of 256 tokens, narrow ones of 64 for experts with few rows.
  if (l.bn != 256) fail(ErrorCode::Internal, name, ": no instance with bn ", l.bn);
  launch_bn<256, T, OutT>(g, l, stream, name);
}

}  // namespace

void launch_tiled_sm90_moe(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream) {
  const std::string name = tiled_sm90_moe_kernel_name(g, l);
  if (g.m * g.top_k == 0 || g.n == 0) return;
  if (g.w_dtype != g.in_dtype || g.k % 8 != 0 || !g.counts || !g.rows ||
      (l.staged && (!g.staged || g.staged_bytes / (g.k * 2) < g.m * g.top_k)))
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
