// moe_ffn: every check of the call, then the float64 reference (CPU contexts) or, on CUDA, passes
// of at most kMoeFfnPassTokens tokens: gate_up matmul_id -> gated activation -> down matmul_id ->
// slot sum, over the context's workspace.
#include "llmm/moe_ffn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/log.hpp"
#include "core/moe/matmul_id_checks.hpp"
#include "core/moe/moe_args.hpp"
#include "core/moe/moe_dispatch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/moe/moe_plan.hpp"
#include "core/moe/matmul_id_pool.hpp"
#include "core/moe/moe_ffn_launch.hpp"
#include "core/ranges.hpp"
#include "core/runtime.hpp"
#include "core/stream_workspace.hpp"
#include "cpu/parallel_for.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/fp8.hpp"
#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "llmm/ternary_moe.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "moe_ffn";

struct Dims {
  std::int64_t m = 0, hidden = 0, inter = 0, top_k = 0, experts = 0;
  std::int64_t gu_rows = 0;  // rows of w_gate_up[e]: 2 inter with a gate, inter without
};

// inter from w_gate_up's rows under opts (a gated layout needs an even count).
void set_inter(Dims& d, std::int64_t rows, const MoeFfnOptions& o, const std::string& shape) {
  if (o.gated && rows % 2 != 0)
    fail(ErrorCode::InvalidArgument, kOp, ": w_gate_up must be [n_experts, 2 * inter, hidden] with a gate (",
         moe_gate_layout_name(o.gate_layout), " gate and up rows), got ", shape, " (an odd row count)");
  d.gu_rows = rows, d.inter = o.gated ? rows / 2 : rows;
}

void check_device(const Context& ctx, const View& v, const char* name) {
  validate_view(v, kOp, name);
  if (v.device != ctx.kind() || (ctx.is_cuda() && v.device_index != ctx.arch().device_index))
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v.describe(), " but the context is ",
         ctx.is_cuda() ? "cuda:" + std::to_string(ctx.arch().device_index) : std::string("cpu"));
}

// x, ids, topk_weights and out against the experts' sizes d.experts, d.inter, d.hidden (set by
// the caller from the weights): shapes, dtypes, devices, overlaps; fills d.m and d.top_k.
void check_activations(const Context& ctx, const View& x, const View& ids, const View& tw, const View& out, Dims& d,
                       const char* weights_desc) {
  for (const auto& [v, name] : {std::pair{&x, "x"}, std::pair{&ids, "ids"}, std::pair{&tw, "topk_weights"},
                                std::pair{&out, "out"}})
    check_device(ctx, *v, name);
  if (x.rank != 2) fail(ErrorCode::InvalidArgument, kOp, ": x must be [m, hidden], got ", x.describe());
  d.m = x.dim(0);
  if (x.dim(1) != d.hidden)
    fail(ErrorCode::InvalidArgument, kOp, ": x is ", x.describe(), " but w_gate_up ", weights_desc, " has hidden ", d.hidden);
  if (ids.rank != 2 || ids.dim(0) != d.m)
    fail(ErrorCode::InvalidArgument, kOp, ": ids must be [m, top_k] with m ", d.m, " (x's rows), got ", ids.describe());
  d.top_k = ids.dim(1);
  if (!is_expert_id(ids.dtype)) fail(ErrorCode::InvalidArgument, kOp, ": ids must be u32, i32 or i64, got ", dtype_name(ids.dtype));
  if (!ids.is_contiguous()) fail(ErrorCode::InvalidArgument, kOp, ": ids must be contiguous, got ", ids.describe());
  if (tw.rank != 2 || tw.dim(0) != d.m || tw.dim(1) != d.top_k)
    fail(ErrorCode::InvalidArgument, kOp, ": topk_weights must be [m, top_k] = [", d.m, ", ", d.top_k, "] like ids, got ",
         tw.describe());
  if (!is_float(tw.dtype))
    fail(ErrorCode::InvalidArgument, kOp, ": topk_weights must be f32, f16 or bf16, got ", dtype_name(tw.dtype));
  if (!tw.is_contiguous()) fail(ErrorCode::InvalidArgument, kOp, ": topk_weights must be contiguous, got ", tw.describe());
  if (!is_float(x.dtype)) fail(ErrorCode::InvalidArgument, kOp, ": x must be f32, f16 or bf16, got ", dtype_name(x.dtype));
  if (out.rank != 2 || out.dim(0) != d.m || out.dim(1) != d.hidden || out.dtype != x.dtype)
    fail(ErrorCode::InvalidArgument, kOp, ": out must be ", dtype_name(x.dtype), "[", d.m, ", ", d.hidden,
         "] (x's dtype and shape), got ", out.describe());
  if (!out.is_contiguous()) fail(ErrorCode::InvalidArgument, kOp, ": out must be contiguous, got ", out.describe());
  for (const auto& [v, name] : {std::pair{&x, "x"}, std::pair{&ids, "ids"}, std::pair{&tw, "topk_weights"}})
    if (overlaps(out, *v))
      fail(ErrorCode::InvalidArgument, kOp, ": out must not overlap ", name, " (out ", out.describe(), ", ", name, " ",
           v->describe(), ")");
  (void)narrow_u32(d.m, kOp, "m (tokens)");
  (void)narrow_u32(d.top_k, kOp, "top_k");
  (void)narrow_u32(d.gu_rows, kOp, "rows of w_gate_up");
  (void)narrow_u32(d.hidden, kOp, "hidden");
  (void)narrow_u32(d.experts, kOp, "n_experts");
}

