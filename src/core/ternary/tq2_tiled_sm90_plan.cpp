#include "core/ternary/tq2_tiled_sm90_plan.hpp"

#include <algorithm>

#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"

namespace llmm::cuda_ternary {
namespace {

constexpr const char* kWhat = "tq2_tiled_sm90 workspace";

std::uint64_t align_up(std::uint64_t v) { return checked_add(v, kTq2LtAlign - 1, kWhat) / kTq2LtAlign * kTq2LtAlign; }

}  // namespace

Tq2TiledSm90Plan tq2_tiled_sm90_plan(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out, bool exact,
                                     int sm_count, bool split) {
  const std::string why = split ? engine::tiled_sm90_tq2_split_refusal(m, n, k, in, out, exact)
                                : engine::tiled_sm90_tq2_shape_refusal(m, n, k, in, out, exact);
  if (!why.empty())
    fail(ErrorCode::InvalidArgument, "tq2_tiled_sm90: m ", m, ", n ", n, ", k ", k, " (", dtype_name(in), " -> ",
         dtype_name(out), exact ? ", exact" : ", fast", "): ", why);
  Tq2TiledSm90Plan p;
  p.scaled = in != DType::F16;
  p.launch = split ? engine::tiled_sm90_tq2_split_launch(m, n, k, sm_count) : engine::tiled_sm90_tq2_launch(m, n, sm_count);
  p.engine_kernel = engine::tiled_sm90_tq2_kernel_name(out, p.launch.bn, p.launch.parts);
  std::uint64_t end = 0;
  if (p.scaled) {
    p.alpha_off = 0;
    p.part_off = to_usize(align_up(checked_mul(to_u64(m, kWhat), 4, kWhat)), kWhat);
    const std::uint64_t part = checked_mul(checked_mul(to_u64(m, kWhat), to_u64(k, kWhat), kWhat), 2, kWhat);
    end = checked_add(p.part_off, align_up(part), kWhat);
    p.rowscale_kernel = "tq2_rowscale_" + std::string(dtype_name(in)) + "_f16";
  }
  if (p.launch.parts > 1) {
    p.slots_off = to_usize(end, kWhat);
    end = checked_add(end, align_up(engine::tiled_sm90_tq2_split_slot_bytes(p.launch)), kWhat);
    p.counters_off = to_usize(end, kWhat);
    p.counter_bytes = to_usize(engine::tiled_sm90_tq2_split_counter_bytes(p.launch), kWhat);
    end = checked_add(end, align_up(p.counter_bytes), kWhat);
  }
  p.bytes = to_usize(end, kWhat);
  return p;
}

}  // namespace llmm::cuda_ternary
