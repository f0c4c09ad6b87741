// llmm._llmm_torch: the host path for torch tensors, built against the installed torch's headers
// where pip finds torch at build time (python/CMakeLists.txt).
//
// Why: through DLPack a call pays per tensor for a capsule, its import and Python-level checks,
// plus torch.empty and the stream lookup from Python: ~21 us a call against ~13 us for
// torch.matmul (issue 47). Here a call unpacks the tensors in C (THPVariable_Unpack), allocates
// its output with at::empty (torch's caching allocator, so it counts in torch's memory stats),
// reads torch's current stream in C++, and hands Views to llmm._llmm through its capsule
// (capi.hpp), where the library's one set of contexts and caches lives. Its refusals are the
// same llmm.Error messages as the DLPack path's: the checks are the library's.
//
// Functions (positional, all required; the llmm package calls them, users call llmm.matmul etc.):
//   matmul(a, b, transpose_a, transpose_b, precision, route) -> Tensor
//   gemm_tq2(x, weight, n, precision, route, out_dtype[, rotation_signs, rotation_block]) -> Tensor
//   matmul_id(weights, x, ids, layout, route, may_repeat, precision, out_dtype, grouped_kernel) -> Tensor
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>
#ifdef LLMM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "capi.hpp"

namespace {

using llmm::View;

const llmm::capi::Table* g_capi = nullptr;
PyObject* g_error = nullptr;  // llmm.Error

// A C++ exception of ours carrying the Python error to raise.
struct Raise {
  PyObject* type;
  std::string msg;
};
struct PyErrorSet {};  // the Python error is already set (llmm._llmm refused the call)

std::string shape_str(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

llmm::DType dtype_of(const at::Tensor& t, const char* op, const char* name) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Float: return llmm::DType::F32;
    case c10::ScalarType::Half: return llmm::DType::F16;
    case c10::ScalarType::BFloat16: return llmm::DType::BF16;
    case c10::ScalarType::Byte: return llmm::DType::U8;
    case c10::ScalarType::UInt32: return llmm::DType::U32;
    case c10::ScalarType::Int: return llmm::DType::I32;
    case c10::ScalarType::Long: return llmm::DType::I64;
    default: {  // named as the DLPack path names it (kind and bits: float64, int16, complex64, bool)
      const c10::ScalarType s = t.scalar_type();
      const std::string kind = s == c10::ScalarType::Bool         ? "bool"
                               : c10::isComplexType(s)            ? "complex"
                               : c10::isFloatingType(s)           ? "float"
                               : c10::isSignedType(s)             ? "int"
                                                                  : "uint";
      const std::string dt = kind == "bool" ? kind : kind + std::to_string(c10::elementSize(s) * 8);
      throw Raise{g_error, std::string(op) + ": " + name + " has unsupported dtype " + dt +
                               " (llmm takes float32, float16 and bfloat16 data; uint32, int32 and int64 expert ids)"};
    }
  }
}

// The tensor as a View (no copy). The library checks the rest (shapes, strides, extents).
View view_of(const at::Tensor& t, const char* op, const char* name) {
  if (t.dim() > View::kMaxRank)
    throw Raise{g_error, std::string(op) + ": " + name + " has " + std::to_string(t.dim()) + " dimensions (at most " +
                             std::to_string(View::kMaxRank) + ")"};
  if (t.layout() != c10::kStrided)
    throw Raise{g_error, std::string(op) + ": " + name + " is not a strided tensor (sparse, MKL-DNN or jagged "
                             "layout): llmm takes dense tensors (convert with .to_dense())"};
  View v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(t, op, name);
  if (t.is_cuda()) {
    v.device = llmm::DeviceKind::CUDA;
    v.device_index = t.get_device();
  } else if (t.is_cpu()) {
    v.device = llmm::DeviceKind::CPU;
  } else {
    throw Raise{g_error, std::string(op) + ": " + name + " lives on " + t.device().str() +
                             ": llmm takes CPU and CUDA tensors"};
  }
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[static_cast<std::size_t>(i)] = t.size(i);
    v.strides[static_cast<std::size_t>(i)] = t.stride(i);
  }
  return v;
}

const at::Tensor& tensor_arg(PyObject* o, const char* op, const char* name) {
  if (!THPVariable_Check(o))
    throw Raise{PyExc_TypeError, std::string(op) + ": " + name + " must be a torch.Tensor, got " + Py_TYPE(o)->tp_name};
  return THPVariable_Unpack(o);
}

