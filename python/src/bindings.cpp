// llmm._llmm: thin nanobind bindings. Tensors arrive as DLPack-capable arrays (NumPy on the CPU,
// torch/CuPy/JAX on CUDA); each becomes an llmm::View without a copy. Output allocation and
// framework conveniences live in python/llmm/__init__.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "llmm/llmm.hpp"

namespace nb = nanobind;
using namespace llmm;

namespace {

DType dtype_of(const nb::dlpack::dtype& t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) fail(ErrorCode::Unsupported, "llmm: vector dtypes are not supported");
  if (t.code == static_cast<std::uint8_t>(C::Float) && t.bits == 32) return DType::F32;
  if (t.code == static_cast<std::uint8_t>(C::Float) && t.bits == 16) return DType::F16;
  if (t.code == static_cast<std::uint8_t>(C::Bfloat) && t.bits == 16) return DType::BF16;
  if (t.code == static_cast<std::uint8_t>(C::UInt) && t.bits == 8) return DType::U8;
  if (t.code == static_cast<std::uint8_t>(C::UInt) && t.bits == 32) return DType::U32;
  fail(ErrorCode::Unsupported, "llmm: unsupported array dtype (code ", int(t.code), ", ", int(t.bits),
       " bits): use float32, float16, bfloat16, uint8 or uint32");
}

// ids_ok: int32 arrays are read as u32 expert ids (frameworks' usual index type; a negative id
// becomes a huge u32, i.e. out of range: a zero row, as for any out-of-range id).
View view_of(const nb::ndarray<>& a, const char* name, bool ids_ok = false) {
  if (a.ndim() > static_cast<std::size_t>(View::kMaxRank))
    fail(ErrorCode::InvalidArgument, "llmm: ", name, " has ", a.ndim(), " dimensions (at most 4)");
  View v;
  v.data = a.data();
  const auto t = a.dtype();
  const bool i32 = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) && t.bits == 32 && t.lanes == 1;
  const bool u32 = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) && t.bits == 32 && t.lanes == 1;
  if (ids_ok && !i32 && !u32)
    fail(ErrorCode::InvalidArgument, "llmm: ", name, " must be uint32 or int32, got DLPack dtype code ", int(t.code), ", ",
         int(t.bits), " bits (convert the ids, e.g. ids.to(torch.int32) or ids.astype(np.uint32))");
  v.dtype = ids_ok ? DType::U32 : dtype_of(t);
  int dev = a.device_type();
  if (dev == nb::device::cpu::value) v.device = DeviceKind::CPU;
  else if (dev == nb::device::cuda::value) v.device = DeviceKind::CUDA;
  else fail(ErrorCode::Unsupported, "llmm: ", name, " lives on an unsupported device (DLPack type ", dev, ")");
  v.device_index = a.device_id();
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    std::int64_t s = a.stride(static_cast<std::size_t>(i));
    if (s < 0) fail(ErrorCode::InvalidArgument, "llmm: ", name, " has a negative stride (", s, "): pass a copy");
    v.strides[static_cast<std::size_t>(i)] = s;
  }
  return v;
}

// One context per device: CPU, or a CUDA device bound per call to the caller's stream.
Context& context_for(const View& v, std::uintptr_t stream) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Context>> cuda;
  static Context cpu = Context::cpu();
  if (v.device == DeviceKind::CPU) return cpu;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cuda[v.device_index];
  if (!slot) slot = std::make_unique<Context>(Context::cuda(v.device_index, nullptr));
  slot->set_stream(reinterpret_cast<StreamHandle>(stream));
  return *slot;
}

Precision precision_of(const std::string& p) {
  if (p == "exact") return Precision::Exact;
  if (p == "fast") return Precision::Fast;
  fail(ErrorCode::InvalidArgument, "llmm: precision must be 'exact' or 'fast', got '", p, "'");
}

DenseRoute dense_route_of(const std::string& r) {
  for (DenseRoute x : {DenseRoute::Auto, DenseRoute::Cpu, DenseRoute::Naive, DenseRoute::Gemv, DenseRoute::GemvWide,
                       DenseRoute::SkinnyMma, DenseRoute::Tiled, DenseRoute::CublasLt})
    if (r == route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, "llmm: unknown dense route '", r, "'");
}

