// llmm._llmm: thin nanobind bindings. Tensors arrive as DLPack-capable arrays (NumPy on the CPU,
// torch/CuPy/JAX on CUDA); each becomes an llmm::View without a copy. Output allocation and
// framework conveniences live in python/llmm/__init__.py.
//
// Every argument is taken as a plain Python object and converted here, with llmm's own messages:
// nanobind's "incompatible function arguments" never reaches a caller that passes the right
// number of arguments. The rules:
//   - arrays are imported without any conversion (no copy, ever): inputs as read-only views,
//     outputs as writable ones (a read-only output is refused, never written through a copy);
//   - a non-array where an array is expected, a non-int size, a non-str option: TypeError whose
//     message starts with "llmm.<op>: <argument>";
//   - a bad value (negative or too large size, unknown option, byte strides DLPack cannot
//     describe, read-only output, unsupported dtype or device): llmm.Error naming op and argument.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi.hpp"
#include "llmm/llmm.hpp"

namespace nb = nanobind;
using namespace llmm;

namespace {

using detail::concat;

constexpr std::uint64_t kU32Max = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kI64Max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

// ---------------------------------------------------------------------------------------------
// Argument conversion

std::string tp_name(nb::handle h) { return Py_TYPE(h.ptr())->tp_name; }

[[noreturn]] void type_error(const std::string& msg) { throw nb::type_error(msg.c_str()); }

std::string py_str(nb::handle h) {
  PyObject* s = PyObject_Str(h.ptr());
  if (!s) {
    PyErr_Clear();
    return "<" + tp_name(h) + ">";
  }
  nb::object o = nb::steal(s);
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) {
    PyErr_Clear();
    return "<" + tp_name(h) + ">";
  }
  return c;
}

// A non-negative Python int (or an object with __index__: NumPy integers) up to `hi`, as u64.
// `ctype` names the C++ type the value must fit, for the message.
std::uint64_t uint_arg(nb::handle h, const char* op, const char* name, std::uint64_t hi, const char* ctype) {
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    type_error(concat(op, ": ", name, " must be an int, got ", tp_name(h)));
  nb::object v = nb::steal(PyNumber_Index(h.ptr()));
  if (!v.is_valid()) {
    PyErr_Clear();
    type_error(concat(op, ": ", name, " must be an int, got ", tp_name(h)));
  }
  nb::object zero = nb::int_(0);
  const int negative = PyObject_RichCompareBool(v.ptr(), zero.ptr(), Py_LT);
  if (negative < 0) {
    PyErr_Clear();
    type_error(concat(op, ": ", name, " must be an int, got ", tp_name(h)));
  }
  if (negative) fail(ErrorCode::InvalidArgument, op, ": ", name, " ", py_str(v), " is negative");
  const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    fail(ErrorCode::InvalidArgument, op, ": ", name, " ", py_str(v), " is too large (at most ", hi, ", ", ctype, ")");
  }
  if (u > hi) fail(ErrorCode::InvalidArgument, op, ": ", name, " ", u, " is too large (at most ", hi, ", ", ctype, ")");
  return u;
}

std::int64_t size_arg(nb::handle h, const char* op, const char* name) {
  return static_cast<std::int64_t>(uint_arg(h, op, name, kI64Max, "int64"));
}
std::uint32_t u32_arg(nb::handle h, const char* op, const char* name) {
  return static_cast<std::uint32_t>(uint_arg(h, op, name, kU32Max, "uint32"));
}

bool bool_arg(nb::handle h, const char* op, const char* name) {
  if (h.ptr() == Py_True) return true;
  if (h.ptr() == Py_False) return false;
  const std::string t = tp_name(h);
  if (t == "numpy.bool" || t == "numpy.bool_") {
    const int r = PyObject_IsTrue(h.ptr());
    if (r >= 0) return r == 1;
    PyErr_Clear();
  }
  type_error(concat(op, ": ", name, " must be a bool, got ", t));
}

// A Python float or int (not a bool), as a double.
double float_arg(nb::handle h, const char* op, const char* name) {
  if (PyBool_Check(h.ptr()) || !(PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr())))
    type_error(concat(op, ": ", name, " must be a float, got ", tp_name(h)));
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    fail(ErrorCode::InvalidArgument, op, ": ", name, " does not fit a double");
  }
  return v;
}

std::string str_arg(nb::handle h, const char* op, const char* name) {
  if (!PyUnicode_Check(h.ptr())) type_error(concat(op, ": ", name, " must be a str, got ", tp_name(h)));
  Py_ssize_t len = 0;
  const char* c = PyUnicode_AsUTF8AndSize(h.ptr(), &len);
  if (!c) {
    PyErr_Clear();
    fail(ErrorCode::InvalidArgument, op, ": ", name, " is not a valid UTF-8 string");
  }
  return std::string(c, static_cast<std::size_t>(len));
}

const char* dlpack_kind(std::uint8_t code) {
  using C = nb::dlpack::dtype_code;
  switch (static_cast<C>(code)) {
    case C::Int: return "int";
    case C::UInt: return "uint";
    case C::Float: return "float";
    case C::Bfloat: return "bfloat";
    case C::Complex: return "complex";
    case C::Bool: return "bool";
    default: return "code";
  }
}

// DLPack 1.1's 8-bit float kinds by name (nullptr for other codes).
const char* dlpack_float8_name(std::uint8_t code) {
  using C = nb::dlpack::dtype_code;
  switch (static_cast<C>(code)) {
    case C::Float8_E3M4: return "float8_e3m4";
    case C::Float8_E4M3: return "float8_e4m3";
    case C::Float8_E4M3B11FNUZ: return "float8_e4m3b11fnuz";
    case C::Float8_E4M3FN: return "float8_e4m3fn";
    case C::Float8_E4M3FNUZ: return "float8_e4m3fnuz";
    case C::Float8_E5M2: return "float8_e5m2";
    case C::Float8_E5M2FNUZ: return "float8_e5m2fnuz";
    case C::Float8_E8M0FNU: return "float8_e8m0fnu";
    default: return nullptr;
  }
}

std::string dlpack_dtype_name(const nb::dlpack::dtype& t) {
  const bool plain_bool = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) && t.bits == 8;
  const char* f8 = t.bits == 8 ? dlpack_float8_name(t.code) : nullptr;
  std::string s = plain_bool ? std::string("bool") : f8 ? std::string(f8) : concat(dlpack_kind(t.code), int(t.bits));
  if (t.lanes != 1) s += concat("x", int(t.lanes));
  return s;
}

DType dtype_of(const nb::dlpack::dtype& t, const char* op, const char* name) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<std::uint8_t>(C::Float) && t.bits == 32) return DType::F32;
    if (t.code == static_cast<std::uint8_t>(C::Float) && t.bits == 16) return DType::F16;
    if (t.code == static_cast<std::uint8_t>(C::Bfloat) && t.bits == 16) return DType::BF16;
    if (t.code == static_cast<std::uint8_t>(C::UInt) && t.bits == 8) return DType::U8;
    if (t.code == static_cast<std::uint8_t>(C::UInt) && t.bits == 32) return DType::U32;
    if (t.code == static_cast<std::uint8_t>(C::Int) && t.bits == 32) return DType::I32;
    if (t.code == static_cast<std::uint8_t>(C::Int) && t.bits == 64) return DType::I64;
  }
  fail(ErrorCode::Unsupported, op, ": ", name, " has unsupported dtype ", dlpack_dtype_name(t),
       " (llmm takes float32, float16 and bfloat16 data; uint32, int32 and int64 expert ids)");
}

// Why an object could not be imported as an array: TypeError for a non-array, llmm.Error naming
// what DLPack cannot describe for an array.
[[noreturn]] void not_importable(nb::handle h, const char* op, const char* name) {
  PyObject* o = h.ptr();
  const bool capsule = PyCapsule_CheckExact(o);
  const bool arrayish = capsule || PyObject_HasAttrString(o, "__dlpack__") || PyObject_CheckBuffer(o);
  if (!arrayish)
    type_error(concat(op, ": ", name, " must be an array (NumPy, torch, CuPy, JAX: anything with __dlpack__), got ",
                      tp_name(h)));
  if (capsule)
    fail(ErrorCode::InvalidArgument, op, ": ", name,
         " is a DLPack capsule that cannot be imported (already consumed, or not a DLPack tensor)");
  // NumPy and CuPy report byte strides; DLPack counts elements.
  try {
    nb::object strides = nb::getattr(h, "strides", nb::none());
    nb::object itemsize = nb::getattr(h, "itemsize", nb::none());
    if (nb::isinstance<nb::tuple>(strides) && nb::isinstance<nb::int_>(itemsize)) {
      const long long size = nb::cast<long long>(itemsize);
      bool odd = false;
      for (nb::handle s : nb::borrow<nb::tuple>(strides))
        if (size > 0 && nb::isinstance<nb::int_>(s) && nb::cast<long long>(s) % size != 0) odd = true;
      if (odd)
        fail(ErrorCode::InvalidArgument, op, ": ", name, " has byte strides ", py_str(strides),
             " that are not a multiple of its ", size, "-byte items: no DLPack view describes it (pass a copy)");
    }
  } catch (const nb::python_error&) {
  } catch (const nb::cast_error&) {
  }
  std::string dtype;
  try {
    nb::object d = nb::getattr(h, "dtype", nb::none());
    if (!d.is_none()) dtype = ", dtype " + py_str(d);
  } catch (const nb::python_error&) {
  }
  fail(ErrorCode::Unsupported, op, ": ", name, " (", tp_name(h), dtype,
       ") cannot be exported through DLPack: its producer refused (an unsupported dtype or layout)");
}

// An imported array and its View; the ndarray keeps the producer's memory alive for the call.
struct Arr {
  View v;
  nb::ndarray<nb::ro> ro;
  nb::ndarray<> rw;
};

