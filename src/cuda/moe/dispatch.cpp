// CUDA side of matmul_id: resolve every kernel of the route and let the context refuse any of
// them before the first launch (the seed's "nothing encoded when a pipeline cannot be resolved").
#include "core/moe/moe_dispatch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/ranges.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/moe/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

// Byte hulls of the operands of g (capture mode).
struct MoeRanges {
  ByteRange w, in, ids, out, counts, rows, staged;
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
    staged = elems_range(g.staged, g.in_dtype, g.staged ? routed * g.k : 0);  // the rows a call stages
  }
};

}  // namespace

Receipt run_matmul_id_cuda(Context& ctx, MatmulIdRoute route, const cuda_moe::MoeArgs& g,
                           MatmulIdGroupedKernel grouped_kernel) {
  StreamHandle s = ctx.stream();
  if (!cuda_moe::moe_dtypes_supported(g))
    fail(ErrorCode::Unsupported, "matmul_id: the CUDA kernels take an input of f32 or the weights' dtype (",
         dtype_name(g.w_dtype), "), got ", dtype_name(g.in_dtype));
  if (route == MatmulIdRoute::Direct) {
    const std::string name = cuda_moe::moe_direct_kernel_name(g);
    ctx.check_launchable(name);
    cuda_moe::launch_moe_direct(g, s);
    ctx.note_launch(name, [&] {
      const MoeRanges r(g);
      return LaunchRanges{{r.w, r.in, r.ids}, {r.out}};
    });
    return Receipt{matmul_id_route_name(route), name, 1};
  }
  if (g.n_experts > cuda_moe::moe_map_max_experts())
    fail(ErrorCode::InvalidArgument, "matmul_id: n_experts ", g.n_experts, " exceeds the map kernel's limit ",
         cuda_moe::moe_map_max_experts());
  // The grouped GEMM: the Hopper engine where it takes the call (measured faster: docs/performance.md,
  // MoE), else the mma.sync kernel; a forced kernel that cannot take it is refused here.
  const std::string engine_why = engine::tiled_sm90_moe_refusal(g, ctx.arch());
  if (grouped_kernel == MatmulIdGroupedKernel::TiledSm90 && !engine_why.empty())
    fail(ErrorCode::Unsupported, "matmul_id: grouped kernel tiled_sm90 cannot run (m ", g.m, ", n ", g.n, ", k ", g.k,
         ", ", dtype_name(g.w_dtype), " weights, ", dtype_name(g.in_dtype), " input): ", engine_why);
  const bool use_engine = grouped_kernel != MatmulIdGroupedKernel::MmaSync && engine_why.empty();
  const engine::TiledSm90Launch sm90 = use_engine ? engine::tiled_sm90_moe_launch(g, ctx.arch().sm_count) : engine::TiledSm90Launch{};
  const std::string map = cuda_moe::moe_map_kernel_name(g);
  const std::string grouped =
      use_engine ? engine::tiled_sm90_moe_kernel_name(g, sm90) : cuda_moe::moe_grouped_kernel_name(g);
  const bool staged = use_engine && sm90.staged;
  const std::string stage = staged ? cuda_moe::moe_stage_rows_kernel_name(g) : std::string();
  ctx.check_launchable(map);
  if (staged) ctx.check_launchable(stage);
  ctx.check_launchable(grouped);
  const auto ranges = [&] { return MoeRanges(g); };
  cuda_moe::launch_moe_map(g, s);
  ctx.note_launch(map, [&] {
    const MoeRanges r = ranges();
    return LaunchRanges{{r.ids}, {r.counts, r.rows, r.out}};  // out: the zero rows of out-of-range ids
  });
  if (staged) {
    cuda_moe::launch_moe_stage_rows(g, s);
    ctx.note_launch(stage, [&] {
      const MoeRanges r = ranges();
      return LaunchRanges{{r.in, r.counts, r.rows}, {r.staged}};
    });
  }
  if (use_engine) engine::launch_tiled_sm90_moe(g, sm90, s);
  else cuda_moe::launch_moe_grouped(g, s);
  ctx.note_launch(grouped, [&] {
    const MoeRanges r = ranges();
    if (staged) return LaunchRanges{{r.w, r.staged, r.counts, r.rows}, {r.out}};
    return LaunchRanges{{r.w, r.in, r.counts, r.rows}, {r.out}};
  });
  return Receipt{matmul_id_route_name(route), staged ? map + "+" + stage + "+" + grouped : map + "+" + grouped,
                 staged ? 3 : 2};
}

}  // namespace llmm::detail
