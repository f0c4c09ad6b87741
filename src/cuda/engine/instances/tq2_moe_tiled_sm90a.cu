// Ternary-experts instance of the Hopper tiled engine (matmul_id_tq2's grouped_sm90 route): the
// MoE row map over routed rows staged in expert order (f16, by TMA), the TQ2 decoder over the
// expert stack (codes [n_experts * n][k/4] and transposed scales by TMA, decoded by the
// consumers into register fragments; expert e's rows start at e * n), each output row written to
// its routed row, times its staged row's 2^e when the rows were scaled (a bf16/f32 input).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/instances/expert_rows_host.cuh"
#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

constexpr int kBN = 256;

template <class OutT>
void launch_t(const cuda_ternary::Tq2MoeArgs& a, const float* alpha, const TiledSm90Launch& l, StreamHandle stream,
              const std::string& name) {
  const cuda_moe::MoeArgs& g = a.g;
  const std::int64_t stack_rows = g.n_experts * g.n;
  Tq2WeightsParams w;
  {
    const std::uint64_t dims[2] = {static_cast<std::uint64_t>(g.k / 4), static_cast<std::uint64_t>(stack_rows)};
    const std::uint32_t box[2] = {kTiledBK / 4, kTiledBM};
    w.codes = cuda_common::make_tensor_map_u8_2d(a.codes, dims, static_cast<std::uint64_t>(g.k / 4), box, false, name.c_str());
  }
  {
    const std::uint64_t row = static_cast<std::uint64_t>(a.scales_t_ld) * 2;
    const std::uint64_t dims[2] = {row, static_cast<std::uint64_t>(g.k / 128)};
    const std::uint32_t box[2] = {kTiledBM * 2, 1};
    w.scales = cuda_common::make_tensor_map_u8_2d(a.scales_t, dims, row, box, false, name.c_str());
  }
  w.group_rows = g.n, w.group_cols = (g.n + 7) / 8 * 8, w.n = static_cast<int>(g.n);
  w.alpha = alpha, w.alpha_per_row = true;  // tq2_rowscale_stage's 2^e of each staged row

  const ExpertRowsParams p = expert_rows_params<OutT>(g);
  const auto [tm_x, tm_n] = staged_rows_maps(g, kBN, name.c_str());
  // l.pdl: after the staging kernel of the same route on the stream
  launch_tiled_sm90(&tiled_sm90_kernel<kBN, false, OutT, ExpertRowsStaged, Tq2Weights>, tm_x, tm_x, tm_n, p, w, l, stream,
                    name, l.pdl && cuda_common::pdl_enabled());
}

}  // namespace

void launch_tiled_sm90_tq2_moe(const cuda_ternary::Tq2MoeArgs& a, const float* alpha, const TiledSm90Launch& l,
                               StreamHandle stream) {
  const cuda_moe::MoeArgs& g = a.g;
  const std::string name = tiled_sm90_tq2_moe_kernel_name(g.out_dtype);
  if (g.m * g.top_k == 0) return;
  if (g.in_dtype != DType::F16 || g.k % 128 != 0 || g.n < 1 || g.n_experts < 1 || g.n_experts > 1024 ||
      g.n_experts * ((g.n + 7) / 8 * 8) > (std::int64_t{1} << 30) - 128 || !g.counts || !g.rows || !g.staged ||
      g.staged_bytes / (g.k * 2) < g.m * g.top_k || l.bn != kBN || !a.codes || !a.scales_t ||
      a.scales_t_ld != g.n_experts * ((g.n + 7) / 8 * 8) || reinterpret_cast<std::uintptr_t>(a.codes) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(a.scales_t) % 16 != 0 || reinterpret_cast<std::uintptr_t>(g.staged) % 16 != 0)
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  switch (g.out_dtype) {
    case DType::F32: launch_t<float>(a, alpha, l, stream, name); break;
    case DType::F16: launch_t<__half>(a, alpha, l, stream, name); break;
    case DType::BF16: launch_t<__nv_bfloat16>(a, alpha, l, stream, name); break;
    default: fail(ErrorCode::Internal, name, ": unsupported output dtype ", dtype_name(g.out_dtype));
  }
}

}  // namespace llmm::engine