template <class A>
View make_view(const A& a, const char* op, const char* name, bool need_dtype) {
  if (a.ndim() > static_cast<std::size_t>(View::kMaxRank))
    fail(ErrorCode::InvalidArgument, op, ": ", name, " has ", a.ndim(), " dimensions (at most ", View::kMaxRank, ")");
  View v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = need_dtype ? dtype_of(a.dtype(), op, name) : DType::U8;
  const int dev = a.device_type();
  if (dev == nb::device::cpu::value) v.device = DeviceKind::CPU;
  else if (dev == nb::device::cuda::value) v.device = DeviceKind::CUDA;
  else
    fail(ErrorCode::Unsupported, op, ": ", name, " lives on an unsupported device (DLPack device type ", dev,
         "): llmm takes CPU and CUDA memory");
  v.device_index = a.device_id();
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) {
    const auto d = a.shape_ptr()[i];
    if (d < 0) fail(ErrorCode::InvalidArgument, op, ": ", name, " dimension ", i, " is negative (", d, ")");
    v.shape[static_cast<std::size_t>(i)] = d;
    const std::int64_t s = a.stride(static_cast<std::size_t>(i));
    if (s < 0)
      fail(ErrorCode::InvalidArgument, op, ": ", name, " has a negative stride (", s, " in dimension ", i,
           "): pass a copy");
    v.strides[static_cast<std::size_t>(i)] = s;
  }
  return v;
}

// An input: a read-only view, never a converted copy.
Arr input_arg(nb::handle h, const char* op, const char* name, bool need_dtype = true) {
  Arr r;
  if (!nb::try_cast(h, r.ro, /*convert=*/false)) not_importable(h, op, name);
  r.v = make_view(r.ro, op, name, need_dtype);
  return r;
}

// An output: writable, never a converted copy (a read-only array is refused, not copied).
Arr output_arg(nb::handle h, const char* op, const char* name) {
  Arr r;
  if (!nb::try_cast(h, r.rw, /*convert=*/false)) {
    if (!PyCapsule_CheckExact(h.ptr())) {
      nb::ndarray<nb::ro> probe;
      if (nb::try_cast(h, probe, /*convert=*/false))
        fail(ErrorCode::InvalidArgument, op, ": ", name, " is read-only (", tp_name(h),
             "): an output must be writable");
    }
    not_importable(h, op, name);
  }
  r.v = make_view(r.rw, op, name, true);
  return r;
}

// Where a resource lives (and, for plans, the dtype): "cpu", "cuda", "cuda:N" or an array there.
struct Where {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  DType dtype = DType::F32;
  Arr keep;
};

Where where_arg(nb::handle h, const char* op, const char* name, bool need_dtype) {
  Where w;
  if (PyUnicode_Check(h.ptr())) {
    const std::string s = str_arg(h, op, name);
    if (s == "cpu") return w;
    w.kind = DeviceKind::CUDA;
    if (s == "cuda") return w;
    bool ok = s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 14;
    long long idx = 0;
    for (std::size_t i = 5; ok && i < s.size(); ++i) {
      ok = s[i] >= '0' && s[i] <= '9';
      idx = idx * 10 + (s[i] - '0');
    }
    if (!ok || idx > std::numeric_limits<int>::max())
      fail(ErrorCode::InvalidArgument, op, ": ", name, " must be 'cpu', 'cuda', 'cuda:N' or an array on that device, got '",
           s, "'");
    w.index = static_cast<int>(idx);
    return w;
  }
  if (!PyCapsule_CheckExact(h.ptr()) && !PyObject_HasAttrString(h.ptr(), "__dlpack__"))
    type_error(concat(op, ": ", name, " must be 'cpu', 'cuda:N' or an array on that device, got ", tp_name(h)));
  w.keep = input_arg(h, op, name, need_dtype);
  w.kind = w.keep.v.device, w.index = w.keep.v.device_index, w.dtype = w.keep.v.dtype;
  return w;
}

// One context per device: CPU, or a CUDA device bound per call to the caller's stream.
Context& context_for(DeviceKind kind, int index, std::uintptr_t stream, const char* op, const char* name) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Context>> cuda;
  static Context cpu = Context::cpu();
  if (kind == DeviceKind::CPU) return cpu;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cuda[index];
  if (!slot) {
    if (!built_with_cuda())
      fail(ErrorCode::Unsupported, op, ": ", name, " is on cuda:", index,
           " but this llmm was built without CUDA (LLMM_CUDA=OFF): use NumPy arrays / device='cpu'");
    if (!cuda_available())
      fail(ErrorCode::Unsupported, op, ": ", name, " is on cuda:", index,
           " but no CUDA device is available to llmm (llmm.cuda_available() is False)");
    slot = std::make_unique<Context>(Context::cuda(index, nullptr));
  }
  slot->set_stream(reinterpret_cast<StreamHandle>(stream));
  return *slot;
}
Context& context_for(const View& v, std::uintptr_t stream, const char* op, const char* name) {
  return context_for(v.device, v.device_index, stream, op, name);
}

std::uintptr_t stream_arg(nb::handle h, const char* op) {
  return static_cast<std::uintptr_t>(uint_arg(h, op, "stream", std::numeric_limits<std::uintptr_t>::max(), "a pointer"));
}

Precision precision_of(nb::handle h, const char* op) {
  const std::string p = str_arg(h, op, "precision");
  if (p == "exact") return Precision::Exact;
  if (p == "fast") return Precision::Fast;
  fail(ErrorCode::InvalidArgument, op, ": precision must be 'exact' or 'fast', got '", p, "'");
}

DenseRoute dense_route_of(nb::handle h, const char* op) {
  const std::string r = str_arg(h, op, "route");
  for (DenseRoute x : {DenseRoute::Auto, DenseRoute::Cpu, DenseRoute::ZeroFill, DenseRoute::GemvWide,
                       DenseRoute::TiledSm90, DenseRoute::CublasLt})
    if (r == route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, op, ": unknown dense route '", r,
       "' (auto, cpu, zero_fill, gemv_wide, tiled_sm90, cublaslt)");
}

Tq2Route tq2_route_of(nb::handle h, const char* op) {
  const std::string r = str_arg(h, op, "route");
  for (Tq2Route x : {Tq2Route::Auto, Tq2Route::Cpu, Tq2Route::StreamV2, Tq2Route::StreamV4,
                     Tq2Route::StreamV5, Tq2Route::Tiled, Tq2Route::DequantLt, Tq2Route::TiledSm90, Tq2Route::TiledSm90SplitK})
    if (r == tq2_route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, op, ": unknown ternary route '", r,
       "' (auto, cpu, tq2_stream_v2, tq2_stream_v4, tq2_stream_v5, tq2_tiled, tq2_dequant_lt, "
       "tq2_tiled_sm90, tq2_tiled_sm90_splitk)");
}

Tq2MoeRoute tq2_moe_route_of(nb::handle h, const char* op) {
  const std::string r = str_arg(h, op, "route");
  for (Tq2MoeRoute x : {Tq2MoeRoute::Auto, Tq2MoeRoute::Cpu, Tq2MoeRoute::Naive, Tq2MoeRoute::GroupedSm90, Tq2MoeRoute::StreamSm90})
    if (r == tq2_moe_route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, op, ": unknown ternary-experts route '", r,
       "' (auto, cpu, tq2_moe_naive, tq2_moe_grouped_sm90, tq2_moe_stream_sm90)");
}

MatmulIdInputLayout layout_of(nb::handle h, const char* op) {
  const std::string s = str_arg(h, op, "layout");
  if (s == "shared") return MatmulIdInputLayout::SharedPerToken;
  if (s == "slotted") return MatmulIdInputLayout::Slotted;
  fail(ErrorCode::InvalidArgument, op, ": layout must be 'shared' or 'slotted', got '", s, "'");
}

MatmulIdRoute matmul_id_route_of(nb::handle h, const char* op) {
  const std::string s = str_arg(h, op, "route");
  if (s == "direct") return MatmulIdRoute::Direct;
  if (s == "grouped") return MatmulIdRoute::GroupedPrefill;
  if (s == "auto") return MatmulIdRoute::Auto;
  fail(ErrorCode::InvalidArgument, op, ": route must be 'direct', 'grouped' or 'auto', got '", s, "'");
}

MatmulIdGroupedKernel grouped_kernel_of(nb::handle h, const char* op) {
  const std::string s = str_arg(h, op, "grouped_kernel");
  for (MatmulIdGroupedKernel k : {MatmulIdGroupedKernel::Auto, MatmulIdGroupedKernel::MmaSync, MatmulIdGroupedKernel::TiledSm90,
                                  MatmulIdGroupedKernel::TiledSm90Fused})
    if (s == matmul_id_grouped_kernel_name(k)) return k;
  fail(ErrorCode::InvalidArgument, op, ": grouped_kernel must be 'auto', 'mma_sync', 'tiled_sm90' or 'tiled_sm90_fused', got '",
       s, "'");
}

Fp8ScaleKind fp8_kind_of(nb::handle h, const char* op, const char* name) {
  const std::string s = str_arg(h, op, name);
  if (s == "tensor") return Fp8ScaleKind::Tensor;
  if (s == "channel") return Fp8ScaleKind::Channel;
  if (s == "block") return Fp8ScaleKind::Block128;
  fail(ErrorCode::InvalidArgument, op, ": ", name, " must be 'block', 'channel' or 'tensor', got '", s, "'");
}

Fp8Route fp8_route_of(nb::handle h, const char* op) {
  const std::string r = str_arg(h, op, "route");
  for (Fp8Route x : {Fp8Route::Auto, Fp8Route::Cpu, Fp8Route::Stream, Fp8Route::StreamMma, Fp8Route::CublasLt,
                     Fp8Route::DequantLt, Fp8Route::TiledSm90})
    if (r == fp8_route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, op, ": unknown fp8 route '", r,
       "' (auto, cpu, stream, stream_mma, cublaslt, dequant_lt, tiled_sm90)");
}

