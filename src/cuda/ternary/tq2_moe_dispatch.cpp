// CUDA side of matmul_id_tq2: resolve every kernel of the route and let the context refuse any of
// them before the first launch, then launch on the context's stream.
#include "core/ranges.hpp"
#include "core/ternary/tq2_moe_dispatch.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/moe/launch.hpp"
#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/ternary/tq2_tiled_sm90_plan.hpp"
#include "core/ternary/tq2_workspace.hpp"
#include "cuda/ternary/tq2_dequant.hpp"
#include "cuda/ternary/tq2_moe_naive.hpp"
#include "cuda/ternary/tq2_moe_stream.hpp"
#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

// Byte hulls of the operands (capture mode).
struct Tq2MoeRanges {
  ByteRange codes, scales, scales_t, in, ids, out, counts, rows, block_counts, staged;
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
    block_counts = elems_range(g.block_counts, DType::U32, cuda_moe::moe_map_grid(g).blocks > 1 ? g.block_count_words : 0);
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
  if (route == Tq2MoeRoute::StreamSm90) {
    // K whole: one kernel, its blocks convert the activation rows they use. K in parts: the
    // staging kernel writes the activation image (and zeroes the part counters) in the context's
    // grow-only ternary workspace first; the streaming kernel reads it.
    const cuda_moe::MoeArgs& g = a.g;
    const auto c = cuda_ternary::tq2_moe_stream_config(g.m, g.top_k, g.n, g.k, g.n_experts, g.in_slot_stride != 0,
                                                       ctx.arch().sm_count);
    if (!c) fail(ErrorCode::Internal, "matmul_id_tq2: route tq2_moe_stream_sm90 was planned for sizes it cannot take");
    const std::string stage = cuda_ternary::tq2_moe_stream_stage_kernel_name(g.in_dtype),
                      kernel = cuda_ternary::tq2_moe_stream_kernel_name(*c, g.in_dtype, g.out_dtype);
    if (c->stage_in_block) {
      ctx.check_launchable(kernel);
      cuda_ternary::launch_tq2_moe_stream_sm90(a, nullptr, 0, s);
      ctx.note_launch(kernel, [&] {
        const Tq2MoeRanges r(a);
        return LaunchRanges{{r.codes, r.scales, r.scales_t, r.in, r.ids}, {r.out}};
      });
      return Receipt{tq2_moe_route_name(route), kernel, 1};
    }
    ctx.check_launchable(stage);
    ctx.check_launchable(kernel);
    void* const ws = ternary_pool(ctx).get("route_workspace", c->workspace_bytes);
    cuda_ternary::launch_tq2_moe_stream_sm90(a, ws, c->workspace_bytes, s);
    const ByteRange route_ws{ws, c->workspace_bytes};
    ctx.note_launch(stage, [&] { return LaunchRanges{{Tq2MoeRanges(a).in}, {route_ws}}; });
    ctx.note_launch(kernel, [&] {
      const Tq2MoeRanges r(a);
      return LaunchRanges{{r.codes, r.scales, r.scales_t, r.in, r.ids, route_ws}, {r.out, route_ws}};
    });
    return Receipt{tq2_moe_route_name(route), stage + "+" + kernel, 2};
  }
  if (route != Tq2MoeRoute::GroupedSm90)
    fail(ErrorCode::Internal, "matmul_id_tq2: route ", tq2_moe_route_name(route), " has no CUDA kernels");
  // moe_map (counting sort; zero rows for out-of-range ids), then the routed rows staged in
  // expert order as f16: copied by moe_stage_rows from an f16 input, or from a bf16/f32 input
  // scaled each by its own power of two (tq2_rowscale_stage, which also writes that 2^e_i in
  // staged order, the epilogue multiplying each output row back), then the engine over each
  // expert's rows.
  const cuda_moe::MoeArgs& g = a.g;
  const bool scaled = g.in_dtype != DType::F16;
  cuda_ternary::Tq2MoeArgs e = a;  // the engine's view: f16 staged rows
  std::size_t alpha_bytes = 0;
  float* alpha = nullptr;
  if (scaled) {
    constexpr const char* kWhat = "matmul_id_tq2 row scales";
    alpha_bytes = to_usize(checked_mul(checked_mul(to_u64(g.m, kWhat), to_u64(g.top_k, kWhat), kWhat), 4, kWhat), kWhat);
    alpha = static_cast<float*>(ternary_pool(ctx).get("route_workspace", alpha_bytes));
    e.g.in_dtype = DType::F16;  // the engine and moe_map read only the staged f16 rows, not in
  }
  // moe_map reads neither weights nor input; it writes the zero rows of out-of-range ids in the
  // output dtype, and the MoE dtype contract pairs a bf16 output with bf16 weights and input.
  cuda_moe::MoeArgs mg = e.g;
  if (g.out_dtype == DType::BF16) mg.w_dtype = mg.in_dtype = DType::BF16;
  const engine::TiledSm90Launch l = engine::tiled_sm90_tq2_moe_launch(e.g, ctx.arch().sm_count);
  const std::vector<std::string> maps = cuda_moe::moe_map_kernel_names(mg);
  const std::string stage = scaled ? "tq2_rowscale_stage_" + std::string(dtype_name(g.in_dtype)) + "_f16"
                                   : cuda_moe::moe_stage_rows_kernel_name(e.g),
                    gemm = engine::tiled_sm90_tq2_moe_kernel_name(g.out_dtype);
  // The staging kernels write up to m * top_k rows of k f16: checked here, before any launch
  // (the engine's own check comes after them).
  if (!g.staged || !g.counts || !g.rows || g.k < 1 || g.staged_bytes / (g.k * 2) < g.m * g.top_k)
    fail(ErrorCode::Internal, "matmul_id_tq2: the grouped route's scratch cannot stage every routed row");
  std::string names;
  for (const std::string& k : maps) {
    ctx.check_launchable(k);
    names += k + "+";
  }
  ctx.check_launchable(stage);
  ctx.check_launchable(gemm);
  const ByteRange alpha_range{alpha, alpha_bytes};
  cuda_moe::launch_moe_map(mg, s);  // moe_map_count (when the rows span sorting blocks), moe_map_sort
  if (maps.size() > 1) ctx.note_launch(maps.front(), [&] { return LaunchRanges{{Tq2MoeRanges(a).ids}, {Tq2MoeRanges(a).block_counts}}; });
  ctx.note_launch(maps.back(), [&] {
    const Tq2MoeRanges r(a);
    return LaunchRanges{{r.ids, r.block_counts}, {r.counts, r.rows, r.out}};
  });
  if (scaled) {
    cuda_ternary::Tq2RowGather rg;
    rg.rows = g.rows, rg.counts = g.counts, rg.n_experts = static_cast<int>(g.n_experts), rg.top_k = static_cast<int>(g.top_k);
    rg.token_stride = g.in_token_stride, rg.slot_stride = g.in_slot_stride, rg.routed = g.m * g.top_k;
    cuda_ternary::launch_tq2_rowscale_stage_f16(g.in, g.in_dtype, g.k, rg, e.g.staged, alpha, s);
  } else {
    cuda_moe::launch_moe_stage_rows(e.g, s);
  }
  ctx.note_launch(stage, [&] {
    const Tq2MoeRanges r(e);
    LaunchRanges lr{{Tq2MoeRanges(a).in, r.counts, r.rows}, {r.staged}};
    if (scaled) lr.writes.push_back(alpha_range);
    return lr;
  });
  engine::launch_tiled_sm90_tq2_moe(e, alpha, l, s);
  ctx.note_launch(gemm, [&] {
    const Tq2MoeRanges r(e);
    LaunchRanges lr{{r.codes, r.scales_t, r.staged, r.counts, r.rows}, {r.out}};
    if (scaled) lr.reads.push_back(alpha_range);
    return lr;
  });
  return Receipt{tq2_moe_route_name(route), names + stage + "+" + gemm, static_cast<int>(maps.size()) + 2};
}

}  // namespace llmm::detail
