// matmul_id_capability: the fail-closed byte contract, pure and allocation-free.
#include <algorithm>

#include "core/moe/matmul_id_checks.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/moe.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul_id";

std::size_t product(const char* what, std::initializer_list<std::uint64_t> f) {
  std::uint64_t v = 1;
  for (std::uint64_t x : f) v = checked_mul(v, x, what);
  return to_usize(v, what);
}

// Bytes from the input's first element to one past its last (m, top_k, k nonzero).
std::size_t input_extent(const MatmulIdParams& p) {
  const detail::MatmulIdInputStrides s = detail::matmul_id_input_strides(p);
  std::uint64_t last = checked_mul(p.m - 1u, s.token, "matmul_id input byte extent");
  last = checked_add(last, checked_mul(p.top_k - 1u, s.slot, "matmul_id input byte extent"), "matmul_id input byte extent");
  return product("matmul_id input byte extent",
                 {checked_add(last, p.k, "matmul_id input byte extent"), dtype_size(p.input_dtype)});
}

}  // namespace

namespace detail {
void check_matmul_id_dtypes(DType w, DType in, DType out, DType ids) {
  if (!is_float(w) && w != DType::F8E4M3)
    fail(ErrorCode::InvalidArgument, kOp, ": weights must be f32, f16, bf16 or f8e4m3 (with scales), got ", dtype_name(w));
  if (!is_float(in)) fail(ErrorCode::InvalidArgument, kOp, ": input must be f32, f16 or bf16, got ", dtype_name(in));
  if (out != DType::F32 && out != in)
    fail(ErrorCode::InvalidArgument, kOp, ": output must be f32 or the input's dtype (", dtype_name(in), "), got ",
         dtype_name(out));
  if (!is_expert_id(ids))
    fail(ErrorCode::InvalidArgument, kOp, ": expert ids must be u32, i32 or i64, got ", dtype_name(ids));
}

MatmulIdInputStrides matmul_id_input_strides(const MatmulIdParams& p) {
  const bool slotted = p.input_layout == MatmulIdInputLayout::Slotted;
  if (!slotted && p.input_slot_stride.value_or(0) != 0)
    fail(ErrorCode::InvalidArgument, kOp, ": a SharedPerToken input has no slot stride (", *p.input_slot_stride,
         " given)");
  MatmulIdInputStrides s;
  s.slot = slotted ? p.input_slot_stride.value_or(p.k) : 0;
  s.token = p.input_token_stride ? *p.input_token_stride
                                 : (slotted ? checked_mul(p.top_k, p.k, "matmul_id input token stride") : p.k);
  return s;
}
}  // namespace detail

const char* matmul_id_grouped_kernel_name(MatmulIdGroupedKernel k) noexcept {
  switch (k) {
    case MatmulIdGroupedKernel::Auto: return "auto";
    case MatmulIdGroupedKernel::MmaSync: return "mma_sync";
    case MatmulIdGroupedKernel::TiledSm90: return "tiled_sm90";
    case MatmulIdGroupedKernel::TiledSm90Fused: return "tiled_sm90_fused";
  }
  return "?";
}

const char* matmul_id_route_name(MatmulIdRoute r) noexcept {
  switch (r) {
    case MatmulIdRoute::Direct: return "direct";
    case MatmulIdRoute::GroupedPrefill: return "grouped_prefill";
    case MatmulIdRoute::Auto: return "auto";
  }
  return "?";
}