bool bool_arg(PyObject* o, const char* op, const char* name) {
  if (o == Py_True) return true;
  if (o == Py_False) return false;
  throw Raise{PyExc_TypeError, std::string(op) + ": " + name + " must be a bool, got " + Py_TYPE(o)->tp_name};
}

// A transposed view (innermost stride != 1, the next 1) is its row-major base with the flag
// flipped: the same matrix, no copy (llmm.matmul's rule).
void canonical(at::Tensor& t, bool& transposed) {
  const int64_t d = t.dim();
  if (d >= 2 && t.stride(d - 1) != 1 && t.stride(d - 2) == 1 && t.size(d - 1) > 1) {
    t = t.transpose(d - 1, d - 2);
    transposed = !transposed;
  }
}

// torch's current stream on t's device (0, the legacy default, stands for the CPU backend).
std::uintptr_t stream_of(const at::Tensor& t) {
#ifdef LLMM_TORCH_CUDA
  if (t.is_cuda()) return reinterpret_cast<std::uintptr_t>(c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
#endif
  (void)t;
  return 0;
}

// Runs f with the GIL held, turning our and torch's C++ exceptions into the Python error.
template <class F>
PyObject* guarded(F&& f) {
  try {
    return f();
  } catch (const Raise& r) {
    PyErr_SetString(r.type, r.msg.c_str());
  } catch (const PyErrorSet&) {
  } catch (const c10::Error& e) {  // e.g. out of device memory in at::empty
    PyErr_SetString(g_error, (std::string("llmm: ") + e.what_without_backtrace()).c_str());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyObject* arity(const char* op, Py_ssize_t got, Py_ssize_t want) {
  PyErr_Format(PyExc_TypeError, "%s: takes %zd positional arguments, got %zd", op, want, got);
  return nullptr;
}

// llmm.matmul's contract for torch tensors: a new output like a, on torch's current stream.
at::Tensor run_matmul(at::Tensor a, at::Tensor b, bool ta, bool tb, PyObject* precision, PyObject* route) {
  constexpr const char* op = "llmm.matmul";
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{a, "a"}, {b, "b"}})
    if (t.dim() != 2 && t.dim() != 3)
      throw Raise{g_error, std::string(op) + ": " + name + " must be rank 2 or 3, got shape " + shape_str(t)};
  // The output's shape as llmm.matmul allocates it (the Python fake implementation's rule).
  const int64_t m = ta ? a.size(-1) : a.size(-2), n = tb ? b.size(-2) : b.size(-1);
  canonical(a, ta), canonical(b, tb);
  at::Tensor out;
  if (a.dim() == 3 || b.dim() == 3) {
    const int64_t batch = a.dim() == 3 && (b.dim() == 2 || a.size(0) != 1) ? a.size(0) : b.size(0);
    out = at::empty({batch, m, n}, a.options());
  } else {
    out = at::empty({m, n}, a.options());
  }
  const View va = view_of(a, op, "a"), vb = view_of(b, op, "b"), vo = view_of(out, op, "out");
#ifdef LLMM_TORCH_CUDA
  const c10::cuda::OptionalCUDAGuard guard(out.is_cuda() ? std::optional<c10::Device>(out.device()) : std::nullopt);
#endif
  if (g_capi->matmul(va, vb, vo, ta, tb, precision, route, stream_of(out)) != 0) throw PyErrorSet{};
  return out;
}

PyObject* matmul(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* op = "llmm.matmul";
  if (nargs != 6) return arity(op, nargs, 6);
  return guarded([&]() -> PyObject* {
    at::Tensor out = run_matmul(tensor_arg(args[0], op, "a"), tensor_arg(args[1], op, "b"),
                                bool_arg(args[2], op, "transpose_a"), bool_arg(args[3], op, "transpose_b"), args[4],
                                args[5]);
    return THPVariable_Wrap(std::move(out));
  });
}

// An out_dtype argument: None (float32, the default of llmm.gemm_tq2 and llmm.matmul_id) or a torch.dtype.
c10::ScalarType out_dtype_arg(PyObject* o, const char* op) {
  if (o == Py_None) return c10::ScalarType::Float;
  if (!THPDtype_Check(o))
    throw Raise{PyExc_TypeError,
                std::string(op) + ": out_dtype must be a torch.dtype or None, got " + Py_TYPE(o)->tp_name};
  return reinterpret_cast<THPDtype*>(o)->scalar_type;
}

// llmm.gemm_tq2's contract for a torch x [m, k]: a new [m, n] output of dtype dt like x.
// signs: a Hadamard rotation's float32 [k] signs (null: none), rotation_block its block.
at::Tensor run_gemm_tq2(const at::Tensor& x, PyObject* weight, int64_t n, c10::ScalarType dt, PyObject* precision,
                        PyObject* route, const at::Tensor* signs = nullptr, int64_t rotation_block = 0) {
  constexpr const char* op = "llmm.gemm_tq2";
  if (x.dim() != 2) throw Raise{g_error, std::string(op) + ": x must be [m, k], got shape " + shape_str(x)};
  if (rotation_block < 0 || rotation_block > (int64_t{1} << 30))
    throw Raise{g_error, std::string(op) + ": rotation_block " + std::to_string(rotation_block) + " is out of range"};
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(dt));
  const View vx = view_of(x, op, "x"), vo = view_of(out, op, "out");
  View vs;
  if (signs) vs = view_of(*signs, op, "rotation_signs");
#ifdef LLMM_TORCH_CUDA
  const c10::cuda::OptionalCUDAGuard guard(out.is_cuda() ? std::optional<c10::Device>(out.device()) : std::nullopt);
#endif
  if (g_capi->gemm_tq2(weight, vx, vo, precision, route, signs ? &vs : nullptr, static_cast<int>(rotation_block),
                       stream_of(out)) != 0)
    throw PyErrorSet{};
  return out;
}

