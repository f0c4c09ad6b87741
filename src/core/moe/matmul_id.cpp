// matmul_id: capability, call validation, then the CPU reference or the CUDA dispatcher.
#include <algorithm>
#include <cstdint>

#include "core/moe/moe_dispatch.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul_id";

struct Range {
  std::uintptr_t lo, hi;
};
Range range_of(const void* p, std::size_t bytes) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  return {a, a + bytes};
}
bool overlap(Range a, Range b) { return a.lo < b.hi && b.lo < a.hi; }

void check_buffer(const Context& ctx, const View& v, const char* name, DType dtype, std::size_t required) {
  validate_view(v, kOp, name);
  if (v.dtype != dtype)
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " must be ", dtype_name(dtype), ", got ", dtype_name(v.dtype));
  if (v.device != ctx.kind() || (ctx.is_cuda() && v.device_index != ctx.arch().device_index))
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v.describe(), " but the context is ",
         ctx.is_cuda() ? "cuda" : "cpu");
  if (!v.is_contiguous()) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " must be contiguous, got ", v.describe());
  std::size_t have = to_usize(checked_mul(v.numel(), dtype_size(v.dtype), "matmul_id buffer bytes"), kOp);
  if (have < required)
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " requires ", required, " logical bytes, got ", have);
}

}  // namespace

Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, const MatmulIdParams& p, const MatmulIdOptions& opts) {
  validate_view(weights, kOp, "weights");
  const MatmulIdCapability cap = matmul_id_capability(weights.dtype, p);
  check_buffer(ctx, weights, "weights", cap.weight_dtype, cap.required_weight_bytes);
  check_buffer(ctx, input, "input", p.input_dtype, cap.required_input_bytes);
  check_buffer(ctx, ids, "expert ids", DType::U32, cap.required_ids_bytes);
  check_buffer(ctx, out, "output", p.output_dtype, cap.required_output_bytes);
  const Range out_r = range_of(out.data, cap.required_output_bytes);
  const Range w_r = range_of(weights.data, cap.required_weight_bytes), in_r = range_of(input.data, cap.required_input_bytes),
              ids_r = range_of(ids.data, cap.required_ids_bytes);
  if (overlap(out_r, w_r)) fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap weights");
  if (overlap(out_r, in_r)) fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap input");
  if (overlap(out_r, ids_r)) fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap expert ids");
  if (p.route == MatmulIdRoute::GroupedPrefill) {
    if (!scratch) fail(ErrorCode::InvalidArgument, kOp, ": grouped prefill requires caller-owned scratch");
    if (scratch->max_experts() < p.n_experts || scratch->max_tokens() < p.m)
      fail(ErrorCode::InvalidArgument, kOp, ": scratch capacity experts/tokens=", scratch->max_experts(), "/",
           scratch->max_tokens(), " is smaller than ", p.n_experts, "/", p.m);
    if (scratch->device() != ctx.kind() || (ctx.is_cuda() && scratch->device_index() != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": scratch lives on another device than the context");
    const Range s_r = range_of(scratch->counts(), scratch->counts_bytes() + scratch->rows_bytes());
    for (const auto& [r, name] : {std::pair{out_r, "output"}, std::pair{w_r, "weights"}, std::pair{in_r, "input"},
                                  std::pair{ids_r, "expert ids"}})
      if (overlap(s_r, r)) fail(ErrorCode::InvalidArgument, kOp, ": scratch must not overlap ", name);
  }

  cuda_moe::MoeArgs g;
  g.m = p.m, g.n = p.n, g.k = p.k, g.top_k = p.top_k, g.n_experts = p.n_experts;
  g.w_dtype = weights.dtype, g.w = weights.data;
  g.expert_stride = static_cast<std::int64_t>(p.expert_stride_bytes / dtype_size(weights.dtype));
  g.in_dtype = p.input_dtype, g.in = input.data;
  const bool slotted = p.input_layout == MatmulIdInputLayout::Slotted;
  g.in_token_stride = slotted ? static_cast<std::int64_t>(p.top_k) * p.k : p.k;
  g.in_slot_stride = slotted ? p.k : 0;
  g.ids = static_cast<const std::uint32_t*>(ids.data);
  g.out_dtype = p.output_dtype, g.out = out.data;
  g.exact = opts.precision == Precision::Exact;
  if (scratch) g.counts = scratch->counts(), g.rows = scratch->rows(), g.row_capacity = scratch->max_tokens();
  if (ctx.is_cuda()) return detail::run_matmul_id_cuda(ctx, p.route, g);

  // CPU backend: the float64 reference (grouped also builds the per-expert lists, as its map does).
  const bool grouped = p.route == MatmulIdRoute::GroupedPrefill;
  if (grouped) ctx.check_launchable("cpu_matmul_id_map");
  ctx.check_launchable("cpu_matmul_id_reference");
  if (grouped) {
    std::fill(g.counts, g.counts + p.n_experts, 0u);
    for (std::uint32_t r = 0; r < p.m * p.top_k; ++r)
      if (g.ids[r] < p.n_experts && g.counts[g.ids[r]] < g.row_capacity)  // a broken distinct promise never writes past a list
        g.rows[static_cast<std::int64_t>(g.ids[r]) * g.row_capacity + g.counts[g.ids[r]]++] = r;
    ctx.note_launch("cpu_matmul_id_map");
  }
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(weights.data, weights.dtype, input.data, g.ids, p, ctx.arch().cpu_threads);
  for (std::size_t i = 0; i < ref.value.size(); ++i) store_from_double(out.data, p.output_dtype, static_cast<std::int64_t>(i), ref.value[i]);
  ctx.note_launch("cpu_matmul_id_reference");
  return Receipt{matmul_id_route_name(p.route), "cpu_matmul_id_reference", grouped ? 2 : 1};
}

}  // namespace llmm
