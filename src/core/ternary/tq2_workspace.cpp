#include "core/ternary/tq2_workspace.hpp"

#include <cstdint>
#include <memory>

#include "llmm/error.hpp"

namespace llmm::detail {

namespace {
constexpr std::uintptr_t kWorkspaceAlign = 256;  // Tq2Options::workspace's documented alignment
}

BufferPool& ternary_pool(Context& ctx) {
  auto& slot = ctx.cache_slot("ternary.pool");
  if (!slot) slot = std::make_shared<BufferPool>(DeviceKind::CUDA, ctx.arch().device_index);
  return *static_cast<BufferPool*>(slot.get());
}

void* tq2_route_workspace(Context& ctx, const cuda_ternary::Tq2Args& g, std::size_t bytes, const char* route,
                          const std::string& what) {
  if (!g.workspace) return ternary_pool(ctx).get("route_workspace", bytes);
  if (g.workspace_bytes < bytes)
    fail(ErrorCode::InvalidArgument, "gemm_tq2: workspace of ", g.workspace_bytes, " bytes is smaller than the ", bytes,
         " bytes route ", route, " needs for ", what, " (tq2_workspace_bytes gives it)");
  if (reinterpret_cast<std::uintptr_t>(g.workspace) % kWorkspaceAlign != 0)
    fail(ErrorCode::InvalidArgument, "gemm_tq2: workspace ", g.workspace, " is not ", kWorkspaceAlign,
         "-byte aligned (route ", route, ")");
  return g.workspace;
}

}  // namespace llmm::detail
