// matmul_id: the params of the views (shapes and strides, not byte counts), call validation,
// then the CPU reference or the CUDA dispatcher.
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/log.hpp"
#include "core/moe/matmul_id_checks.hpp"
#include "core/moe/matmul_id_pool.hpp"
#include "core/moe/moe_dispatch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/moe/moe_plan.hpp"
#include "core/ranges.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/fp8.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul_id";

// A dimension of extent 0 or 1 may have any stride (it is never stepped).
bool stride_is(const View& v, int i, std::int64_t want) { return v.dim(i) <= 1 || v.stride(i) == want; }

void check_views(const Context& ctx, const View& w, const View& in, const View& ids, const View& out) {
  for (const auto& [v, name] : {std::pair{&w, "weights"}, std::pair{&in, "input"}, std::pair{&ids, "expert ids"},
                                std::pair{&out, "output"}}) {
    validate_view(*v, kOp, name);
    if (v->device != ctx.kind() || (ctx.is_cuda() && v->device_index != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v->describe(), " but the context is ",
           ctx.is_cuda() ? "cuda:" + std::to_string(ctx.arch().device_index) : std::string("cpu"));
  }
}

std::string describe_all(const View& w, const View& in, const View& ids, const View& out) {
  return "weights " + w.describe() + ", input " + in.describe() + ", ids " + ids.describe() + ", output " +
         out.describe();
}

// A validated call: the route that runs and the kernels' arguments (scratch pointers included).
struct Prepared {
  bool empty = false;  // no output element: nothing runs
  bool zeros = false;  // k or n_experts is 0: every output row is zero (the direct kernel writes them)
  bool pooled = false;  // grouped without a caller's scratch: the context's own (filled in by run)
  MatmulIdRoute route = MatmulIdRoute::Direct;
  std::uint64_t routed = 0;
  cuda_moe::MoeArgs g;
};

// Every check of a call (before anything is enqueued), then its kernels' arguments.
Prepared prepare(const Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                 const MatmulIdScratch* scratch, const MatmulIdParams& p, const MatmulIdOptions& opts,
                 const Fp8Experts* fp8 = nullptr) {
  detail::check_matmul_id_dtypes(weights.dtype, p.input_dtype, p.output_dtype, p.ids_dtype);
  if ((weights.dtype == DType::F8E4M3) != (fp8 != nullptr))
    fail(ErrorCode::InvalidArgument, kOp, ": f8e4m3 weights need their scales (call matmul_id with llmm::Fp8Experts), got ",
         weights.describe());
  Prepared pr;
  if (p.m == 0 || p.top_k == 0 || p.n == 0) {  // no output element
    pr.empty = true;
    return pr;
  }
  // k == 0 or no experts: every output is an empty sum or an out-of-range row, i.e. zero. The
  // direct kernel (and the reference) write exactly that without reading weights or input.
  const bool zeros = p.k == 0 || p.n_experts == 0;
  MatmulIdRoute route = zeros ? MatmulIdRoute::Direct : p.route;
  if (route == MatmulIdRoute::Auto && fp8) {  // FP8: the generic rule (the engine's FP8 instance not yet measured at decode)
    const std::uint64_t routed_rows = static_cast<std::uint64_t>(p.m) * p.top_k;
    const std::uint64_t active = std::min<std::uint64_t>(p.n_experts, routed_rows);
    route = routed_rows <= 4 * active || p.n_experts > kMatmulIdGroupedMaxExperts ? MatmulIdRoute::Direct
                                                                                  : MatmulIdRoute::GroupedPrefill;
  }
  if (route == MatmulIdRoute::Auto) route = suggest_matmul_id_route(p, ctx.arch());
  pr.zeros = zeros, pr.route = route;
  if (!zeros) {  // strides, alignment, extents, the resolved route's limits
    MatmulIdParams resolved = p;
    resolved.route = route;
    (void)matmul_id_capability(weights.dtype, resolved);
  }
  const std::uint64_t routed = static_cast<std::uint64_t>(p.m) * p.top_k;
  if (routed > UINT32_MAX)  // the capability checks it too, but is not asked when the output is zeros
    fail(ErrorCode::InvalidArgument, kOp, ": ", p.m, " x ", p.top_k, " routed rows exceed the u32 range");
  if (fp8 && overlaps(out, fp8->scales))
    fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap the scales (output ", out.describe(), ", scales ",
         fp8->scales.describe(), ")");
  for (const auto& [v, name] : {std::pair{&weights, "weights"}, std::pair{&input, "input"}, std::pair{&ids, "expert ids"}})
    if (overlaps(out, *v))
      fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap ", name, " (output ", out.describe(), ", ", name,
           " ", v->describe(), ")");
  if (route == MatmulIdRoute::GroupedPrefill) {
    // A GEMM asked for by name is a CUDA kernel: a CPU context would run the reference instead.
    if (!ctx.is_cuda() && opts.grouped_kernel != MatmulIdGroupedKernel::Auto)
      fail(ErrorCode::Unsupported, kOp, ": grouped kernel ", matmul_id_grouped_kernel_name(opts.grouped_kernel),
           " runs on CUDA devices only (a CPU context runs the reference: leave grouped_kernel Auto)");
    pr.pooled = scratch == nullptr;
  }
  if (route == MatmulIdRoute::GroupedPrefill && scratch) {
    if (scratch->max_experts() < p.n_experts || scratch->max_tokens() < p.m)
      fail(ErrorCode::InvalidArgument, kOp, ": scratch capacity experts/tokens=", scratch->max_experts(), "/",
           scratch->max_tokens(), " is smaller than ", p.n_experts, "/", p.m);
    if (scratch->row_capacity() < routed)
      fail(ErrorCode::InvalidArgument, kOp, ": scratch holds ", scratch->row_capacity(), " routed rows (max_tokens ",
           scratch->max_tokens(), " x max_top_k ", scratch->max_top_k(), "), the call routes ", p.m, " x ", p.top_k,
           " = ", routed, ": make it with max_top_k >= ", p.top_k);
    if (scratch->device() != ctx.kind() || (ctx.is_cuda() && scratch->device_index() != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": scratch lives on another device than the context");
    View s = View::contiguous(scratch->counts(), DType::U32,
                              {static_cast<std::int64_t>((scratch->counts_bytes() + scratch->rows_bytes()) / 4 +
                                                         scratch->map_block_count_words())},  // one allocation
                              scratch->device(), scratch->device_index());
    for (const auto& [v, name] : {std::pair{&out, "output"}, std::pair{&weights, "weights"}, std::pair{&input, "input"},
                                  std::pair{&ids, "expert ids"}}) {
      if (overlaps(s, *v)) fail(ErrorCode::InvalidArgument, kOp, ": scratch must not overlap ", name);
      if (scratch->staged()) {
        const View st = View::contiguous(scratch->staged(), DType::U8, {static_cast<std::int64_t>(scratch->staged_bytes())},
                                         scratch->device(), scratch->device_index());
        if (overlaps(st, *v)) fail(ErrorCode::InvalidArgument, kOp, ": scratch must not overlap ", name);
      }
    }
  }

  pr.routed = routed;
  cuda_moe::MoeArgs& g = pr.g;
  g.m = p.m, g.n = p.n, g.k = p.k, g.top_k = p.top_k, g.n_experts = p.n_experts;
  g.w_dtype = weights.dtype, g.w = weights.data;
  g.expert_stride = static_cast<std::int64_t>(p.expert_stride_bytes / dtype_size(weights.dtype));
  if (fp8) {
    const auto [sr, sc] = fp8_scale_shape(fp8->kind, p.n, p.k);
    g.w_scales = static_cast<const float*>(fp8->scales.data);
    g.w_scale_kind = static_cast<int>(fp8->kind);
    g.w_scale_expert_stride = sr * sc;
  }
  g.in_dtype = p.input_dtype, g.in = input.data;
  const detail::MatmulIdInputStrides strides = detail::matmul_id_input_strides(p);
  g.in_token_stride = static_cast<std::int64_t>(strides.token), g.in_slot_stride = static_cast<std::int64_t>(strides.slot);
  g.ids = ids.data, g.ids64 = p.ids_dtype == DType::I64;
  g.out_dtype = p.output_dtype, g.out = out.data;
  g.exact = opts.precision == Precision::Exact;
  if (route == MatmulIdRoute::GroupedPrefill && scratch) {
    g.counts = scratch->counts(), g.rows = scratch->rows(), g.row_capacity = static_cast<std::int64_t>(scratch->row_capacity());
    g.block_counts = scratch->map_block_counts(), g.block_count_words = static_cast<std::int64_t>(scratch->map_block_count_words());
    g.tile_counter = scratch->tile_counter();
    if (scratch->staged()) g.staged = scratch->staged(), g.staged_bytes = static_cast<std::int64_t>(scratch->staged_bytes());
  }
  return pr;
}

void use_scratch(cuda_moe::MoeArgs& g, const MatmulIdScratch& s) {
  g.counts = s.counts(), g.rows = s.rows(), g.row_capacity = static_cast<std::int64_t>(s.row_capacity());
  g.block_counts = s.map_block_counts(), g.block_count_words = static_cast<std::int64_t>(s.map_block_count_words());
  g.tile_counter = s.tile_counter();
  g.staged = s.staged(), g.staged_bytes = static_cast<std::int64_t>(s.staged_bytes());
}

// The CUDA plan of a grouped call that will use the context's scratch, before that scratch is had
// (a pure function: nothing allocated): the pool's memory as the planner sees it, non-null
// 256-byte aligned stand-ins (cudaMalloc's alignment; never dereferenced) with room to stage
// every routed row.
cuda_moe::MoePlan plan_pooled_cuda(const ArchInfo& arch, cuda_moe::MoeArgs g, MatmulIdGroupedKernel kernel) {
  auto* stand_in = reinterpret_cast<std::uint32_t*>(std::uintptr_t{256});
  const std::int64_t routed = g.m * g.top_k;
  g.counts = stand_in, g.rows = stand_in, g.row_capacity = routed;
  g.block_counts = stand_in, g.block_count_words = static_cast<std::int64_t>(cuda_moe::kMoeMapBlockCountWords);
  g.staged = stand_in, g.staged_bytes = routed * g.k * static_cast<std::int64_t>(dtype_size(g.in_dtype));
  return cuda_moe::plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, arch, kernel);
}

// The context's scratch for a pooled call, sized by its plan: staging room only where the engine
// stages (on CUDA), then g pointed at it. Before anything is enqueued.
void use_pool(Context& ctx, cuda_moe::MoeArgs& g, const MatmulIdOptions& opts) {
  std::uint64_t row_bytes = 0;
  if (ctx.is_cuda() && plan_pooled_cuda(ctx.arch(), g, opts.grouped_kernel).staged)
    row_bytes = static_cast<std::uint64_t>(g.k) * dtype_size(g.in_dtype);
  use_scratch(g, detail::matmul_id_pool_scratch(ctx, static_cast<std::uint32_t>(g.n_experts), static_cast<std::uint32_t>(g.m),
                                                static_cast<std::uint32_t>(g.top_k), row_bytes));
}

Receipt run(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
            MatmulIdScratch* scratch, const MatmulIdParams& p, const MatmulIdOptions& opts, const Fp8Experts* fp8 = nullptr) {
  Prepared pr = prepare(ctx, weights, input, ids, out, scratch, p, opts, fp8);
  if (pr.empty) return Receipt{"none", "", 0};
  const bool zeros = pr.zeros;
  const MatmulIdRoute route = pr.route;
  const std::uint64_t routed = pr.routed;
  cuda_moe::MoeArgs& g = pr.g;
  if (pr.pooled) use_pool(ctx, g, opts);
  auto logged = [&](Receipt r) {
    if (log_level() > 0)
      detail::log_call(kOp,
                       "m " + std::to_string(p.m) + " top_k " + std::to_string(p.top_k) + " n " + std::to_string(p.n) +
                           " k " + std::to_string(p.k) + " experts " + std::to_string(p.n_experts) + " w " +
                           std::string(dtype_name(weights.dtype)) + " in " + std::string(dtype_name(p.input_dtype)) +
                           " out " + std::string(dtype_name(p.output_dtype)) + " ids " +
                           std::string(dtype_name(p.ids_dtype)) +
                           (p.input_layout == MatmulIdInputLayout::Slotted ? " slotted" : " shared"),
                       r, zeros                                       ? "k or n_experts is 0: zero rows"
                          : p.route == MatmulIdRoute::Auto ? "auto: suggest_matmul_id_route"
                                                           : "the caller's route");
    return r;
  };
  if (ctx.is_cuda()) return logged(detail::run_matmul_id_cuda(ctx, route, g, opts.grouped_kernel));

  // CPU backend: the float64 reference (grouped also builds the scratch lists, as its map does).
  const bool grouped = route == MatmulIdRoute::GroupedPrefill;
  if (grouped) ctx.check_launchable("cpu_matmul_id_map");
  ctx.check_launchable("cpu_matmul_id_reference");
  if (grouped) {  // stable counting sort of the routed rows by expert
    std::fill(g.counts, g.counts + p.n_experts, 0u);
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(routed); ++r)
      if (const std::uint32_t e = cuda_moe::host_expert_of(g, r); e != cuda_moe::kNoExpert) ++g.counts[e];
    std::vector<std::uint64_t> next(p.n_experts, 0);
    for (std::uint32_t e = 1; e < p.n_experts; ++e) next[e] = next[e - 1] + g.counts[e - 1];
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(routed); ++r)
      if (const std::uint32_t e = cuda_moe::host_expert_of(g, r); e != cuda_moe::kNoExpert)
        g.rows[next[e]++] = static_cast<std::uint32_t>(r);
    ctx.note_launch("cpu_matmul_id_map", [&] {
      return LaunchRanges{{byte_range(ids)},
                          {detail::elems_range(g.counts, DType::U32, p.n_experts),
                           detail::elems_range(g.rows, DType::U32, static_cast<std::int64_t>(routed))}};
    });
  }
  cpu::MatmulIdF64 ref;
  if (fp8) {
    const auto [sr, sc] = fp8_scale_shape(fp8->kind, p.n, p.k);
    for (std::uint32_t e = 0; e < p.n_experts; ++e)
      check_fp8_scales(kOp, fp8->kind, p.n, p.k, static_cast<const float*>(fp8->scales.data) + e * sr * sc,
                       static_cast<std::size_t>(sr * sc));
    ref = cpu::matmul_id_fp8_f64(weights.data, static_cast<const float*>(fp8->scales.data), fp8->kind, input.data, ids.data,
                                 p, ctx.arch().cpu_threads);
  } else {
    ref = cpu::matmul_id_f64(weights.data, weights.dtype, input.data, ids.data, p, ctx.arch().cpu_threads);
  }
  for (std::size_t i = 0; i < ref.value.size(); ++i)
    store_from_double(out.data, p.output_dtype, static_cast<std::int64_t>(i), ref.value[i]);
  ctx.note_launch("cpu_matmul_id_reference", [&] {
    LaunchRanges r{{byte_range(weights), byte_range(input), byte_range(ids)}, {byte_range(out)}};
    if (fp8) r.reads.push_back(byte_range(fp8->scales));
    return r;
  });
  return logged(Receipt{matmul_id_route_name(route), "cpu_matmul_id_reference", grouped ? 2 : 1});
}

}  // namespace

