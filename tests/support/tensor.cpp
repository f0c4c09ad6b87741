#include "tensor.hpp"

#include "llmm/checked.hpp"

namespace llmm::test {

double HostTensor::get(std::int64_t i) const { return load_as_double(view.data, view.dtype, i); }

HostTensor host_tensor(DType dtype, std::initializer_list<std::int64_t> shape) {
  HostTensor t;
  t.view = View::contiguous(nullptr, dtype, shape);
  t.bytes.resize(to_usize(std::max<std::uint64_t>(t.view.byte_extent(), 16), "host_tensor"));
  t.view.data = t.bytes.data();
  return t;
}

HostTensor host_tensor_3d(DType dtype, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                          std::int64_t pad_cols, std::int64_t pad_batch, bool batch_stride_zero) {
  std::int64_t ld = cols + pad_cols;
  std::int64_t bstride = batch_stride_zero ? 0 : rows * ld + pad_batch;
  HostTensor t;
  t.view = View::strided(nullptr, dtype, {batch, rows, cols}, {bstride, ld, 1});
  t.bytes.resize(to_usize(std::max<std::uint64_t>(t.view.byte_extent(), 16), "host_tensor_3d"));
  t.view.data = t.bytes.data();
  return t;
}

DeviceTensor to_device(const HostTensor& h, int device) {
  DeviceTensor d{DeviceBuffer(h.bytes.size(), device), h.view};
  copy_to_device(d.buffer.data(), h.bytes.data(), h.bytes.size());
  d.view.data = d.buffer.data();
  d.view.device = DeviceKind::CUDA;
  d.view.device_index = device;
  return d;
}

void to_host(const DeviceTensor& d, HostTensor& h) { copy_to_host(h.bytes.data(), d.buffer.data(), h.bytes.size()); }

}  // namespace llmm::test