// gemm_tq2(x, weight, n, precision, route, out_dtype[, rotation_signs, rotation_block])
PyObject* gemm_tq2(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* op = "llmm.gemm_tq2";
  if (nargs != 6 && nargs != 8) return arity(op, nargs, 8);
  return guarded([&]() -> PyObject* {
    const at::Tensor* signs = nullptr;
    long long block = 0;
    if (nargs == 8) {
      if (args[6] != Py_None) signs = &tensor_arg(args[6], op, "rotation_signs");
      if (!PyLong_Check(args[7])) throw Raise{PyExc_TypeError, std::string(op) + ": rotation_block must be an int"};
      block = PyLong_AsLongLong(args[7]);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw Raise{g_error, std::string(op) + ": rotation_block is out of range"};
      }
    }
    const at::Tensor& x = tensor_arg(args[0], op, "x");
    if (!PyLong_Check(args[2])) throw Raise{PyExc_TypeError, std::string(op) + ": n must be an int"};
    const long long n = PyLong_AsLongLong(args[2]);
    if (n < 0 || PyErr_Occurred()) {
      PyErr_Clear();
      throw Raise{g_error, std::string(op) + ": n must be a non-negative int64"};
    }
    return THPVariable_Wrap(run_gemm_tq2(x, args[1], static_cast<int64_t>(n), out_dtype_arg(args[5], op), args[3],
                                         args[4], signs, static_cast<int64_t>(block)));
  });
}

// llmm.matmul_id's contract for torch tensors without out= and scratch=: a new [m, top_k, n]
// output of dtype dt on x's device, the grouped route on the library's own scratch. The checks
// before the allocation are llmm.matmul_id's in Python (_matmul_id_args), in its order.
at::Tensor run_matmul_id(const at::Tensor& w, const at::Tensor& x, const at::Tensor& ids, PyObject* layout,
                         PyObject* route, PyObject* may_repeat, PyObject* precision, c10::ScalarType dt,
                         PyObject* grouped_kernel) {
  constexpr const char* op = "llmm.matmul_id";
  if (w.dim() != 3)
    throw Raise{g_error, std::string(op) + ": weights must be [n_experts, n, k], got shape " + shape_str(w)};
  if (ids.dim() != 2) throw Raise{g_error, std::string(op) + ": ids must be [m, top_k], got shape " + shape_str(ids)};
  if (x.dim() != 2 && x.dim() != 3)
    throw Raise{g_error, std::string(op) + ": x must be [m, k], [m * top_k, k] or [m, top_k, k], got shape " +
                             shape_str(x)};
  constexpr int64_t u32_max = std::numeric_limits<uint32_t>::max();
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"m (tokens)", ids.size(0)}, {"top_k", ids.size(1)},
                                {"n", w.size(1)}})
    if (v > u32_max)  // refused before a huge output is allocated
      throw Raise{g_error, std::string(op) + ": " + name + " " + std::to_string(v) + " is outside 0.." +
                               std::to_string(u32_max)};
  // Strided whatever x's layout (the DLPack path's torch.empty): a sparse x is refused below.
  at::Tensor out = at::empty({ids.size(0), ids.size(1), w.size(1)}, at::TensorOptions().dtype(dt).device(x.device()));
  const View vw = view_of(w, op, "weights"), vx = view_of(x, op, "x"), vi = view_of(ids, op, "ids"),
             vo = view_of(out, op, "out");