namespace detail {
MatmulIdParams matmul_id_params_named(const char* op, const View& w, const View& in, const View& ids, const View& out,
                                      MatmulIdInputLayout layout, MatmulIdMultiplicity multiplicity, MatmulIdRoute route) {
  if (w.rank != 3) fail(ErrorCode::InvalidArgument, op, ": weights must be [n_experts, n, k], got ", w.describe());
  if (ids.rank != 2) fail(ErrorCode::InvalidArgument, op, ": expert ids must be [m, top_k], got ", ids.describe());
  if (out.rank != 3) fail(ErrorCode::InvalidArgument, op, ": output must be [m, top_k, n], got ", out.describe());
  if (in.rank != 2 && in.rank != 3)
    fail(ErrorCode::InvalidArgument, op, ": input must be [m, k], [m * top_k, k] or [m, top_k, k], got ", in.describe());
  const std::int64_t n_experts = w.dim(0), n = w.dim(1), k = w.dim(2), m = ids.dim(0), top_k = ids.dim(1);
  if (!w.empty() && (!stride_is(w, 2, 1) || !stride_is(w, 1, k)))  // an empty view's strides are never used
    fail(ErrorCode::InvalidArgument, op, ": weights must have strides [expert stride, k, 1] (each expert a row-major [",
         n, ", ", k, "] matrix), got ", w.describe());
  if (!is_expert_id(ids.dtype))
    fail(ErrorCode::InvalidArgument, op, ": expert ids must be u32, i32 or i64, got ", dtype_name(ids.dtype));
  if (!ids.is_contiguous()) fail(ErrorCode::InvalidArgument, op, ": expert ids must be contiguous, got ", ids.describe());
  if (out.dim(0) != m || out.dim(1) != top_k || out.dim(2) != n)
    fail(ErrorCode::InvalidArgument, op, ": output must be [m, top_k, n] = [", m, ", ", top_k, ", ", n,
         "] (m, top_k from ids ", ids.describe(), ", n from weights ", w.describe(), "), got ", out.describe());
  if (!out.is_contiguous()) fail(ErrorCode::InvalidArgument, op, ": output must be contiguous, got ", out.describe());

  MatmulIdParams p;
  p.m = narrow_u32(m, op, "m (tokens)");
  p.top_k = narrow_u32(top_k, op, "top_k");
  p.n = narrow_u32(n, op, "n");
  p.k = narrow_u32(k, op, "k");
  p.n_experts = narrow_u32(n_experts, op, "n_experts");
  const std::uint64_t matrix = static_cast<std::uint64_t>(p.n) * p.k;  // u32 x u32: no overflow
  const std::uint64_t es = w.dim(0) <= 1 || w.empty() ? matrix : static_cast<std::uint64_t>(w.stride(0));
  p.expert_stride_bytes = checked_mul(es, dtype_size(w.dtype), "matmul_id expert stride bytes");
  p.id_multiplicity = multiplicity, p.route = route;
  p.input_dtype = in.dtype, p.output_dtype = out.dtype, p.ids_dtype = ids.dtype;

  const int inner = in.rank - 1;
  if (!in.empty() && !stride_is(in, inner, 1))
    fail(ErrorCode::InvalidArgument, op, ": input innermost stride must be 1, got ", in.describe());
  if (in.rank == 3) layout = MatmulIdInputLayout::Slotted;
  p.input_layout = layout;
  const bool slotted = layout == MatmulIdInputLayout::Slotted;
  const std::uint64_t rows = slotted && in.rank == 2 ? static_cast<std::uint64_t>(p.m) * p.top_k : p.m;
  const bool shape_ok = in.rank == 3 ? in.dim(0) == m && in.dim(1) == top_k && in.dim(2) == k
                                     : static_cast<std::uint64_t>(in.dim(0)) == rows && in.dim(1) == k;
  if (!shape_ok) {
    const char* want = in.rank == 3 ? "[m, top_k, k]" : slotted ? "[m * top_k, k] (layout slotted)" : "[m, k] (layout shared)";
    fail(ErrorCode::InvalidArgument, op, ": input must be ", want, " with m ", m, ", top_k ", top_k, " (from ids) and k ",
         k, " (from weights), got ", in.describe(),
         !slotted && in.rank == 2 && top_k > 1 && static_cast<std::uint64_t>(in.dim(0)) == static_cast<std::uint64_t>(p.m) * p.top_k
             ? ": a row per (token, slot) is layout slotted"
             : "");
  }
  // Strides in elements; a dimension of extent <= 1 gets the dense value (it is never stepped).
  const std::uint64_t dense_token = slotted ? checked_mul(p.top_k, p.k, "matmul_id input token stride") : p.k;
  auto stride_u = [&](int i, std::uint64_t dense) {
    return in.dim(i) <= 1 || in.empty() ? dense : static_cast<std::uint64_t>(in.stride(i));
  };
  if (in.rank == 3) {
    p.input_token_stride = stride_u(0, dense_token);
    p.input_slot_stride = stride_u(1, p.k);
  } else if (slotted) {
    const std::uint64_t s = stride_u(0, p.k);
    p.input_slot_stride = s;
    p.input_token_stride = checked_mul(s, p.top_k, "matmul_id input token stride");
  } else {
    p.input_token_stride = stride_u(0, p.k);
  }
  return p;
}
}  // namespace detail

