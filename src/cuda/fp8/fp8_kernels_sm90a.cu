// matmul_fp8's sm_90 kernels: the streaming gemv instantiated with the e4m3 weight decoder (the
// hardware e4m3 -> f16x2 conversion) and the W8A8 operand preparation (per-token activation
// quantization for cuBLASLt's sm_90 FP8 scale modes).
#include <cuda_fp8.h>

#include <algorithm>
#include <limits>

#include "cuda/dense/gemv_wide_kernels.cuh"
#include "cuda/fp8/fp8_act_quant.cuh"
#include "cuda/fp8/fp8_kernels.hpp"

namespace llmm::cuda_fp8 {
namespace {

using cuda_dense::DenseArgs;
namespace dev = cuda_dense::dev;
namespace host = cuda_dense::host;

const char* kind_tag(Fp8ScaleKind k) { return fp8_scale_kind_name(k); }

constexpr int kQuantThreads = 256;

// 8 consecutive values of x as floats: one or two 16-byte loads when vec (16-byte aligned
// rows), else element by element.
template <class T>
__device__ __forceinline__ void load8(const T* p, bool vec, float (&f)[8]) {
  if (vec) {
    constexpr int V = dev::kVec16<T>;
#pragma unroll
    for (int q = 0; q < 8 / V; ++q) {
      float g[V];
      dev::unpack16<T>(dev::ldg16(p + q * V), g);
#pragma unroll
      for (int e = 0; e < V; ++e) f[q * V + e] = g[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = dev::to_f32(p[e]);
  }
}

__device__ __forceinline__ void store8_codes(std::uint8_t* dst, const float (&f)[8], float s) {
  std::uint32_t w[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e)
    w[e / 4] |= fp8_act_code(f[e], s) << (8 * (e % 4));
  *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
}

// Groups of 128 (the block kind): a half-warp per (token, group), 8 values a lane held in
// registers between the amax and the codes (x read once). Rows (group = k): a block per token,
// the amax reduced over the block, then the row read again (from L2) for the codes. k % 16 == 0
// (the route's gate), so every lane's 8 values lie in one group. Scales [group][m]. Tokens m_x
// to m - 1 are zero (the block kind's padding to m % 4 == 0): codes 0, scale 1. The grid's
// threads also write the weight scales cuBLASLt reads.
template <class T>
__global__ void __launch_bounds__(kQuantThreads)
    fp8_quantize_rows_kernel(const T* __restrict__ x, std::int64_t m_x, std::int64_t m, std::int64_t k, std::int64_t x_ld,
                             bool by_row, bool vec, std::uint8_t* __restrict__ codes, float* __restrict__ act_scales,
                             const float* __restrict__ w_scales_in, float* __restrict__ w_scales_out,
                             std::int64_t w_rows, std::int64_t w_cols, std::int64_t w_ld_out, bool w_broadcast) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (!by_row) {
    const std::int64_t groups = (k + 127) / 128;
    const std::int64_t units = m * groups;
    const std::int64_t warps = std::int64_t{gridDim.x} * (kQuantThreads / 32);
    const int h = lane & 15;
    // Warp-uniform loop (both halves shuffle together); a half past the end is idle.
    for (std::int64_t u0 = (std::int64_t{blockIdx.x} * (kQuantThreads / 32) + (threadIdx.x >> 5)) * 2; u0 < units;
         u0 += warps * 2) {
      const std::int64_t u = u0 + (lane >> 4);
      const std::int64_t i = u / groups, g = u - i * groups;
      const std::int64_t l = g * 128 + h * 8;
      const bool mine = u < units && l < k;
      float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (mine && i < m_x) load8(x + i * x_ld + l, vec, f);
      float amax = 0.0f;
      bool finite = true;
#pragma unroll
      for (int e = 0; e < 8; ++e) finite = finite && isfinite(f[e]), amax = fmaxf(amax, fabsf(f[e]));
      float bad = finite ? 0.0f : 1.0f;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) {  // within each half-warp
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        bad = fmaxf(bad, __shfl_xor_sync(0xffffffffu, bad, o));
      }
      const float s = fp8_act_scale(amax, bad == 0.0f);
      if (u < units && h == 0) act_scales[g * m + i] = s;
      if (mine) store8_codes(codes + i * k + l, f, s);
    }
  } else {
    __shared__ float red_amax[kQuantThreads / 32], red_bad[kQuantThreads / 32];
    for (std::int64_t i = blockIdx.x; i < m; i += gridDim.x) {  // block-uniform
      const T* row = x + i * x_ld;
      float amax = 0.0f, bad = 0.0f;
      for (std::int64_t l = std::int64_t{threadIdx.x} * 8; l < k && i < m_x; l += kQuantThreads * 8) {
        float f[8];
        load8(row + l, vec, f);
#pragma unroll
        for (int e = 0; e < 8; ++e) bad = isfinite(f[e]) ? bad : 1.0f, amax = fmaxf(amax, fabsf(f[e]));
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        bad = fmaxf(bad, __shfl_xor_sync(0xffffffffu, bad, o));
      }
      if (lane == 0) red_amax[threadIdx.x >> 5] = amax, red_bad[threadIdx.x >> 5] = bad;
      __syncthreads();
      amax = 0.0f, bad = 0.0f;
#pragma unroll
      for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, red_amax[w]), bad = fmaxf(bad, red_bad[w]);
      __syncthreads();  // red_* is reused by the next row
      const float s = fp8_act_scale(amax, bad == 0.0f);
      if (threadIdx.x == 0) act_scales[i] = s;
      for (std::int64_t l = std::int64_t{threadIdx.x} * 8; l < k; l += kQuantThreads * 8) {
        float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (i < m_x) load8(row + l, vec, f);
        store8_codes(codes + i * k + l, f, s);
      }
    }
  }
  // The weight scales cuBLASLt reads: w_rows x w_cols values into rows of pitch w_ld_out, or
  // (w_broadcast, the tensor kind) w_rows copies of the one scale.
  const std::int64_t threads = std::int64_t{gridDim.x} * kQuantThreads;
  const std::int64_t total = w_rows * w_cols;
  for (std::int64_t t = std::int64_t{blockIdx.x} * kQuantThreads + threadIdx.x; t < total; t += threads) {
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

std::string quantize_kernel_name(const detail::Fp8LaunchArgs& a, bool groups128) {
  return std::string("fp8_quantize_rows_") + std::string(dtype_name(a.dtype)) +
         (groups128 || a.kind == Fp8ScaleKind::Block128 ? "_g128" : "_row");
}

void launch_quantize(const detail::Fp8LaunchArgs& a, const detail::Fp8WorkspaceLayout& lay, StreamHandle s) {
  const std::string name = quantize_kernel_name(a, lay.act_groups128);
  const bool by_row = a.kind != Fp8ScaleKind::Block128 && !lay.act_groups128;
  if (a.k % 16 != 0) fail(ErrorCode::Internal, name, ": k ", a.k, " is not a multiple of 16");
  auto* codes = reinterpret_cast<std::uint8_t*>(a.workspace + lay.act_codes);
  auto* act_scales = reinterpret_cast<float*>(a.workspace + lay.act_scales);
  auto* w_out = reinterpret_cast<float*>(a.workspace + lay.w_scales);
  std::int64_t w_rows = 0, w_cols = 0, w_ld = 1;
  if (lay.act_groups128) {
    // no weight scales to stage (the engine reads the weight's own)
  } else if (a.kind == Fp8ScaleKind::Block128 && lay.w_scale_ld != (a.k + 127) / 128) {
    w_rows = (a.n + 127) / 128, w_cols = (a.k + 127) / 128, w_ld = lay.w_scale_ld;
  } else if (a.kind == Fp8ScaleKind::Tensor) {
    w_rows = a.n, w_cols = 1, w_ld = 1;
  }
  // 16-byte loads where x's base and rows allow them (8 values of T are 16 or 32 bytes).
  const std::size_t esz = dtype_size(a.dtype);
  const bool vec = (reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0) && (a.x_ld * static_cast<std::int64_t>(esz)) % 16 == 0;
  const std::int64_t m = lay.lt_m;  // rows a.m .. lt_m - 1: zero tokens (scale 1, codes 0)
  const std::int64_t units = by_row ? m : m * ((a.k + 127) / 128);
  const unsigned grid = std::max(by_row ? blocks_for(units, 1) : blocks_for(units, 2 * (kQuantThreads / 32)),
                                 blocks_for(w_rows * w_cols, kQuantThreads));
  host::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    fp8_quantize_rows_kernel<T><<<grid, kQuantThreads, 0, s>>>(static_cast<const T*>(a.x), a.m, m, a.k, a.x_ld, by_row, vec,
                                                              codes, act_scales, a.scales, w_out, w_rows, w_cols, w_ld,
                                                              a.kind == Fp8ScaleKind::Tensor);
  });
  host::check_launch(name);
}

}  // namespace llmm::cuda_fp8
