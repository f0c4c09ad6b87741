// FP8-experts instance of the Hopper tiled engine (matmul_id's grouped route on e4m3 weights):
// the staged MoE row map (bf16 rows moe_stage_rows copied in expert order, by TMA; tiles handed
// out from the scratch's counter) over the Fp8Weights decoder: each expert's codes by TMA from a
// 3D byte map [expert][n][k], scaled and rounded to bf16 in shared memory by the consumers, then
// 16-bit wgmmas; each output row written to its routed row (or, sorted, in map order). With
// Precision::Fast, W8A8 (Fp8MmaWeights): rows staged as e4m3 per 128 channels, e4m3 wgmmas.
#include <cuda_bf16.h>

#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/instances/expert_rows_host.cuh"
#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

using cuda_moe::MoeArgs;

template <class OutT>
void launch_t(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  constexpr int kBN = 256;
  Fp8WeightsParams w;
  {
    const std::uint64_t dims[3] = {static_cast<std::uint64_t>(g.k), static_cast<std::uint64_t>(g.n),
                                   static_cast<std::uint64_t>(g.n_experts)};
    const std::uint64_t strides[2] = {static_cast<std::uint64_t>(g.k), static_cast<std::uint64_t>(g.expert_stride)};
    const std::uint32_t box[3] = {kTiledBK, kTiledBM, 1};
    w.codes = cuda_common::make_tensor_map_u8_3d(g.w, dims, strides, box, name.c_str());
  }
  w.scales = g.w_scales, w.scale_group_stride = g.w_scale_expert_stride, w.kind = g.w_scale_kind;
  w.scale_cols = static_cast<int>((g.k + 127) / 128), w.n = static_cast<int>(g.n);
  const ExpertRowsParams p = expert_rows_params<OutT>(g);
  const auto [tm_x, tm_n] = staged_rows_maps(g, kBN, name.c_str());
  // l.pdl: after moe_stage_rows of the same route on the stream
  launch_tiled_sm90(&tiled_sm90_kernel<kBN, true, OutT, ExpertRowsStaged, Fp8Weights>, tm_x, tm_x, tm_n, p, w, l, stream,
                    name, l.pdl && cuda_common::pdl_enabled());
}

// W8A8: the codes in 128-k boxes with the 128-byte swizzle (the e4m3 wgmma's A operand as it
// lands), the staged rows as e4m3 codes [routed][k] bytes and their scales (staged_e4m3_layout).
template <class OutT>
void launch_w8a8_t(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  constexpr int kBN = 128;
  const std::uint64_t routed = static_cast<std::uint64_t>(g.m * g.top_k), k = static_cast<std::uint64_t>(g.k);
  const cuda_moe::StagedE4m3Layout lay = cuda_moe::staged_e4m3_layout(g.m * g.top_k, g.k);
  Fp8MmaWeightsParams w;
  {
    const std::uint64_t dims[3] = {k, static_cast<std::uint64_t>(g.n), static_cast<std::uint64_t>(g.n_experts)};
    const std::uint64_t strides[2] = {k, static_cast<std::uint64_t>(g.expert_stride)};
    const std::uint32_t box[3] = {kTiledW8a8BK, kTiledBM, 1};
    w.codes = cuda_common::make_tensor_map_3d(g.w, 1, dims, strides, box, true, name.c_str());
  }
  {
    const std::uint64_t kblocks = (k + 127) / 128, ld = static_cast<std::uint64_t>(lay.scale_ld);
    const std::uint64_t dims[3] = {ld, kblocks, 1};
    const std::uint64_t strides[2] = {ld * 4, ld * 4 * kblocks};
    const std::uint32_t box[3] = {kBN, 1, 1};
    w.x_scales = cuda_common::make_tensor_map_3d(static_cast<const std::uint8_t*>(g.staged) + lay.scale_offset, 4, dims, strides,
                                                 box, false, name.c_str());
  }
  w.scales = g.w_scales, w.scale_group_stride = g.w_scale_expert_stride, w.kind = g.w_scale_kind;
  w.scale_cols = static_cast<int>((g.k + 127) / 128), w.n = static_cast<int>(g.n);
  const ExpertRowsParams p = expert_rows_params<OutT>(g);
  CUtensorMap tm_x, tm_n;
  {
    const std::uint64_t dims[3] = {k, routed, 1};
    const std::uint64_t strides[2] = {k, k * routed};
    const std::uint32_t wide[3] = {kTiledW8a8BK, kBN, 1}, narrow[3] = {kTiledW8a8BK, kTiledNarrowBN, 1};
    tm_x = cuda_common::make_tensor_map_3d(g.staged, 1, dims, strides, wide, true, name.c_str());
    tm_n = cuda_common::make_tensor_map_3d(g.staged, 1, dims, strides, narrow, true, name.c_str());
  }
  // l.pdl: after moe_stage_rows of the same route on the stream
  launch_tiled_sm90(&tiled_sm90_kernel<kBN, true, OutT, ExpertRowsStaged, Fp8MmaWeights>, tm_x, tm_x, tm_n, p, w, l, stream,
                    name, l.pdl && cuda_common::pdl_enabled());
}

}  // namespace

void launch_tiled_sm90_moe_fp8(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream) {
  const std::string name = tiled_sm90_moe_kernel_name(g, l);
  if (g.m * g.top_k == 0 || g.n == 0) return;
  if (g.w_dtype != DType::F8E4M3 || g.in_dtype != DType::BF16 || g.k % 16 != 0 || g.expert_stride % 16 != 0 || !g.w_scales ||
      g.w_scale_kind < 0 || g.w_scale_kind > 2 || !g.counts || !g.rows || !l.staged || l.fused || l.bn != (l.w8a8 ? 128 : 256) ||
      !g.staged || g.n > 0x7fffffff || g.k > 0x7fffffff ||
      (l.w8a8 ? g.staged_bytes < cuda_moe::staged_e4m3_layout(g.m * g.top_k, g.k).bytes || g.presorted
              : g.staged_bytes / (g.k * 2) < g.m * g.top_k))
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  if (l.w8a8) {
    if (g.out_dtype == DType::F32) launch_w8a8_t<float>(g, l, stream, name);
    else if (g.out_dtype == DType::BF16) launch_w8a8_t<__nv_bfloat16>(g, l, stream, name);
    else fail(ErrorCode::Internal, name, ": unsupported output dtype ", dtype_name(g.out_dtype));
    return;
  }
  if (g.out_dtype == DType::F32) launch_t<float>(g, l, stream, name);
  else if (g.out_dtype == DType::BF16) launch_t<__nv_bfloat16>(g, l, stream, name);
  else fail(ErrorCode::Internal, name, ": unsupported output dtype ", dtype_name(g.out_dtype));
}

}  // namespace llmm::engine
