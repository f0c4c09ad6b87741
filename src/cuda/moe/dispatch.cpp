// CUDA side of matmul_id: resolve every kernel of the route and let the context refuse any of
// them before the first launch (the seed's "nothing encoded when a pipeline cannot be resolved").
#include "core/moe/moe_dispatch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "cuda/moe/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {

Receipt run_matmul_id_cuda(Context& ctx, MatmulIdRoute route, const cuda_moe::MoeArgs& g) {
  StreamHandle s = ctx.stream();
  if (!cuda_moe::moe_dtypes_supported(g))
    fail(ErrorCode::Unsupported, "matmul_id: the CUDA kernels take an input of f32 or the weights' dtype (",
         dtype_name(g.w_dtype), "), got ", dtype_name(g.in_dtype));
  if (route == MatmulIdRoute::Direct) {
    const std::string name = cuda_moe::moe_direct_kernel_name(g);
    ctx.check_launchable(name);
    cuda_moe::launch_moe_direct(g, s);
    ctx.note_launch(name);
    return Receipt{matmul_id_route_name(route), name, 1};
  }
  if (g.n_experts > cuda_moe::moe_map_max_experts())
    fail(ErrorCode::InvalidArgument, "matmul_id: n_experts ", g.n_experts, " exceeds the map kernel's limit ",
         cuda_moe::moe_map_max_experts());
  const std::string map = cuda_moe::moe_map_kernel_name(g), grouped = cuda_moe::moe_grouped_kernel_name(g);
  ctx.check_launchable(map);
  ctx.check_launchable(grouped);
  cuda_moe::launch_moe_map(g, s);
  ctx.note_launch(map);
  cuda_moe::launch_moe_grouped(g, s);
  ctx.note_launch(grouped);
  return Receipt{matmul_id_route_name(route), map + "+" + grouped, 2};
}

}  // namespace llmm::detail
