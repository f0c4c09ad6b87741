// matmul_id_tq2: ternary experts. The views are read by matmul_id's rules (matmul_id_params,
// the stack's [n_experts, n, k] standing in for the weights view), then checked, planned, and
// run by the float64 reference (CPU contexts) or the CUDA dispatcher.
#include <cstdint>
#include <string>

#include "core/engine/tiled_sm90_plan.hpp"
#include "core/log.hpp"
#include "core/moe/matmul_id_checks.hpp"
#include "core/moe/matmul_id_pool.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/ranges.hpp"
#include "core/ternary/tq2_moe_dispatch.hpp"
#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "core/vec16.hpp"
#include "cpu/reference_matmul_id_tq2.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary_moe.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul_id_tq2";

bool on_context(const Context& ctx, DeviceKind d, int index) {
  return d == ctx.kind() && (!ctx.is_cuda() || index == ctx.arch().device_index);
}

}  // namespace

const char* tq2_moe_route_name(Tq2MoeRoute r) noexcept {
  switch (r) {
    case Tq2MoeRoute::Auto: return "auto";
    case Tq2MoeRoute::Cpu: return "cpu";
    case Tq2MoeRoute::Naive: return "tq2_moe_naive";
    case Tq2MoeRoute::GroupedSm90: return "tq2_moe_grouped_sm90";
    case Tq2MoeRoute::StreamSm90: return "tq2_moe_stream_sm90";
  }
  return "?";
}

Tq2MoeRoute plan_matmul_id_tq2(const MatmulIdParams& p, const ArchInfo& arch, bool input_ok, bool staging_ok,
                               Tq2MoeRoute force) {
  const bool cuda = arch.kind == DeviceKind::CUDA;
  const std::string engine_why = engine::tiled_sm90_tq2_moe_refusal(p, arch);
  const std::string stream_why = cuda_ternary::tq2_moe_stream_refusal(p, arch);
  if (force != Tq2MoeRoute::Auto) {
    std::string why;
    if (force == Tq2MoeRoute::Cpu && cuda) why = "the cpu route runs on CPU contexts only";
    if (force != Tq2MoeRoute::Cpu && !cuda) why = "needs a CUDA context";
    if (force == Tq2MoeRoute::GroupedSm90 && cuda) {
      if (!engine_why.empty()) why = engine_why;
      else if (!input_ok)
        why = "needs a bf16 input or an f16 one TMA can read (16-byte aligned base, strides multiples of 8)";
      else if (!staging_ok)
        why = "stages every routed row: it needs a MatmulIdScratch made with staged_row_bytes >= 2 k and room for m * top_k rows";
    }
    if (force == Tq2MoeRoute::StreamSm90 && cuda) why = stream_why;
    if (!why.empty())
      fail(ErrorCode::Unsupported, kOp, ": route ", tq2_moe_route_name(force), " cannot run (m ", p.m, ", top_k ",
           p.top_k, ", n ", p.n, ", k ", p.k, ", ", p.n_experts, " experts, ", dtype_name(p.input_dtype), " input): ", why);
    return force;
  }
  if (!cuda) return Tq2MoeRoute::Cpu;
  if (stream_why.empty() && p.m <= cuda_ternary::kTq2MoeStreamAutoMaxTokens) return Tq2MoeRoute::StreamSm90;
  if (engine_why.empty() && input_ok && staging_ok) return Tq2MoeRoute::GroupedSm90;
  return Tq2MoeRoute::Naive;
}