MatmulIdParams matmul_id_params(const View& w, const View& in, const View& ids, const View& out, MatmulIdInputLayout layout,
                                MatmulIdMultiplicity multiplicity, MatmulIdRoute route) {
  return detail::matmul_id_params_named(kOp, w, in, ids, out, layout, multiplicity, route);
}

namespace {
// params must describe the views exactly (each field compared; the views described on a mismatch).
void check_params_match_views(const View& weights, const View& input, const View& ids, const View& out,
                              const MatmulIdParams& p) {
  const MatmulIdParams v = matmul_id_params(weights, input, ids, out, p.input_layout, p.id_multiplicity, p.route);
  // params.<field> must equal what the views give (the views are described only on a mismatch).
  auto expect_same = [&](const char* field, const auto& given, const auto& from_views) {
    if (!(given == from_views))
      fail(ErrorCode::InvalidArgument, kOp, ": params.", field, " is ", given, " but the views give ", from_views, " (",
           describe_all(weights, input, ids, out), ")");
  };
  expect_same("m", p.m, v.m);
  expect_same("top_k", p.top_k, v.top_k);
  expect_same("n", p.n, v.n);
  expect_same("k", p.k, v.k);
  expect_same("n_experts", p.n_experts, v.n_experts);
  if (v.n_experts > 1) expect_same("expert_stride_bytes", p.expert_stride_bytes, v.expert_stride_bytes);
  if (p.input_layout != v.input_layout)
    fail(ErrorCode::InvalidArgument, kOp, ": params.input_layout is SharedPerToken but the input is [m, top_k, k] (",
         describe_all(weights, input, ids, out), ")");
  expect_same("input_dtype", dtype_name(p.input_dtype), dtype_name(v.input_dtype));
  expect_same("output_dtype", dtype_name(p.output_dtype), dtype_name(v.output_dtype));
  expect_same("ids_dtype", dtype_name(p.ids_dtype), dtype_name(v.ids_dtype));
  const detail::MatmulIdInputStrides given = detail::matmul_id_input_strides(p), viewed = detail::matmul_id_input_strides(v);
  if (v.m > 1) expect_same("input_token_stride", given.token, viewed.token);
  if (v.top_k > 1) expect_same("input_slot_stride", given.slot, viewed.slot);
}
}  // namespace

Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, const MatmulIdParams& p, const MatmulIdOptions& opts) {
  check_views(ctx, weights, input, ids, out);
  check_params_match_views(weights, input, ids, out, p);
  return run(ctx, weights, input, ids, out, scratch, p, opts);
}

