// FP8-experts instance of the Hopper tiled engine (matmul_id's grouped route on e4m3 weights):
// the staged MoE row map (bf16 rows moe_stage_rows copied in expert order, by TMA; tiles handed
// out from the scratch's counter) over the Fp8Weights decoder: each expert's codes by TMA from a
// 3D byte map [expert][n][k], scaled and rounded to bf16 in shared memory by producer warps, then
// the 16-bit consumers; each output row written to its routed row (or, sorted, in map order).
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

}  // namespace

void launch_tiled_sm90_moe_fp8(const MoeArgs& g, const TiledSm90Launch& l, StreamHandle stream) {
  const std::string name = tiled_sm90_moe_kernel_name(g, l);
  if (g.m * g.top_k == 0 || g.n == 0) return;
  if (g.w_dtype != DType::F8E4M3 || g.in_dtype != DType::BF16 || g.k % 16 != 0 || g.expert_stride % 16 != 0 || !g.w_scales ||
      g.w_scale_kind < 0 || g.w_scale_kind > 2 || !g.counts || !g.rows || !l.staged || l.fused || l.bn != 256 ||
      !g.staged || g.staged_bytes / (g.k * 2) < g.m * g.top_k || g.n > 0x7fffffff || g.k > 0x7fffffff)
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  if (g.out_dtype == DType::F32) launch_t<float>(g, l, stream, name);
  else if (g.out_dtype == DType::BF16) launch_t<__nv_bfloat16>(g, l, stream, name);
  else fail(ErrorCode::Internal, name, ": unsupported output dtype ", dtype_name(g.out_dtype));
}

}  // namespace llmm::engine
