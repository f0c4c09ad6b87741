// matmul_fp8's sm_90 kernels: the streaming gemv instantiated with the e4m3 weight decoder (the
// hardware e4m3 -> f16x2 conversion) and the W8A8 operand preparation (per-token activation
// quantization for cuBLASLt's sm_90 FP8 scale modes).
#include <cuda_fp8.h>

#include <algorithm>
#include <limits>

#include "cuda/dense/gemv_wide_kernels.cuh"
#include "cuda/fp8/fp8_kernels.hpp"

namespace llmm::cuda_fp8 {
namespace {

using cuda_dense::DenseArgs;
namespace dev = cuda_dense::dev;
namespace host = cuda_dense::host;

constexpr int kThreads = 128;

const char* kind_tag(Fp8ScaleKind k) { return fp8_scale_kind_name(k); }

// One warp per (token, group): the group's amax (NaN when a value is not finite), its scale,
// then every code. Scales [group][m]. Extra warps of the grid also write the weight scales.
template <class T>
__global__ void __launch_bounds__(kThreads)
    fp8_quantize_rows_kernel(const T* __restrict__ x, std::int64_t m, std::int64_t k, std::int64_t x_ld,
                             std::int64_t group, std::uint8_t* __restrict__ codes, float* __restrict__ act_scales,
                             const float* __restrict__ w_scales_in, float* __restrict__ w_scales_out,
                             std::int64_t w_rows, std::int64_t w_cols, std::int64_t w_ld_out, bool w_broadcast) {
  const std::int64_t groups = (k + group - 1) / group;
  const std::int64_t units = m * groups;
  const std::int64_t warps = std::int64_t{gridDim.x} * (kThreads / 32);
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (std::int64_t u = std::int64_t{blockIdx.x} * (kThreads / 32) + (threadIdx.x >> 5); u < units; u += warps) {
    const std::int64_t i = u / groups, g = u - i * groups;
    const std::int64_t l0 = g * group, l1 = min(k, l0 + group);
    const T* row = x + i * x_ld;
    float amax = 0.0f;
    bool finite = true;
    for (std::int64_t l = l0 + lane; l < l1; l += 32) {
      const float v = dev::to_f32(row[l]);
      finite = finite && isfinite(v);
      amax = fmaxf(amax, fabsf(v));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    finite = __all_sync(0xffffffffu, finite);
    const float s = !finite ? __int_as_float(0x7fc00000)
                    : amax == 0.0f ? 1.0f
                                   : fmaxf(amax / 448.0f, std::numeric_limits<float>::denorm_min());
    if (lane == 0) act_scales[g * m + i] = s;
    for (std::int64_t l = l0 + lane; l < l1; l += 32)
      codes[i * k + l] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(dev::to_f32(row[l]) / s, __NV_SATFINITE, __NV_E4M3));
  }
  // The weight scales cuBLASLt reads: w_rows x w_cols values into rows of pitch w_ld_out, or
  // (w_broadcast, the tensor kind) w_rows copies of the one scale.
  const std::int64_t threads = std::int64_t{gridDim.x} * kThreads;
  const std::int64_t total = w_rows * w_cols;
  for (std::int64_t t = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; t < total; t += threads) {
    const std::int64_t r = t / w_cols, c = t - r * w_cols;
    w_scales_out[r * w_ld_out + c] = w_broadcast ? w_scales_in[0] : w_scales_in[r * w_cols + c];
  }
}

template <class T, class Dec, int NV>
void launch_nv(const cuda_dense::GemvWideParams& p, const Dec& dec, dim3 grid, StreamHandle s) {
  cuda_dense::gemv_wide_kernel<T, Dec, NV><<<grid, cuda_dense::kGemvWideThreads, 0, s>>>(p, dec);
}

unsigned blocks_for(std::int64_t work_items, std::int64_t per_block) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((work_items + per_block - 1) / per_block, 1, 132 * 32));
}

}  // namespace

std::string gemv_e4m3_kernel_name(const detail::Fp8LaunchArgs& a, int vecs, int k_lanes) {
  return std::string("gemv_e4m3_") + std::string(dtype_name(a.dtype)) + "_v" + std::to_string(vecs) + "_kl" + std::to_string(k_lanes) + "_" +
         kind_tag(a.kind);
}

