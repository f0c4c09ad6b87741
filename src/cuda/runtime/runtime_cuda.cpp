// CUDA runtime seam: device properties, streams, cuBLASLt handles, allocations.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/runtime.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaErrorMemoryAllocation)
    fail(ErrorCode::OutOfMemory, what, ": ", cudaGetErrorString(e));
  if (e != cudaSuccess) fail(ErrorCode::Cuda, what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// Makes `device` current for the scope (ops may be called from threads with another one current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }

 private:
  int prev_ = 0;
};

int attr(cudaDeviceAttr a, int device) {
  int v = 0;
  check(cudaDeviceGetAttribute(&v, a, device), "cudaDeviceGetAttribute");
  return v;
}

}  // namespace

bool cuda_built() noexcept { return true; }

bool cuda_device_present() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

void cuda_fill_arch(int device, ArchInfo& arch) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    fail(ErrorCode::Cuda, "Context::cuda: no CUDA device is visible");
  }
  if (device < 0 || device >= n)
    fail(ErrorCode::InvalidArgument, "Context::cuda: device ", device, " out of range (", n, " devices)");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  arch.kind = DeviceKind::CUDA;
  arch.device_index = device;
  arch.name = p.name;
  arch.cc_major = p.major;
  arch.cc_minor = p.minor;
  arch.sm_count = p.multiProcessorCount;
  arch.l2_bytes = p.l2CacheSize;
  arch.smem_per_block_optin = static_cast<std::int64_t>(p.sharedMemPerBlockOptin);
  arch.global_mem_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
  arch.sm_clock_khz = attr(cudaDevAttrClockRate, device);
  arch.mem_clock_khz = attr(cudaDevAttrMemoryClockRate, device);
  arch.mem_bus_width_bits = attr(cudaDevAttrGlobalMemoryBusWidth, device);
}

StreamHandle cuda_create_stream(int device) {
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}

void cuda_destroy_stream(int device, StreamHandle s) noexcept {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  cudaStreamDestroy(s);
  cudaSetDevice(prev);
}

void cuda_sync(int device, StreamHandle s) {
  DeviceGuard g(device);
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

bool cuda_stream_capturing(int device, StreamHandle s) {
  DeviceGuard g(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

void* cublaslt_create(int device) {
  DeviceGuard g(device);
  cublasLtHandle_t h = nullptr;
  cublasStatus_t st = cublasLtCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) fail(ErrorCode::Cuda, "cublasLtCreate failed with status ", static_cast<int>(st));
  return h;
}

void cublaslt_destroy(void* h) noexcept { cublasLtDestroy(static_cast<cublasLtHandle_t>(h)); }

void* cuda_alloc(std::size_t bytes, int device) {
  DeviceGuard g(device);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
      fail(ErrorCode::OutOfMemory, "DeviceBuffer: cudaMalloc of ", bytes, " bytes on device ", device, " failed");
    check(e, "cudaMalloc");
  }
  return p;
}

void cuda_free(void* p, int device) noexcept {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  cudaFree(p);
  cudaSetDevice(prev);
}

void* cuda_alloc_pinned(std::size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::OutOfMemory, "PinnedBuffer: cudaMallocHost of ", bytes, " bytes failed: ", cudaGetErrorString(e));
  }
  return p;
}

void cuda_free_pinned(void* p) noexcept { cudaFreeHost(p); }

void cuda_copy(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
  // cudaMemcpy from pageable memory may return before the DMA lands, and work on a non-blocking
  // stream does not wait for it: make these setup copies complete before returning.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemcpy");
}

void cuda_copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
}

}  // namespace llmm::detail
