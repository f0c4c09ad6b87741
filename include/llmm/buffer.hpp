// RAII memory: device buffers (cudaMalloc, never managed memory) and pinned host buffers.
#pragma once
#include <cstddef>

#include "llmm/view.hpp"

namespace llmm {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, int device = 0);  // throws OutOfMemory / Cuda
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  int device() const { return device_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Synchronous copies for tests, examples and benchmark setup (not for ops).
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);

}  // namespace llmm