Tq2Route tq2_route_of(const std::string& r) {
  for (Tq2Route x : {Tq2Route::Auto, Tq2Route::Cpu, Tq2Route::Naive, Tq2Route::Stream, Tq2Route::StreamV2,
                     Tq2Route::StreamV3, Tq2Route::Tiled, Tq2Route::DequantLt})
    if (r == tq2_route_name(x)) return x;
  fail(ErrorCode::InvalidArgument, "llmm: unknown ternary route '", r, "'");
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
  std::size_t nbytes() const { return handle->bytes(); }
  std::string device() const {
    return handle->device() == DeviceKind::CPU ? "cpu" : "cuda:" + std::to_string(handle->device_index());
  }
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

}  // namespace

NB_MODULE(_llmm, m) {
  m.doc() = "llmm: matmul kernels for LLM and DiT inference (low-level bindings; use the llmm package)";
  static nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  error.attr("__doc__") =
      "llmm::Error: an invalid or unsupported call, refused before anything was enqueued; the message names the op "
      "and the offending values. A RuntimeError.";
  m.def("built_with_cuda", &built_with_cuda, "True if this build of llmm has the CUDA backend.");
  m.def("cuda_available", &cuda_available,
        "True if the CUDA backend is built and a usable CUDA device is present (never raises).");

  m.def(
      "matmul",
      [](nb::ndarray<> a, nb::ndarray<> b, nb::ndarray<> out, bool transpose_a, bool transpose_b,
         const std::string& precision, const std::string& route, std::uintptr_t stream) {
        View va = view_of(a, "a"), vb = view_of(b, "b"), vc = view_of(out, "out");
        MatmulOptions o;
        o.transpose_a = transpose_a, o.transpose_b = transpose_b, o.precision = precision_of(precision);
        o.force_route = dense_route_of(route);
        Context& ctx = context_for(vc, stream);
        return receipt_dict(llmm::matmul(ctx, va, vb, vc, o));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("transpose_a") = false, nb::arg("transpose_b") = false,
      nb::arg("precision") = "exact", nb::arg("route") = "auto", nb::arg("stream") = 0,
      "out = op(a) @ op(b) into out; returns the receipt {route, kernel, kernels_launched}. Low level: use "
      "llmm.matmul.");

  m.def(
      "plan_matmul",
      [](std::int64_t m_, std::int64_t n, std::int64_t k, nb::ndarray<> like, bool transpose_a, bool transpose_b,
         const std::string& precision) {
        View v = view_of(like, "like");
        Context& ctx = context_for(v, 0);
        MatmulDesc d;
        d.m = m_, d.n = n, d.k = k, d.dtype = v.dtype, d.transpose_a = transpose_a, d.transpose_b = transpose_b;
        d.precision = precision_of(precision), d.a_vec16 = d.b_vec16 = true;
        DensePlan p = plan_matmul(d, ctx.arch());
        nb::dict r;
        r["route"] = std::string(route_name(p.route));
        r["reason"] = p.reason;
        return r;
      },
      nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("like"), nb::arg("transpose_a") = false,
      nb::arg("transpose_b") = true, nb::arg("precision") = "exact",
      "The dense route for an [m, k] x [k, n] product with like's dtype on like's device: {route, reason}. Pure.");

  // Ternary.
  m.def(
      "tq2_quantize",
      [](nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> w, const std::string& rule) {
        Tq2ScaleRule r = rule == "absmean" ? Tq2ScaleRule::AbsMean
                         : rule == "absmax" ? Tq2ScaleRule::AbsMax
                                            : (fail(ErrorCode::InvalidArgument, "tq2_quantize: rule must be 'absmean' or 'absmax'"),
                                               Tq2ScaleRule::AbsMean);
        auto blocks = tq2_quantize(w.data(), static_cast<std::int64_t>(w.shape(0)), static_cast<std::int64_t>(w.shape(1)), r);
        return nb::bytes(reinterpret_cast<const char*>(blocks.data()), blocks.size() * sizeof(BlockTQ2_128));
      },
      nb::arg("w"), nb::arg("rule") = "absmean",
      "TQ2_0_g128 AoS bytes of a C-contiguous float32 [n, k] host array (rule 'absmean' or 'absmax').");
  m.def(
      "tq2_dequantize",
      [](nb::bytes aos, std::int64_t n, std::int64_t k, nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> out) {
        std::vector<float> w = tq2_dequantize(aos.c_str(), aos.size(), n, k);
        if (out.shape(0) != static_cast<std::size_t>(n) || out.shape(1) != static_cast<std::size_t>(k))
          fail(ErrorCode::InvalidArgument, "tq2_dequantize: out must be [", n, ", ", k, "]");
        std::copy(w.begin(), w.end(), out.data());
      },
      nb::arg("aos"), nb::arg("n"), nb::arg("k"), nb::arg("out"),
      "Decodes TQ2_0_g128 AoS bytes into a C-contiguous float32 [n, k] host array out.");

  nb::class_<PyTernaryWeight>(m, "TernaryWeight",
                              "A TQ2_0_g128 ternary weight [n, k] resident on one device (from llmm.upload_tq2).")
      .def_prop_ro("n", &PyTernaryWeight::n, "Output features (rows of W).")
      .def_prop_ro("k", &PyTernaryWeight::k, "Input features (columns of W, a multiple of 128).")
      .def_prop_ro("key", &PyTernaryWeight::key, "The cache key it was uploaded under.")
      .def_prop_ro("nbytes", &PyTernaryWeight::nbytes, "Packed bytes held (codes and scales, 2.125 bits a weight).")
      .def_prop_ro("device", &PyTernaryWeight::device, "'cpu' or 'cuda:N'.")
      .def("__repr__", [](const PyTernaryWeight& w) {
        return "TernaryWeight(n=" + std::to_string(w.n()) + ", k=" + std::to_string(w.k()) + ", key=" +
               std::to_string(w.key()) + ", device='" + w.device() + "')";
      });
  m.def(
      "tq2_upload",
      [](nb::bytes aos, std::int64_t n, std::int64_t k, std::uint64_t key, nb::ndarray<> device_like) {
        View v = view_of(device_like, "device_like");
        Context& ctx = context_for(v, 0);
        return PyTernaryWeight{cache_for(ctx).get_or_upload(key, aos.c_str(), aos.size(), n, k)};
      },
      nb::arg("aos"), nb::arg("n"), nb::arg("k"), nb::arg("key"), nb::arg("device_like"),
      "Converts and uploads AoS bytes once per key to device_like's device (the per-device cache). Low level: use "
      "llmm.upload_tq2.");
  m.def(
      "tq2_evict",
      [](std::uint64_t key, nb::ndarray<> device_like) {
        View v = view_of(device_like, "device_like");
        return cache_for(context_for(v, 0)).evict(key);
      },
      nb::arg("key"), nb::arg("device_like"),
      "Drops key from device_like's ternary-weight cache (live TernaryWeight objects keep their memory). True if it "
      "was cached.");
  m.def(
      "gemm_tq2",
      [](const PyTernaryWeight& w, nb::ndarray<> x, nb::ndarray<> out, const std::string& precision,
         const std::string& route, std::uintptr_t stream) {
        View vx = view_of(x, "x"), vo = view_of(out, "out");
        Tq2Options o;
        o.precision = precision_of(precision), o.force_route = tq2_route_of(route);
        Context& ctx = context_for(vo, stream);
        return receipt_dict(gemm_tq2(ctx, w.handle, vx, vo, o));
      },
      nb::arg("weight"), nb::arg("x"), nb::arg("out"), nb::arg("precision") = "exact", nb::arg("route") = "auto",
      nb::arg("stream") = 0,
      "out[m, n] = x[m, k] @ W[n, k]^T on out's device and the given stream; returns the receipt. Low level: use "
      "llmm.gemm_tq2.");

  m.def(
      "plan_tq2",
      [](std::int64_t m_, std::int64_t n, std::int64_t k, nb::ndarray<> like, const std::string& out_dtype,
         const std::string& precision, const std::string& route) {
        View v = view_of(like, "like");
        Context& ctx = context_for(v, 0);
        if (m_ < 0 || n < 1 || k < 128 || k % 128 != 0)
          fail(ErrorCode::InvalidArgument, "plan_tq2: needs m >= 0, n >= 1 and k a positive multiple of 128, got m ", m_,
               ", n ", n, ", k ", k);
        if (v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16)
          fail(ErrorCode::InvalidArgument, "plan_tq2: the input dtype must be f32, f16 or bf16, got ", dtype_name(v.dtype));
        const DType out = out_dtype == "f32" ? DType::F32 : v.dtype;
        if (out_dtype != "f32" && out_dtype != dtype_name(v.dtype))
          fail(ErrorCode::InvalidArgument, "plan_tq2: out_dtype must be f32 or the input's ", dtype_name(v.dtype), ", got ",
               out_dtype);
        Tq2Options o;
        o.precision = precision_of(precision);
        o.force_route = plan_tq2(m_, n, k, v.dtype, ctx.arch(), tq2_route_of(route));
        nb::dict d;
        d["route"] = std::string(tq2_route_name(o.force_route));
        d["workspace_bytes"] = tq2_workspace_bytes(m_, n, k, v.dtype, out, o);
        return d;
      },
      nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("like"), nb::arg("out_dtype") = "f32",
      nb::arg("precision") = "exact", nb::arg("route") = "auto",
      "The ternary route gemm_tq2 takes for x [m, k] with like's dtype on like's device, and the device workspace "
      "it needs: {route, workspace_bytes}. Pure.");

  // Expert-ID matmul.
  auto params_of = [](std::uint32_t m_, std::uint32_t n, std::uint32_t k, std::uint32_t top_k, std::uint32_t n_experts,
                      std::uint64_t expert_stride_bytes, const std::string& layout, bool may_repeat,
                      const std::string& route, DType in_dtype, DType out_dtype) {
    MatmulIdParams p;
    p.m = m_, p.n = n, p.k = k, p.top_k = top_k, p.n_experts = n_experts, p.expert_stride_bytes = expert_stride_bytes;
    if (layout == "shared") p.input_layout = MatmulIdInputLayout::SharedPerToken;
    else if (layout == "slotted") p.input_layout = MatmulIdInputLayout::Slotted;
    else fail(ErrorCode::InvalidArgument, "matmul_id: layout must be 'shared' or 'slotted', got '", layout, "'");
    p.id_multiplicity = may_repeat ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
    if (route == "direct") p.route = MatmulIdRoute::Direct;
    else if (route == "grouped") p.route = MatmulIdRoute::GroupedPrefill;
    else fail(ErrorCode::InvalidArgument, "matmul_id: route must be 'direct' or 'grouped', got '", route, "'");
    p.input_dtype = in_dtype, p.output_dtype = out_dtype;
    return p;
  };
  m.def(
      "matmul_id_capability",
      [params_of](const std::string& weight_dtype, std::uint32_t m_, std::uint32_t n, std::uint32_t k, std::uint32_t top_k,
                  std::uint32_t n_experts, std::uint64_t expert_stride_bytes, const std::string& layout, bool may_repeat,
                  const std::string& route, const std::string& input_dtype, const std::string& output_dtype) {
        auto dt = [](const std::string& s) {
          for (DType t : {DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32})
            if (s == dtype_name(t)) return t;
          fail(ErrorCode::InvalidArgument, "llmm: unknown dtype '", s, "'");
        };
        MatmulIdCapability c = matmul_id_capability(
            dt(weight_dtype), params_of(m_, n, k, top_k, n_experts, expert_stride_bytes, layout, may_repeat, route,
                                        dt(input_dtype), dt(output_dtype)));
        nb::dict d;
        d["schema_version"] = c.schema_version;
        d["route"] = std::string(matmul_id_route_name(c.route));
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
      nb::arg("weight_dtype"), nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("top_k"), nb::arg("n_experts"),
      nb::arg("expert_stride_bytes"), nb::arg("layout") = "shared", nb::arg("may_repeat") = false,
      nb::arg("route") = "direct", nb::arg("input_dtype") = "f32", nb::arg("output_dtype") = "f32",
      "Exact byte extents of a matmul_id call (weights, input, ids, output, grouped scratch), or llmm.Error. Pure.");

  m.def(
      "suggest_matmul_id_route",
      [params_of](std::uint32_t m_, std::uint32_t n, std::uint32_t k, std::uint32_t top_k, std::uint32_t n_experts,
                  nb::ndarray<> like, bool may_repeat) {
        View v = view_of(like, "like");
        MatmulIdParams p = params_of(m_, n, k, top_k, n_experts, 0, "shared", may_repeat, "direct", v.dtype, DType::F32);
        return suggest_matmul_id_route(p, context_for(v, 0).arch()) == MatmulIdRoute::Direct ? "direct" : "grouped";
      },
      nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("top_k"), nb::arg("n_experts"), nb::arg("like"),
      nb::arg("may_repeat") = false,
      "The matmul_id route ('direct' or 'grouped') calibrated as fastest for these sizes on like's device. Pure; "
      "it cannot see the routing (hot experts favour 'grouped' earlier).");

  nb::class_<MatmulIdScratch>(m, "MatmulIdScratch",
                              "Scratch of matmul_id's grouped route on one device (from llmm.matmul_id_scratch).")
      .def_prop_ro("max_experts", &MatmulIdScratch::max_experts, "Experts it has room for.")
      .def_prop_ro("max_tokens", &MatmulIdScratch::max_tokens, "Tokens it has room for.");
  m.def(
      "matmul_id_scratch",
      [](std::uint32_t max_experts, std::uint32_t max_tokens, nb::ndarray<> device_like) {
        View v = view_of(device_like, "device_like");
        return std::make_unique<MatmulIdScratch>(context_for(v, 0), max_experts, max_tokens);
      },
      nb::arg("max_experts"), nb::arg("max_tokens"), nb::arg("device_like"),
      "Allocates grouped-route scratch on device_like's device. Low level: use llmm.matmul_id_scratch.");
  m.def(
      "matmul_id",
      [params_of](nb::ndarray<> weights, nb::ndarray<> x, nb::ndarray<> ids, nb::ndarray<> out, std::uint32_t top_k,
                  std::uint32_t n_experts, std::uint64_t expert_stride_bytes, const std::string& layout, bool may_repeat,
                  const std::string& route, MatmulIdScratch* scratch, const std::string& precision, std::uintptr_t stream) {
        View w = view_of(weights, "weights"), vx = view_of(x, "x"), vid = view_of(ids, "ids", true), vo = view_of(out, "out");
        if (vo.rank != 3) fail(ErrorCode::InvalidArgument, "matmul_id: out must be [m, top_k, n], got ", vo.describe());
        if (vx.rank != 2) fail(ErrorCode::InvalidArgument, "matmul_id: x must be rank 2, got ", vx.describe());
        MatmulIdParams p = params_of(static_cast<std::uint32_t>(vo.dim(0)), static_cast<std::uint32_t>(vo.dim(2)),
                                     static_cast<std::uint32_t>(vx.dim(1)), top_k, n_experts, expert_stride_bytes, layout,
                                     may_repeat, route, vx.dtype, vo.dtype);
        MatmulIdOptions o;
        o.precision = precision_of(precision);
        Context& ctx = context_for(vo, stream);
        return receipt_dict(llmm::matmul_id(ctx, w, vx, vid, vo, scratch, p, o));
      },
      nb::arg("weights"), nb::arg("x"), nb::arg("ids"), nb::arg("out"), nb::arg("top_k"), nb::arg("n_experts"),
      nb::arg("expert_stride_bytes"), nb::arg("layout") = "shared", nb::arg("may_repeat") = false,
      nb::arg("route") = "direct", nb::arg("scratch") = nb::none(), nb::arg("precision") = "exact",
      nb::arg("stream") = 0,
      "out[t, s, :] = weights[ids[t, s]] @ x(t, s) on out's device and the given stream; returns the receipt. Low "
      "level: use llmm.matmul_id.");
}
