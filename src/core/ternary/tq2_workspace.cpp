#include "core/ternary/tq2_workspace.hpp"

#include <cstdint>
#include <memory>

#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {

BufferPool& ternary_pool(Context& ctx) {
  auto& slot = ctx.cache_slot("ternary.pool");
  if (!slot) slot = std::make_shared<BufferPool>(DeviceKind::CUDA, ctx.arch().device_index);
  return *static_cast<BufferPool*>(slot.get());
}

void* tq2_route_workspace(Context& ctx, const cuda_ternary::Tq2Args& g, std::size_t bytes, Tq2Route route,
                          const std::string& what) {
  if (!g.workspace) return ternary_pool(ctx).get("route_workspace", bytes);
  if (g.workspace_bytes < bytes)
    fail(ErrorCode::InvalidArgument, "gemm_tq2: workspace of ", g.workspace_bytes, " bytes is smaller than the ", bytes,
         " bytes route ", tq2_route_name(route), " needs for ", what, " (tq2_workspace_bytes gives it)");
  // Tq2Options documents one alignment for every route: the one tq2_dequant_lt's sections need.
  if (reinterpret_cast<std::uintptr_t>(g.workspace) % cuda_ternary::kTq2LtAlign != 0)
    fail(ErrorCode::InvalidArgument, "gemm_tq2: workspace ", g.workspace, " is not ", cuda_ternary::kTq2LtAlign,
         "-byte aligned (route ", tq2_route_name(route), ")");
  return g.workspace;
}

}  // namespace llmm::detail