MatmulIdPlan plan_matmul_id(const Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                            const MatmulIdScratch* scratch, const MatmulIdParams& p, const MatmulIdOptions& opts) {
  check_views(ctx, weights, input, ids, out);
  check_params_match_views(weights, input, ids, out, p);
  const Prepared pr = prepare(ctx, weights, input, ids, out, scratch, p, opts);
  MatmulIdPlan plan;
  plan.route = pr.route;
  plan.pooled = pr.pooled;
  if (pr.empty) return plan;
  if (ctx.is_cuda()) {  // the function run_matmul_id_cuda plans with, on the same arguments
    const cuda_moe::MoePlan cp = pr.pooled ? plan_pooled_cuda(ctx.arch(), pr.g, opts.grouped_kernel)
                                           : cuda_moe::plan_matmul_id_cuda(pr.g, pr.route, ctx.arch(), opts.grouped_kernel);
    plan.kernels = cp.kernels, plan.engine = cp.engine, plan.staged = cp.staged, plan.fused = cp.fused;
    plan.reason = cp.reason;
    return plan;
  }
  if (pr.route == MatmulIdRoute::GroupedPrefill) plan.kernels.push_back("cpu_matmul_id_map");
  plan.kernels.push_back("cpu_matmul_id_reference");
  return plan;
}

Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, MatmulIdInputLayout layout, MatmulIdMultiplicity multiplicity,
                  MatmulIdRoute route, const MatmulIdOptions& opts) {
  check_views(ctx, weights, input, ids, out);
  return run(ctx, weights, input, ids, out, scratch, matmul_id_params(weights, input, ids, out, layout, multiplicity, route),
             opts);
}