// The activation's parameters and the optional biases against the experts' sizes.
void check_options(const Context& ctx, const MoeFfnOptions& o, const Dims& d, const View& out) {
  if (o.activation == MoeActivation::SwigluOai && !o.gated)
    fail(ErrorCode::InvalidArgument, kOp, ": activation swigluoai is gated only (gated is false)");
  if (!o.gated && o.gate_layout != MoeGateLayout::Halves)
    fail(ErrorCode::InvalidArgument, kOp, ": gate layout ", moe_gate_layout_name(o.gate_layout),
         " needs a gated activation (gated is false)");
  if (o.activation == MoeActivation::SwigluOai &&
      (!std::isfinite(o.swiglu_alpha) || !std::isfinite(o.swiglu_limit) || !(o.swiglu_limit > 0.0f)))
    fail(ErrorCode::InvalidArgument, kOp, ": swigluoai needs a finite alpha and a finite limit > 0, got alpha ",
         o.swiglu_alpha, ", limit ", o.swiglu_limit);
  for (const auto& [b, name, cols, what] :
       {std::tuple{&o.bias_gate_up, "bias_gate_up", d.gu_rows, "rows of w_gate_up"},
        std::tuple{&o.bias_down, "bias_down", d.hidden, "hidden"}}) {
    if (!b->has_value()) continue;
    const View& v = **b;
    check_device(ctx, v, name);
    if (v.rank != 2 || v.dim(0) != d.experts || v.dim(1) != cols || !is_float(v.dtype) || !v.is_contiguous())
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " must be a contiguous f32 / f16 / bf16 [", d.experts, ", ", cols,
           "] (n_experts, ", what, "), got ", v.describe());
    if (overlaps(out, v))
      fail(ErrorCode::InvalidArgument, kOp, ": out must not overlap ", name, " (out ", out.describe(), ", ", name, " ",
           v.describe(), ")");
  }
}

// Dense experts: their shapes and dtypes, then the activations' checks.
Dims check_call(const Context& ctx, const View& x, const View& wgu, const View& wd, const View& ids, const View& tw,
                const View& out, const MoeFfnOptions& opts, bool fp8 = false) {
  check_device(ctx, wgu, "w_gate_up");
  check_device(ctx, wd, "w_down");
  if (wgu.rank != 3)
    fail(ErrorCode::InvalidArgument, kOp, ": w_gate_up must be [n_experts, 2 * inter, hidden] (inter rows without a gate), got ",
         wgu.describe());
  Dims d;
  d.hidden = wgu.dim(2), d.experts = wgu.dim(0);
  set_inter(d, wgu.dim(1), opts, wgu.describe());
  if (wd.rank != 3 || wd.dim(0) != d.experts || wd.dim(1) != d.hidden || wd.dim(2) != d.inter)
    fail(ErrorCode::InvalidArgument, kOp, ": w_down must be [n_experts, hidden, inter] = [", d.experts, ", ", d.hidden, ", ",
         d.inter, "] (from w_gate_up ", wgu.describe(), "), got ", wd.describe());
  check_activations(ctx, x, ids, tw, out, d, wgu.describe().c_str());
  if (wgu.dtype != wd.dtype)
    fail(ErrorCode::InvalidArgument, kOp, ": w_gate_up (", dtype_name(wgu.dtype), ") and w_down (", dtype_name(wd.dtype),
         ") must have one dtype");
  if (fp8 && wgu.dtype != DType::F8E4M3)
    fail(ErrorCode::InvalidArgument, kOp, ": FP8 expert codes must be f8e4m3, got ", dtype_name(wgu.dtype));
  if (!fp8 && (!is_float(wgu.dtype) || (wgu.dtype != x.dtype && x.dtype != DType::F32)))
    fail(ErrorCode::InvalidArgument, kOp, ": the weights must be of x's dtype (", dtype_name(x.dtype),
         "), or f16 / bf16 with an f32 x; got ", dtype_name(wgu.dtype),
         wgu.dtype == DType::F8E4M3 ? " (FP8 experts come with their scales: llmm::Fp8Experts)" : "");
  for (const auto& [v, name] : {std::pair{&wgu, "w_gate_up"}, std::pair{&wd, "w_down"}})
    if (overlaps(out, *v))
      fail(ErrorCode::InvalidArgument, kOp, ": out must not overlap ", name, " (out ", out.describe(), ", ", name, " ",
           v->describe(), ")");
  check_options(ctx, opts, d, out);
  return d;
}

