// fuzz_matmul_id_capability: any MatmulIdParams (every field, valid enum values only) and weight
// dtype -> matmul_id_capability and suggest_matmul_id_route. The capability must accept exactly
// the calls the contract allows and report byte counts equal to the contract's formula,
// recomputed here in 128-bit arithmetic; the suggestion must follow its documented rule and
// never name a route the capability refuses.
#include <algorithm>

#include "fuzz_util.hpp"
#include "llmm/moe.hpp"

using namespace llmm;
using fuzz::attempt;
using fuzz::kU64Max;
using fuzz::u128;

namespace {

struct Expected {
  u128 weight = 0, input = 0, ids = 0, output = 0;
  bool scratch = false;
  u128 scratch_counts = 0, scratch_rows = 0;
};

// ---- The contract, in one place: update these two functions when MatmulIdParams or
// ---- src/core/moe/matmul_id_capability.cpp changes (the static_assert trips on a new schema).
//
// matmul_id_capability's byte contract in 128-bit arithmetic (no overflow possible: every factor
// is < 2^64 and every product below has at most one such factor); nullopt: it must refuse.
std::optional<Expected> expected_capability(DType w, const MatmulIdParams& p) {
  static_assert(kMatmulIdSchemaVersion == 2, "matmul_id contract changed: update expected_capability");
  if (p.m == 0 || p.n == 0 || p.k == 0 || p.top_k == 0 || p.n_experts == 0) return {};
  if (p.id_multiplicity == MatmulIdMultiplicity::DistinctPerToken && p.top_k > p.n_experts) return {};
  if (!is_float(w) || !is_float(p.input_dtype) || !is_expert_id(p.ids_dtype)) return {};
  if (p.output_dtype != DType::F32 && p.output_dtype != p.input_dtype) return {};
  const u128 es = dtype_size(w), matrix = u128{p.n} * p.k * es;
  if (matrix > kU64Max || p.expert_stride_bytes < matrix || p.expert_stride_bytes % es != 0) return {};
  const u128 rows = u128{p.m} * p.top_k;
  if (rows > UINT32_MAX) return {};
  const bool slotted = p.input_layout == MatmulIdInputLayout::Slotted;
  if (!slotted && p.input_slot_stride.value_or(0) != 0) return {};  // SharedPerToken has no slot stride
  const u128 slot_stride = slotted ? p.input_slot_stride.value_or(p.k) : 0;
  const u128 token_stride = p.input_token_stride ? *p.input_token_stride : slotted ? u128{p.top_k} * p.k : u128{p.k};
  Expected e;
  e.weight = u128{p.n_experts - 1u} * p.expert_stride_bytes + matrix;
  e.input = ((p.m - 1u) * token_stride + (p.top_k - 1u) * slot_stride + p.k) * dtype_size(p.input_dtype);
  e.ids = rows * dtype_size(p.ids_dtype);
  e.output = rows * p.n * dtype_size(p.output_dtype);
  if (p.route == MatmulIdRoute::GroupedPrefill) {
    if (p.n_experts > kMatmulIdGroupedMaxExperts) return {};
    e.scratch = true;
    e.scratch_counts = u128{p.n_experts} * 4;
    e.scratch_rows = rows * 4;  // m * top_k u32: every routed row, listed by expert
  }
  for (u128 v : {e.weight, e.input, e.ids, e.output, e.scratch_counts, e.scratch_rows})
    if (v > std::numeric_limits<std::size_t>::max()) return {};
  return e;
}

// suggest_matmul_id_route's documented rule (moe.hpp).
// moe.hpp: Direct while rows <= 4 x active experts; on sm_90 (cc 9.0) with a 16-bit input (the
// Hopper engine's grouped route), GroupedPrefill from m = 4 on.
MatmulIdRoute expected_suggestion(const MatmulIdParams& p, const ArchInfo& arch) {
  if (p.n_experts > kMatmulIdGroupedMaxExperts) return MatmulIdRoute::Direct;
  const u128 rows = u128{p.m} * p.top_k, active = std::min<u128>(p.n_experts, rows);
  if (active == 0) return MatmulIdRoute::Direct;
  const bool engine = arch.kind == DeviceKind::CUDA && arch.cc() == 90 &&
                      (p.input_dtype == DType::F16 || p.input_dtype == DType::BF16);
  if (engine && p.m >= 4) return MatmulIdRoute::GroupedPrefill;
  return rows <= 4u * active ? MatmulIdRoute::Direct : MatmulIdRoute::GroupedPrefill;
}
// ---- end of the contract.

// Sizes: often plausible (so that many calls are accepted), else anywhere in u32.
std::uint32_t consume_size(FuzzedDataProvider& in, bool plausible) {
  return plausible ? in.ConsumeIntegralInRange<std::uint32_t>(1, 300) : fuzz::edgy<std::uint32_t>(in);
}

std::optional<std::uint64_t> consume_stride(FuzzedDataProvider& in, const MatmulIdParams& p) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return std::nullopt;
    case 1: return in.ConsumeIntegralInRange<std::uint64_t>(0, 2 * std::uint64_t{p.top_k} * p.k);  // padded / broadcast
    case 2: return 0;
    default: return fuzz::edgy<std::uint64_t>(in);
  }
}

