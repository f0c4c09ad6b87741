// RAII device and pinned buffers over the runtime seam.
#include "llmm/buffer.hpp"

#include <utility>

#include "runtime.hpp"

namespace llmm {

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device)
    : ptr_(bytes ? detail::cuda_alloc(bytes, device) : nullptr), bytes_(bytes), device_(device) {}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() { reset(); }
void DeviceBuffer::reset() {
  if (ptr_) detail::cuda_free(ptr_, device_);
  ptr_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes)
    : ptr_(bytes ? detail::cuda_alloc_pinned(bytes) : nullptr), bytes_(bytes) {}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
PinnedBuffer::~PinnedBuffer() { reset(); }
void PinnedBuffer::reset() {
  if (ptr_) detail::cuda_free_pinned(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes) detail::cuda_copy(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) detail::cuda_copy(dst, src, bytes);
}

}  // namespace llmm
