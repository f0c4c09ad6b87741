// CPU-only build: every CUDA entry point refuses with ErrorCode::Unsupported.
#include "llmm/error.hpp"
#include "runtime.hpp"

namespace llmm::detail {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  fail(ErrorCode::Unsupported, what, ": llmm was built without CUDA (LLMM_CUDA=OFF)");
}
}  // namespace

bool cuda_built() noexcept { return false; }
bool cuda_device_present() noexcept { return false; }
void cuda_fill_arch(int, ArchInfo&) { no_cuda("Context::cuda"); }
StreamHandle cuda_create_stream(int) { no_cuda("Context::cuda"); }
void cuda_destroy_stream(int, StreamHandle) noexcept {}
void cuda_sync(int, StreamHandle) { no_cuda("Context::synchronize"); }
bool cuda_stream_capturing(int, StreamHandle) { return false; }
void* cublaslt_create(int) { no_cuda("Context::cublaslt_handle"); }
void cublaslt_destroy(void*) noexcept {}
void* cuda_alloc(std::size_t, int) { no_cuda("DeviceBuffer"); }
void cuda_free(void*, int) noexcept {}
void* cuda_alloc_pinned(std::size_t) { no_cuda("PinnedBuffer"); }
void cuda_free_pinned(void*) noexcept {}
void cuda_copy(void*, const void*, std::size_t) { no_cuda("copy_to_device/copy_to_host"); }
void cuda_copy_async(void*, const void*, std::size_t, StreamHandle) { no_cuda("cuda_copy_async"); }

}  // namespace llmm::detail