// Ternary expert stacks (upload_tq2_experts): [E, 2 inter, hidden] and [E, hidden, inter].
Dims check_call_tq2(const Context& ctx, const View& x, const WeightHandle& gu, const WeightHandle& dn, const View& ids,
                    const View& tw, const View& out, const MoeFfnOptions& opts) {
  for (const auto& [h, name] : {std::pair{&gu, "w_gate_up"}, std::pair{&dn, "w_down"}}) {
    if (!*h) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is a null ternary weight");
    if ((*h)->device() != ctx.kind() || (ctx.is_cuda() && (*h)->device_index() != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": ternary ", name, " lives on another device than the context");
  }
  auto shape = [](const WeightHandle& h) {
    std::string s = "[";
    s.append(std::to_string(h->experts())).append(", ").append(std::to_string(h->n())).append(", ");
    return s.append(std::to_string(h->k())).append("]");
  };
  Dims d;
  d.hidden = gu->k(), d.experts = gu->experts();
  set_inter(d, gu->n(), opts, std::string("ternary ").append(shape(gu)));
  if (dn->experts() != d.experts || dn->n() != d.hidden || dn->k() != d.inter)
    fail(ErrorCode::InvalidArgument, kOp, ": ternary w_down must be [n_experts, hidden, inter] = [", d.experts, ", ", d.hidden,
         ", ", d.inter, "] (from w_gate_up ", shape(gu), "), got ", shape(dn));
  check_activations(ctx, x, ids, tw, out, d, shape(gu).c_str());
  check_options(ctx, opts, d, out);
  return d;
}

// f of the activation (MoeActivation's table); NaN stays NaN (relu: a NaN is not < 0).
double act_f(MoeActivation a, double g) {
  switch (a) {
    case MoeActivation::Silu: return g / (1.0 + std::exp(-g));
    case MoeActivation::GeluTanh: return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    case MoeActivation::GeluErf: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
    case MoeActivation::Relu2: {
      const double r = g < 0.0 ? 0.0 : g;
      return r * r;
    }
    case MoeActivation::SwigluOai: break;  // gated only: activate()
  }
  return 0.0;
}

// act(g, u) with a gate, act(g) without (u unused); the clamps keep a NaN.
double activate(const MoeFfnOptions& o, double g, double u) {
  if (!o.gated) return act_f(o.activation, g);
  if (o.activation != MoeActivation::SwigluOai) return act_f(o.activation, g) * u;
  const double lim = o.swiglu_limit;
  const double gc = g > lim ? lim : g;
  const double uc = u > lim ? lim : u < -lim ? -lim : u;
  return (uc + 1.0) * gc / (1.0 + std::exp(-static_cast<double>(o.swiglu_alpha) * gc));
}

// Row of w_gate_up[e] holding feature i's gate (or its only row without a gate) and its up row.
std::int64_t gate_row(const MoeFfnOptions& o, std::int64_t i) {
  return o.gated && o.gate_layout == MoeGateLayout::Interleaved ? 2 * i : i;
}
std::int64_t up_row(const MoeFfnOptions& o, std::int64_t inter, std::int64_t i) {
  return o.gate_layout == MoeGateLayout::Interleaved ? 2 * i + 1 : inter + i;
}

double bias_at(const std::optional<View>& b, std::int64_t e, std::int64_t c) {
  return b ? load_as_double(b->data, b->dtype, e * b->dim(1) + c) : 0.0;
}

std::int64_t element_at(const View& v, std::int64_t i0, std::int64_t i1, std::int64_t i2 = 0) {
  return i0 * v.stride(0) + i1 * v.stride(1) + (v.rank == 3 ? i2 * v.stride(2) : 0);
}

// The float64 reference: no intermediate rounding; out-of-range ids contribute zero. Tokens in
// parallel (each token's result is computed by one thread: the same bits for any thread count).
// gate_up(e, r, l) and down(e, j, i) give the experts' weights as doubles.
template <class GateUp, class Down>
void run_cpu(const View& x, const View& ids, const View& tw, const View& out, const Dims& d, const MoeFfnOptions& o,
             int threads, GateUp gate_up, Down down) {
  cpu::detail::parallel_for(d.m, threads, [&](std::int64_t t) {
    std::vector<double> xr(static_cast<std::size_t>(d.hidden)), a(static_cast<std::size_t>(d.inter)),
        acc(static_cast<std::size_t>(d.hidden), 0.0);
    for (std::int64_t l = 0; l < d.hidden; ++l) xr[l] = load_as_double(x.data, x.dtype, element_at(x, t, l));
    for (std::int64_t s = 0; s < d.top_k; ++s) {
      const double id = load_as_double(ids.data, ids.dtype, t * d.top_k + s);
      const double w = load_as_double(tw.data, tw.dtype, t * d.top_k + s);
      if (!(id >= 0 && id < static_cast<double>(d.experts))) {
        for (double& v : acc) v += w * 0.0;  // NaN / Inf weights still propagate
        continue;
      }
      const auto e = static_cast<std::int64_t>(id);
      for (std::int64_t i = 0; i < d.inter; ++i) {
        const std::int64_t gr = gate_row(o, i), ur = o.gated ? up_row(o, d.inter, i) : gr;
        double g = bias_at(o.bias_gate_up, e, gr), u = o.gated ? bias_at(o.bias_gate_up, e, ur) : 0.0;
        for (std::int64_t l = 0; l < d.hidden; ++l) {
          g += gate_up(e, gr, l) * xr[l];
          if (o.gated) u += gate_up(e, ur, l) * xr[l];
        }
        a[i] = activate(o, g, u);
      }
      for (std::int64_t j = 0; j < d.hidden; ++j) {
        double y = bias_at(o.bias_down, e, j);
        for (std::int64_t i = 0; i < d.inter; ++i) y += down(e, j, i) * a[i];
        acc[j] += w * y;
      }
    }
    for (std::int64_t j = 0; j < d.hidden; ++j) store_from_double(out.data, out.dtype, t * d.hidden + j, acc[j]);
  });
}

// A ternary expert stack's weight (e, r, l) on the host: (code - 1) * the block's f16 scale.
struct Tq2HostWeight {
  const TernaryWeight* w;
  double operator()(std::int64_t e, std::int64_t r, std::int64_t l) const {
    const std::int64_t row = e * w->n() + r, k = w->k();
    const int code = (w->codes()[row * (k / 4) + l / 4] >> (2 * (l % 4))) & 3;
    return (code - 1) * static_cast<double>(f16_bits_to_f32(w->scales()[row * (k / 128) + l / 128]));
  }
};

View rows_of(const View& v, std::int64_t first, std::int64_t count) {
  View r = v;
  r.shape[0] = count;
  if (count > 0)
    r.data = static_cast<char*>(v.data) + static_cast<std::size_t>(first * v.stride(0)) * dtype_size(v.dtype);
  return r;
}

// One pass's operands on CUDA: the token slices and the workspace views.
struct Pass {
  View x, ids, tw, out, h, a, y;
  std::int64_t m = 0;
};

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

struct WorkspaceLayout {
  std::size_t h = 0, a = 0, y = 0, total = 0;
};

// The down GEMM's rows before the slot sum: in x's dtype for 16-bit x (as torch's and vLLM's
// compositions keep them: half the bytes of f32 at prefill), f32 for an f32 x.
DType down_rows_dtype(DType xd) { return xd == DType::F32 ? DType::F32 : xd; }
WorkspaceLayout workspace_layout(const Dims& d, std::int64_t pass_m, DType xd) {
  const auto rows = static_cast<std::uint64_t>(pass_m) * static_cast<std::uint64_t>(d.top_k);
  WorkspaceLayout w;
  w.h = aligned(to_usize(checked_mul(checked_mul(rows, d.gu_rows, "moe_ffn workspace"), dtype_size(xd), "moe_ffn workspace"),
                         "moe_ffn workspace"));
  w.a = aligned(to_usize(checked_mul(checked_mul(rows, d.inter, "moe_ffn workspace"), dtype_size(xd), "moe_ffn workspace"),
                         "moe_ffn workspace"));
  w.y = aligned(to_usize(checked_mul(checked_mul(rows, d.hidden, "moe_ffn workspace"), dtype_size(down_rows_dtype(xd)),
                                     "moe_ffn workspace"),
                         "moe_ffn workspace"));
  w.total = w.h + w.a + w.y;
  return w;
}

Pass make_pass(const View& x, const View& ids, const View& tw, const View& out, const Dims& d, std::int64_t first,
               std::int64_t count, char* ws, const WorkspaceLayout& lay) {
  Pass p;
  p.m = count;
  p.x = rows_of(x, first, count), p.ids = rows_of(ids, first, count), p.tw = rows_of(tw, first, count);
  p.out = rows_of(out, first, count);
  const DeviceKind dev = x.device;
  const int idx = x.device_index;
  p.h = View::contiguous(ws, x.dtype, {count, d.top_k, d.gu_rows}, dev, idx);
  p.a = View::contiguous(ws + lay.h, x.dtype, {count * d.top_k, d.inter}, dev, idx);
  p.y = View::contiguous(ws + lay.h + lay.a, down_rows_dtype(x.dtype), {count, d.top_k, d.hidden}, dev, idx);
  return p;
}


MatmulIdRoute resolved(MatmulIdRoute r, const MatmulIdParams& p, const ArchInfo& arch) {
  return r == MatmulIdRoute::Auto ? suggest_matmul_id_route(p, arch) : r;
}

}  // namespace

