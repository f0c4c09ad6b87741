#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "core/ternary/tq2_tiled_sm90_plan.hpp"

#include <algorithm>
#include <limits>

#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm::cuda_ternary {
namespace {

constexpr const char* kWhat = "tq2_dequant_lt workspace";

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }  // a >= 0: no overflow

std::uint64_t align_up(std::uint64_t v) {
  return checked_add(v, kTq2LtAlign - 1, kWhat) / kTq2LtAlign * kTq2LtAlign;
}

std::uint64_t product(std::initializer_list<std::int64_t> xs) {
  std::uint64_t r = 1;
  for (std::int64_t x : xs) r = checked_mul(r, to_u64(x, kWhat), kWhat);
  return r;
}

}  // namespace

std::int64_t tq2_lt_auto_chunk_rows(std::int64_t m, std::int64_t n, std::int64_t k) {
  const std::int64_t row_bytes = 2 * k, unit = kTq2LtRowUnit;
  const std::int64_t cap = std::max(unit, static_cast<std::int64_t>(kTq2LtMaxChunkBytes) / row_bytes / unit * unit);
  const std::int64_t l2_rows = static_cast<std::int64_t>(kTq2LtL2ChunkBytes) / row_bytes;
  const std::int64_t wave_rows = ceil_div(kTq2LtWaveTiles, ceil_div(m, 128)) * 256;
  const std::int64_t want = std::min(cap, std::max({l2_rows, wave_rows, unit}));
  // As few chunks as keep each at least `want` rows (and none above the cap), evened out.
  const std::int64_t chunks = std::max({std::int64_t{1}, n / want, ceil_div(n, cap)});
  return std::min(n, ceil_div(ceil_div(n, chunks), unit) * unit);
}

Tq2LtPlan tq2_lt_plan(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out, bool exact,
                      std::int64_t chunk_rows) {
  // Bounds far above any weight a device holds keep every product below in 64 bits.
  constexpr std::int64_t kMax = std::int64_t{1} << 40;
  if (m < 1 || n < 1 || k < 128 || k % 128 != 0 || m > kMax || n > kMax || k > kMax)
    fail(ErrorCode::InvalidArgument, "tq2_dequant_lt: sizes m ", m, ", n ", n, ", k ", k,
         " (m, n >= 1; k a positive multiple of 128; each at most 2^40)");
  if (!is_float(in) || (out != DType::F32 && out != in))
    fail(ErrorCode::Unsupported, "tq2_dequant_lt: ", dtype_name(in), " -> ", dtype_name(out),
         " (input f32, f16 or bf16; output f32 or the input's dtype)");
  if (chunk_rows < 0) fail(ErrorCode::InvalidArgument, "tq2_dequant_lt: chunk rows ", chunk_rows, " is negative");
  Tq2LtPlan p;
  p.parts = in == DType::F32 ? (exact ? 2 : 1) : in == DType::BF16 ? 1 : 0;
  p.scaled = p.parts > 0;
  p.via_temp = p.scaled && out != DType::F32;  // bf16 out: no f16 x f16 -> bf16 cuBLASLt GEMM
  p.gemm_out = in == DType::F16 ? out : DType::F32;
  p.gemms = p.parts == 2 ? 2 : 1;
  if (chunk_rows > 0) {  // rounded up to the unit, at most n (no overflow for n near 2^63)
    const std::int64_t c = std::min(chunk_rows, n), unit = kTq2LtOverrideUnit;
    p.chunk_rows = c > INT64_MAX - unit ? n : std::min(n, c + (unit - c % unit) % unit);
  } else {
    p.chunk_rows = tq2_lt_auto_chunk_rows(m, n, k);
  }
  p.chunks = ceil_div(n, p.chunk_rows);
  p.last_rows = n - (p.chunks - 1) * p.chunk_rows;
  p.temp_ld = p.via_temp ? ceil_div(p.chunk_rows, 8) * 8 : 0;

  std::uint64_t at = 0;
  if (p.scaled) at = align_up(product({m, 4}));  // alpha at 0
  p.parts_off = to_usize(at, kWhat);
  p.part_bytes = p.parts > 0 ? to_usize(align_up(product({m, k, 2})), kWhat) : 0;
  at = checked_add(at, checked_mul(static_cast<std::uint64_t>(p.parts), p.part_bytes, kWhat), kWhat);
  p.weight_off = to_usize(at, kWhat);
  at = checked_add(at, align_up(product({p.chunk_rows, k, 2})), kWhat);
  p.temp_off = to_usize(at, kWhat);
  if (p.via_temp) at = checked_add(at, align_up(product({m, p.temp_ld, 4})), kWhat);
  p.bytes = to_usize(at, kWhat);
  const std::int64_t kernels = (p.scaled ? 1 : 0) + p.chunks * (1 + p.gemms + (p.scaled ? 1 : 0));  // chunks < 2^62
  if (kernels > 1 << 20)
    fail(ErrorCode::InvalidArgument, "tq2_dequant_lt: ", p.chunks, " chunks of ", p.chunk_rows, " weight rows (n ", n,
         ") would launch ", kernels, " kernels: give more rows per chunk");
  p.kernels = static_cast<int>(kernels);

  const std::string in_name(dtype_name(in));
  if (p.scaled) {
    p.rowscale_kernel = "tq2_rowscale_" + in_name + (p.parts == 2 ? "_f16x2" : "_f16");
    p.scale_kernel = "tq2_lt_scale_rows_" + std::string(dtype_name(out));
  }
  p.dequant_kernel = "tq2_dequant_f16";
  return p;
}

}  // namespace llmm::cuda_ternary

