#include "core/moe/moe_plan.hpp"

#include "core/moe/moe_kernels.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_moe {

MoePlan plan_matmul_id_cuda(const MoeArgs& g, MatmulIdRoute route, const ArchInfo& arch, MatmulIdGroupedKernel kernel) {
  if (!moe_dtypes_supported(g))
    fail(ErrorCode::Unsupported, "matmul_id: the CUDA kernels take an input of f32 or the weights' dtype (",
         dtype_name(g.w_dtype), "), got ", dtype_name(g.in_dtype));
  MoePlan p;
  p.route = route;
  if (route == MatmulIdRoute::Direct) {
    p.kernels = {moe_direct_kernel_name(g)};
    return p;
  }
  if (g.n_experts > moe_map_max_experts())
    fail(ErrorCode::InvalidArgument, "matmul_id: n_experts ", g.n_experts, " exceeds the map kernel's limit ",
         moe_map_max_experts());
  // The Hopper engine where it takes the call (measured faster: docs/performance.md, MoE), else
  // the mma.sync kernel; a forced kernel that cannot take it is refused.
  const std::string engine_why = engine::tiled_sm90_moe_refusal(g, arch);
  const bool forced = kernel == MatmulIdGroupedKernel::TiledSm90 || kernel == MatmulIdGroupedKernel::TiledSm90Fused;
  if (forced && !engine_why.empty())
    fail(ErrorCode::Unsupported, "matmul_id: grouped kernel ", matmul_id_grouped_kernel_name(kernel), " cannot run (m ", g.m,
         ", n ", g.n, ", k ", g.k, ", ", dtype_name(g.w_dtype), " weights, ", dtype_name(g.in_dtype), " input): ", engine_why);
  p.engine = kernel != MatmulIdGroupedKernel::MmaSync && engine_why.empty();
  // The engine alone, sorting the routed rows in each CTA: Auto's choice at m <= 16 (measured:
  // tiled_sm90_moe_fused_preferred), up to kTiledMoeFusedMaxRows routed rows when forced.
  const std::string fused_why = p.engine ? engine::tiled_sm90_moe_fused_refusal(g) : engine_why;
  if (kernel == MatmulIdGroupedKernel::TiledSm90Fused && !fused_why.empty())
    fail(ErrorCode::Unsupported, "matmul_id: grouped kernel tiled_sm90_fused cannot run (m ", g.m, ", top_k ", g.top_k, "): ",
         fused_why);
  // moe_ffn's sorted pipeline: moe_map's lists and the staged engine only (its caller checked).
  const bool sorted = g.out_sorted || g.presorted;
  if (sorted && (!p.engine || kernel != MatmulIdGroupedKernel::Auto))
    fail(ErrorCode::Internal, "matmul_id: a sorted output or presorted rows need the Hopper engine under Auto (",
         engine_why.empty() ? "a kernel asked for by name" : engine_why, ")");
  const bool fused = kernel == MatmulIdGroupedKernel::TiledSm90Fused ||
                     (kernel == MatmulIdGroupedKernel::Auto && p.engine && !sorted && engine::tiled_sm90_moe_fused_preferred(g));
  if (p.engine && fused_why.empty() && fused) {
    p.fused = true;
    p.launch = engine::tiled_sm90_moe_fused_launch(g, arch.sm_count);
    p.kernels = {engine::tiled_sm90_moe_kernel_name(g, p.launch)};
    p.reason = kernel == MatmulIdGroupedKernel::TiledSm90Fused
                   ? "the Hopper engine sorting the routed rows itself, asked for by name"
                   : "the Hopper engine sorting the routed rows itself (one kernel: m <= " +
                         std::to_string(engine::kTiledMoeFusedAutoMaxTokens) + ")";
    return p;
  }
  if (g.presorted) {  // the lists and the staged rows are the previous call's: the engine alone
    p.engine = true;
    p.launch = engine::tiled_sm90_moe_launch(g, arch.sm_count);
    p.staged = p.launch.staged;
    if (!p.staged) fail(ErrorCode::Internal, "matmul_id: presorted rows without staging room for them");
    p.kernels = {engine::tiled_sm90_moe_kernel_name(g, p.launch)};
    p.reason = "the Hopper engine over rows a previous call left in expert order";
    return p;
  }
  p.kernels = moe_map_kernel_names(g);
  // FP8 weights run on the engine over staged rows only (no gathering instance converts them).
  const bool fp8 = g.w_dtype == DType::F8E4M3;
  if (p.engine && fp8 && !engine::tiled_sm90_moe_launch(g, arch.sm_count).staged) {
    if (kernel == MatmulIdGroupedKernel::TiledSm90)
      fail(ErrorCode::Unsupported, "matmul_id: grouped kernel tiled_sm90 runs FP8 weights over staged rows only: the scratch "
                                   "has no staging room for the ", g.m * g.top_k, " routed rows");
    p.engine = false;
  }
  if (p.engine) {
    p.launch = engine::tiled_sm90_moe_launch(g, arch.sm_count);
    p.staged = p.launch.staged;
    if (g.out_sorted && !p.staged) fail(ErrorCode::Internal, "matmul_id: a sorted output without staging room");
    if (p.staged) p.kernels.push_back(moe_stage_rows_kernel_name(g));
    p.kernels.push_back(engine::tiled_sm90_moe_kernel_name(g, p.launch));
    p.reason = p.staged ? "the Hopper engine over routed rows staged in expert order"
                        : "the Hopper engine, gathering routed rows (the scratch cannot stage them all)";
  } else {
    p.kernels.push_back(moe_grouped_kernel_name(g));
    p.reason = kernel == MatmulIdGroupedKernel::MmaSync ? "moe_grouped, asked for by name"
               : engine_why.empty()                      ? "moe_grouped (the Hopper engine runs FP8 weights over staged rows only)"
                                                         : "moe_grouped (the Hopper engine " + engine_why + ")";
  }
  return p;
}

}  // namespace llmm::cuda_moe
