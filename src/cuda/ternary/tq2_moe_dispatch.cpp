// CUDA side of matmul_id_tq2: resolve every kernel of the route and let the context refuse any of
// them before the first launch, then launch on the context's stream.
#include "core/ranges.hpp"
#include "core/ternary/tq2_moe_dispatch.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/moe/launch.hpp"
#include "cuda/ternary/tq2_moe_naive.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

// Byte hulls of the operands (capture mode).
struct Tq2MoeRanges {
  ByteRange codes, scales, scales_t, in, ids, out, counts, rows, staged;
  explicit Tq2MoeRanges(const cuda_ternary::Tq2MoeArgs& a) {
    const cuda_moe::MoeArgs& g = a.g;
    const std::int64_t routed = g.m * g.top_k, stack = g.n_experts * g.n;
    codes = elems_range(a.codes, DType::U8, stack * (g.k / 4));
    scales = elems_range(a.scales, DType::F16, stack * (g.k / 128));
    scales_t = elems_range(a.scales_t, DType::F16, (g.k / 128) * a.scales_t_ld);
    in = elems_range(g.in, g.in_dtype, (g.m - 1) * g.in_token_stride + (g.top_k - 1) * g.in_slot_stride + g.k);
    ids = elems_range(g.ids, g.ids64 ? DType::I64 : DType::U32, routed);
    out = elems_range(g.out, g.out_dtype, routed * g.n);
    counts = elems_range(g.counts, DType::U32, g.counts ? g.n_experts : 0);
    rows = elems_range(g.rows, DType::U32, g.rows ? routed : 0);
    staged = elems_range(g.staged, g.in_dtype, g.staged ? routed * g.k : 0);
  }
};

}  // namespace

Receipt run_matmul_id_tq2_cuda(Context& ctx, Tq2MoeRoute route, const cuda_ternary::Tq2MoeArgs& a) {
  StreamHandle s = ctx.stream();
  if (route == Tq2MoeRoute::Naive) {
    const std::string name = cuda_ternary::tq2_moe_naive_kernel_name(a);
    ctx.check_launchable(name);
    cuda_ternary::launch_tq2_moe_naive(a, s);
    ctx.note_launch(name, [&] {
      const Tq2MoeRanges r(a);
      return LaunchRanges{{r.codes, r.scales, r.in, r.ids}, {r.out}};
    });
    return Receipt{tq2_moe_route_name(route), name, 1};
  }
  if (route != Tq2MoeRoute::GroupedSm90)
    fail(ErrorCode::Internal, "matmul_id_tq2: route ", tq2_moe_route_name(route), " has no CUDA kernels");
  // moe_map (counting sort; zero rows for out-of-range ids), the routed rows staged in expert
  // order, then the engine over each expert's rows.
  const engine::TiledSm90Launch l = engine::tiled_sm90_tq2_moe_launch(a.g, ctx.arch().sm_count);
  const std::string map = cuda_moe::moe_map_kernel_name(a.g), stage = cuda_moe::moe_stage_rows_kernel_name(a.g),
                    gemm = engine::tiled_sm90_tq2_moe_kernel_name(a.g.out_dtype);
  ctx.check_launchable(map);
  ctx.check_launchable(stage);
  ctx.check_launchable(gemm);
  cuda_moe::launch_moe_map(a.g, s);
  ctx.note_launch(map, [&] {
    const Tq2MoeRanges r(a);
    return LaunchRanges{{r.ids}, {r.counts, r.rows, r.out}};
  });
  cuda_moe::launch_moe_stage_rows(a.g, s);
  ctx.note_launch(stage, [&] {
    const Tq2MoeRanges r(a);
    return LaunchRanges{{r.in, r.counts, r.rows}, {r.staged}};
  });
  engine::launch_tiled_sm90_tq2_moe(a, l, s);
  ctx.note_launch(gemm, [&] {
    const Tq2MoeRanges r(a);
    return LaunchRanges{{r.codes, r.scales_t, r.staged, r.counts, r.rows}, {r.out}};
  });
  return Receipt{tq2_moe_route_name(route), map + "+" + stage + "+" + gemm, 3};
}

}  // namespace llmm::detail
