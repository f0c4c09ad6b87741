#include "core/stream_workspace.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include "core/runtime.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"  // BufferPool

namespace llmm::detail {

char* stream_workspace(Context& ctx, const char* op, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  auto& slot = ctx.cache_slot(std::string(op) + ".workspace." + std::to_string(reinterpret_cast<std::uintptr_t>(ctx.stream())));
  if (!slot) slot = std::make_shared<BufferPool>(DeviceKind::CUDA, ctx.arch().device_index);
  auto& pool = *static_cast<BufferPool*>(slot.get());
  if (pool.capacity("ws") < bytes && cuda_stream_capturing(ctx.arch().device_index, ctx.stream()))
    fail(ErrorCode::InvalidArgument, op, ": the call needs the context's workspace grown to ", bytes,
         " bytes during CUDA-graph capture, where memory cannot be allocated: run one call of this size or larger on "
         "this stream before capturing");
  return static_cast<char*>(pool.get("ws", bytes));
}

}  // namespace llmm::detail
