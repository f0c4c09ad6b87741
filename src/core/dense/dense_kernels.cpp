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
// gemv mapping.

GemvProblem gemv_problem(const DenseArgs& a, int sm_count) {
  GemvProblem p;
  const std::size_t es = dtype_size(a.dtype);
  p.batch = a.batch;
  // A 1x1 output is a dot product: take the mapping whose W is contiguous along l.
  const bool use_a = a.n == 1 && !(a.m == 1 && a.a_trans && a.b_trans);
  if (use_a) {
    // C[i, 0] = sum_l A(i, l) B(l, 0): W = A, x = column 0 of B, y = column 0 of C.
    p.rows = !a.a_trans;
    p.outputs = a.m;
    p.w = a.a;
    p.w_ld = a.a_ld;
    p.w_batch = a.a_batch;
    p.x = a.b;
    p.x_inc = a.b_trans ? 1 : a.b_ld;
    p.x_batch = a.b_batch;
    p.y = a.c;
    p.y_inc = a.c_ld;
  } else {
    // C[0, j] = sum_l A(0, l) B(l, j): W(j, l) = B(l, j), x = row 0 of A, y = row 0 of C.
    p.rows = a.b_trans;
    p.outputs = a.n;
    p.w = a.b;
    p.w_ld = a.b_ld;
    p.w_batch = a.b_batch;
    p.x = a.a;
    p.x_inc = a.a_trans ? a.a_ld : 1;
    p.x_batch = a.a_batch;
    p.y = a.c;
    p.y_inc = 1;
  }
  p.len = a.k;
  p.y_batch = a.c_batch;

  const bool batched = p.batch > 1;
  // rows: W rows (stride w_ld between outputs) start aligned; cols: each l-slice of W does.
  const bool ld_used = p.rows ? p.outputs > 1 : p.len > 1;
  p.w_vec = aligned16(p.w) && stride_ok(p.w_ld, a.dtype, ld_used) &&
            stride_ok(p.w_batch, a.dtype, batched);
  p.x_vec = p.rows && p.w_vec && (p.x_inc == 1 || p.len <= 1) && aligned16(p.x) &&
            stride_ok(p.x_batch, a.dtype, batched);

  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSmCount;
  const std::int64_t ve = p.w_vec ? static_cast<std::int64_t>(16 / es) : 1;
  if (p.rows) {
    // One warp per output row unless that leaves the device short of warps; each lane keeps
    // at least two vectors of the row after a split.
    p.split = 1;
    while (p.split < 4 && p.outputs * p.batch * p.split < sms * kTargetWarpsPerSm &&
           p.len >= 2 * (2 * p.split) * 32 * ve) {
      p.split *= 2;
    }
  } else {
    // 256-thread blocks: `split` threads along i, 256 / split along l. Narrow the i extent of
    // a block until there are about two blocks per SM (3072 outputs: 2 threads x 8 bf16).
    p.split = 32;
    auto blocks = [&](int ti) { return (p.outputs + ti * ve - 1) / (ti * ve) * p.batch; };
    while (p.split > 2 && blocks(p.split) < 2 * sms) p.split /= 2;
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Names.

std::string zero_fill_name(const DenseArgs& a) { return "zero_fill_" + std::string(dtype_name(a.dtype)); }

std::string gemv_kernel_name(const DenseArgs& a) {
  const GemvProblem p = gemv_problem(a);
  std::string s = p.rows ? "gemv_rows_" : "gemv_cols_";
  s += dtype_name(a.dtype);
  s += p.w_vec ? "_v16" : "_scalar";
  if (p.rows && p.w_vec && !p.x_vec) s += "_xstrided";
  return s;
}

std::string gemv_wide_kernel_name(const DenseArgs& a, const GemvWideConfig& c) {
  return "gemv_wide_" + std::string(dtype_name(a.dtype)) + "_v" +
         std::to_string(c.vecs_per_block) + "_kl" + std::to_string(c.k_lanes);
}

}  // namespace llmm::cuda_dense