Receipt matmul_id_tq2(Context& ctx, const WeightHandle& experts, const View& input, const View& ids, const View& out,
                      MatmulIdScratch* scratch, MatmulIdInputLayout layout, const Tq2MoeOptions& opts) {
  if (!experts) fail(ErrorCode::InvalidArgument, kOp, ": null weight handle");
  const TernaryWeight& w = *experts;
  if (!on_context(ctx, w.device(), w.device_index()))
    fail(ErrorCode::InvalidArgument, kOp, ": weight ", w.key(), " lives on ", w.device() == DeviceKind::CUDA ? "cuda" : "cpu",
         " but the context is ", ctx.is_cuda() ? "cuda" : "cpu");
  for (const auto& [v, name] : {std::pair{&input, "input"}, std::pair{&ids, "expert ids"}, std::pair{&out, "output"}}) {
    validate_view(*v, kOp, name);
    if (!on_context(ctx, v->device, v->device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v->describe(), " but the context is ",
           ctx.is_cuda() ? "cuda:" + std::to_string(ctx.arch().device_index) : std::string("cpu"));
  }
  // The stack's memory as bytes (overlap checks), and its shape as the weights view of matmul_id.
  const View held = View::contiguous(const_cast<std::uint8_t*>(w.codes()), DType::U8,
                                     {static_cast<std::int64_t>(w.held_bytes())}, w.device(), w.device_index());
  const View shape = View::contiguous(const_cast<std::uint8_t*>(w.codes()), DType::U8, {w.experts(), w.n(), w.k()},
                                      w.device(), w.device_index());
  const MatmulIdParams p = detail::matmul_id_params_named(kOp, shape, input, ids, out, layout,
                                                          MatmulIdMultiplicity::MayRepeat, MatmulIdRoute::GroupedPrefill);
  detail::check_matmul_id_dtypes(DType::F16, p.input_dtype, p.output_dtype, p.ids_dtype);
  const std::uint64_t routed = static_cast<std::uint64_t>(p.m) * p.top_k;
  if (routed > UINT32_MAX)
    fail(ErrorCode::InvalidArgument, kOp, ": ", p.m, " x ", p.top_k, " routed rows exceed the u32 range");
  for (const auto& [v, name] : {std::pair{&held, "the experts"}, std::pair{&input, "input"}, std::pair{&ids, "expert ids"}})
    if (overlaps(out, *v))
      fail(ErrorCode::InvalidArgument, kOp, ": output must not overlap ", name, " (output ", out.describe(), ")");
  if (p.m == 0 || p.top_k == 0) return Receipt{"none", "", 0};  // no output element (n, k >= 1 here)

  bool staging_ok = false;
  if (scratch) {
    if (!on_context(ctx, scratch->device(), scratch->device_index()))
      fail(ErrorCode::InvalidArgument, kOp, ": scratch lives on another device than the context");
    const View s = View::contiguous(scratch->counts(), DType::U32,
                                    {static_cast<std::int64_t>((scratch->counts_bytes() + scratch->rows_bytes()) / 4 +
                                                               scratch->map_block_count_words())},
                                    scratch->device(), scratch->device_index());
    for (const auto& [v, name] : {std::pair{&out, "output"}, std::pair{&held, "the experts"}, std::pair{&input, "input"},
                                  std::pair{&ids, "expert ids"}}) {
      bool hit = overlaps(s, *v);
      if (scratch->staged())
        hit = hit || overlaps(View::contiguous(scratch->staged(), DType::U8, {static_cast<std::int64_t>(scratch->staged_bytes())},
                                               scratch->device(), scratch->device_index()),
                              *v);
      if (hit) fail(ErrorCode::InvalidArgument, kOp, ": scratch must not overlap ", name);
    }
    staging_ok = scratch->max_experts() >= p.n_experts && scratch->row_capacity() >= routed && scratch->staged() &&
                 scratch->staged_bytes() / (2 * static_cast<std::uint64_t>(p.k)) >= routed;
  }
  const detail::MatmulIdInputStrides strides = detail::matmul_id_input_strides(p);
  // The engine reads f16 rows by TMA (16-byte aligned, strides multiples of 8) before staging
  // them; a bf16 input is staged row by row through its own strides (tq2_rowscale_stage), any.
  const bool input_ok = p.input_dtype == DType::F16
                            ? detail::aligned16(input.data) && strides.token % 8 == 0 && strides.slot % 8 == 0
                            : p.input_dtype == DType::BF16;
  // No scratch on CUDA: planned as if staging room were there (staging_ok decides nothing but the
  // engine); where the engine takes the call it runs on the context's own scratch (per stream,
  // grow-only, sized by this call), so that a caller passing only tensors gets the engine.
  const bool pooled = !scratch && ctx.is_cuda();
  const Tq2MoeRoute route = plan_matmul_id_tq2(p, ctx.arch(), input_ok, staging_ok || pooled, opts.force_route);
  if (pooled && route == Tq2MoeRoute::GroupedSm90)
    scratch = &detail::matmul_id_pool_scratch(ctx, p.n_experts, p.m, p.top_k, 2 * static_cast<std::uint64_t>(p.k), kOp);

  cuda_ternary::Tq2MoeArgs a;
  cuda_moe::MoeArgs& g = a.g;
  g.m = p.m, g.n = p.n, g.k = p.k, g.top_k = p.top_k, g.n_experts = p.n_experts;
  // The map and staging kernels check the MoE arguments as a whole: g.w names the stack (never
  // read as f16 weights), g.w_dtype the dtype the engine decodes to.
  g.w_dtype = DType::F16, g.w = w.codes(), g.expert_stride = static_cast<std::int64_t>(p.n) * p.k;
  g.in_dtype = p.input_dtype, g.in = input.data;
  g.in_token_stride = static_cast<std::int64_t>(strides.token), g.in_slot_stride = static_cast<std::int64_t>(strides.slot);
  g.ids = ids.data, g.ids64 = p.ids_dtype == DType::I64;
  g.out_dtype = p.output_dtype, g.out = out.data;
  if (route == Tq2MoeRoute::GroupedSm90) {
    g.counts = scratch->counts(), g.rows = scratch->rows(), g.row_capacity = static_cast<std::int64_t>(scratch->row_capacity());
    g.block_counts = scratch->map_block_counts(), g.block_count_words = static_cast<std::int64_t>(scratch->map_block_count_words());
    g.staged = scratch->staged(), g.staged_bytes = static_cast<std::int64_t>(scratch->staged_bytes());
  }
  a.codes = w.codes(), a.scales = w.scales(), a.scales_t = w.scales_t(), a.scales_t_ld = w.scales_t_ld();

  auto logged = [&](Receipt r) {
    if (log_level() > 0)
      detail::log_call(kOp,
                       "m " + std::to_string(p.m) + " top_k " + std::to_string(p.top_k) + " n " + std::to_string(p.n) +
                           " k " + std::to_string(p.k) + " experts " + std::to_string(p.n_experts) + " in " +
                           std::string(dtype_name(p.input_dtype)) + " out " + std::string(dtype_name(p.output_dtype)) +
                           " ids " + std::string(dtype_name(p.ids_dtype)),
                       r, opts.force_route == Tq2MoeRoute::Auto ? "plan_matmul_id_tq2" : "forced");
    return r;
  };
  if (ctx.is_cuda()) return logged(detail::run_matmul_id_tq2_cuda(ctx, route, a));
  ctx.check_launchable("cpu_matmul_id_tq2_reference");
  cpu::matmul_id_tq2_reference(a, ctx.arch().cpu_threads);
  ctx.note_launch("cpu_matmul_id_tq2_reference", [&] {
    return LaunchRanges{{byte_range(held), byte_range(input), byte_range(ids)}, {byte_range(out)}};
  });
  return logged(Receipt{tq2_moe_route_name(route), "cpu_matmul_id_tq2_reference", 1});
}

}  // namespace llmm
