// Host and device test tensors: owned bytes plus a View, with optional padding.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "llmm/buffer.hpp"
#include "llmm/view.hpp"

namespace llmm::test {

struct HostTensor {
  std::vector<unsigned char> bytes;
  View view;
  double get(std::int64_t flat_index) const;  // element at a flat offset (in elements)
};

// Row-major contiguous host tensor.
HostTensor host_tensor(DType dtype, std::initializer_list<std::int64_t> shape);
// 3-D [batch, rows, cols] with `pad_cols` extra elements after each row and `pad_batch`
// extra elements after each matrix; batch_stride_zero makes every batch alias batch 0.
HostTensor host_tensor_3d(DType dtype, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                          std::int64_t pad_cols = 0, std::int64_t pad_batch = 0,
                          bool batch_stride_zero = false);

// A device copy of a host tensor's whole byte range, with the same shape and strides.
struct DeviceTensor {
  DeviceBuffer buffer;
  View view;
};
DeviceTensor to_device(const HostTensor& h, int device = 0);
// Copies the device bytes back into `h` (same layout as when uploaded).
void to_host(const DeviceTensor& d, HostTensor& h);

}  // namespace llmm::test
