// Internal seam between host code and the CUDA runtime. Implemented by
// src/cuda/runtime/runtime_cuda.cpp when built with CUDA, else by src/core/runtime_nocuda.cpp
// (every call there refuses with ErrorCode::Unsupported).
#pragma once
#include <cstddef>

#include "llmm/context.hpp"

namespace llmm::detail {

bool cuda_built() noexcept;
bool cuda_device_present() noexcept;
void cuda_fill_arch(int device, ArchInfo& arch);
StreamHandle cuda_create_stream(int device);
void cuda_destroy_stream(int device, StreamHandle s) noexcept;
void cuda_sync(int device, StreamHandle s);
bool cuda_stream_capturing(int device, StreamHandle s);  // s is being captured into a CUDA graph
void* cublaslt_create(int device);
void cublaslt_destroy(void* handle) noexcept;
void* cuda_alloc(std::size_t bytes, int device);
void cuda_free(void* p, int device) noexcept;
void* cuda_alloc_pinned(std::size_t bytes);
void cuda_free_pinned(void* p) noexcept;
void cuda_copy(void* dst, const void* src, std::size_t bytes);  // cudaMemcpyDefault, synchronous
void cuda_copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s);  // ordered on s

}  // namespace llmm::detail
