#include "core/dense/dense_kernels.hpp"

#include <algorithm>

#include "core/vec16.hpp"

namespace llmm::cuda_dense {
namespace {

constexpr int kDefaultSmCount = 132;  // H100/H200 SXM

// Warps per SM to aim for in a memory-bound kernel: with 16-byte loads and a few in flight per
// lane this keeps roughly 40 KB per SM outstanding, enough to cover DRAM latency.
constexpr std::int64_t kTargetWarpsPerSm = 16;

using detail::aligned16;

// A stride of `elems` elements keeps 16-byte alignment (or is never used: `used` false).
bool stride_ok(std::int64_t elems, DType t, bool used) { return !used || detail::bytes16(elems, t); }

}  // namespace

int vec16_elems(DType t) noexcept {
  if (!is_float(t)) return 0;
  return static_cast<int>(16 / dtype_size(t));
}

// ---------------------------------------------------------------------------------------------
// gemv_wide gate.
//
// M range 2..16: one block keeps up to 8 vectors x 4 weight rows = 32 f32 accumulators per
// thread, so M <= 8 is one pass over the weights and M in 9..16 two passes of 8 (the second
// pass re-reads weight rows the first just pulled into L2, because both passes of a row block
// run side by side as neighbouring blockIdx.x). Beyond 16 the tiled tensor-core engine wastes
// little of its 64-128 row tile, and this kernel's f32 FMA rate, not bandwidth, would bound it.
std::optional<GemvWideConfig> gemv_wide_config(std::int64_t m, std::int64_t n, std::int64_t k,
                                               DType dtype, int cc_major, int sm_count) {
  if (cc_major > 0 && cc_major < 8) return std::nullopt;
  if (!is_float(dtype)) return std::nullopt;
  if (m < 1 || m > kGemvWideMaxM || n <= 1 || k < 0) return std::nullopt;
  const int ve = vec16_elems(dtype);
  if (k % ve != 0) return std::nullopt;  // every weight row is whole 16-byte vectors

  GemvWideConfig c;
  c.passes = static_cast<int>((m + kGemvWideMaxVecsPerPass - 1) / kGemvWideMaxVecsPerPass);
  const std::int64_t per_pass = (m + c.passes - 1) / c.passes;
  c.vecs_per_block = per_pass <= 1 ? 1 : per_pass <= 2 ? 2 : per_pass <= 4 ? 4 : 8;
  // Both passes of a row block run side by side (neighbouring blockIdx.x), so the second
  // read of a weight row hits L2. mlx loops the passes inside one block for n >= 65536; on an
  // H200 that was 1.3-1.55x slower (f32/bf16, 16 x 128256 x 4096), so every N gets a block per
  // pass.
  c.grid_x = c.passes;

  // Split K over more threads (1, 2 or 4 warps per row group) until the device has enough
  // warps in flight, as long as every thread still streams at least two 16-byte vectors.
  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSmCount;
  const std::int64_t target_warps = sms * kTargetWarpsPerSm;
  const std::int64_t row_groups = n / kGemvWideRowsPerWarp + (n % kGemvWideRowsPerWarp != 0);  // n near 2^63: no overflow
  const std::int64_t k_vecs = k / ve;
  c.k_lanes = 32;
  while (c.k_lanes < 128 && row_groups * c.grid_x * (c.k_lanes / 32) < target_warps &&
         k_vecs >= 2 * (2 * c.k_lanes)) {
    c.k_lanes *= 2;
  }
  c.rows_per_block = (128 / c.k_lanes) * kGemvWideRowsPerWarp;
  return c;
}

GemvWideConfig gemv_wide_config_of(int vecs_per_block, int k_lanes, int grid_x) {
  GemvWideConfig c;
  c.vecs_per_block = vecs_per_block, c.k_lanes = k_lanes;
  c.passes = grid_x, c.grid_x = grid_x;  // a block per pass (gemv_wide_config says why)
  c.rows_per_block = k_lanes > 0 && k_lanes <= 128 ? (128 / k_lanes) * kGemvWideRowsPerWarp : 0;
  return c;
}

bool gemv_wide_supports(const DenseArgs& a) {
  if (a.a_trans || !a.b_trans || !is_float(a.dtype)) return false;
  const bool batched = a.batch > 1;
  return aligned16(a.a) && aligned16(a.b) && stride_ok(a.a_ld, a.dtype, a.m > 1) &&
         stride_ok(a.b_ld, a.dtype, a.n > 1) && stride_ok(a.a_batch, a.dtype, batched) &&
         stride_ok(a.b_batch, a.dtype, batched);
}

// ---------------------------------------------------------------------------------------------
// Names.

std::string zero_fill_name(const DenseArgs& a) { return "zero_fill_" + std::string(dtype_name(a.dtype)); }

std::string gemv_wide_kernel_name(const DenseArgs& a, const GemvWideConfig& c) {
  return "gemv_wide_" + std::string(dtype_name(a.dtype)) + "_v" +
         std::to_string(c.vecs_per_block) + "_kl" + std::to_string(c.k_lanes);
}

}  // namespace llmm::cuda_dense
