// CUDA side of gemm_tq2: name the route's kernel, let the context refuse it, then launch.
#include <memory>
#include <string>

#include "core/ranges.hpp"
#include "core/ternary/tq2_dispatch.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "core/ternary/tq2_workspace.hpp"
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_dequant_lt.hpp"
#include "cuda/ternary/tq2_tiled_sm90.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm::detail {

Receipt run_tq2_cuda(Context& ctx, Tq2Route route, const cuda_ternary::Tq2Args& g, const std::function<void()>& before) {
  std::string name;
  if (!cuda_ternary::tq2_args_ok(g)) fail(ErrorCode::Internal, "gemm_tq2: validated arguments rejected by the kernels");
  if (route == Tq2Route::DequantLt) return run_tq2_dequant_lt(ctx, g, before);  // several kernels
  if (route == Tq2Route::TiledSm90 || route == Tq2Route::TiledSm90SplitK)
    return run_tq2_tiled_sm90(ctx, g, before, route == Tq2Route::TiledSm90SplitK);
  switch (route) {
    case Tq2Route::StreamV2:
      if (!cuda_ternary::tq2_stream_v2_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_stream_v2 planned for m ", g.m);
      name = cuda_ternary::tq2_stream_v2_kernel_name(g);
      break;
    case Tq2Route::StreamV4:
      if (!cuda_ternary::tq2_stream_v4_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_stream_v4 planned for m ", g.m);
      name = cuda_ternary::tq2_stream_v4_kernel_name(g);
      break;
    case Tq2Route::StreamV5:
      if (!cuda_ternary::tq2_stream_v5_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_stream_v5 planned for m ", g.m);
      name = cuda_ternary::tq2_stream_v5_kernel_name(g);
      break;
    case Tq2Route::Tiled:
      if (!cuda_ternary::tq2_tiled_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_tiled planned for unsupported args");
      name = cuda_ternary::tq2_tiled_kernel_name(g);
      break;
    default: fail(ErrorCode::Internal, "gemm_tq2: route ", tq2_route_name(route), " has no CUDA kernel");
  }
  // tq2_stream_v2 at m >= 3, tq2_stream_v4 and tq2_stream_v5 first stage the activation (a first
  // kernel) in a workspace: the caller's, or the context's grow-only pool (resolved here, before
  // anything is enqueued).
  cuda_ternary::Tq2Args gs = g;
  int kernels = 1;
  const bool v2_staged = route == Tq2Route::StreamV2 && cuda_ternary::tq2_stream_v2_stage_bytes(g) > 0;
  std::string stage_name;
  if (v2_staged) stage_name = cuda_ternary::tq2_stream_v2_stage_kernel_name(g);
  if (route == Tq2Route::StreamV4) stage_name = cuda_ternary::tq2_stream_v4_stage_kernel_name(g);
  if (route == Tq2Route::StreamV5) stage_name = cuda_ternary::tq2_stream_v5_stage_kernel_name(g);
  if (!stage_name.empty()) {
    const std::size_t bytes = v2_staged                       ? cuda_ternary::tq2_stream_v2_stage_bytes(g)
                              : route == Tq2Route::StreamV4 ? cuda_ternary::tq2_stream_v4_stage_bytes(g.m, g.k)
                                                            : cuda_ternary::tq2_stream_v5_workspace_bytes(g.m, g.n, g.k);
    ctx.check_launchable(stage_name);
    gs.workspace = tq2_route_workspace(ctx, g, bytes, route, "m " + std::to_string(g.m) + ", k " + std::to_string(g.k));
    gs.workspace_bytes = bytes;
    kernels = 2;
  }
  ctx.check_launchable(name);
  if (before) before();
  StreamHandle s = ctx.stream();
  switch (route) {
    case Tq2Route::StreamV2: cuda_ternary::launch_tq2_stream_v2(gs, s); break;
    case Tq2Route::StreamV4: cuda_ternary::launch_tq2_stream_v4(gs, s); break;
    case Tq2Route::StreamV5: cuda_ternary::launch_tq2_stream_v5(gs, s); break;
    case Tq2Route::Tiled: cuda_ternary::launch_tq2_tiled(g, s); break;
    default: break;
  }
  const ByteRange staged{gs.workspace, kernels == 2 ? gs.workspace_bytes : 0};
  // v5's staging kernel also zeroes the band counters (in the workspace) and its main kernel
  // writes partials there: the whole workspace is written by both.
  if (kernels == 2)
    ctx.note_launch(stage_name, [&] {
      return LaunchRanges{{tq2_ranges(g).reads[0]}, {staged}};  // the activation, converted once
    });
  ctx.note_launch(name, [&] {
    LaunchRanges r = tq2_ranges(g);
    if (kernels == 2) r.reads.push_back(staged);
    if (route == Tq2Route::StreamV5) {
      r.reads.push_back(elems_range(g.scales_t, DType::F16, (g.k / 128) * g.scales_t_ld));
      r.writes.push_back(staged);
    }
    return r;
  });
  return Receipt{tq2_route_name(route), name, kernels};
}

}  // namespace llmm::detail