#ifdef LLMM_TORCH_CUDA
  const c10::cuda::OptionalCUDAGuard guard(out.is_cuda() ? std::optional<c10::Device>(out.device()) : std::nullopt);
#endif
  if (g_capi->matmul_id(vw, vx, vi, vo, layout, may_repeat, route, precision, grouped_kernel, stream_of(out)) != 0)
    throw PyErrorSet{};
  return out;
}

PyObject* matmul_id(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* op = "llmm.matmul_id";
  if (nargs != 9) return arity(op, nargs, 9);
  return guarded([&]() -> PyObject* {
    const at::Tensor &w = tensor_arg(args[0], op, "weights"), &x = tensor_arg(args[1], op, "x"),
                     &ids = tensor_arg(args[2], op, "ids");
    return THPVariable_Wrap(
        run_matmul_id(w, x, ids, args[3], args[4], args[5], args[6], out_dtype_arg(args[7], op), args[8]));
  });
}

// A new reference to a str of v, or PyErrorSet.
PyObject* py_str(c10::string_view v) {
  PyObject* s = PyUnicode_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.size()));
  if (!s) throw PyErrorSet{};
  return s;
}
struct Ref {  // owns one reference
  PyObject* p;
  explicit Ref(PyObject* o) : p(o) {}
  Ref(const Ref&) = delete;
  ~Ref() { Py_XDECREF(p); }
};

// The op kernels' error path: the Python error set (or our Raise), carried through torch's
// dispatcher as a python_error, which torch restores at the Python boundary (so the caller sees
// the same llmm.Error as from llmm.matmul).
template <class F>
auto op_guarded(F&& f) -> decltype(f()) {
  pybind11::gil_scoped_acquire gil;  // torch calls op kernels with the GIL released
  try {
    return f();
  } catch (const Raise& e) {
    PyErr_SetString(e.type, e.msg.c_str());
  } catch (const PyErrorSet&) {
  }
  python_error err;
  err.persist();
  throw err;
}

// torch.ops.llmm.matmul's, gemm_tq2's and matmul_id's CPU and CUDA kernels (the schemas and the fake
// implementations are llmm/torch_ops.py's): the ops' calls skip custom_op's Python kernels.
at::Tensor matmul_op(const at::Tensor& a, const at::Tensor& b, bool ta, bool tb, c10::string_view precision,
                     c10::string_view route) {
  return op_guarded([&] {
    const Ref p(py_str(precision)), r(py_str(route));
    return run_matmul(a, b, ta, tb, p.p, r.p);
  });
}

// llmm._tq2_lookup(device, key), the package's registry of uploads, looked up per call: a
// reference held here would keep the package's globals (and every uploaded weight) alive past
// the interpreter's teardown.
PyObject* tq2_lookup(const std::string& dev, int64_t key) {
  const Ref name(PyUnicode_FromString("llmm"));
  const Ref pkg(name.p ? PyImport_GetModule(name.p) : nullptr);
  if (!pkg.p) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "llmm.gemm_tq2: the llmm package is not imported");
    throw PyErrorSet{};
  }
  PyObject* w = PyObject_CallMethod(pkg.p, "_tq2_lookup", "sL", dev.c_str(), static_cast<long long>(key));
  if (!w) throw PyErrorSet{};
  return w;
}

at::Tensor gemm_tq2_op(const at::Tensor& x, int64_t key, int64_t n, c10::string_view precision, c10::string_view route,
                       std::optional<c10::ScalarType> out_dtype, const std::optional<at::Tensor>& rotation_signs,
                       int64_t rotation_block) {
  return op_guarded([&] {
    const std::string dev = x.is_cuda() ? "cuda:" + std::to_string(x.get_device()) : std::string("cpu");
    const Ref w(tq2_lookup(dev, key));
    const Ref wn(PyObject_GetAttrString(w.p, "n"));
    if (!wn.p) throw PyErrorSet{};
    const long long have = PyLong_AsLongLong(wn.p);
    if (have != n) {
      const Ref wk(PyObject_GetAttrString(w.p, "k"));
      throw Raise{g_error, "llmm.gemm_tq2: weight key " + std::to_string(key) + " is [" + std::to_string(have) + ", " +
                               (wk.p ? std::to_string(PyLong_AsLongLong(wk.p)) : std::string("?")) +
                               "], the call says n = " + std::to_string(n)};
    }
    const Ref p(py_str(precision)), r(py_str(route));
    return run_gemm_tq2(x, w.p, n, out_dtype.value_or(c10::ScalarType::Float), p.p, r.p,
                        rotation_signs ? &*rotation_signs : nullptr, rotation_block);
  });
}

