#include "cuda/dense/streamk_workspace.hpp"

#include <cuda_runtime.h>

#include <memory>

#include "llmm/buffer.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_dense {
namespace {

struct Held {
  DeviceBuffer buf;
  std::uint64_t slot_cap = 0, counter_cap = 0;  // counters first (counter_cap bytes), then the slots
};

}  // namespace

StreamKWorkspace streamk_workspace(Context& ctx, const engine::TiledSm90Launch& l) {
  constexpr const char* kWhat = "matmul: route tiled_sm90_streamk";
  const std::uint64_t slots = engine::tiled_sm90_dense_streamk_slot_bytes(l);
  const std::uint64_t counters = (engine::tiled_sm90_dense_streamk_counter_bytes(l) + 255) / 256 * 256;
  auto& slot = ctx.cache_slot("dense.streamk_workspace");
  if (!slot) slot = std::make_shared<Held>();
  Held& h = *static_cast<Held*>(slot.get());
  if (h.slot_cap < slots || h.counter_cap < counters) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(ctx.stream()), &cap);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::Cuda, kWhat, ": cannot query the stream's capture status: ", cudaGetErrorString(e));
    }
    if (cap != cudaStreamCaptureStatusNone)
      fail(ErrorCode::Unsupported, kWhat, " needs a workspace of ", slots + counters,
           " bytes, allocated outside CUDA-graph capture: make one call of this shape (or a larger one) before capturing");
    const std::uint64_t slot_cap = h.slot_cap > slots ? h.slot_cap : slots;
    const std::uint64_t counter_cap = h.counter_cap > counters ? h.counter_cap : counters;
    ctx.synchronize();  // launches in flight may still use the old buffer
    h.buf = DeviceBuffer();
    DeviceBuffer fresh(static_cast<std::size_t>(counter_cap + slot_cap), ctx.arch().device_index);
    e = cudaMemset(fresh.data(), 0, static_cast<std::size_t>(counter_cap));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::Cuda, kWhat, ": cannot zero the workspace's counters: ", cudaGetErrorString(e));
    }
    h.buf = std::move(fresh);
    h.slot_cap = slot_cap, h.counter_cap = counter_cap;
  }
  StreamKWorkspace w;
  w.base = h.buf.data();
  w.bytes = h.counter_cap + h.slot_cap;
  w.counters = static_cast<std::uint32_t*>(h.buf.data());
  w.slots = reinterpret_cast<float*>(static_cast<unsigned char*>(h.buf.data()) + h.counter_cap);
  return w;
}

}  // namespace llmm::cuda_dense