const char* moe_activation_name(MoeActivation a) noexcept {
  switch (a) {
    case MoeActivation::Silu: return "silu";
    case MoeActivation::GeluTanh: return "gelu_tanh";
    case MoeActivation::GeluErf: return "gelu";
    case MoeActivation::Relu2: return "relu2";
    case MoeActivation::SwigluOai: return "swigluoai";
  }
  return "?";
}

const char* moe_gate_layout_name(MoeGateLayout l) noexcept {
  return l == MoeGateLayout::Interleaved ? "interleaved" : "halves";
}

namespace {

// The sorted pipeline (16-bit or FP8 experts where both GEMMs run on the staged Hopper engine):
// gate_up maps and stages x's rows as matmul_id does but writes h in the map's expert order
// (MoeArgs::out_sorted); the activation keeps that order, so `a` is already the down GEMM's
// staged input over the same lists (MoeArgs::presorted): the down GEMM runs without a second map
// or staging copy, and writes its rows to their routed rows for the slot sum. Every value is
// computed as on the routed-order path (the same tiles over the same lists): the same bits.
// LLMM_MOE_FFN_SORTED=0 turns it off (measurement: the A/B of the two orders in one process).
bool sorted_pipeline_enabled() {
  const char* v = std::getenv("LLMM_MOE_FFN_SORTED");
  return v == nullptr || std::string(v) != "0";
}

// Fills up and down with the pass's sorted-pipeline arguments; false where it does not apply.
template <class Grouped>
bool sorted_pipeline(Context& ctx, const Pass& p, MatmulIdScratch& scratch, const WorkspaceLayout& lay, Grouped grouped,
                     cuda_moe::MoeArgs& up, cuda_moe::MoeArgs& down) {
  if ((p.x.dtype != DType::F16 && p.x.dtype != DType::BF16) || !grouped(p, scratch, true, up) || !grouped(p, scratch, false, down)) return false;
  auto plan = [&](const cuda_moe::MoeArgs& g) {
    return cuda_moe::plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, ctx.arch(), MatmulIdGroupedKernel::Auto);
  };
  const cuda_moe::MoePlan pu = plan(up), pd = plan(down);
  if (!pu.engine || !pu.staged || pu.fused || !pd.engine || pd.fused) return false;
  up.out_sorted = true;
  down.presorted = true;
  down.counts = up.counts, down.rows = up.rows, down.tile_counter = up.tile_counter;
  down.staged = p.a.data, down.staged_bytes = static_cast<std::int64_t>(lay.a);
  return true;
}

// Which routes a pass's two GEMMs take (validate's answer).
struct Routes {
  bool grouped = false;                          // either GEMM: the grouped route (needs the scratch)
  bool up_direct = false, down_direct = false;   // the direct kernel (dense and FP8 experts only)
};

