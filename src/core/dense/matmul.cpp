// llmm::matmul: validate everything, normalise to DenseArgs, fold broadcast batches, plan,
// then run on the CPU reference backend or hand over to the CUDA dispatcher.
#include <algorithm>
#include <climits>
#include <sstream>

#include "core/dense/dense_dispatch.hpp"
#include "core/dense/dense_kernels.hpp"
#include "core/log.hpp"
#include "core/vec16.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#include "llmm/reference.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul";

std::string strides_of(const View& v) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < v.rank; ++i) os << (i ? ", " : "") << v.stride(i);
  os << "]";
  return os.str();
}

// A rank-2/3 view as [batch, rows, cols] with strides; rank 2 broadcasts (batch stride 0).
struct Mat {
  std::int64_t batch, rows, cols, bstride, ld;
};
Mat as_mat(const View& v) {
  if (v.rank == 2) return {1, v.dim(0), v.dim(1), 0, v.stride(0)};
  return {v.dim(0), v.dim(1), v.dim(2), v.stride(0), v.stride(1)};
}

// The seed's stride check, stricter: innermost stride 1 and row stride >= the row's extent
// (dimensions of extent 1 may have any stride). Returns the row stride to use.
std::int64_t check_rows(const View& v, const Mat& x, const char* side, const char* name, const char* shape,
                        std::int64_t m, std::int64_t n, std::int64_t k) {
  if (v.empty()) return std::max<std::int64_t>(x.cols, 1);  // no element: the strides are never used
  std::int64_t inner = v.stride(v.rank - 1);
  bool inner_ok = inner == 1 || x.cols <= 1;
  bool ld_ok = x.ld >= x.cols || x.rows <= 1;
  if (!inner_ok || !ld_ok)
    fail(ErrorCode::InvalidArgument, kOp, ": invalid ", side, " matmul argument ", name, " ", shape, ": strides [", x.ld,
         ", ", inner, "] != [>= ", x.cols, ", 1], strides: ", strides_of(v), " dims: (m: ", m, ", n: ", n, ", k: ", k,
         ")");
  return x.rows <= 1 ? std::max<std::int64_t>(x.ld, x.cols) : x.ld;
}

struct Validated {
  cuda_dense::DenseArgs args;
  bool empty = false;
};

Validated validate(const Context& ctx, const View& a, const View& b, const View& c, const MatmulOptions& o) {
  const View* views[3] = {&a, &b, &c};
  const char* names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    const View& v = *views[i];
    validate_view(v, kOp, names[i]);
    if (v.rank != 2 && v.rank != 3)
      fail(ErrorCode::InvalidArgument, kOp, ": ", names[i], " must be rank 2 or 3, got ", v.describe());
    if (v.device != ctx.kind() || (ctx.is_cuda() && v.device_index != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": ", names[i], " is on ", v.describe(), " but the context is ",
           ctx.is_cuda() ? "cuda:" + std::to_string(ctx.arch().device_index) : std::string("cpu"));
  }
  if (!is_float(a.dtype))
    fail(ErrorCode::Unsupported, kOp, ": unsupported dtype ", dtype_name(a.dtype), " (f32, f16 and bf16 are supported)");
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    fail(ErrorCode::Unsupported, kOp, ": only homogeneous dtypes are supported. inputs: ", dtype_name(a.dtype), ", ",
         dtype_name(b.dtype), ". output: ", dtype_name(c.dtype));

  Mat A = as_mat(a), B = as_mat(b), C = as_mat(c);
  std::int64_t m = o.transpose_a ? A.cols : A.rows, k = o.transpose_a ? A.rows : A.cols;
  std::int64_t kb = o.transpose_b ? B.cols : B.rows, n = o.transpose_b ? B.rows : B.cols;
  if (kb != k)
    fail(ErrorCode::InvalidArgument, kOp, ": inner dimensions differ: a ", a.describe(), (o.transpose_a ? " (transposed)" : ""),
         " gives k = ", k, ", b ", b.describe(), (o.transpose_b ? " (transposed)" : ""), " gives k = ", kb);
  if (C.rows != m || C.cols != n)
    fail(ErrorCode::InvalidArgument, kOp, ": c must be [", m, ", ", n, "] per batch, got ", c.describe(), " (dims: (m: ", m,
         ", n: ", n, ", k: ", k, "))");
  std::int64_t batch = C.batch;
  for (const auto& [x, name] : {std::pair{A, "a"}, std::pair{B, "b"}})
    if (x.batch != batch && x.batch != 1)
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " has batch ", x.batch, " but c has batch ", batch,
           " (a batch of 1 or a batch stride of 0 broadcasts)");
  for (std::int64_t d : {batch, m, n, k})
    if (d > INT_MAX)
      fail(ErrorCode::Unsupported, kOp, ": dimension ", d, " exceeds the supported 2^31 - 1 (batch: ", batch, ", m: ", m,
           ", n: ", n, ", k: ", k, ")");

  cuda_dense::DenseArgs g;
  g.dtype = a.dtype;
  g.batch = batch, g.m = m, g.n = n, g.k = k;
  g.a_trans = o.transpose_a, g.b_trans = o.transpose_b;
  g.exact = o.precision == Precision::Exact;
  g.a = a.data, g.b = b.data, g.c = c.data;
  g.a_ld = check_rows(a, A, "left", "a", o.transpose_a ? "[k, m]" : "[m, k]", m, n, k);
  g.b_ld = check_rows(b, B, "right", "b", o.transpose_b ? "[n, k]" : "[k, n]", m, n, k);
  g.c_ld = check_rows(c, C, "output", "c", "[m, n]", m, n, k);
  g.a_batch = A.batch == 1 ? 0 : A.bstride;
  g.b_batch = B.batch == 1 ? 0 : B.bstride;
  g.c_batch = C.batch == 1 ? 0 : C.bstride;

  Validated r;
  r.empty = batch == 0 || m == 0 || n == 0;
  if (r.empty) return r;
  // The output must not alias itself (each element written once) nor any input.
  if (batch > 1 && g.c_batch < (m - 1) * g.c_ld + n)
    fail(ErrorCode::InvalidArgument, kOp, ": c batch stride ", g.c_batch, " is smaller than one [", m, ", ", n,
         "] matrix of row stride ", g.c_ld, ": outputs of different batches would alias");
  if (k > 0) {
    if (overlaps(c, a)) fail(ErrorCode::InvalidArgument, kOp, ": output c overlaps input a (c ", c.describe(), ", a ", a.describe(), ")");
    if (overlaps(c, b)) fail(ErrorCode::InvalidArgument, kOp, ": output c overlaps input b (c ", c.describe(), ", b ", b.describe(), ")");
  }
  r.args = g;
  return r;
}