MatmulIdRoute suggest_matmul_id_route(const MatmulIdParams& p, const ArchInfo& arch) {
  if (p.n_experts > kMatmulIdGroupedMaxExperts) return MatmulIdRoute::Direct;
  const std::uint64_t rows = static_cast<std::uint64_t>(p.m) * p.top_k;
  const std::uint64_t active = std::min<std::uint64_t>(p.n_experts, rows);
  if (active == 0) return MatmulIdRoute::Direct;
  // The Hopper engine's grouped route (16-bit input on sm_90; the engine sorting the routed rows
  // itself at m <= 16) against direct, H200, 2026-12-06 (`llmm-bench --suite moe --decode`, bf16,
  // Qwen3-30B gate_up / down, Mixtral w1, DeepSeek-V3 x uniform / hot / Zipf routing), grouped /
  // direct time: m 4 0.51-1.22x (geometric mean 0.84x; the worst case for direct, hot routing,
  // is 1.96x slower than grouped), m 8 0.29-1.10x (faster in 10 of 12), m 16 0.16-0.99x, m 32
  // 0.09-0.93x. So from m = 4 the engine takes it whatever the routing; m <= 2 stays direct (the
  // engine not measured there), and so does anything the engine does not take (the run-5 rule).
  const bool engine = arch.kind == DeviceKind::CUDA && arch.cc_major == 9 && arch.cc_minor == 0 &&
                      (p.input_dtype == DType::F16 || p.input_dtype == DType::BF16);
  if (engine && p.m >= 4) return MatmulIdRoute::GroupedPrefill;
  const std::uint64_t rows_per_expert = 4;
  return rows <= rows_per_expert * active ? MatmulIdRoute::Direct : MatmulIdRoute::GroupedPrefill;
}

MatmulIdCapability matmul_id_capability(DType weight_dtype, const MatmulIdParams& p) {
  if (p.m == 0 || p.n == 0 || p.k == 0 || p.top_k == 0 || p.n_experts == 0)
    fail(ErrorCode::InvalidArgument, kOp, ": m, n, k, top_k and n_experts must be nonzero (m ", p.m, ", n ", p.n, ", k ",
         p.k, ", top_k ", p.top_k, ", n_experts ", p.n_experts, ")");
  if (p.top_k > p.n_experts && p.id_multiplicity == MatmulIdMultiplicity::DistinctPerToken)
    fail(ErrorCode::InvalidArgument, kOp, ": distinct top_k ", p.top_k, " exceeds n_experts ", p.n_experts);
  detail::check_matmul_id_dtypes(weight_dtype, p.input_dtype, p.output_dtype, p.ids_dtype);
  const std::uint64_t es = dtype_size(weight_dtype);
  const std::uint64_t matrix = checked_mul(checked_mul(p.n, p.k, "matmul_id expert matrix byte extent"), es,
                                           "matmul_id expert matrix byte extent");
  if (p.expert_stride_bytes < matrix)
    fail(ErrorCode::InvalidArgument, kOp, ": expert stride ", p.expert_stride_bytes, " is smaller than one ", matrix,
         "-byte matrix");
  if (p.expert_stride_bytes % es != 0)
    fail(ErrorCode::InvalidArgument, kOp, ": expert stride ", p.expert_stride_bytes, " is not aligned to ",
         dtype_name(weight_dtype));
  MatmulIdCapability c;
  c.weight_dtype = weight_dtype;
  c.route = p.route;
  const std::uint64_t last = checked_mul(p.n_experts - 1u, p.expert_stride_bytes, "matmul_id expert weight offset");
  c.required_weight_bytes = to_usize(checked_add(last, matrix, "matmul_id weight extent"), "matmul_id weight extent");
  const std::uint64_t rows = checked_mul(p.m, p.top_k, "matmul_id routed row count");
  if (rows > UINT32_MAX)
    fail(ErrorCode::InvalidArgument, kOp, ": ", p.m, " x ", p.top_k, " = ", rows, " routed rows exceed the u32 range");
  c.required_input_bytes = input_extent(p);
  c.required_ids_bytes = product("matmul_id expert id byte extent", {rows, dtype_size(p.ids_dtype)});
  c.required_output_bytes = product("matmul_id output byte extent", {rows, p.n, dtype_size(p.output_dtype)});
  if (p.route == MatmulIdRoute::GroupedPrefill) {
    if (p.n_experts > kMatmulIdGroupedMaxExperts)
      fail(ErrorCode::InvalidArgument, kOp, ": grouped prefill supports at most ", kMatmulIdGroupedMaxExperts,
           " experts, got ", p.n_experts);
    c.scratch = MatmulIdScratchRequirement{product("matmul_id scratch expert counts", {p.n_experts, 4}),
                                           product("matmul_id scratch routed rows", {rows, 4})};
  }
  return c;
}

}  // namespace llmm
