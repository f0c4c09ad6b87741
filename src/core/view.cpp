// View construction, validation, extents and overlap.
#include "llmm/view.hpp"

#include <sstream>

#include "llmm/checked.hpp"
#include "llmm/error.hpp"

namespace llmm {
namespace {

View make(void* data, DType dtype, std::initializer_list<std::int64_t> shape, DeviceKind device,
          int device_index) {
  if (shape.size() > static_cast<std::size_t>(View::kMaxRank))
    fail(ErrorCode::InvalidArgument, "View: rank ", shape.size(), " exceeds ", View::kMaxRank);
  View v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.device_index = device_index;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (auto d : shape) {
    if (d < 0) fail(ErrorCode::InvalidArgument, "View: dimension ", i, " is negative (", d, ")");
    v.shape[static_cast<std::size_t>(i++)] = d;
  }
  return v;
}

}  // namespace

View View::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                      DeviceKind device, int device_index) {
  View v = make(data, dtype, shape, device, device_index);
  std::uint64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.strides[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(s);
    std::uint64_t d = static_cast<std::uint64_t>(v.dim(i));
    s = checked_mul(s, d == 0 ? 1 : d, "View::contiguous stride");
    if (s > static_cast<std::uint64_t>(INT64_MAX))
      fail(ErrorCode::InvalidArgument, "View::contiguous: stride ", s, " exceeds int64");
  }
  return v;
}

View View::strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                   std::initializer_list<std::int64_t> strides, DeviceKind device,
                   int device_index) {
  if (strides.size() != shape.size())
    fail(ErrorCode::InvalidArgument, "View::strided: ", shape.size(), " dims but ", strides.size(),
         " strides");
  View v = make(data, dtype, shape, device, device_index);
  int i = 0;
  for (auto s : strides) {
    if (s < 0) fail(ErrorCode::InvalidArgument, "View::strided: stride ", i, " is negative (", s, ")");
    v.strides[static_cast<std::size_t>(i++)] = s;
  }
  return v;
}

bool View::empty() const {
  for (int i = 0; i < rank; ++i)
    if (dim(i) == 0) return true;
  return false;
}

std::uint64_t View::numel() const {
  if (empty()) return 0;  // before multiplying: {2^62, 2^62, 0} has no element
  std::uint64_t n = 1;
  for (int i = 0; i < rank; ++i) n = checked_mul(n, to_u64(dim(i), "View::numel dim"), "View::numel");
  return n;
}

bool View::is_contiguous() const {
  if (empty()) return true;  // no element: any strides (NumPy gives empty arrays all sorts)
  __int128 expect = 1;         // the product of the inner dims can pass 2^63 on a valid view
  for (int i = rank - 1; i >= 0; --i) {
    if (dim(i) != 1 && stride(i) != expect) return false;
    expect *= dim(i);
  }
  return true;
}

std::uint64_t View::byte_extent() const {
  if (empty()) return 0;
  std::uint64_t last = 0;  // element offset of the last element
  for (int i = 0; i < rank; ++i) {
    std::uint64_t span = checked_mul(to_u64(dim(i), "View dim") - 1, to_u64(stride(i), "View stride"),
                                     "View::byte_extent");  // dim >= 1 here: the view is not empty
    last = checked_add(last, span, "View::byte_extent");
  }
  return checked_mul(checked_add(last, 1, "View::byte_extent"), dtype_size(dtype), "View::byte_extent");
}

std::string View::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << dim(i);
  os << "] strides [";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << stride(i);
  os << "] on " << (device == DeviceKind::CPU ? "cpu" : "cuda:") ;
  if (device == DeviceKind::CUDA) os << device_index;
  return os.str();
}

void validate_view(const View& v, const char* op, const char* name) {
  if (v.rank < 0 || v.rank > View::kMaxRank)
    fail(ErrorCode::InvalidArgument, op, ": ", name, " has rank ", v.rank, ", expected 0..", View::kMaxRank);
  for (int i = 0; i < v.rank; ++i) {
    if (v.dim(i) < 0)
      fail(ErrorCode::InvalidArgument, op, ": ", name, " dimension ", i, " is negative (", v.dim(i), ")");
    if (v.stride(i) < 0)
      fail(ErrorCode::InvalidArgument, op, ": ", name, " stride ", i, " is negative (", v.stride(i), ")");
  }
  if (v.empty()) return;
  try {
    (void)v.byte_extent();
  } catch (const Error&) {
    fail(ErrorCode::InvalidArgument, op, ": ", name, " byte extent overflows 64 bits: ", v.describe());
  }
  if (v.data == nullptr) fail(ErrorCode::InvalidArgument, op, ": ", name, " has null data: ", v.describe());
  auto addr = reinterpret_cast<std::uintptr_t>(v.data);
  if (addr % dtype_size(v.dtype) != 0)
    fail(ErrorCode::InvalidArgument, op, ": ", name, " pointer ", v.data, " is not aligned to its ",
         dtype_size(v.dtype), "-byte ", dtype_name(v.dtype), " elements");
  std::uint64_t ext = v.byte_extent();
  if (ext > UINTPTR_MAX - addr)
    fail(ErrorCode::InvalidArgument, op, ": ", name, " byte range wraps the address space: ", v.describe());
}

bool overlaps(const View& a, const View& b) {
  if (a.device != b.device || a.device_index != b.device_index) return false;
  if (a.empty() || b.empty()) return false;
  auto a0 = reinterpret_cast<std::uintptr_t>(a.data);
  auto b0 = reinterpret_cast<std::uintptr_t>(b.data);
  auto a1 = a0 + a.byte_extent();
  auto b1 = b0 + b.byte_extent();
  return a0 < b1 && b0 < a1;
}

}  // namespace llmm