namespace llmm {

std::size_t tq2_workspace_bytes(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, DType out_dtype,
                                const Tq2Options& opts) {
  // The sizes and dtypes gemm_tq2 takes (plan_tq2's rule), before any arithmetic on them.
  (void)plan_tq2(m, n, k, in_dtype, ArchInfo{}, Tq2Route::Auto);
  if (out_dtype != DType::F32 && out_dtype != in_dtype)
    fail(ErrorCode::Unsupported, "tq2_workspace_bytes: ", dtype_name(in_dtype), " -> ", dtype_name(out_dtype),
         " (output f32 or the input's dtype)");
  // tq2_stream_v2's staging takes at most 16 tokens x 3 parts x 256 bytes + 512 bytes per 128 of k.
  if (static_cast<std::uint64_t>(k / kTq2BlockWeights) > std::numeric_limits<std::size_t>::max() / (48 * 256 + 512))
    fail(ErrorCode::InvalidArgument, "tq2_workspace_bytes: k ", k, " is too large for any workspace");
  if (m == 0) return 0;  // gemm_tq2 launches nothing for m == 0
  const bool exact = opts.precision == Precision::Exact;
  // tq2_stream_v2 stages the activation for m >= 3 (tq2_kernels.hpp).
  const std::size_t stage = cuda_ternary::tq2_stream_v2_stage_bytes(m, k, in_dtype, exact);
  if (opts.force_route == Tq2Route::StreamV2) return stage;
  // tq2_stream_v4 stages the activation once for all blocks (m <= 2, where it fits).
  const std::size_t stage_v4 = cuda_ternary::tq2_stream_v4_stage_bytes(m, k);
  if (opts.force_route == Tq2Route::StreamV4) return stage_v4;
  if (opts.force_route == Tq2Route::StreamV5) return cuda_ternary::tq2_stream_v5_workspace_bytes(m, n, k);
  const bool split = opts.force_route == Tq2Route::TiledSm90SplitK;
  if (opts.force_route == Tq2Route::TiledSm90 || split) {
    const std::string why = split ? engine::tiled_sm90_tq2_split_refusal(m, n, k, in_dtype, out_dtype, exact)
                                  : engine::tiled_sm90_tq2_shape_refusal(m, n, k, in_dtype, out_dtype, exact);
    if (!why.empty())
      fail(ErrorCode::Unsupported, "tq2_workspace_bytes: route ", tq2_route_name(opts.force_route), " cannot run (m: ", m,
           ", n: ", n, ", k: ", k, "): ", why);
    return cuda_ternary::tq2_tiled_sm90_plan(m, n, k, in_dtype, out_dtype, exact, 0, split).bytes;
  }
  if (opts.force_route != Tq2Route::Auto && opts.force_route != Tq2Route::DequantLt) return 0;
  const std::size_t lt = cuda_ternary::tq2_lt_plan(m, n, k, in_dtype, out_dtype, exact, opts.dequant_chunk_rows).bytes;
  if (opts.force_route == Tq2Route::DequantLt) return lt;
  // Auto may take the split route (16-bit input, m <= 128): its slots and counters. The plan
  // does not depend on the SM count (tiled_sm90_tq2_split_launch), so neither does this.
  std::size_t split_bytes = 0;
  if ((in_dtype == DType::F16 || in_dtype == DType::BF16) && m <= engine::kTiledSm90Tq2SplitMaxM &&
      engine::tiled_sm90_tq2_split_refusal(m, n, k, in_dtype, out_dtype, exact).empty())
    split_bytes = cuda_ternary::tq2_tiled_sm90_plan(m, n, k, in_dtype, out_dtype, exact, 0, true).bytes;
  return std::max({stage, stage_v4, cuda_ternary::tq2_stream_v5_workspace_bytes(m, n, k), lt, split_bytes});
}

}  // namespace llmm