// Both forms of the op after their checks: the CPU reference, or on CUDA passes of at most
// kMoeFfnPassTokens tokens over one workspace (stream order). `validate(x, ids, h, a, y)` checks
// the two GEMMs on a pass's views (nothing launched) and says which routes they take;
// `gemm(pass, scratch, first)` runs gate_up (first) or down and returns its receipt;
// `direct(pass, first, args)` fills the direct kernel's arguments of that GEMM (false: none).
// Where a GEMM takes the direct route, its epilogue absorbs the activation (gate_up) or the slot
// sum (down), unless opts.fuse_decode is false. `grouped_args(pass, scratch, first, args)` fills the
// grouped route's arguments of that GEMM over `scratch` (false: none; dense and FP8 experts): where
// both GEMMs run on the staged Hopper engine, the pass takes the sorted pipeline (sorted_pipeline).
template <class CpuRun, class Validate, class Gemm, class Direct, class Grouped>
Receipt run_ffn(Context& ctx, const View& x, const View& ids, const View& tw, const View& out, const Dims& d,
                const MoeFfnOptions& opts, const std::string& weights_desc, std::uint64_t scratch_row_bytes,
                CpuRun cpu_run, Validate validate, Gemm gemm, Direct direct, Grouped grouped_args) {
  auto logged = [&](Receipt r) {
    if (log_level() > 0)
      detail::log_call(kOp,
                       "m " + std::to_string(d.m) + " hidden " + std::to_string(d.hidden) + " inter " +
                           std::to_string(d.inter) + " top_k " + std::to_string(d.top_k) + " experts " +
                           std::to_string(d.experts) + " x " + std::string(dtype_name(x.dtype)) + " w " + weights_desc +
                           " " + moe_activation_name(opts.activation) + (opts.gated ? "" : "_no_mul") +
                           (opts.gate_layout == MoeGateLayout::Interleaved ? " interleaved" : "") +
                           (opts.bias_gate_up || opts.bias_down ? " biases" : ""),
                       r, "gate_up, activation, down, slot sum");
    return r;
  };
  if (d.m == 0 || d.hidden == 0) return logged(Receipt{"none", "", 0});
  const DeviceKind dev = ctx.kind();
  const int idx = ctx.arch().device_index;
  auto stand_ins = [&](std::int64_t mc) {  // the workspace views' shapes, for the checks
    return std::tuple{View::contiguous(nullptr, x.dtype, {mc, d.top_k, d.gu_rows}, dev, idx),
                      View::contiguous(nullptr, x.dtype, {mc * d.top_k, d.inter}, dev, idx),
                      View::contiguous(nullptr, down_rows_dtype(x.dtype), {mc, d.top_k, d.hidden}, dev, idx)};
  };
  if (!ctx.is_cuda()) {
    const auto [h, a, y] = stand_ins(d.m);
    (void)validate(x, ids, h, a, y);
    ctx.check_launchable("cpu_moe_ffn_reference");
    cpu_run();
    ctx.note_launch("cpu_moe_ffn_reference", [&] {
      return LaunchRanges{{byte_range(x), byte_range(ids), byte_range(tw)}, {byte_range(out)}};
    });
    return logged(Receipt{"reference", "cpu_moe_ffn_reference", 1});
  }

  const std::int64_t pass_m = std::min<std::int64_t>(d.m, kMoeFfnPassTokens);
  const WorkspaceLayout lay = workspace_layout(d, pass_m, x.dtype);
  std::vector<std::pair<std::int64_t, std::int64_t>> passes;  // first token, tokens
  for (std::int64_t t = 0; t < d.m; t += pass_m) passes.emplace_back(t, std::min(pass_m, d.m - t));
  // Every check before anything is allocated or enqueued (first pass, and the last when it is
  // shorter: every other pass is the first's size).
  Routes routes[2];  // the first pass's, the last pass's (one pass: both)
  for (std::size_t i : {std::size_t{0}, passes.size() - 1}) {
    const std::int64_t mc = passes[i].second;
    const auto [h, a, y] = stand_ins(mc);
    const Routes r = validate(rows_of(x, passes[i].first, mc), rows_of(ids, passes[i].first, mc), h, a, y);
    if (i == 0) routes[0] = r;
    if (i + 1 == passes.size()) routes[1] = r;
  }
  const bool grouped = routes[0].grouped || routes[1].grouped;
  cuda_moe::MoeGatedArgs ga;
  ga.dtype = x.dtype, ga.activation = opts.activation, ga.gated = opts.gated, ga.layout = opts.gate_layout;
  ga.alpha = opts.swiglu_alpha, ga.limit = opts.swiglu_limit;
  ga.ids_dtype = ids.dtype, ga.experts = d.experts;
  if (opts.bias_gate_up) ga.bias = opts.bias_gate_up->data, ga.bias_dtype = opts.bias_gate_up->dtype;
  cuda_moe::MoeCombineArgs ca;
  ca.w_dtype = tw.dtype, ca.out_dtype = out.dtype, ca.y_dtype = down_rows_dtype(x.dtype);
  ca.ids_dtype = ids.dtype, ca.experts = d.experts;
  if (opts.bias_down) ca.bias = opts.bias_down->data, ca.bias_dtype = opts.bias_down->dtype;
  const std::string gated_name = cuda_moe::moe_ffn_gated_kernel_name(ga), combine_name = cuda_moe::moe_ffn_combine_kernel_name(ca);

  char* ws = detail::stream_workspace(ctx, kOp, lay.total);
  // One scratch for both GEMMs (room to stage rows of either), so neither grows it mid-call.
  MatmulIdScratch* scratch =
      grouped && d.top_k > 0 && d.experts > 0
          ? &detail::matmul_id_pool_scratch(ctx, narrow_u32(d.experts, kOp, "n_experts"), narrow_u32(pass_m, kOp, "m"),
                                            narrow_u32(d.top_k, kOp, "top_k"), scratch_row_bytes)
          : nullptr;
  // Every pass's kernels before the first launch: the direct GEMMs' fused epilogues where they
  // take the call (16-byte rows; top_k <= 64 for the slot sum), else the composition's kernels;
  // every name offered to check_launchable.
  struct PassRun {
    Pass p;
    bool fuse_up = false, fuse_down = false;
    bool sorted = false;  // the sorted pipeline: up and down are its grouped arguments
    cuda_moe::MoeArgs up, down;
  };
  std::vector<PassRun> runs;
  std::vector<std::string> names;
  auto need = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  for (std::size_t i = 0; i < passes.size(); ++i) {
    PassRun r;
    r.p = make_pass(x, ids, tw, out, d, passes[i].first, passes[i].second, ws, lay);
    const Routes& rt = routes[i + 1 == passes.size() ? 1 : 0];
    if (opts.fuse_decode && d.top_k > 0 && rt.up_direct && direct(r.p, true, r.up)) {
      cuda_moe::MoeDirectFusion& f = r.up.fusion;
      f.epi = cuda_moe::MoeDirectEpi::Activate, f.activation = opts.activation, f.gated = opts.gated;
      f.interleaved = opts.gated && opts.gate_layout == MoeGateLayout::Interleaved;
      f.alpha = opts.swiglu_alpha, f.limit = opts.swiglu_limit;
      if (opts.bias_gate_up) f.bias = opts.bias_gate_up->data, f.bias_dtype = opts.bias_gate_up->dtype;
      r.up.out = r.p.a.data, r.up.out_dtype = x.dtype;
      r.fuse_up = cuda_moe::moe_direct_fusion_supported(r.up);
    }
    if (opts.fuse_decode && d.top_k > 0 && rt.down_direct && direct(r.p, false, r.down)) {
      cuda_moe::MoeDirectFusion& f = r.down.fusion;
      f.epi = cuda_moe::MoeDirectEpi::SlotSum, f.tw = r.p.tw.data, f.tw_dtype = tw.dtype;
      if (opts.bias_down) f.bias = opts.bias_down->data, f.bias_dtype = opts.bias_down->dtype;
      r.down.out = r.p.out.data, r.down.out_dtype = out.dtype;
      r.fuse_down = cuda_moe::moe_direct_fusion_supported(r.down);
    }
    if (scratch && !rt.up_direct && !rt.down_direct && sorted_pipeline_enabled() &&
        sorted_pipeline(ctx, r.p, *scratch, lay, grouped_args, r.up, r.down)) {
      r.sorted = true;
      for (const cuda_moe::MoeArgs* g : {&r.up, &r.down})
        for (const std::string& n : cuda_moe::plan_matmul_id_cuda(*g, MatmulIdRoute::GroupedPrefill, ctx.arch(),
                                                                  MatmulIdGroupedKernel::Auto).kernels)
          need(n);
    }
    if (r.fuse_up) need(cuda_moe::moe_direct_kernel_name(r.up));
    else if (d.top_k > 0) need(gated_name);
    if (r.fuse_down) need(cuda_moe::moe_direct_kernel_name(r.down));
    else need(combine_name);
    runs.push_back(r);
  }
  for (const std::string& n : names) ctx.check_launchable(n);

  Receipt first;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const PassRun& run = runs[i];
    const Pass& p = run.p;
    std::string kernels;
    int launched = 0;
    auto add = [&](const Receipt& r) {
      if (!r.kernel.empty()) kernels += (kernels.empty() ? "" : "+") + r.kernel;
      launched += r.kernels_launched;
    };
    Receipt gate_up;
    if (d.top_k > 0 && run.fuse_up) {
      detail::launch_moe_direct_fused(ctx, run.up);
      gate_up = Receipt{matmul_id_route_name(MatmulIdRoute::Direct), cuda_moe::moe_direct_kernel_name(run.up), 1};
      add(gate_up);
    } else if (d.top_k > 0) {
      gate_up = run.sorted ? detail::run_matmul_id_cuda(ctx, MatmulIdRoute::GroupedPrefill, run.up, MatmulIdGroupedKernel::Auto)
                           : gemm(p, scratch, true);
      add(gate_up);
      ga.h = p.h.data, ga.a = p.a.data, ga.rows = p.m * d.top_k, ga.inter = d.inter, ga.ids = p.ids.data;
      ga.counts = run.sorted ? run.up.counts : nullptr, ga.list = run.sorted ? run.up.rows : nullptr;
      cuda_moe::launch_moe_ffn_gated(ga, ctx.stream());
      if (ga.rows > 0 && ga.inter > 0) {
        ctx.note_launch(gated_name, [&] {
          LaunchRanges r{{byte_range(p.h), byte_range(p.ids)}, {byte_range(p.a)}};
          if (opts.bias_gate_up) r.reads.push_back(byte_range(*opts.bias_gate_up));
          if (run.sorted)
            r.reads.push_back(detail::elems_range(run.up.counts, DType::U32, d.experts)),
                r.reads.push_back(detail::elems_range(run.up.rows, DType::U32, ga.rows));
          return r;
        });
        add(Receipt{"", gated_name, 1});
      }
    }
    if (run.fuse_down) {
      detail::launch_moe_direct_fused(ctx, run.down);
      add(Receipt{"", cuda_moe::moe_direct_kernel_name(run.down), 1});
      if (i == 0) first = Receipt{gate_up.route, kernels, launched};
      continue;
    }
    if (d.top_k > 0)
      add(run.sorted ? detail::run_matmul_id_cuda(ctx, MatmulIdRoute::GroupedPrefill, run.down, MatmulIdGroupedKernel::Auto)
                     : gemm(p, scratch, false));
    ca.y = p.y.data, ca.w = p.tw.data, ca.out = p.out.data;
    ca.m = p.m, ca.top_k = d.top_k, ca.hidden = d.hidden, ca.ids = p.ids.data;
    cuda_moe::launch_moe_ffn_combine(ca, ctx.stream());
    ctx.note_launch(combine_name, [&] {
      LaunchRanges r{{byte_range(p.y), byte_range(p.tw), byte_range(p.ids)}, {byte_range(p.out)}};
      if (opts.bias_down) r.reads.push_back(byte_range(*opts.bias_down));
      return r;
    });
    add(Receipt{"", combine_name, 1});
    if (i == 0) first = Receipt{d.top_k > 0 ? gate_up.route : "none", kernels, launched};
  }
  return logged(first);
}

}  // namespace

