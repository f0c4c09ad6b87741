// View: a non-owning strided tensor (pointer, dtype, device, shape, strides in elements).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "llmm/dtype.hpp"

namespace llmm {

enum class DeviceKind : std::uint8_t { CPU, CUDA };

struct View {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;  // byte offsets are expressed through the pointer
  DType dtype = DType::F32;
  DeviceKind device = DeviceKind::CPU;
  int device_index = 0;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // elements, >= 0

  // Row-major contiguous view. Throws on rank > 4 or a negative dimension.
  static View contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                         DeviceKind device = DeviceKind::CPU, int device_index = 0);
  // Explicit strides (same length as shape).
  static View strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                      std::initializer_list<std::int64_t> strides,
                      DeviceKind device = DeviceKind::CPU, int device_index = 0);

  std::int64_t dim(int i) const { return shape[static_cast<std::size_t>(i)]; }
  std::int64_t stride(int i) const { return strides[static_cast<std::size_t>(i)]; }
  bool empty() const;                 // some dimension is 0
  std::uint64_t numel() const;        // checked
  bool is_contiguous() const;         // row-major, no padding
  // Bytes from `data` to one past the last addressable element (0 when empty). Checked.
  std::uint64_t byte_extent() const;
  std::string describe() const;       // "f16[3, 4] strides [4, 1] on cuda:0"
};

// Throws InvalidArgument, naming `op` and `name`, when the view is malformed: rank outside
// 0..4, negative dims or strides, null data with elements, or a byte extent that overflows.
void validate_view(const View& v, const char* op, const char* name);

// True when the byte ranges [data, data + byte_extent) of two non-empty views on the same
// device intersect (a conservative test: interleaved strided views also count as overlapping).
bool overlaps(const View& a, const View& b);

}  // namespace llmm