MatmulIdParams consume_params(FuzzedDataProvider& in, DType weight_dtype) {
  MatmulIdParams p;
  const bool plausible = in.ConsumeBool();
  p.m = consume_size(in, plausible), p.n = consume_size(in, plausible), p.k = consume_size(in, plausible);
  p.top_k = consume_size(in, plausible), p.n_experts = consume_size(in, plausible);
  const std::uint64_t matrix = static_cast<std::uint64_t>(u128{p.n} * p.k * dtype_size(weight_dtype));  // may wrap: fine
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: p.expert_stride_bytes = matrix; break;
    case 1: p.expert_stride_bytes = matrix + dtype_size(weight_dtype) * in.ConsumeIntegralInRange<std::uint64_t>(0, 64); break;
    case 2: p.expert_stride_bytes = matrix + in.ConsumeIntegralInRange<std::uint64_t>(0, 3) - 1; break;
    default: p.expert_stride_bytes = fuzz::edgy<std::uint64_t>(in); break;
  }
  p.input_layout = in.ConsumeBool() ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
  p.id_multiplicity = in.ConsumeBool() ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
  p.route = in.ConsumeBool() ? MatmulIdRoute::GroupedPrefill : MatmulIdRoute::Direct;
  p.input_dtype = fuzz::pick_dtype(in), p.output_dtype = fuzz::pick_dtype(in), p.ids_dtype = fuzz::pick_dtype(in);
  if (in.ConsumeBool()) {  // mostly valid dtypes, so that the byte formulas get exercised
    p.input_dtype = in.PickValueInArray({DType::F32, DType::F16, DType::BF16});
    p.output_dtype = in.ConsumeBool() ? DType::F32 : p.input_dtype;
    p.ids_dtype = in.PickValueInArray({DType::U32, DType::I32, DType::I64});
  }
  p.input_token_stride = consume_stride(in, p);
  p.input_slot_stride = consume_stride(in, p);
  return p;
}

std::string describe(DType w, const MatmulIdParams& p) {
  std::ostringstream os;
  os << "w " << dtype_name(w) << " m " << p.m << " n " << p.n << " k " << p.k << " top_k " << p.top_k << " experts "
     << p.n_experts << " stride " << p.expert_stride_bytes << " layout " << static_cast<int>(p.input_layout) << " mult "
     << static_cast<int>(p.id_multiplicity) << " route " << matmul_id_route_name(p.route) << " in "
     << dtype_name(p.input_dtype) << " out " << dtype_name(p.output_dtype) << " ids " << dtype_name(p.ids_dtype)
     << " token stride " << (p.input_token_stride ? std::to_string(*p.input_token_stride) : "unset") << " slot stride "
     << (p.input_slot_stride ? std::to_string(*p.input_slot_stride) : "unset");
  return os.str();
}