Receipt moe_ffn(Context& ctx, const View& x, const View& w_gate_up, const View& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts) {
  const Dims d = check_call(ctx, x, w_gate_up, w_down, ids, topk_weights, out, opts);
  // The two GEMMs by matmul_id's own rules (weight strides, alignment, extents), with its messages
  // under this op's name; the routes they resolve to.
  auto validate = [&](const View& xs, const View& is, const View& h, const View& a, const View& y) {
    const MatmulIdParams p1 = detail::matmul_id_params_named(kOp, w_gate_up, xs, is, h, MatmulIdInputLayout::SharedPerToken,
                                                             MatmulIdMultiplicity::MayRepeat, opts.route);
    const MatmulIdParams p2 = detail::matmul_id_params_named(kOp, w_down, a, is, y, MatmulIdInputLayout::Slotted,
                                                             MatmulIdMultiplicity::MayRepeat, opts.route);
    if (p1.m && p1.n && p1.k && p1.top_k && p1.n_experts) (void)matmul_id_capability(w_gate_up.dtype, p1);
    if (p2.m && p2.n && p2.k && p2.top_k && p2.n_experts) (void)matmul_id_capability(w_down.dtype, p2);
    const MatmulIdRoute r1 = resolved(opts.route, p1, ctx.arch()), r2 = resolved(opts.route, p2, ctx.arch());
    return Routes{r1 == MatmulIdRoute::GroupedPrefill || r2 == MatmulIdRoute::GroupedPrefill, r1 == MatmulIdRoute::Direct,
                  r2 == MatmulIdRoute::Direct};
  };
  auto cpu_run = [&] {
    auto weight = [](const View& w) {
      return [&w](std::int64_t e, std::int64_t r, std::int64_t l) { return load_as_double(w.data, w.dtype, element_at(w, e, r, l)); };
    };
    run_cpu(x, ids, topk_weights, out, d, opts, ctx.arch().cpu_threads, weight(w_gate_up), weight(w_down));
  };
  MatmulIdOptions mo;
  mo.precision = opts.precision;
  auto gemm = [&](const Pass& p, MatmulIdScratch* scratch, bool first) {
    return first ? matmul_id(ctx, w_gate_up, p.x, p.ids, p.h, scratch, MatmulIdInputLayout::SharedPerToken,
                             MatmulIdMultiplicity::MayRepeat, opts.route, mo)
                 : matmul_id(ctx, w_down, p.a, p.ids, p.y, scratch, MatmulIdInputLayout::Slotted,
                             MatmulIdMultiplicity::MayRepeat, opts.route, mo);
  };
  auto direct = [&](const Pass& p, bool first, cuda_moe::MoeArgs& g) {
    return first ? detail::matmul_id_direct_args(ctx, w_gate_up, p.x, p.ids, p.h, MatmulIdInputLayout::SharedPerToken, mo,
                                                 nullptr, g)
                 : detail::matmul_id_direct_args(ctx, w_down, p.a, p.ids, p.y, MatmulIdInputLayout::Slotted, mo, nullptr, g);
  };
  auto grouped = [&](const Pass& p, MatmulIdScratch& scratch, bool first, cuda_moe::MoeArgs& g) {
    return first ? detail::matmul_id_grouped_args(ctx, w_gate_up, p.x, p.ids, p.h, MatmulIdInputLayout::SharedPerToken, mo,
                                                  scratch, g)
                 : detail::matmul_id_grouped_args(ctx, w_down, p.a, p.ids, p.y, MatmulIdInputLayout::Slotted, mo, scratch, g);
  };
  return run_ffn(ctx, x, ids, topk_weights, out, d, opts, std::string(dtype_name(w_gate_up.dtype)),
                 static_cast<std::uint64_t>(std::max(d.hidden, d.inter)) * dtype_size(x.dtype), cpu_run, validate, gemm,
                 direct, grouped);
}