// MLX's trick: a weight broadcast over the batch (b batch stride 0) with evenly spaced rows of a
// and c is one [batch * m, k] x [k, n] product. Turns batched decode into a skinny GEMM.
cuda_dense::DenseArgs fold_broadcast_batch(cuda_dense::DenseArgs g) {
  if (g.batch <= 1 || g.b_batch != 0 || g.a_trans || g.a_batch == 0) return g;
  bool a_even = g.m == 1 || g.a_batch == g.m * g.a_ld;
  bool c_even = g.m == 1 || g.c_batch == g.m * g.c_ld;
  if (!a_even || !c_even) return g;
  std::int64_t a_ld = g.m == 1 ? g.a_batch : g.a_ld, c_ld = g.m == 1 ? g.c_batch : g.c_ld;
  if (static_cast<std::uint64_t>(g.m) * static_cast<std::uint64_t>(g.batch) > INT_MAX) return g;
  g.m *= g.batch;
  g.batch = 1;
  g.a_ld = a_ld, g.c_ld = c_ld;
  g.a_batch = g.c_batch = 0;
  return g;
}

}  // namespace

Receipt matmul(Context& ctx, const View& a, const View& b, const View& c, const MatmulOptions& opts) {
  Validated v = validate(ctx, a, b, c, opts);
  if (v.empty) return Receipt{"none", "", 0};
  // Folding changes the problem's shape, so a forced route sees the problem as given.
  cuda_dense::DenseArgs g = opts.force_route == DenseRoute::Auto ? fold_broadcast_batch(v.args) : v.args;
  MatmulDesc d;
  d.batch = g.batch, d.m = g.m, d.n = g.n, d.k = g.k;
  d.dtype = g.dtype;
  d.transpose_a = g.a_trans, d.transpose_b = g.b_trans;
  d.precision = opts.precision;
  d.a_vec16 = detail::rows_vec16(g.a, g.a_ld, g.a_batch, g.dtype);
  d.b_vec16 = detail::rows_vec16(g.b, g.b_ld, g.b_batch, g.dtype);
  const std::int64_t a_rows = g.a_trans ? g.k : g.m, b_rows = g.b_trans ? g.n : g.k;
  d.batches_disjoint = (g.a_batch == 0 || g.a_batch >= a_rows * g.a_ld) && (g.b_batch == 0 || g.b_batch >= b_rows * g.b_ld);
  DensePlan plan = plan_matmul(d, ctx.arch(), opts.force_route);
  auto logged = [&](Receipt r) {
    if (log_level() > 0) {
      std::ostringstream os;
      os << "batch " << g.batch << " m " << g.m << " n " << g.n << " k " << g.k << " " << dtype_name(g.dtype) << " "
         << (g.a_trans ? 't' : 'n') << (g.b_trans ? 't' : 'n') << " " << (g.exact ? "exact" : "fast");
      detail::log_call(kOp, os.str(), r, plan.reason);
    }
    return r;
  };
  if (plan.route != DenseRoute::Cpu) return logged(detail::run_dense_cuda(ctx, plan, g));

  // CPU backend: the float64 reference, rounded once to c's dtype.
  auto view3 = [&](const void* p, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t bs) {
    return View::strided(const_cast<void*>(p), g.dtype, {g.batch, rows, cols}, {bs, ld, 1});
  };
  cpu::MatmulProblem p{g.a_trans ? view3(g.a, g.k, g.m, g.a_ld, g.a_batch) : view3(g.a, g.m, g.k, g.a_ld, g.a_batch),
                       g.b_trans ? view3(g.b, g.n, g.k, g.b_ld, g.b_batch) : view3(g.b, g.k, g.n, g.b_ld, g.b_batch),
                       g.a_trans, g.b_trans};
  ctx.check_launchable("cpu_reference_matmul");
  cpu::matmul(p, view3(g.c, g.m, g.n, g.c_ld, g.c_batch), ctx.arch().cpu_threads);
  ctx.note_launch("cpu_reference_matmul",
                  [&] { return LaunchRanges{{byte_range(a), byte_range(b)}, {byte_range(c)}}; });
  return logged(Receipt{route_name(DenseRoute::Cpu), "cpu_reference_matmul", 1});
}

}  // namespace llmm