// The op refuses what its fake implementation refuses, with the same messages (torch_ops.py's
// _matmul_id_check: the output's shape depends on these), then runs llmm.matmul_id's path.
at::Tensor matmul_id_op(const at::Tensor& w, const at::Tensor& x, const at::Tensor& ids, c10::string_view layout,
                        c10::string_view route, bool may_repeat, c10::string_view precision,
                        std::optional<c10::ScalarType> out_dtype) {
  return op_guarded([&] {
    const c10::ScalarType it = ids.scalar_type();
    if (it != c10::ScalarType::Int && it != c10::ScalarType::Long && it != c10::ScalarType::UInt32)
      throw Raise{g_error, std::string("llmm.matmul_id: ids must be int32, int64 or uint32, got torch.") +
                               torch::getTHPDtype(it)->name};
    if (ids.dim() != 2 || w.dim() != 3 || (x.dim() != 2 && x.dim() != 3))
      throw Raise{g_error, "llmm.matmul_id: weights must be [E, n, k], ids [m, top_k] and x [m, k], [m * top_k, k] or "
                           "[m, top_k, k], got " + shape_str(w) + ", " + shape_str(ids) + " and " + shape_str(x)};
    const Ref l(py_str(layout)), r(py_str(route)), p(py_str(precision)), g(py_str("auto"));
    return run_matmul_id(w, x, ids, l.p, r.p, may_repeat ? Py_True : Py_False, p.p,
                         out_dtype.value_or(c10::ScalarType::Float), g.p);
  });
}

TORCH_LIBRARY_IMPL(llmm, CPU, m) {
  m.impl("matmul", &matmul_op);
  m.impl("gemm_tq2", &gemm_tq2_op);
  m.impl("matmul_id", &matmul_id_op);
}
#ifdef LLMM_TORCH_CUDA
TORCH_LIBRARY_IMPL(llmm, CUDA, m) {
  m.impl("matmul", &matmul_op);
  m.impl("gemm_tq2", &gemm_tq2_op);
  m.impl("matmul_id", &matmul_id_op);
}
#endif

PyMethodDef kMethods[] = {
    {"matmul", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&matmul)), METH_FASTCALL,
     "matmul(a, b, transpose_a, transpose_b, precision, route) -> Tensor. Low level: use llmm.matmul."},
    {"gemm_tq2", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&gemm_tq2)), METH_FASTCALL,
     "gemm_tq2(x, weight, n, precision, route, out_dtype[, rotation_signs, rotation_block]) -> Tensor. Low level: "
     "use llmm.gemm_tq2."},
    {"matmul_id", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&matmul_id)), METH_FASTCALL,
     "matmul_id(weights, x, ids, layout, route, may_repeat, precision, out_dtype, grouped_kernel) -> Tensor. Low "
     "level: use llmm.matmul_id."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_llmm_torch",
                       "llmm's host path for torch tensors (C++, against the installed torch); used by the llmm package.",
                       -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__llmm_torch() {
  PyObject* core = PyImport_ImportModule("llmm._llmm");
  if (!core) return nullptr;
  g_error = PyObject_GetAttrString(core, "Error");  // kept for the module's lifetime
  PyObject* cap = PyObject_GetAttrString(core, "_capi");
  Py_DECREF(core);
  if (!g_error || !cap) {
    Py_XDECREF(cap);
    return nullptr;
  }
  g_capi = static_cast<const llmm::capi::Table*>(PyCapsule_GetPointer(cap, llmm::capi::kCapsuleName));
  Py_DECREF(cap);
  if (!g_capi) return nullptr;
  if (g_capi->abi != llmm::capi::kAbi) {
    PyErr_Format(PyExc_ImportError, "llmm._llmm_torch: llmm._llmm's C API is version %u, this module needs %u "
                 "(a stale build: reinstall llmm)", g_capi->abi, llmm::capi::kAbi);
    return nullptr;
  }
  return PyModule_Create(&kModule);
}