Receipt moe_ffn(Context& ctx, const View& x, const WeightHandle& w_gate_up, const WeightHandle& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts) {
  const Dims d = check_call_tq2(ctx, x, w_gate_up, w_down, ids, topk_weights, out, opts);
  if (opts.route != MatmulIdRoute::Auto)
    fail(ErrorCode::InvalidArgument, kOp, ": ternary experts take route auto (matmul_id_tq2's own), got ",
         matmul_id_route_name(opts.route));
  // The GEMMs' view checks by matmul_id's rules on stand-in [E, n, k] weight views (as
  // matmul_id_tq2 reads its own); the grouped ternary route needs staging room (f16 rows).
  auto validate = [&](const View& xs, const View& is, const View& h, const View& a, const View& y) {
    const View gu = View::contiguous(nullptr, DType::F16, {d.experts, d.gu_rows, d.hidden}, ctx.kind(), ctx.arch().device_index);
    const View dn = View::contiguous(nullptr, DType::F16, {d.experts, d.hidden, d.inter}, ctx.kind(), ctx.arch().device_index);
    (void)detail::matmul_id_params_named(kOp, gu, xs, is, h, MatmulIdInputLayout::SharedPerToken,
                                         MatmulIdMultiplicity::MayRepeat, MatmulIdRoute::GroupedPrefill);
    (void)detail::matmul_id_params_named(kOp, dn, a, is, y, MatmulIdInputLayout::Slotted, MatmulIdMultiplicity::MayRepeat,
                                         MatmulIdRoute::GroupedPrefill);
    return Routes{xs.dim(0) > cuda_ternary::kTq2MoeStreamAutoMaxTokens};  // above it the ternary engine wants staged rows
  };
  auto cpu_run = [&] {
    run_cpu(x, ids, topk_weights, out, d, opts, ctx.arch().cpu_threads, Tq2HostWeight{w_gate_up.get()},
            Tq2HostWeight{w_down.get()});
  };
  auto gemm = [&](const Pass& p, MatmulIdScratch* scratch, bool first) {
    return first ? matmul_id_tq2(ctx, w_gate_up, p.x, p.ids, p.h, scratch, MatmulIdInputLayout::SharedPerToken)
                 : matmul_id_tq2(ctx, w_down, p.a, p.ids, p.y, scratch, MatmulIdInputLayout::Slotted);
  };
  auto no_direct = [](const Pass&, bool, cuda_moe::MoeArgs&) { return false; };  // matmul_id_tq2's own kernels
  auto no_grouped = [](const Pass&, MatmulIdScratch&, bool, cuda_moe::MoeArgs&) { return false; };
  return run_ffn(ctx, x, ids, topk_weights, out, d, opts, "tq2", static_cast<std::uint64_t>(std::max(d.hidden, d.inter)) * 2,
                 cpu_run, validate, gemm, no_direct, no_grouped);
}

