// CUDA side of gemm_tq2: name the route's kernel, let the context refuse it, then launch.
#include "core/ternary/tq2_dispatch.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "cuda/ternary/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {

Receipt run_tq2_cuda(Context& ctx, Tq2Route route, const cuda_ternary::Tq2Args& g, const std::function<void()>& before) {
  std::string name;
  if (!cuda_ternary::tq2_args_ok(g)) fail(ErrorCode::Internal, "gemm_tq2: validated arguments rejected by the kernels");
  switch (route) {
    case Tq2Route::Naive: name = cuda_ternary::tq2_naive_kernel_name(g); break;
    case Tq2Route::Stream:
      if (!cuda_ternary::tq2_stream_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_stream planned for m ", g.m);
      name = cuda_ternary::tq2_stream_kernel_name(g);
      break;
    case Tq2Route::StreamV2:
      if (!cuda_ternary::tq2_stream_v2_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_stream_v2 planned for m ", g.m);
      name = cuda_ternary::tq2_stream_v2_kernel_name(g);
      break;
    case Tq2Route::Tiled:
      if (!cuda_ternary::tq2_tiled_supports(g)) fail(ErrorCode::Internal, "gemm_tq2: tq2_tiled planned for unsupported args");
      name = cuda_ternary::tq2_tiled_kernel_name(g);
      break;
    default: fail(ErrorCode::Internal, "gemm_tq2: route ", tq2_route_name(route), " has no CUDA kernel");
  }
  ctx.check_launchable(name);
  if (before) before();
  StreamHandle s = ctx.stream();
  switch (route) {
    case Tq2Route::Naive: cuda_ternary::launch_tq2_naive(g, s); break;
    case Tq2Route::Stream: cuda_ternary::launch_tq2_stream(g, s); break;
    case Tq2Route::StreamV2: cuda_ternary::launch_tq2_stream_v2(g, s); break;
    case Tq2Route::Tiled: cuda_ternary::launch_tq2_tiled(g, s); break;
    default: break;
  }
  ctx.note_launch(name);
  return Receipt{tq2_route_name(route), name, 1};
}

}  // namespace llmm::detail
