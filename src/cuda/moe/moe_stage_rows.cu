// moe_stage_rows: the grouped route's routed input rows copied into expert order, staged[i] =
// the input row of rows[i] for i < sum(counts) (after moe_map on the same stream), so that a
// tiled GEMM can load a tile's rows with one TMA box instead of gathering them row by row
// (measured: per-row gathers inside the Hopper engine ran at 40% of its dense speed).
// Each warp copies whole rows with 16-byte loads and stores (k * element size a multiple of 16,
// 16-byte aligned input rows and staging area: the launcher's contract). A pure copy: exact and
// deterministic. Blocks first sum counts[] (the rows to copy), so the grid needs no host sync.
#include <algorithm>

#include "cuda/common/launch_pdl.cuh"
#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) moe_stage_rows_kernel(MoeArgs a) {
  __shared__ std::uint32_t s_sum[kThreads / 32];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  // Programmatic dependent launch (sm_90: launch_moe_stage_rows uses it there): the GEMM after
  // may start now (it waits for this grid before reading the staged rows); this grid waits for
  // moe_map before reading its lists.
  ptx::grid_launch_dependents();
  ptx::grid_dependency_wait();
  std::uint32_t part = 0;
  for (std::int64_t e = tid; e < a.n_experts; e += kThreads) part += a.counts[e];
  part = __reduce_add_sync(0xffffffffu, part);
  if (lane == 0) s_sum[warp] = part;
  __syncthreads();
  std::uint32_t total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += s_sum[w];

  const std::int64_t vecs = a.k * static_cast<std::int64_t>(dtype_size(a.in_dtype)) / 16;  // per row
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32);
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + warp; i < total; i += warps) {
    const std::uint32_t r = a.rows[i];
    const std::int64_t t = r / a.top_k, s = r - t * a.top_k;
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(a.in) +
                                                      (t * a.in_token_stride + s * a.in_slot_stride) * dtype_size(a.in_dtype));
    uint4* dst = reinterpret_cast<uint4*>(static_cast<unsigned char*>(a.staged) + i * vecs * 16);
    for (std::int64_t v = lane; v < vecs; v += 32) dst[v] = __ldg(src + v);
  }
}

}  // namespace

std::int64_t moe_stage_rows_blocks(const MoeArgs& a) noexcept {
  const std::int64_t routed = a.m * a.top_k;
  return std::max<std::int64_t>(1, std::min<std::int64_t>((routed + 7) / 8, 132 * 8));
}

void launch_moe_stage_rows(const MoeArgs& a, StreamHandle stream) {
  const std::string name = moe_stage_rows_kernel_name(a);
  const std::int64_t routed = a.m * a.top_k;
  if (routed == 0) return;
  const std::int64_t row_bytes = a.k * static_cast<std::int64_t>(dtype_size(a.in_dtype));
  if (!a.staged || !a.counts || !a.rows || row_bytes % 16 != 0 || a.staged_bytes < routed * row_bytes)
    fail(ErrorCode::Internal, name, ": arguments outside the kernel's contract");
  const dim3 grid(static_cast<unsigned>(moe_stage_rows_blocks(a)));
  if (cuda_common::pdl_enabled())  // after moe_map of the same route on the stream
    cuda_common::launch_pdl(moe_stage_rows_kernel, grid, dim3(kThreads), 0, stream, a);
  else
    moe_stage_rows_kernel<<<grid, kThreads, 0, stream>>>(a);
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_moe