Receipt moe_ffn(Context& ctx, const View& x, const Fp8Experts& w_gate_up, const Fp8Experts& w_down, const View& ids,
                const View& topk_weights, const View& out, const MoeFfnOptions& opts) {
  const Dims d = check_call(ctx, x, w_gate_up.codes, w_down.codes, ids, topk_weights, out, opts, true);
  for (const auto& [w, name, n, k] : {std::tuple{&w_gate_up, "w_gate_up", d.gu_rows, d.hidden},
                                      std::tuple{&w_down, "w_down", d.hidden, d.inter}}) {
    check_device(ctx, w->scales, name);
    const auto [sr, sc] = fp8_scale_shape(w->kind, n, k);
    const bool ok = w->scales.dtype == DType::F32 && w->scales.is_contiguous() &&
                    w->scales.numel() == static_cast<std::uint64_t>(sr * sc * d.experts) &&
                    (w->scales.rank != 3 || (w->scales.dim(0) == d.experts && w->scales.dim(1) == sr && w->scales.dim(2) == sc));
    if (!ok)
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, "'s ", fp8_scale_kind_name(w->kind), " scales must be a contiguous f32 [",
           d.experts, ", ", sr, ", ", sc, "], got ", w->scales.describe());
    if (overlaps(out, w->scales)) fail(ErrorCode::InvalidArgument, kOp, ": out must not overlap ", name, "'s scales");
  }
  // FP8 experts: matmul_id's FP8 rule (direct while a weight row feeds at most 4 routed rows on
  // average), the grouped GEMMs on the engine's FP8 instance where it takes them.
  auto fp8_grouped = [&](const MatmulIdParams& p) {
    if (opts.route != MatmulIdRoute::Auto) return opts.route == MatmulIdRoute::GroupedPrefill;
    const std::uint64_t routed = static_cast<std::uint64_t>(p.m) * p.top_k;
    return routed > 4 * std::min<std::uint64_t>(p.n_experts, routed) && p.n_experts <= kMatmulIdGroupedMaxExperts;
  };
  auto validate = [&](const View& xs, const View& is, const View& h, const View& a, const View& y) {
    const MatmulIdParams p1 = detail::matmul_id_params_named(kOp, w_gate_up.codes, xs, is, h, MatmulIdInputLayout::SharedPerToken,
                                                             MatmulIdMultiplicity::MayRepeat, opts.route);
    const MatmulIdParams p2 = detail::matmul_id_params_named(kOp, w_down.codes, a, is, y, MatmulIdInputLayout::Slotted,
                                                             MatmulIdMultiplicity::MayRepeat, opts.route);
    if (p1.m && p1.n && p1.k && p1.top_k && p1.n_experts) (void)matmul_id_capability(DType::F8E4M3, p1);
    if (p2.m && p2.n && p2.k && p2.top_k && p2.n_experts) (void)matmul_id_capability(DType::F8E4M3, p2);
    const bool g1 = fp8_grouped(p1), g2 = fp8_grouped(p2);
    return Routes{g1 || g2, !g1, !g2};
  };
  auto cpu_run = [&] {
    for (const auto& [w, n, k] : {std::tuple{&w_gate_up, d.gu_rows, d.hidden}, std::tuple{&w_down, d.hidden, d.inter}}) {
      const auto [sr, sc] = fp8_scale_shape(w->kind, n, k);
      for (std::int64_t e = 0; e < d.experts; ++e)
        check_fp8_scales(kOp, w->kind, n, k, static_cast<const float*>(w->scales.data) + e * sr * sc,
                         static_cast<std::size_t>(sr * sc));
    }
    auto weight = [](const Fp8Experts& w, std::int64_t n, std::int64_t k) {
      const auto [sr, sc] = fp8_scale_shape(w.kind, n, k);
      return [&w, sr = sr, sc = sc](std::int64_t e, std::int64_t r, std::int64_t l) {
        const std::int64_t g = w.kind == Fp8ScaleKind::Tensor    ? 0
                               : w.kind == Fp8ScaleKind::Channel ? r
                                                                 : (r / kFp8Block) * sc + l / kFp8Block;
        const auto code = static_cast<const std::uint8_t*>(w.codes.data)[element_at(w.codes, e, r, l)];
        return static_cast<double>(e4m3fn_bits_to_f32(code)) *
               static_cast<double>(static_cast<const float*>(w.scales.data)[e * sr * sc + g]);
      };
    };
    run_cpu(x, ids, topk_weights, out, d, opts, ctx.arch().cpu_threads, weight(w_gate_up, d.gu_rows, d.hidden),
            weight(w_down, d.hidden, d.inter));
  };
  MatmulIdOptions mo;
  mo.precision = opts.precision;
  auto gemm = [&](const Pass& p, MatmulIdScratch* scratch, bool first) {
    return first ? matmul_id(ctx, w_gate_up, p.x, p.ids, p.h, scratch, MatmulIdInputLayout::SharedPerToken,
                             MatmulIdMultiplicity::MayRepeat, opts.route, mo)
                 : matmul_id(ctx, w_down, p.a, p.ids, p.y, scratch, MatmulIdInputLayout::Slotted,
                             MatmulIdMultiplicity::MayRepeat, opts.route, mo);
  };
  auto direct = [&](const Pass& p, bool first, cuda_moe::MoeArgs& g) {
    return first ? detail::matmul_id_direct_args(ctx, w_gate_up.codes, p.x, p.ids, p.h, MatmulIdInputLayout::SharedPerToken, mo,
                                                 &w_gate_up, g)
                 : detail::matmul_id_direct_args(ctx, w_down.codes, p.a, p.ids, p.y, MatmulIdInputLayout::Slotted, mo,
                                                 &w_down, g);
  };
  // Staging room for bf16 rows of either GEMM: there the grouped GEMMs run on the Hopper engine's
  // FP8 instance (staged rows only); other inputs take moe_grouped, which stages nothing.
  const std::uint64_t row_bytes =
      x.dtype == DType::BF16 ? static_cast<std::uint64_t>(std::max(d.hidden, d.inter)) * dtype_size(x.dtype) : 0;
  return run_ffn(ctx, x, ids, topk_weights, out, d, opts, std::string("f8e4m3 ") + fp8_scale_kind_name(w_gate_up.kind), row_bytes,
                 cpu_run, validate, gemm, direct, [&](const Pass& p, MatmulIdScratch& scratch, bool first, cuda_moe::MoeArgs& g) {
                   return first ? detail::matmul_id_grouped_args(ctx, w_gate_up.codes, p.x, p.ids, p.h,
                                                                 MatmulIdInputLayout::SharedPerToken, mo, scratch, g, &w_gate_up)
                                : detail::matmul_id_grouped_args(ctx, w_down.codes, p.a, p.ids, p.y, MatmulIdInputLayout::Slotted,
                                                                 mo, scratch, g, &w_down);
                 });
}

}  // namespace llmm