bool detail::matmul_id_direct_args(const Context& ctx, const View& weights, const View& input, const View& ids,
                                   const View& out, MatmulIdInputLayout layout, const MatmulIdOptions& opts,
                                   const Fp8Experts* fp8, cuda_moe::MoeArgs& args) {
  check_views(ctx, weights, input, ids, out);
  const MatmulIdParams p = matmul_id_params(weights, input, ids, out, layout, MatmulIdMultiplicity::MayRepeat,
                                            MatmulIdRoute::Direct);
  const Prepared pr = prepare(ctx, weights, input, ids, out, nullptr, p, opts, fp8);
  if (pr.empty) return false;
  args = pr.g;
  return true;
}

bool detail::matmul_id_grouped_args(const Context& ctx, const View& weights, const View& input, const View& ids,
                                    const View& out, MatmulIdInputLayout layout, const MatmulIdOptions& opts,
                                    MatmulIdScratch& scratch, cuda_moe::MoeArgs& args, const Fp8Experts* fp8) {
  check_views(ctx, weights, input, ids, out);
  const MatmulIdParams p = matmul_id_params(weights, input, ids, out, layout, MatmulIdMultiplicity::MayRepeat,
                                            MatmulIdRoute::GroupedPrefill);
  const Prepared pr = prepare(ctx, weights, input, ids, out, &scratch, p, opts, fp8);
  if (pr.empty || pr.zeros) return false;
  args = pr.g;
  return true;
}