// FP8 weight codes: a uint8 array of float8_e4m3fn bits, or a float8_e4m3fn array where the
// producer exports that dtype; either becomes an F8E4M3 view of the same bytes (no copy).
Arr fp8_codes_arg(nb::handle h, const char* op, const char* name) {
  Arr r = input_arg(h, op, name, /*need_dtype=*/false);
  const nb::dlpack::dtype t = r.ro.dtype();
  using C = nb::dlpack::dtype_code;
  const bool ok = t.lanes == 1 && t.bits == 8 &&
                  (t.code == static_cast<std::uint8_t>(C::UInt) || t.code == static_cast<std::uint8_t>(C::Float8_E4M3FN));
  if (!ok)
    fail(ErrorCode::Unsupported, op, ": ", name, " has dtype ", dlpack_dtype_name(t),
         ": FP8 ", std::string(name) == "x" ? "activation" : "weight", " codes must be float8_e4m3fn, or uint8 holding float8_e4m3fn bits");
  r.v.dtype = DType::F8E4M3;
  return r;
}

DType dtype_code_of(nb::handle h, const char* op, const char* name) {
  const std::string s = str_arg(h, op, name);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32, DType::I32, DType::I64})
    if (s == dtype_name(t)) return t;
  fail(ErrorCode::InvalidArgument, op, ": unknown ", name, " '", s, "' (f32, f16, bf16, u8, u32, i32, i64)");
}

// Bytes of a blob argument (TQ2 AoS): any C-contiguous CPU buffer of 1-byte items (bytes,
// bytearray, memoryview, a uint8 NumPy array or CPU tensor), read in place.
struct Blob {
  const void* data = nullptr;
  std::size_t size = 0;
  nb::ndarray<nb::ro> keep;
};

Blob blob_arg(nb::handle h, const char* op, const char* name) {
  Blob b;
  if (!nb::try_cast(h, b.keep, /*convert=*/false)) {
    if (PyObject_CheckBuffer(h.ptr()) || PyObject_HasAttrString(h.ptr(), "__dlpack__"))
      fail(ErrorCode::InvalidArgument, op, ": ", name, " (", tp_name(h), ") could not be read as bytes");
    type_error(concat(op, ": ", name,
                      " must be bytes-like (bytes, bytearray, memoryview or a contiguous uint8 array), got ", tp_name(h)));
  }
  const auto& a = b.keep;
  if (a.device_type() != nb::device::cpu::value)
    fail(ErrorCode::InvalidArgument, op, ": ", name, " must be in host memory (bytes or a CPU array)");
  if (a.dtype().bits != 8 || a.dtype().lanes != 1)
    fail(ErrorCode::InvalidArgument, op, ": ", name, " must hold bytes (1-byte items), got ", dlpack_dtype_name(a.dtype()),
         " items");
  std::int64_t expect = 1;
  std::size_t n = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect)
      fail(ErrorCode::InvalidArgument, op, ": ", name, " must be C-contiguous bytes");
    expect *= static_cast<std::int64_t>(a.shape(i));
    n *= a.shape(i);
  }
  b.data = a.data(), b.size = n;
  return b;
}

nb::dict receipt_dict(const Receipt& r) {
  nb::dict d;
  d["route"] = r.route;
  d["kernel"] = r.kernel;
  d["kernels_launched"] = r.kernels_launched;
  return d;
}

// A ternary weight resident on one device, kept alive by its handle.
struct PyTernaryWeight {
  WeightHandle handle;
  std::int64_t n() const { return handle->n(); }
  std::int64_t k() const { return handle->k(); }
  std::uint64_t key() const { return handle->key(); }
  std::uint64_t upload_id() const { return handle->upload_id(); }
  std::size_t nbytes() const { return handle->bytes(); }
  std::int64_t experts() const { return handle->experts(); }
  std::string device() const {
    return handle->device() == DeviceKind::CPU ? "cpu" : "cuda:" + std::to_string(handle->device_index());
  }
};

const PyTernaryWeight& weight_arg(nb::handle h, const char* op) {
  if (!nb::isinstance<PyTernaryWeight>(h))
    type_error(concat(op, ": weight must be a llmm.TernaryWeight (from llmm.upload_tq2), got ", tp_name(h)));
  return *nb::inst_ptr<PyTernaryWeight>(h);
}

// A weight the host quantizers read in place: a C-contiguous float32 [n, k] host array.
void check_host_f32_matrix(const View& v, const char* op) {
  if (v.device != DeviceKind::CPU || v.dtype != DType::F32 || v.rank != 2 || !v.is_contiguous())
    fail(ErrorCode::InvalidArgument, op, ": w must be a C-contiguous float32 [n, k] host array, got ", v.describe());
}

MatmulIdScratch* scratch_arg(nb::handle h, const char* op) {
  if (h.is_none()) return nullptr;
  if (!nb::isinstance<MatmulIdScratch>(h))
    type_error(concat(op, ": scratch must be None or a llmm.MatmulIdScratch (from llmm.matmul_id_scratch), got ",
                      tp_name(h)));
  return nb::inst_ptr<MatmulIdScratch>(h);
}

// Expert weights [E, n, k]: 16/32-bit floats, or (fp8) FP8 e4m3 codes as fp8_codes_arg takes them.
// float8_e4m3fn weights without scales are refused here, saying what they need (the generic dtype
// message would only call the dtype unsupported).
Arr expert_weights_arg(nb::handle h, const char* op, const char* name, bool fp8, const char* scale_name) {
  if (fp8) return fp8_codes_arg(h, op, name);
  Arr r = input_arg(h, op, name, /*need_dtype=*/false);
  const nb::dlpack::dtype t = r.ro.dtype();
  if (t.lanes == 1 && t.bits == 8 && t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float8_E4M3FN))
    fail(ErrorCode::InvalidArgument, op, ": ", name, " are float8_e4m3fn: FP8 experts need their float32 scales (",
         scale_name, ": per tensor [E], per channel [E, n, 1] or per 128 x 128 block [E, ceil(n / 128), ceil(k / 128)])");
  r.v.dtype = dtype_of(t, op, name);
  return r;
}

// The arguments of matmul_id and plan_matmul_id, parsed in argument order (each error names op).
// weight_scale (matmul_id only): None, or the f32 scales of FP8 e4m3 weights [E, n, k] of
// scale_kind ('tensor', 'channel', 'block'); the weights are then read as codes (fp8_codes_arg).
struct MatmulIdCall {
  Arr w, x, ids, out;
  MatmulIdInputLayout layout;
  MatmulIdMultiplicity mult;
  MatmulIdRoute route;
  MatmulIdScratch* scratch;
  MatmulIdOptions opts;
  std::optional<Arr> scales;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  MatmulIdCall(const char* op, nb::handle weights, nb::handle x_, nb::handle ids_, nb::handle out_, nb::handle layout_,
               nb::handle may_repeat, nb::handle route_, nb::handle scratch_, nb::handle precision, nb::handle grouped_kernel,
               nb::handle weight_scale = nb::none(), nb::handle scale_kind = nb::none())
      : w(expert_weights_arg(weights, op, "weights", !weight_scale.is_none(), "weight_scale")),
        x(input_arg(x_, op, "x")),
        ids(input_arg(ids_, op, "ids")),
        out(output_arg(out_, op, "out")),
        layout(layout_of(layout_, op)),
        mult(bool_arg(may_repeat, op, "may_repeat") ? MatmulIdMultiplicity::MayRepeat
                                                    : MatmulIdMultiplicity::DistinctPerToken),
        route(matmul_id_route_of(route_, op)),
        scratch(scratch_arg(scratch_, op)) {
    opts.precision = precision_of(precision, op);
    opts.grouped_kernel = grouped_kernel_of(grouped_kernel, op);
    if (!weight_scale.is_none()) {
      scales.emplace(input_arg(weight_scale, op, "weight_scale"));
      kind = fp8_kind_of(scale_kind, op, "scale_kind");
    }
  }
  Fp8Experts fp8() const { return Fp8Experts{w.v, kind, scales->v}; }
};

TernaryWeightCache& cache_for(const Context& ctx) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<TernaryWeightCache>> caches;  // -1: CPU
  std::lock_guard<std::mutex> lock(mu);
  int key = ctx.is_cuda() ? ctx.arch().device_index : -1;
  auto& slot = caches[key];
  if (!slot) slot = std::make_unique<TernaryWeightCache>(ctx);
  return *slot;
}

// ---------------------------------------------------------------------------------------------
// The capsule's entry points (capi.hpp): the torch extension's calls, run here so that there is
// one set of contexts and caches.

PyObject* g_error_type = nullptr;  // llmm.Error

