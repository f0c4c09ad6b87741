// CUDA side of matmul_id: resolve every kernel of the route and let the context refuse any of
// them before the first launch (the seed's "nothing encoded when a pipeline cannot be resolved").
#include "core/moe/moe_dispatch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/moe/moe_plan.hpp"
#include "core/ranges.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/moe/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

// Byte hulls of the operands of g (capture mode).
struct MoeRanges {
  ByteRange w, in, ids, out, counts, rows, block_counts, staged, tile_counter, scales;
  explicit MoeRanges(const cuda_moe::MoeArgs& g) {
    const std::int64_t routed = g.m * g.top_k;
    w = g.n_experts > 0 && g.k > 0 ? elems_range(g.w, g.w_dtype, (g.n_experts - 1) * g.expert_stride + g.n * g.k)
                                   : ByteRange{g.w, 0};
    in = g.k > 0 ? elems_range(g.in, g.in_dtype, (g.m - 1) * g.in_token_stride + (g.top_k - 1) * g.in_slot_stride + g.k)
                 : ByteRange{g.in, 0};
    ids = elems_range(g.ids, g.ids64 ? DType::I64 : DType::U32, routed);
    out = elems_range(g.out, g.out_dtype, routed * g.n);
    counts = elems_range(g.counts, DType::U32, g.counts ? g.n_experts : 0);
    rows = elems_range(g.rows, DType::U32, g.rows ? routed : 0);
    block_counts = elems_range(g.block_counts, DType::U32, cuda_moe::moe_map_grid(g).blocks > 1 ? g.block_count_words : 0);
    staged = elems_range(g.staged, g.in_dtype, g.staged ? routed * g.k : 0);  // the rows a call stages
    tile_counter = elems_range(g.tile_counter, DType::U32, g.tile_counter ? 1 : 0);
    // FP8 weights' scales (none otherwise: an empty range the capture ignores)
    scales = elems_range(g.w_scales, DType::F32, g.w_dtype == DType::F8E4M3 && g.w_scales ? g.n_experts * g.w_scale_expert_stride : 0);
  }
};

}  // namespace

Receipt run_matmul_id_cuda(Context& ctx, MatmulIdRoute route, const cuda_moe::MoeArgs& g,
                           MatmulIdGroupedKernel grouped_kernel) {
  const cuda_moe::MoePlan plan = cuda_moe::plan_matmul_id_cuda(g, route, ctx.arch(), grouped_kernel);
  std::string names;
  for (const std::string& k : plan.kernels) {
    ctx.check_launchable(k);
    names += (names.empty() ? "" : "+") + k;
  }
  StreamHandle s = ctx.stream();
  const auto ranges = [&] { return MoeRanges(g); };
  if (route == MatmulIdRoute::Direct) {
    cuda_moe::launch_moe_direct(g, s);
    ctx.note_launch(plan.kernels[0], [&] {
      const MoeRanges r = ranges();
      return LaunchRanges{{r.w, r.in, r.ids, r.scales}, {r.out}};
    });
    return Receipt{matmul_id_route_name(route), names, 1};
  }
  if (plan.fused) {  // the engine alone: it sorts the routed rows and zeroes out-of-range ones itself
    engine::launch_tiled_sm90_moe(g, plan.launch, s);
    ctx.note_launch(plan.kernels[0], [&] {
      const MoeRanges r = ranges();
      return LaunchRanges{{r.w, r.in, r.ids}, {r.out}};
    });
    return Receipt{matmul_id_route_name(route), names, 1};
  }
  std::size_t next = 0;  // plan.kernels[next]: the kernel launched next
  if (!g.presorted) {
    cuda_moe::launch_moe_map(g, s);  // moe_map_count (when the rows span sorting blocks), moe_map_sort
    if (cuda_moe::moe_map_grid(g).blocks > 1)
      ctx.note_launch(plan.kernels[next++], [&] { return LaunchRanges{{ranges().ids}, {ranges().block_counts}}; });
    ctx.note_launch(plan.kernels[next++], [&] {
      const MoeRanges r = ranges();
      if (g.out_sorted) return LaunchRanges{{r.ids, r.block_counts}, {r.counts, r.rows, r.tile_counter}};
      // out: the zero rows of out-of-range ids
      return LaunchRanges{{r.ids, r.block_counts}, {r.counts, r.rows, r.out, r.tile_counter}};
    });
  }
  if (plan.staged && !g.presorted) {
    cuda_moe::launch_moe_stage_rows(g, s);
    ctx.note_launch(plan.kernels[next++], [&] {
      const MoeRanges r = ranges();
      return LaunchRanges{{r.in, r.counts, r.rows}, {r.staged}};
    });
  }
  if (plan.engine) engine::launch_tiled_sm90_moe(g, plan.launch, s);
  else cuda_moe::launch_moe_grouped(g, s);
  ctx.note_launch(plan.kernels[next++], [&] {
    const MoeRanges r = ranges();
    if (plan.staged) return LaunchRanges{{r.w, r.staged, r.counts, r.rows, r.scales}, {r.out, r.tile_counter}};
    return LaunchRanges{{r.w, r.in, r.counts, r.rows, r.scales}, {r.out}};
  });
  return Receipt{matmul_id_route_name(route), names, static_cast<int>(plan.kernels.size())};
}

void launch_moe_direct_fused(Context& ctx, const cuda_moe::MoeArgs& g) {
  using cuda_moe::MoeDirectEpi;
  if (g.fusion.epi == MoeDirectEpi::Plain || !cuda_moe::moe_direct_fusion_supported(g))
    fail(ErrorCode::Internal, "launch_moe_direct_fused: no fused epilogue the kernel takes");
  cuda_moe::launch_moe_direct(g, ctx.stream());
  ctx.note_launch(cuda_moe::moe_direct_kernel_name(g), [&] {
    const MoeRanges r(g);
    const std::int64_t routed = g.m * g.top_k;
    const bool act = g.fusion.epi == MoeDirectEpi::Activate;
    const std::int64_t out_elems = act ? routed * (g.fusion.gated ? g.n / 2 : g.n) : g.m * g.n;
    LaunchRanges lr{{r.w, r.in, r.ids}, {elems_range(g.out, g.out_dtype, out_elems)}};
    if (g.fusion.bias) lr.reads.push_back(elems_range(g.fusion.bias, g.fusion.bias_dtype, g.n_experts * g.n));
    if (!act) lr.reads.push_back(elems_range(g.fusion.tw, g.fusion.tw_dtype, routed));
    return lr;
  });
}

}  // namespace llmm::detail