void check_capability(DType w, const MatmulIdParams& p) {
  const auto want = expected_capability(w, p);
  fuzz::Refusal why;
  const auto got = attempt([&] { return matmul_id_capability(w, p); }, &why);
  FUZZ_CHECK(got.has_value() == want.has_value(), got ? "accepted" : "refused", " against the contract: ", describe(w, p),
             got ? "" : " -- ", why.message);
  if (!got) {
    FUZZ_CHECK(why.code == ErrorCode::InvalidArgument, why.message);
    return;
  }
  const MatmulIdCapability& c = *got;
  FUZZ_CHECK(c.schema_version == kMatmulIdSchemaVersion && c.weight_dtype == w && c.route == p.route, describe(w, p));
  FUZZ_CHECK(u128{p.m} * p.top_k <= UINT32_MAX, describe(w, p));
  FUZZ_CHECK(c.required_weight_bytes > 0 && c.required_input_bytes > 0 && c.required_ids_bytes > 0 &&
                 c.required_output_bytes > 0, describe(w, p));
  FUZZ_CHECK(c.required_weight_bytes == want->weight, "weight bytes ", c.required_weight_bytes, " != ", fuzz::str(want->weight), ": ", describe(w, p));
  FUZZ_CHECK(c.required_input_bytes == want->input, "input bytes ", c.required_input_bytes, " != ", fuzz::str(want->input), ": ", describe(w, p));
  FUZZ_CHECK(c.required_ids_bytes == want->ids, "ids bytes ", c.required_ids_bytes, " != ", fuzz::str(want->ids), ": ", describe(w, p));
  FUZZ_CHECK(c.required_output_bytes == want->output, "output bytes ", c.required_output_bytes, " != ", fuzz::str(want->output), ": ", describe(w, p));
  FUZZ_CHECK(c.scratch.has_value() == want->scratch, describe(w, p));
  if (c.scratch) {
    FUZZ_CHECK(c.scratch->expert_counts_bytes == want->scratch_counts && c.scratch->routed_rows_bytes == want->scratch_rows &&
                   c.scratch->expert_counts_bytes > 0 && c.scratch->routed_rows_bytes > 0,
               "scratch ", c.scratch->expert_counts_bytes, " + ", c.scratch->routed_rows_bytes, ": ", describe(w, p));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const DType w = in.ConsumeBool() ? in.PickValueInArray({DType::F32, DType::F16, DType::BF16}) : fuzz::pick_dtype(in);
  const MatmulIdParams p = consume_params(in, w);
  check_capability(w, p);

  ArchInfo arch;
  if (in.ConsumeBool()) {
    arch.kind = DeviceKind::CUDA, arch.sm_count = 132;
    arch.cc_major = in.ConsumeIntegralInRange(8, 9);
    arch.cc_minor = in.ConsumeBool() ? 0 : 1;
  }
  const auto s = attempt([&] { return suggest_matmul_id_route(p, arch); });
  FUZZ_CHECK(s.has_value(), "suggest_matmul_id_route refused: ", describe(w, p));
  FUZZ_CHECK(*s == expected_suggestion(p, arch), "suggested ", matmul_id_route_name(*s), " on cc ", arch.cc(), ": ",
             describe(w, p));
  // A suggestion is always runnable: if the call is valid on some route, it is on the suggested one.
  MatmulIdParams direct = p, suggested = p;
  direct.route = MatmulIdRoute::Direct, suggested.route = *s;
  if (expected_capability(w, direct)) {
    FUZZ_CHECK(expected_capability(w, suggested).has_value(), "suggested an unrunnable route: ", describe(w, suggested));
    check_capability(w, suggested);
  }
  return 0;
}