Receipt matmul_id(Context& ctx, const Fp8Experts& w, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, MatmulIdInputLayout layout, MatmulIdMultiplicity multiplicity, MatmulIdRoute route,
                  const MatmulIdOptions& opts) {
  check_views(ctx, w.codes, input, ids, out);
  validate_view(w.scales, kOp, "scales");
  if (w.scales.device != w.codes.device || w.scales.device_index != w.codes.device_index)
    fail(ErrorCode::InvalidArgument, kOp, ": scales are on ", w.scales.describe(), " but the codes on ", w.codes.describe());
  if (w.codes.dtype != DType::F8E4M3)
    fail(ErrorCode::InvalidArgument, kOp, ": FP8 expert codes must be f8e4m3, got ", w.codes.describe());
  const MatmulIdParams p = matmul_id_params(w.codes, input, ids, out, layout, multiplicity, route);
  const auto [sr, sc] = fp8_scale_shape(w.kind, p.n, p.k);
  const bool ok = w.scales.dtype == DType::F32 && w.scales.is_contiguous() &&
                  w.scales.numel() == static_cast<std::uint64_t>(sr * sc) * p.n_experts &&
                  (w.scales.rank != 3 || (w.scales.dim(0) == p.n_experts && w.scales.dim(1) == sr && w.scales.dim(2) == sc));
  if (!ok)
    fail(ErrorCode::InvalidArgument, kOp, ": ", fp8_scale_kind_name(w.kind), " scales of ", p.n_experts, " [", p.n, ", ", p.k,
         "] experts must be a contiguous f32 [", p.n_experts, ", ", sr, ", ", sc, "], got ", w.scales.describe());
  return run(ctx, w.codes, input, ids, out, scratch, p, opts, &w);
}

}  // namespace llmm
