#include "cuda/ternary/tq2_tiled_sm90.hpp"

#include <string>

#include "core/ranges.hpp"
#include "core/ternary/tq2_tiled_sm90_plan.hpp"
#include "core/ternary/tq2_workspace.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/ternary/tq2_dequant.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm::detail {

Receipt run_tq2_tiled_sm90(Context& ctx, const cuda_ternary::Tq2Args& g, const std::function<void()>& before,
                           bool split) {
  const Tq2Route route = split ? Tq2Route::TiledSm90SplitK : Tq2Route::TiledSm90;
  const cuda_ternary::Tq2TiledSm90Plan p =
      cuda_ternary::tq2_tiled_sm90_plan(g.m, g.n, g.k, g.in_dtype, g.out_dtype, g.exact, ctx.arch().sm_count, split);
  if (!p.scaled && (reinterpret_cast<std::uintptr_t>(g.in) % 16 != 0 || g.in_ld % 8 != 0))
    fail(ErrorCode::Unsupported, "gemm_tq2: route ", tq2_route_name(route), " reads an f16 input by TMA: it needs a "
         "16-byte aligned base and a row stride that is a multiple of 8 elements, got ", g.in, " and ", g.in_ld);
  unsigned char* ws = nullptr;
  if (p.bytes > 0)
    ws = static_cast<unsigned char*>(tq2_route_workspace(ctx, g, p.bytes, route,
                                                         "m " + std::to_string(g.m) + ", n " + std::to_string(g.n) +
                                                             ", k " + std::to_string(g.k) + " (" +
                                                             std::string(dtype_name(g.in_dtype)) + ")"));
  const bool parts = p.launch.parts > 1;
  const std::string zero = parts ? "tq2_split_counters_zero" : "";
  std::string names;
  for (const std::string& n : {p.rowscale_kernel, zero, p.engine_kernel})
    if (!n.empty()) {
      ctx.check_launchable(n);
      names += (names.empty() ? "" : "+") + n;
    }
  if (before) before();

  StreamHandle s = ctx.stream();
  const ByteRange route_ws{ws, p.bytes};
  cuda_ternary::Tq2Args e = g;  // the engine's view: an f16 activation
  const float* alpha = nullptr;
  int launched = 0;
  if (p.scaled) {
    float* const row_alpha = reinterpret_cast<float*>(ws + p.alpha_off);
    const cuda_ternary::Tq2LtInput x{g.in, g.in_dtype, g.m, g.k, g.in_ld};
    cuda_ternary::launch_tq2_rowscale_f16(x, 1, ws + p.part_off, 0, row_alpha, s);
    ctx.note_launch(p.rowscale_kernel, [&] { return LaunchRanges{{tq2_ranges(g).reads[0]}, {route_ws}}; });
    e.in = ws + p.part_off, e.in_dtype = DType::F16, e.in_ld = g.k;
    alpha = row_alpha;
    launched = 1;
  }
  float* const slots = parts ? reinterpret_cast<float*>(ws + p.slots_off) : nullptr;
  auto* const counters = parts ? reinterpret_cast<std::uint32_t*>(ws + p.counters_off) : nullptr;
  engine::launch_tiled_sm90_tq2(e, alpha, p.launch, s, slots, counters);  // with parts: a memset, then the kernel
  if (parts) {
    ctx.note_launch(zero, [&] { return LaunchRanges{{}, {ByteRange{counters, p.counter_bytes}}}; });
    ++launched;
  }
  ctx.note_launch(p.engine_kernel, [&] {
    LaunchRanges r = tq2_ranges(g);
    r.reads.push_back(elems_range(g.scales_t, DType::F16, (g.k / 128) * g.scales_t_ld));
    if (p.bytes > 0) r.reads.push_back(route_ws);
    if (parts) r.writes.push_back(route_ws);  // the parts' slots and counters
    return r;
  });
  return Receipt{tq2_route_name(route), names, launched + 1};
}

}  // namespace llmm::detail