// The Python error for the exception in flight, as the module's translators would set it.
void set_python_error() noexcept {
  try {
    throw;
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {  // the argument parsers raise only type_error
    PyErr_SetString(e.type() == nb::exception_type::type_error ? PyExc_TypeError : PyExc_ValueError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_error_type, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(g_error_type, "llmm: out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "llmm: unknown C++ exception");
  }
}

int capi_matmul(const View& a, const View& b, const View& out, bool transpose_a, bool transpose_b, PyObject* precision,
                PyObject* route, std::uintptr_t stream) {
  try {
    constexpr const char* op = "llmm.matmul";
    MatmulOptions o;
    o.transpose_a = transpose_a, o.transpose_b = transpose_b;
    o.precision = precision_of(precision, op), o.force_route = dense_route_of(route, op);
    llmm::matmul(context_for(out, stream, op, "out"), a, b, out, o);
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

// A Hadamard rotation's signs for gemm_tq2 (Tq2Options::rotation_signs): float32 [k], contiguous,
// where out lives (the core checks the block and the pointer's alignment); null without a rotation.
const float* rotation_signs_of(const View* s, int block, const View& out, std::int64_t k, const char* op) {
  if (!s) {
    if (block != 0) fail(ErrorCode::InvalidArgument, op, ": rotation_block ", block, " given without rotation_signs");
    return nullptr;
  }
  if (s->dtype != DType::F32 || s->rank != 1 || s->shape[0] != k || (k > 1 && s->strides[0] != 1))
    fail(ErrorCode::InvalidArgument, op, ": rotation_signs must be a contiguous float32 [", k, "] (the weight's k), got ",
         dtype_name(s->dtype), " of rank ", s->rank, s->rank == 1 ? " and length " + std::to_string(s->shape[0]) : "");
  if (s->device != out.device || (s->device == DeviceKind::CUDA && s->device_index != out.device_index))
    fail(ErrorCode::InvalidArgument, op, ": rotation_signs must live on out's device");
  return static_cast<const float*>(s->data);
}

int capi_gemm_tq2(PyObject* weight, const View& x, const View& out, PyObject* precision, PyObject* route,
                  const View* rotation_signs, int rotation_block, std::uintptr_t stream) {
  try {
    constexpr const char* op = "llmm.gemm_tq2";
    const PyTernaryWeight& w = weight_arg(weight, op);
    Tq2Options o;
    o.precision = precision_of(precision, op), o.force_route = tq2_route_of(route, op);
    o.rotation_signs = rotation_signs_of(rotation_signs, rotation_block, out, w.k(), op);
    o.rotation_block = rotation_block;
    gemm_tq2(context_for(out, stream, op, "out"), w.handle, x, out, o);
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

// Flags parsed in MatmulIdCall's order, so that a call refused for two reasons names the same one.
int capi_matmul_id(const View& weights, const View& x, const View& ids, const View& out, PyObject* layout,
                   PyObject* may_repeat, PyObject* route, PyObject* precision, PyObject* grouped_kernel,
                   std::uintptr_t stream) {
  try {
    constexpr const char* op = "llmm.matmul_id";
    const MatmulIdInputLayout l = layout_of(layout, op);
    const MatmulIdMultiplicity mult =
        bool_arg(may_repeat, op, "may_repeat") ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
    const MatmulIdRoute r = matmul_id_route_of(route, op);
    MatmulIdOptions o;
    o.precision = precision_of(precision, op);
    o.grouped_kernel = grouped_kernel_of(grouped_kernel, op);
    llmm::matmul_id(context_for(out, stream, op, "out"), weights, x, ids, out, nullptr, l, mult, r, o);
    return 0;
  } catch (...) {
    set_python_error();
    return -1;
  }
}

const capi::Table kCapi{capi::kAbi, &capi_matmul, &capi_gemm_tq2, &capi_matmul_id};

MatmulIdParams sizes_params(const char* op, nb::handle m_, nb::handle n, nb::handle k, nb::handle top_k,
                            nb::handle n_experts) {
  MatmulIdParams p;
  p.m = u32_arg(m_, op, "m");
  p.n = u32_arg(n, op, "n");
  p.k = u32_arg(k, op, "k");
  p.top_k = u32_arg(top_k, op, "top_k");
  p.n_experts = u32_arg(n_experts, op, "n_experts");
  return p;
}

}  // namespace

NB_MODULE(_llmm, m) {
  m.doc() = "llmm: matmul kernels for LLM and DiT inference (low-level bindings; use the llmm package)";
  m.attr("__version__") = LLMM_VERSION_STRING;  // llmm/version.hpp, from CMakeLists.txt
  static nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  g_error_type = error.ptr();
  m.attr("_capi") = nb::capsule(&kCapi, capi::kCapsuleName);  // for llmm._llmm_torch (capi.hpp)
  error.attr("__doc__") =
      "llmm::Error: an invalid or unsupported call, refused before anything was enqueued; the message names the op "
      "and the offending values. A RuntimeError.";
  // Registered after llmm.Error, so tried first: memory exhaustion anywhere is an llmm.Error too
  // (OutOfMemory), not a bare MemoryError.
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void*) {
        try {
          std::rethrow_exception(p);
        } catch (const std::bad_alloc&) {
          PyErr_SetString(error.ptr(), "llmm: out of host memory (std::bad_alloc)");
        } catch (const std::length_error& e) {
          PyErr_SetString(error.ptr(), concat("llmm: allocation too large (", e.what(), ")").c_str());
        }
      },
      nullptr);
  m.def("built_with_cuda", &built_with_cuda, "True if this build of llmm has the CUDA backend.");
  m.def("cuda_available", &cuda_available,
        "True if the CUDA backend is built and a usable CUDA device is present (never raises).");

  m.def(
      "matmul",
      [](nb::handle a, nb::handle b, nb::handle out, nb::handle transpose_a, nb::handle transpose_b, nb::handle precision,
         nb::handle route, nb::handle stream) {
        constexpr const char* op = "llmm.matmul";
        Arr va = input_arg(a, op, "a"), vb = input_arg(b, op, "b"), vc = output_arg(out, op, "out");
        MatmulOptions o;
        o.transpose_a = bool_arg(transpose_a, op, "transpose_a"), o.transpose_b = bool_arg(transpose_b, op, "transpose_b");
        o.precision = precision_of(precision, op), o.force_route = dense_route_of(route, op);
        Context& ctx = context_for(vc.v, stream_arg(stream, op), op, "out");
        return receipt_dict(llmm::matmul(ctx, va.v, vb.v, vc.v, o));
      },
      nb::arg("a").none(), nb::arg("b").none(), nb::arg("out").none(), nb::arg("transpose_a").none() = false, nb::arg("transpose_b").none() = false,
      nb::arg("precision").none() = "exact", nb::arg("route").none() = "auto", nb::arg("stream").none() = 0,
      "out = op(a) @ op(b) into out; returns the receipt {route, kernel, kernels_launched}. Low level: use "
      "llmm.matmul.");

  m.def(
      "plan_matmul",
      [](nb::handle m_, nb::handle n, nb::handle k, nb::handle like, nb::handle transpose_a, nb::handle transpose_b,
         nb::handle precision) {
        constexpr const char* op = "llmm.plan_matmul";
        MatmulDesc d;
        d.m = size_arg(m_, op, "m"), d.n = size_arg(n, op, "n"), d.k = size_arg(k, op, "k");
        Where w = where_arg(like, op, "like", true);
        d.dtype = w.dtype;
        d.transpose_a = bool_arg(transpose_a, op, "transpose_a"), d.transpose_b = bool_arg(transpose_b, op, "transpose_b");
        d.precision = precision_of(precision, op), d.a_vec16 = d.b_vec16 = true;
        DensePlan p = plan_matmul(d, context_for(w.kind, w.index, 0, op, "like").arch());
        nb::dict r;
        r["route"] = std::string(route_name(p.route));
        r["reason"] = p.reason;
        return r;
      },
      nb::arg("m").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("like").none(), nb::arg("transpose_a").none() = false,
      nb::arg("transpose_b").none() = false, nb::arg("precision").none() = "exact",
      "The dense route for an [m, k] x [k, n] product with like's dtype on like's device (like: an array, or 'cpu' / "
      "'cuda:N' for float32): {route, reason}. Pure.");

  // Ternary.
  m.def(
      "tq2_quantize",
      [](nb::handle w, nb::handle rule) {
        constexpr const char* op = "llmm.quantize_tq2";
        Arr a = input_arg(w, op, "w");
        const View& v = a.v;
        check_host_f32_matrix(v, op);
        const std::string r = str_arg(rule, op, "rule");
        Tq2ScaleRule sr;
        if (r == "absmean") sr = Tq2ScaleRule::AbsMean;
        else if (r == "absmax") sr = Tq2ScaleRule::AbsMax;
        else fail(ErrorCode::InvalidArgument, op, ": rule must be 'absmean' or 'absmax', got '", r, "'");
        auto blocks = tq2_quantize(static_cast<const float*>(v.data), v.dim(0), v.dim(1), sr);
        return nb::bytes(reinterpret_cast<const char*>(blocks.data()), blocks.size() * sizeof(BlockTQ2_128));
      },
      nb::arg("w").none(), nb::arg("rule").none() = "absmean",
      "TQ2_0_g128 AoS bytes of a C-contiguous float32 [n, k] host array (rule 'absmean' or 'absmax').");
  // FP8 e4m3 (host): conversions and quantization with f32 scales.
  m.def(
      "fp8_from_f32",
      [](nb::handle x, nb::handle saturate) {
        constexpr const char* op = "llmm.fp8_from_f32";
        Arr a = input_arg(x, op, "x");
        const View& v = a.v;
        if (v.device != DeviceKind::CPU || v.dtype != DType::F32 || !v.is_contiguous())
          fail(ErrorCode::InvalidArgument, op, ": x must be a C-contiguous float32 host array, got ", v.describe());
        const bool sat = bool_arg(saturate, op, "saturate");
        const std::uint64_t count = v.numel();
        std::string out(static_cast<std::size_t>(count), '\0');
        const float* f = static_cast<const float*>(v.data);
        for (std::uint64_t i = 0; i < count; ++i) out[i] = static_cast<char>(f32_to_e4m3fn_bits(f[i], sat));
        return nb::bytes(out.data(), out.size());
      },
      nb::arg("x").none(), nb::arg("saturate").none() = false,
      "float8_e4m3fn bits (bytes) of a C-contiguous float32 host array. Low level: use llmm.to_fp8.");
  m.def(
      "fp8_to_f32",
      [](nb::handle codes) {
        constexpr const char* op = "llmm.fp8_to_f32";
        Blob b = blob_arg(codes, op, "codes");
        std::string out(b.size * 4, '\0');
        const auto* c = static_cast<const std::uint8_t*>(b.data);
        for (std::size_t i = 0; i < b.size; ++i) {
          const float f = e4m3fn_bits_to_f32(c[i]);
          std::memcpy(out.data() + 4 * i, &f, 4);
        }
        return nb::bytes(out.data(), out.size());
      },
      nb::arg("codes").none(), "float32 values (bytes) of float8_e4m3fn bits. Low level: use llmm.from_fp8.");
  m.def(
      "fp8_quantize",
      [](nb::handle w, nb::handle scale) {
        constexpr const char* op = "llmm.quantize_fp8";
        Arr a = input_arg(w, op, "w");
        const View& v = a.v;
        check_host_f32_matrix(v, op);
        const std::string kind = str_arg(scale, op, "scale");
        Fp8ScaleKind k = Fp8ScaleKind::Block128;
        if (kind == "tensor") k = Fp8ScaleKind::Tensor;
        else if (kind == "channel") k = Fp8ScaleKind::Channel;
        else if (kind != "block") fail(ErrorCode::InvalidArgument, op, ": scale must be 'block', 'channel' or 'tensor', got '", kind, "'");
        const Fp8Weight q = quantize_fp8(static_cast<const float*>(v.data), v.dim(0), v.dim(1), v.dim(1), k);
        return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(q.codes.data()), q.codes.size()),
                              nb::bytes(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4));
      },
      nb::arg("w").none(), nb::arg("scale").none() = "block",
      "(codes, scales) bytes of a C-contiguous float32 [n, k] host array. Low level: use llmm.quantize_fp8.");
  m.def(
      "fp8_quantize_activations",
      [](nb::handle x) {
        constexpr const char* op = "llmm.quantize_fp8_activations";
        Arr a = input_arg(x, op, "x");
        if (a.v.device != DeviceKind::CPU || a.v.dtype != DType::F32 || a.v.rank != 2)
          fail(ErrorCode::InvalidArgument, op, ": x must be a float32 [m, k] host array, got ", a.v.describe());
        const Fp8Activations q = quantize_fp8_activations(a.v, kFp8Block);
        return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(q.codes.data()), q.codes.size()),
                              nb::bytes(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4));
      },
      nb::arg("x").none(),
      "(codes, scales) bytes of a float32 [m, k] host array quantized per token and 128 channels: codes [m, k], "
      "scales [ceil(k / 128), m] (the token fastest). Low level: use llmm.quantize_fp8_activations.");
  m.def(
      "matmul_fp8",
      [](nb::handle x, nb::handle weight, nb::handle scale, nb::handle scale_kind, nb::handle out, nb::handle precision,
         nb::handle route, nb::handle x_scale, nb::handle stream) {
        constexpr const char* op = "llmm.matmul_fp8";
        const bool x_fp8 = !x_scale.is_none();
        Arr vx = x_fp8 ? fp8_codes_arg(x, op, "x") : input_arg(x, op, "x");
        Arr vw = fp8_codes_arg(weight, op, "weight");
        Arr vs = input_arg(scale, op, "scale");
        Arr vo = output_arg(out, op, "out");
        const Fp8WeightView w{vw.v, fp8_kind_of(scale_kind, op, "scale_kind"), vs.v};
        MatmulFp8Options o;
        o.precision = precision_of(precision, op), o.force_route = fp8_route_of(route, op);
        Context& ctx = context_for(vo.v, stream_arg(stream, op), op, "out");
        if (x_fp8) {
          Arr vxs = input_arg(x_scale, op, "x_scale");
          return receipt_dict(llmm::matmul_fp8(ctx, Fp8ActivationView{vx.v, vxs.v}, w, vo.v, o));
        }
        return receipt_dict(llmm::matmul_fp8(ctx, vx.v, w, vo.v, o));
      },
      nb::arg("x").none(), nb::arg("weight").none(), nb::arg("scale").none(), nb::arg("scale_kind").none(),
      nb::arg("out").none(), nb::arg("precision").none() = "fast", nb::arg("route").none() = "auto",
      nb::arg("x_scale").none() = nb::none(), nb::arg("stream").none() = 0,
      "out[m, n] = x[m, k] @ dequant(weight[n, k])^T for float8_e4m3fn codes (uint8 bits or float8_e4m3fn) with "
      "float32 scales of scale_kind ('tensor', 'channel', 'block'), on out's device and the given stream; with "
      "x_scale, x is e4m3 codes too and x_scale its float32 [m, ceil(k / 128)] scales. Returns the receipt. Low "
      "level: use llmm.matmul_fp8.");
  m.def(
      "plan_matmul_fp8",
      [](nb::handle m_, nb::handle n_, nb::handle k_, nb::handle dtype, nb::handle scale_kind, nb::handle device,
         nb::handle precision, nb::handle route, nb::handle x_fp8) {
        constexpr const char* op = "llmm.plan_matmul_fp8";
        MatmulFp8Desc d;
        // x in e4m3 (dtype is then the output's), its codes and scales as llmm.matmul_fp8 lays them out.
        d.x_e4m3 = d.x_tma_aligned = bool_arg(x_fp8, op, "x_fp8");
        d.m = size_arg(m_, op, "m"), d.n = size_arg(n_, op, "n"), d.k = size_arg(k_, op, "k");
        d.x_dtype = dtype_code_of(dtype, op, "dtype");
        if (!is_float(d.x_dtype))
          fail(ErrorCode::InvalidArgument, op, ": dtype must be f32, f16 or bf16 (x's and the output's), got ",
               dtype_name(d.x_dtype));
        d.kind = fp8_kind_of(scale_kind, op, "scale_kind");
        Where w = where_arg(device, op, "device", false);
        d.precision = precision_of(precision, op);
        const Fp8Route forced = fp8_route_of(route, op);
        // Dense row-major arrays on 16-byte aligned bases (as the frameworks allocate them); sizes
        // taken modulo 16 so that no product can overflow.
        const std::int64_t xs = static_cast<std::int64_t>(dtype_size(d.x_dtype));
        const bool k16 = d.k % 16 == 0;
        d.stream_aligned = (d.m <= 1 || (d.k % 16) * xs % 16 == 0) && (d.n <= 1 || k16);
        d.lt_aligned = (d.n <= 1 || k16) && (d.n % 16) * xs % 16 == 0;
        const Fp8Plan p = plan_matmul_fp8(context_for(w.kind, w.index, 0, op, "device"), d, forced);
        nb::dict r;
        r["route"] = std::string(fp8_route_name(p.route));
        r["reason"] = p.reason;
        r["workspace_bytes"] = p.workspace_bytes;
        r["gemv_vecs"] = p.gemv_vecs;
        r["gemv_k_lanes"] = p.gemv_k_lanes;
        r["gemv_grid_x"] = p.gemv_grid_x;
        r["mma_k_warps"] = p.mma_k_warps;
        return r;
      },
      nb::arg("m").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("dtype").none(), nb::arg("scale_kind").none(),
      nb::arg("device").none(), nb::arg("precision").none() = "fast", nb::arg("route").none() = "auto",
      nb::arg("x_fp8").none() = false,
      "The route matmul_fp8 takes for x [m, k] of dtype (f32, f16, bf16) and an [n, k] FP8 weight with scale_kind "
      "scales on device ('cpu', 'cuda:N' or an array there), for dense arrays on aligned bases: {route, reason, "
      "workspace_bytes, gemv_vecs, gemv_k_lanes, gemv_grid_x} (the last three: the stream route's launch, else 0). "
      "route: 'auto' or one to check (refused with llmm.Error naming why when it cannot take the problem). Pure.");
  m.def(
      "tq2_from_gguf",
      [](nb::handle data, nb::handle kind_, nb::handle n_, nb::handle k_) {
        constexpr const char* op = "llmm.tq2_from_gguf";
        Blob b = blob_arg(data, op, "data");
        const std::string kind = str_arg(kind_, op, "kind");
        const std::int64_t n = size_arg(n_, op, "n"), k = size_arg(k_, op, "k");
        std::vector<BlockTQ2_128> blocks;
        if (kind == "TQ2_0") blocks = tq2_from_gguf_tq2_0(b.data, b.size, n, k);
        else if (kind == "TQ1_0") blocks = tq2_from_gguf_tq1_0(b.data, b.size, n, k);
        else if (kind == "Q2_0_g128") blocks = tq2_from_q2_0_g128(b.data, b.size, n, k);
        else if (kind == "PQ2_0") blocks = tq2_from_pq2_0(b.data, b.size, n, k);
        else if (kind == "PTQ1_0") blocks = tq2_from_ptq1_0(b.data, b.size, n, k);
        else if (kind == "Q2_0") blocks = tq2_from_q2_0_g64(b.data, b.size, n, k);
        else
          fail(ErrorCode::InvalidArgument, op,
               ": kind must be 'TQ2_0', 'TQ1_0', 'Q2_0_g128', 'PQ2_0', 'PTQ1_0' or 'Q2_0' (group 64), got '", kind, "'");
        return nb::bytes(reinterpret_cast<const char*>(blocks.data()), blocks.size() * sizeof(BlockTQ2_128));
      },
      nb::arg("data").none(), nb::arg("kind").none(), nb::arg("n").none(), nb::arg("k").none(),
      "TQ2_0_g128 AoS bytes of a GGUF TQ2_0, TQ1_0, PrismML Q2_0 (group 128), PQ2_0 or PTQ1_0 tensor's raw bytes "
      "(lossless), or of upstream Q2_0 (group 64) where each pair of blocks shares a scale (n rows of k weights).");
  m.def(
      "tq2_from_bitnet",
      [](nb::handle packed, nb::handle out_, nb::handle in_, nb::handle scale) {
        constexpr const char* op = "llmm.tq2_from_bitnet";
        Blob b = blob_arg(packed, op, "packed");
        const std::int64_t o = size_arg(out_, op, "out_features"), i = size_arg(in_, op, "in_features");
        double ws = 0;
        if (!nb::try_cast(scale, ws, /*convert=*/true))
          type_error(concat(op, ": weight_scale must be a number, got ", tp_name(scale)));
        auto blocks = tq2_from_bitnet(static_cast<const std::uint8_t*>(b.data), b.size, o, i, static_cast<float>(ws));
        return nb::bytes(reinterpret_cast<const char*>(blocks.data()), blocks.size() * sizeof(BlockTQ2_128));
      },
      nb::arg("packed").none(), nb::arg("out_features").none(), nb::arg("in_features").none(),
      nb::arg("weight_scale").none(),
      "TQ2_0_g128 AoS bytes of a Hugging Face BitNet packed uint8 [out/4, in] weight and its weight_scale.");
  m.def(
      "tq2_dequantize",
      [](nb::handle aos, nb::handle n_, nb::handle k_, nb::handle out) -> nb::object {
        constexpr const char* op = "llmm.dequantize_tq2";
        Blob b = blob_arg(aos, op, "aos");
        const std::int64_t n = size_arg(n_, op, "n"), k = size_arg(k_, op, "k");
        Arr o;
        if (!out.is_none()) {  // checked before anything is decoded or written
          o = output_arg(out, op, "out");
          const View& v = o.v;
          if (v.device != DeviceKind::CPU || v.dtype != DType::F32 || v.rank != 2 || v.dim(0) != n || v.dim(1) != k ||
              !v.is_contiguous())
            fail(ErrorCode::InvalidArgument, op, ": out must be a C-contiguous float32 [", n, ", ", k,
                 "] host array, got ", v.describe());
        }
        std::vector<float> w = tq2_dequantize(b.data, b.size, n, k);
        if (!out.is_none()) {
          std::copy(w.begin(), w.end(), static_cast<float*>(o.v.data));
          return nb::borrow(out);
        }
        auto* owned = new std::vector<float>(std::move(w));
        nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        return nb::ndarray<nb::numpy, float, nb::ndim<2>>(owned->data(), {static_cast<std::size_t>(n), static_cast<std::size_t>(k)},
                                                          owner)
            .cast();
      },
      nb::arg("aos").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("out").none() = nb::none(),
      "Decodes TQ2_0_g128 AoS bytes (any C-contiguous bytes-like object) into a float32 [n, k] array: out (a "
      "writable C-contiguous float32 host array, returned) or, for None, a new NumPy array.");

  nb::class_<PyTernaryWeight>(m, "TernaryWeight",
                              "A TQ2_0_g128 ternary weight [n, k] resident on one device (from llmm.upload_tq2).")
      .def("__init__", [](PyTernaryWeight*, nb::args, nb::kwargs) {
        type_error("llmm.TernaryWeight cannot be created directly: use llmm.upload_tq2");
      })
      .def_prop_ro("n", &PyTernaryWeight::n, "Output features (rows of W).")
      .def_prop_ro("k", &PyTernaryWeight::k, "Input features (columns of W, a multiple of 128).")
      .def_prop_ro("key", &PyTernaryWeight::key, "The cache key it was uploaded under.")
      .def_prop_ro("upload_id", &PyTernaryWeight::upload_id,
                   "Process-unique number of this upload: a key released and uploaded again names a new weight with a "
                   "new upload_id.")
      .def_prop_ro("nbytes", &PyTernaryWeight::nbytes, "Packed bytes held (codes and scales, 2.125 bits a weight).")
      .def_prop_ro("experts", &PyTernaryWeight::experts,
                   "1 for a weight; for a stack of experts (llmm.upload_tq2_experts) their number, each [n, k].")
      .def_prop_ro("device", &PyTernaryWeight::device, "'cpu' or 'cuda:N'.")
      .def("__repr__", [](const PyTernaryWeight& w) {
        return "TernaryWeight(" + (w.experts() > 1 ? "experts=" + std::to_string(w.experts()) + ", " : std::string()) +
               "n=" + std::to_string(w.n()) + ", k=" + std::to_string(w.k()) + ", key=" +
               std::to_string(w.key()) + ", device='" + w.device() + "')";
      });
  m.def(
      "tq2_upload",
      [](nb::handle aos, nb::handle n_, nb::handle k_, nb::handle key_, nb::handle device) {
        constexpr const char* op = "llmm.upload_tq2";
        Blob b = blob_arg(aos, op, "aos");
        const std::int64_t n = size_arg(n_, op, "n"), k = size_arg(k_, op, "k");
        const std::uint64_t key = uint_arg(key_, op, "key", kU64Max, "uint64");
        Where w = where_arg(device, op, "device", false);
        Context& ctx = context_for(w.kind, w.index, 0, op, "device");
        return PyTernaryWeight{cache_for(ctx).get_or_upload(key, b.data, b.size, n, k)};
      },
      nb::arg("aos").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("key").none(), nb::arg("device").none(),
      "Converts and uploads AoS bytes once per key to device ('cpu', 'cuda:N' or an array there): the per-device "
      "cache. Low level: use llmm.upload_tq2.");
  m.def(
      "tq2_upload_experts",
      [](nb::handle aos, nb::handle e_, nb::handle n_, nb::handle k_, nb::handle key_, nb::handle device) {
        constexpr const char* op = "llmm.upload_tq2_experts";
        Blob b = blob_arg(aos, op, "aos");
        const std::int64_t e = size_arg(e_, op, "n_experts"), n = size_arg(n_, op, "n"), k = size_arg(k_, op, "k");
        const std::uint64_t key = uint_arg(key_, op, "key", kU64Max, "uint64");
        Where w = where_arg(device, op, "device", false);
        Context& ctx = context_for(w.kind, w.index, 0, op, "device");
        return PyTernaryWeight{cache_for(ctx).get_or_upload_experts(key, b.data, b.size, e, n, k)};
      },
      nb::arg("aos").none(), nb::arg("n_experts").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("key").none(),
      nb::arg("device").none(),
      "Converts and uploads a stack of n_experts [n, k] AoS weights once per key. Low level: use "
      "llmm.upload_tq2_experts.");
  m.def(
      "tq2_evict",
      [](nb::handle key_, nb::handle device) {
        constexpr const char* op = "llmm.tq2_evict";
        const std::uint64_t key = uint_arg(key_, op, "key", kU64Max, "uint64");
        Where w = where_arg(device, op, "device", false);
        return cache_for(context_for(w.kind, w.index, 0, op, "device")).evict(key);
      },
      nb::arg("key").none(), nb::arg("device").none(),
      "Drops key from the device's ternary-weight cache, whatever upload it holds (live TernaryWeight objects keep "
      "their memory). True if it was cached. Prefer tq2_release(weight).");
  m.def(
      "tq2_release",
      [](nb::handle weight) {
        constexpr const char* op = "llmm.release_tq2";
        const PyTernaryWeight& w = weight_arg(weight, op);
        Context& ctx = context_for(w.handle->device(), w.handle->device_index(), 0, op, "weight");
        return cache_for(ctx).evict(w.handle);
      },
      nb::arg("weight").none(),
      "Drops weight from its device's cache only while the cache still holds that very upload (a stale handle never "
      "evicts a later upload under the same key). True if it evicted.");
  m.def(
      "gemm_tq2",
      [](nb::handle weight, nb::handle x, nb::handle out, nb::handle precision, nb::handle route, nb::handle stream,
         nb::handle rotation_signs, nb::handle rotation_block) {
        constexpr const char* op = "llmm.gemm_tq2";
        const PyTernaryWeight& w = weight_arg(weight, op);
        Arr vx = input_arg(x, op, "x"), vo = output_arg(out, op, "out");
        Tq2Options o;
        o.precision = precision_of(precision, op), o.force_route = tq2_route_of(route, op);
        const int block = static_cast<int>(uint_arg(rotation_block, op, "rotation_block", 1u << 30, "int"));
        Arr vs;
        if (!rotation_signs.is_none()) vs = input_arg(rotation_signs, op, "rotation_signs");
        o.rotation_signs = rotation_signs_of(rotation_signs.is_none() ? nullptr : &vs.v, block, vo.v, w.k(), op);
        o.rotation_block = block;
        Context& ctx = context_for(vo.v, stream_arg(stream, op), op, "out");
        return receipt_dict(gemm_tq2(ctx, w.handle, vx.v, vo.v, o));
      },
      nb::arg("weight").none(), nb::arg("x").none(), nb::arg("out").none(), nb::arg("precision").none() = "exact", nb::arg("route").none() = "auto",
      nb::arg("stream").none() = 0, nb::arg("rotation_signs").none() = nb::none(), nb::arg("rotation_block").none() = 0,
      "out[m, n] = x[m, k] @ W[n, k]^T on out's device and the given stream, x rotated first where rotation_signs "
      "(float32 [k]) and rotation_block are given (Tq2Options::rotation_*); returns the receipt. Low level: use "
      "llmm.gemm_tq2.");

  m.def(
      "plan_tq2",
      [](nb::handle m_, nb::handle n_, nb::handle k_, nb::handle like, nb::handle out_dtype_, nb::handle precision,
         nb::handle route) {
        constexpr const char* op = "llmm.plan_tq2";
        const std::int64_t mm = size_arg(m_, op, "m"), n = size_arg(n_, op, "n"), k = size_arg(k_, op, "k");
        Where w = where_arg(like, op, "like", true);
        Context& ctx = context_for(w.kind, w.index, 0, op, "like");
        const std::string out_dtype = str_arg(out_dtype_, op, "out_dtype");
        Tq2Options o;
        o.precision = precision_of(precision, op);
        const Tq2Route forced = tq2_route_of(route, op);
        const Tq2Plan plan = plan_gemm_tq2(mm, n, k, w.dtype, ctx.arch(), forced);  // refuses bad sizes and dtypes
        o.force_route = plan.route;
        if (out_dtype != "f32" && out_dtype != dtype_name(w.dtype))
          fail(ErrorCode::InvalidArgument, "plan_tq2: out_dtype must be f32 or the input's ", dtype_name(w.dtype), ", got ",
               out_dtype);
        const DType out = out_dtype == "f32" ? DType::F32 : w.dtype;
        nb::dict d;
        d["route"] = std::string(tq2_route_name(o.force_route));
        d["workspace_bytes"] = tq2_workspace_bytes(mm, n, k, w.dtype, out, o);
        d["reason"] = plan.reason;
        return d;
      },
      nb::arg("m").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("like").none(), nb::arg("out_dtype").none() = "f32",
      nb::arg("precision").none() = "exact", nb::arg("route").none() = "auto",
      "The ternary route gemm_tq2 takes for x [m, k] with like's dtype on like's device (like: an array, or 'cpu' / "
      "'cuda:N' for float32), the device workspace it needs and why: {route, workspace_bytes, reason}. Pure.");

  // Expert-ID matmul.
  m.def(
      "matmul_id_capability",
      [](nb::handle weight_dtype, nb::handle m_, nb::handle n, nb::handle k, nb::handle top_k, nb::handle n_experts,
         nb::handle expert_stride_bytes, nb::handle layout, nb::handle may_repeat, nb::handle route,
         nb::handle input_dtype, nb::handle output_dtype, nb::handle ids_dtype, nb::handle input_token_stride,
         nb::handle input_slot_stride) {
        constexpr const char* op = "llmm.matmul_id_capability";
        const DType wd = dtype_code_of(weight_dtype, op, "weight_dtype");
        MatmulIdParams p = sizes_params(op, m_, n, k, top_k, n_experts);
        p.expert_stride_bytes = uint_arg(expert_stride_bytes, op, "expert_stride_bytes", kU64Max, "uint64");
        p.input_layout = layout_of(layout, op);
        p.id_multiplicity =
            bool_arg(may_repeat, op, "may_repeat") ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
        p.route = matmul_id_route_of(route, op);
        p.input_dtype = dtype_code_of(input_dtype, op, "input_dtype");
        p.output_dtype = dtype_code_of(output_dtype, op, "output_dtype");
        p.ids_dtype = dtype_code_of(ids_dtype, op, "ids_dtype");
        if (!input_token_stride.is_none())
          p.input_token_stride = uint_arg(input_token_stride, op, "input_token_stride", kU64Max, "uint64");
        if (!input_slot_stride.is_none())
          p.input_slot_stride = uint_arg(input_slot_stride, op, "input_slot_stride", kU64Max, "uint64");
        MatmulIdCapability c = matmul_id_capability(wd, p);
        nb::dict d;
        d["schema_version"] = c.schema_version;
        d["route"] = c.route == MatmulIdRoute::GroupedPrefill ? "grouped"  // the names route= takes
                     : c.route == MatmulIdRoute::Auto       ? "auto"
                                                            : "direct";
        d["weight_bytes"] = c.required_weight_bytes;
        d["input_bytes"] = c.required_input_bytes;
        d["ids_bytes"] = c.required_ids_bytes;
        d["output_bytes"] = c.required_output_bytes;
        if (c.scratch) {
          d["scratch_counts_bytes"] = c.scratch->expert_counts_bytes;
          d["scratch_rows_bytes"] = c.scratch->routed_rows_bytes;
        }
        return d;
      },
      nb::arg("weight_dtype").none(), nb::arg("m").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("top_k").none(), nb::arg("n_experts").none(),
      nb::arg("expert_stride_bytes").none(), nb::arg("layout").none() = "shared", nb::arg("may_repeat").none() = false,
      nb::arg("route").none() = "direct", nb::arg("input_dtype").none() = "f32", nb::arg("output_dtype").none() = "f32",
      nb::arg("ids_dtype").none() = "u32", nb::arg("input_token_stride").none() = nb::none(), nb::arg("input_slot_stride").none() = nb::none(),
      "Exact byte extents of a matmul_id call (weights, input, ids, output, grouped scratch), or llmm.Error. Pure. "
      "Dtypes are llmm codes: f32, f16, bf16 (data), u32, i32, i64 (ids); input strides in elements (None: dense).");

  m.def(
      "suggest_matmul_id_route",
      [](nb::handle m_, nb::handle n, nb::handle k, nb::handle top_k, nb::handle n_experts, nb::handle like,
         nb::handle may_repeat) {
        constexpr const char* op = "llmm.suggest_matmul_id_route";
        MatmulIdParams p = sizes_params(op, m_, n, k, top_k, n_experts);
        Where w = where_arg(like, op, "like", true);
        p.id_multiplicity =
            bool_arg(may_repeat, op, "may_repeat") ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
        p.input_dtype = w.dtype;
        return suggest_matmul_id_route(p, context_for(w.kind, w.index, 0, op, "like").arch()) == MatmulIdRoute::Direct
                   ? "direct"
                   : "grouped";
      },
      nb::arg("m").none(), nb::arg("n").none(), nb::arg("k").none(), nb::arg("top_k").none(), nb::arg("n_experts").none(), nb::arg("like").none(),
      nb::arg("may_repeat").none() = false,
      "The matmul_id route ('direct' or 'grouped') calibrated as fastest for these sizes on like's device. Pure; "
      "it cannot see the routing (hot experts favour 'grouped' earlier).");

  nb::class_<MatmulIdScratch>(m, "MatmulIdScratch",
                              "Scratch of matmul_id's grouped route on one device (from llmm.matmul_id_scratch).")
      .def("__init__", [](MatmulIdScratch*, nb::args, nb::kwargs) {
        type_error("llmm.MatmulIdScratch cannot be created directly: use llmm.matmul_id_scratch");
      })
      .def_prop_ro("max_experts", &MatmulIdScratch::max_experts, "Experts it has room for.")
      .def_prop_ro("max_tokens", &MatmulIdScratch::max_tokens, "Tokens it has room for.")
      .def_prop_ro("max_top_k", &MatmulIdScratch::max_top_k,
                   "Slots per token it has room for: a call needs m * top_k <= max_tokens * max_top_k.")
      .def_prop_ro("staged_row_bytes", &MatmulIdScratch::staged_row_bytes,
                   "Bytes per routed input row it can stage in expert order (0: none; CPU scratch never stages).");
  m.def(
      "matmul_id_scratch",
      [](nb::handle max_experts, nb::handle max_tokens, nb::handle device, nb::handle max_top_k, nb::handle staged_row_bytes) {
        constexpr const char* op = "llmm.matmul_id_scratch";
        const std::uint32_t e = u32_arg(max_experts, op, "max_experts"), t = u32_arg(max_tokens, op, "max_tokens");
        const std::uint32_t s = u32_arg(max_top_k, op, "max_top_k");
        const std::uint32_t rb = u32_arg(staged_row_bytes, op, "staged_row_bytes");
        Where w = where_arg(device, op, "device", false);
        return std::make_unique<MatmulIdScratch>(context_for(w.kind, w.index, 0, op, "device"), e, t, s, rb);
      },
      nb::arg("max_experts").none(), nb::arg("max_tokens").none(), nb::arg("device").none(), nb::arg("max_top_k").none() = 0,
      nb::arg("staged_row_bytes").none() = 0,
      "Allocates grouped-route scratch on device ('cpu', 'cuda:N' or an array there) for max_tokens x max_top_k "
      "routed rows (max_top_k 0: max_experts), plus room to stage that many input rows of staged_row_bytes "
      "each. Low level: use llmm.matmul_id_scratch.");
  m.def(
      "moe_ffn",
      [](nb::handle x, nb::handle w_gate_up, nb::handle w_down, nb::handle ids, nb::handle topk_weights, nb::handle out,
         nb::handle activation, nb::handle route, nb::handle precision, nb::handle stream, nb::handle w_gate_up_scale,
         nb::handle w_down_scale, nb::handle gate_up_scale_kind, nb::handle down_scale_kind, nb::handle alpha,
         nb::handle limit, nb::handle bias_gate_up, nb::handle bias_down, nb::handle fuse_decode) {
        constexpr const char* op = "llmm.moe_ffn";
        // Ternary expert stacks (llmm.upload_tq2_experts) or dense [E, rows, cols] arrays, both of one kind.
        const bool ternary = nb::isinstance<PyTernaryWeight>(w_gate_up) || nb::isinstance<PyTernaryWeight>(w_down);
        if (ternary && !(nb::isinstance<PyTernaryWeight>(w_gate_up) && nb::isinstance<PyTernaryWeight>(w_down)))
          type_error(concat(op, ": w_gate_up and w_down must both be arrays or both llmm.TernaryWeight expert stacks, got ",
                            tp_name(w_gate_up), " and ", tp_name(w_down)));
        // FP8 e4m3 expert arrays: both stacks with their scales (each stack its own kind).
        const bool fp8 = !w_gate_up_scale.is_none() || !w_down_scale.is_none();
        if (fp8 && (w_gate_up_scale.is_none() || w_down_scale.is_none()))
          fail(ErrorCode::InvalidArgument, op, ": FP8 experts need both w_gate_up_scale and w_down_scale (got only ",
               w_gate_up_scale.is_none() ? "w_down_scale" : "w_gate_up_scale", ")");
        if (fp8 && ternary)
          fail(ErrorCode::InvalidArgument, op,
               ": w_gate_up_scale and w_down_scale are the scales of FP8 expert arrays, not of llmm.TernaryWeight stacks");
        Arr vx = input_arg(x, op, "x");
        std::optional<Arr> vgu, vd;
        if (!ternary)
          vgu.emplace(expert_weights_arg(w_gate_up, op, "w_gate_up", fp8, "w_gate_up_scale")),
              vd.emplace(expert_weights_arg(w_down, op, "w_down", fp8, "w_down_scale"));
        Arr vid = input_arg(ids, op, "topk_ids"), vtw = input_arg(topk_weights, op, "topk_weights");
        Arr vo = output_arg(out, op, "out");
        MoeFfnOptions o;
        // vLLM's activation names: "<f>" gated (gate rows then up rows), "<f>_no_mul" without a gate,
        // "swigluoai" gpt-oss's clamped SwiGLU on interleaved rows, "swigluoai_uninterleave" on halves.
        const std::string a = str_arg(activation, op, "activation");
        std::string base = a;
        if (base.size() > 7 && base.compare(base.size() - 7, 7, "_no_mul") == 0) base.resize(base.size() - 7), o.gated = false;
        bool known = false;
        if (base == "swigluoai" || base == "swigluoai_uninterleave") {
          o.activation = MoeActivation::SwigluOai, known = o.gated;
          o.gate_layout = base == "swigluoai" ? MoeGateLayout::Interleaved : MoeGateLayout::Halves;
        } else {
          for (MoeActivation k : {MoeActivation::Silu, MoeActivation::GeluTanh, MoeActivation::GeluErf, MoeActivation::Relu2})
            if (base == moe_activation_name(k)) o.activation = k, known = true;
        }
        if (!known)
          fail(ErrorCode::InvalidArgument, op, ": activation must be one of 'silu', 'gelu', 'gelu_tanh', 'relu2' (each also "
               "with '_no_mul': no gate), 'swigluoai' (gpt-oss, interleaved gate and up rows) or 'swigluoai_uninterleave', got '",
               a, "'");
        o.swiglu_alpha = static_cast<float>(float_arg(alpha, op, "alpha"));
        o.swiglu_limit = static_cast<float>(float_arg(limit, op, "limit"));
        o.fuse_decode = bool_arg(fuse_decode, op, "fuse_decode");
        std::optional<Arr> vbgu, vbd;
        if (!bias_gate_up.is_none()) vbgu.emplace(input_arg(bias_gate_up, op, "bias_gate_up")), o.bias_gate_up = vbgu->v;
        if (!bias_down.is_none()) vbd.emplace(input_arg(bias_down, op, "bias_down")), o.bias_down = vbd->v;
        o.route = matmul_id_route_of(route, op);
        o.precision = precision_of(precision, op);
        std::optional<Arr> sgu, sd;
        Fp8ScaleKind kgu = Fp8ScaleKind::Block128, kd = Fp8ScaleKind::Block128;
        if (fp8) {
          sgu.emplace(input_arg(w_gate_up_scale, op, "w_gate_up_scale")), sd.emplace(input_arg(w_down_scale, op, "w_down_scale"));
          kgu = fp8_kind_of(gate_up_scale_kind, op, "gate_up_scale_kind"), kd = fp8_kind_of(down_scale_kind, op, "down_scale_kind");
        }
        Context& ctx = context_for(vo.v, stream_arg(stream, op), op, "out");
        if (ternary)
          return receipt_dict(llmm::moe_ffn(ctx, vx.v, nb::inst_ptr<PyTernaryWeight>(w_gate_up)->handle,
                                            nb::inst_ptr<PyTernaryWeight>(w_down)->handle, vid.v, vtw.v, vo.v, o));
        if (fp8)
          return receipt_dict(llmm::moe_ffn(ctx, vx.v, Fp8Experts{vgu->v, kgu, sgu->v}, Fp8Experts{vd->v, kd, sd->v}, vid.v,
                                            vtw.v, vo.v, o));
        return receipt_dict(llmm::moe_ffn(ctx, vx.v, vgu->v, vd->v, vid.v, vtw.v, vo.v, o));
      },
      nb::arg("x").none(), nb::arg("w_gate_up").none(), nb::arg("w_down").none(), nb::arg("topk_ids").none(),
      nb::arg("topk_weights").none(), nb::arg("out").none(), nb::arg("activation").none() = "silu",
      nb::arg("route").none() = "auto", nb::arg("precision").none() = "exact", nb::arg("stream").none() = 0,
      nb::arg("w_gate_up_scale").none() = nb::none(), nb::arg("w_down_scale").none() = nb::none(),
      nb::arg("gate_up_scale_kind").none() = "block", nb::arg("down_scale_kind").none() = "block",
      nb::arg("alpha").none() = 1.702, nb::arg("limit").none() = 7.0, nb::arg("bias_gate_up").none() = nb::none(),
      nb::arg("bias_down").none() = nb::none(), nb::arg("fuse_decode").none() = false,
      "The MoE expert FFN into out [m, hidden] on out's device and the given stream; returns the receipt. With "
      "w_gate_up_scale and w_down_scale, the weights are FP8 e4m3 codes (uint8 bits or float8_e4m3fn) with those "
      "contiguous f32 [E, sr, sc] scales of gate_up_scale_kind / down_scale_kind ('tensor', 'channel', 'block'). "
      "Low level: use llmm.moe_ffn.");
  m.def(
      "matmul_id_tq2",
      [](nb::handle experts, nb::handle x, nb::handle ids, nb::handle out, nb::handle layout, nb::handle route,
         nb::handle scratch, nb::handle stream) {
        constexpr const char* op = "llmm.matmul_id_tq2";
        const PyTernaryWeight& w = weight_arg(experts, op);
        Arr vx = input_arg(x, op, "x"), vid = input_arg(ids, op, "ids");
        Arr vo = output_arg(out, op, "out");
        Tq2MoeOptions o;
        o.force_route = tq2_moe_route_of(route, op);
        MatmulIdScratch* s = scratch_arg(scratch, op);
        Context& ctx = context_for(vo.v, stream_arg(stream, op), op, "out");
        return receipt_dict(llmm::matmul_id_tq2(ctx, w.handle, vx.v, vid.v, vo.v, s, layout_of(layout, op), o));
      },
      nb::arg("experts").none(), nb::arg("x").none(), nb::arg("ids").none(), nb::arg("out").none(),
      nb::arg("layout").none() = "shared", nb::arg("route").none() = "auto", nb::arg("scratch").none() = nb::none(),
      nb::arg("stream").none() = 0,
      "out[t, s, :] = W[ids[t, s]] @ x(t, s) for a ternary expert stack W on out's device and the given stream; "
      "returns the receipt. Low level: use llmm.matmul_id_tq2.");
  m.def(
      "matmul_id",
      [](nb::handle weights, nb::handle x, nb::handle ids, nb::handle out, nb::handle layout, nb::handle may_repeat,
         nb::handle route, nb::handle scratch, nb::handle precision, nb::handle grouped_kernel, nb::handle stream,
         nb::handle weight_scale, nb::handle scale_kind) {
        constexpr const char* op = "llmm.matmul_id";
        const MatmulIdCall c(op, weights, x, ids, out, layout, may_repeat, route, scratch, precision, grouped_kernel,
                             weight_scale, scale_kind);
        Context& ctx = context_for(c.out.v, stream_arg(stream, op), op, "out");
        if (c.scales)
          return receipt_dict(llmm::matmul_id(ctx, c.fp8(), c.x.v, c.ids.v, c.out.v, c.scratch, c.layout, c.mult, c.route, c.opts));
        return receipt_dict(llmm::matmul_id(ctx, c.w.v, c.x.v, c.ids.v, c.out.v, c.scratch, c.layout, c.mult, c.route, c.opts));
      },
      nb::arg("weights").none(), nb::arg("x").none(), nb::arg("ids").none(), nb::arg("out").none(), nb::arg("layout").none() = "shared",
      nb::arg("may_repeat").none() = false, nb::arg("route").none() = "auto", nb::arg("scratch").none() = nb::none(),
      nb::arg("precision").none() = "exact", nb::arg("grouped_kernel").none() = "auto", nb::arg("stream").none() = 0,
      nb::arg("weight_scale").none() = nb::none(), nb::arg("scale_kind").none() = "block",
      "out[t, s, :] = weights[ids[t, s]] @ x(t, s) on out's device and the given stream, every size read off the "
      "views (weights [E, n, k], x [m, k] / [m * top_k, k] / [m, top_k, k], ids [m, top_k] u32/i32/i64, out "
      "[m, top_k, n]); with weight_scale, weights are FP8 e4m3 codes (uint8 bits or float8_e4m3fn) and "
      "weight_scale their contiguous f32 [E, sr, sc] scales of scale_kind ('tensor', 'channel', 'block'). Returns "
      "the receipt. Low level: use llmm.matmul_id.");
  m.def(
      "plan_matmul_id",
      [](nb::handle weights, nb::handle x, nb::handle ids, nb::handle out, nb::handle layout, nb::handle may_repeat,
         nb::handle route, nb::handle scratch, nb::handle precision, nb::handle grouped_kernel, nb::handle stream) {
        constexpr const char* op = "llmm.plan_matmul_id";
        const MatmulIdCall c(op, weights, x, ids, out, layout, may_repeat, route, scratch, precision, grouped_kernel);
        const MatmulIdParams p = llmm::matmul_id_params(c.w.v, c.x.v, c.ids.v, c.out.v, c.layout, c.mult, c.route);
        const Context& ctx = context_for(c.out.v, stream_arg(stream, op), op, "out");  // the call's context: nothing enqueued
        const MatmulIdPlan plan = llmm::plan_matmul_id(ctx, c.w.v, c.x.v, c.ids.v, c.out.v, c.scratch, p, c.opts);
        nb::dict d;
        d["route"] = plan.route == MatmulIdRoute::Direct ? "direct" : "grouped";
        nb::list kernels;
        for (const std::string& k : plan.kernels) kernels.append(k);
        d["kernels"] = kernels;
        d["engine"] = plan.engine;
        d["staged"] = plan.staged;
        d["fused"] = plan.fused;
        d["pooled"] = plan.pooled;
        d["reason"] = plan.reason;
        return d;
      },
      nb::arg("weights").none(), nb::arg("x").none(), nb::arg("ids").none(), nb::arg("out").none(), nb::arg("layout").none() = "shared",
      nb::arg("may_repeat").none() = false, nb::arg("route").none() = "auto", nb::arg("scratch").none() = nb::none(),
      nb::arg("precision").none() = "exact", nb::arg("grouped_kernel").none() = "auto", nb::arg("stream").none() = 0,
      "What llmm.matmul_id with these arguments launches, without running it: {route, kernels (in launch order), "
      "engine, staged, fused, pooled, reason}; the call's refusals are raised here. Low level: use llmm.plan_matmul_id.");
}
