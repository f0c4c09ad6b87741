// moe_stage_rows: the grouped route's routed input rows copied into expert order, staged[i] =
// the input row of rows[i] for i < sum(counts) (after moe_map on the same stream), so that a
// tiled GEMM can load a tile's rows with one TMA box instead of gathering them row by row
// (measured: per-row gathers inside the Hopper engine ran at 40% of its dense speed).
// Each warp copies whole rows with 16-byte loads and stores (k * element size a multiple of 16,
// 16-byte aligned input rows and staging area: the launcher's contract). A pure copy: exact and
// deterministic. Blocks first sum counts[] (the rows to copy), so the grid needs no host sync.
// The W8A8 variant (FP8 experts, Precision::Fast) writes each row quantized instead: a warp a
// row, 128 channels a step (4 a lane), the group's amax reduced over the warp, the codes and the
// scale as quantize_fp8_activations makes them (staged_e4m3_layout: codes [rows][k], scales
// [k / 128][ld]); a non-finite value makes its group's scale NaN.
#include <algorithm>

#include <cuda_bf16.h>

#include "cuda/common/launch_pdl.cuh"
#include "cuda/fp8/fp8_act_quant.cuh"
#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

constexpr int kThreads = 256;

template <bool kE4m3>
__global__ void __launch_bounds__(kThreads) moe_stage_rows_kernel(MoeArgs a, std::int64_t scale_offset, std::int64_t scale_ld) {
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

  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32);
  if constexpr (kE4m3) {  // bf16 rows (the launcher's contract), k % 16 == 0
    std::uint8_t* const codes = static_cast<std::uint8_t*>(a.staged);  // staged_e4m3_layout
    float* const scales = reinterpret_cast<float*>(codes + scale_offset);
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + warp; i < total; i += warps) {
      const std::uint32_t r = a.rows[i];
      const std::int64_t t = r / a.top_k, s = r - t * a.top_k;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.in) + t * a.in_token_stride + s * a.in_slot_stride;
      for (std::int64_t g0 = 0; g0 < a.k; g0 += 128) {
        const std::int64_t l = g0 + 4 * lane;
        float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (l < a.k) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(src + l));
          const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
          f[0] = lo.x, f[1] = lo.y, f[2] = hi.x, f[3] = hi.y;
        }
        float amax = 0.0f;
        bool finite = true;
#pragma unroll
        for (int e = 0; e < 4; ++e) finite = finite && isfinite(f[e]), amax = fmaxf(amax, fabsf(f[e]));
        amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));  // >= 0: ordered as its bits
        finite = __all_sync(0xffffffffu, finite);
        const float sc = cuda_fp8::fp8_act_scale(amax, finite);
        if (lane == 0) scales[(g0 / 128) * scale_ld + i] = sc;
        if (l < a.k) {
          std::uint32_t w = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) w |= cuda_fp8::fp8_act_code(f[e], sc) << (8 * e);
          *reinterpret_cast<std::uint32_t*>(codes + i * a.k + l) = w;
        }
      }
    }
    return;
  }
  const std::int64_t vecs = a.k * static_cast<std::int64_t>(dtype_size(a.in_dtype)) / 16;  // per row
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

void launch_moe_stage_rows(const MoeArgs& a, StreamHandle stream, bool e4m3) {
  const std::string name = moe_stage_rows_kernel_name(a, e4m3);
  const std::int64_t routed = a.m * a.top_k;
  if (routed == 0) return;
  const std::int64_t row_bytes = a.k * static_cast<std::int64_t>(dtype_size(a.in_dtype));
  if (!a.staged || !a.counts || !a.rows || (!e4m3 && (row_bytes % 16 != 0 || a.staged_bytes < routed * row_bytes)))
    fail(ErrorCode::Internal, name, ": arguments outside the kernel's contract");
  if (e4m3 && (a.in_dtype != DType::BF16 || a.k % 16 != 0 || a.in_token_stride % 8 != 0 || a.in_slot_stride % 8 != 0 ||
               reinterpret_cast<std::uintptr_t>(a.in) % 16 != 0 || reinterpret_cast<std::uintptr_t>(a.staged) % 16 != 0 ||
               a.staged_bytes < staged_e4m3_layout(routed, a.k).bytes))
    fail(ErrorCode::Internal, name, ": arguments outside the quantizing kernel's contract");
  const dim3 grid(static_cast<unsigned>(moe_stage_rows_blocks(a)));
  auto* const kernel = e4m3 ? moe_stage_rows_kernel<true> : moe_stage_rows_kernel<false>;
  const StagedE4m3Layout lay = staged_e4m3_layout(routed, a.k);
  if (cuda_common::pdl_enabled())  // after moe_map of the same route on the stream
    cuda_common::launch_pdl(kernel, grid, dim3(kThreads), 0, stream, a, lay.scale_offset, lay.scale_ld);
  else
    kernel<<<grid, kThreads, 0, stream>>>(a, lay.scale_offset, lay.scale_ld);
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_moe