void launch_gemv_e4m3(const detail::Fp8LaunchArgs& a, int vecs, int k_lanes, int grid_x, StreamHandle s) {
  const std::string name = gemv_e4m3_kernel_name(a, vecs, k_lanes);
  const bool ok = (vecs == 1 || vecs == 2 || vecs == 4 || (vecs == 8 && a.dtype != DType::F32)) && (k_lanes == 32 || k_lanes == 64 || k_lanes == 128) &&
                  grid_x >= 1 && std::int64_t{grid_x} * vecs >= a.m && a.k % 16 == 0 && a.m >= 1 && a.n >= 1;
  if (!ok) fail(ErrorCode::Internal, name, ": configuration does not fit m ", a.m, " n ", a.n, " k ", a.k);
  DenseArgs g;
  g.dtype = a.dtype, g.batch = 1, g.m = a.m, g.n = a.n, g.k = a.k;
  g.a = a.x, g.a_ld = a.x_ld, g.b = a.codes, g.b_ld = a.w_ld, g.b_trans = true, g.c = a.y, g.c_ld = a.y_ld;
  const cuda_dense::GemvWideParams p{g, grid_x, k_lanes};
  const int rows_per_block = (128 / k_lanes) * cuda_dense::kGemvWideRowsPerWarp;
  const dim3 grid(static_cast<unsigned>(grid_x),
                  static_cast<unsigned>(std::min<std::int64_t>((a.n + rows_per_block - 1) / rows_per_block, host::kMaxGridYZ)));
  const std::int64_t kb = (a.k + 127) / 128;
  host::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto go = [&](auto dec) {
      using D = decltype(dec);
      switch (vecs) {
        case 1: launch_nv<T, D, 1>(p, dec, grid, s); break;
        case 2: launch_nv<T, D, 2>(p, dec, grid, s); break;
        case 4: launch_nv<T, D, 4>(p, dec, grid, s); break;
        default:
          if constexpr (!std::is_same_v<T, float>) launch_nv<T, D, 8>(p, dec, grid, s);  // f32: at most 4 (planner)
          break;
      }
    };
    if (a.kind == Fp8ScaleKind::Block128)
      go(cuda_dense::GemvWeightsE4m3<true>{a.scales, a.kind, kb});
    else
      go(cuda_dense::GemvWeightsE4m3<false>{a.scales, a.kind, kb});
  });
  host::check_launch(name);
}

std::string quantize_kernel_name(const detail::Fp8LaunchArgs& a) {
  return std::string("fp8_quantize_rows_") + std::string(dtype_name(a.dtype)) + (a.kind == Fp8ScaleKind::Block128 ? "_g128" : "_row");
}

void launch_quantize(const detail::Fp8LaunchArgs& a, const detail::Fp8WorkspaceLayout& lay, StreamHandle s) {
  const std::string name = quantize_kernel_name(a);
  const std::int64_t group = a.kind == Fp8ScaleKind::Block128 ? 128 : a.k;
  auto* codes = reinterpret_cast<std::uint8_t*>(a.workspace + lay.act_codes);
  auto* act_scales = reinterpret_cast<float*>(a.workspace + lay.act_scales);
  auto* w_out = reinterpret_cast<float*>(a.workspace + lay.w_scales);
  std::int64_t w_rows = 0, w_cols = 0, w_ld = 1;
  if (a.kind == Fp8ScaleKind::Block128 && lay.w_scale_ld != (a.k + 127) / 128) {
    w_rows = (a.n + 127) / 128, w_cols = (a.k + 127) / 128, w_ld = lay.w_scale_ld;
  } else if (a.kind == Fp8ScaleKind::Tensor) {
    w_rows = a.n, w_cols = 1, w_ld = 1;
  }
  const std::int64_t units = a.m * ((a.k + group - 1) / group);
  const unsigned grid = std::max(blocks_for(units, kThreads / 32), blocks_for(w_rows * w_cols, kThreads));
  host::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    fp8_quantize_rows_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a.m, a.k, a.x_ld, group, codes,
                                                         act_scales, a.scales, w_out, w_rows, w_cols, w_ld,
                                                         a.kind == Fp8ScaleKind::Tensor);
  });
  host::check_launch(name);
}

}  // namespace llmm::cuda_fp8
