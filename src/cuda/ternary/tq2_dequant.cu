// Kernels of the tq2_dequant_lt route (see core/ternary/tq2_dequant_lt_plan.hpp for the route):
// memory-bound elementwise passes with 16-byte loads and fully coalesced 16-byte stores.
//   tq2_lt_absmax : per-block max |x| (finite elements), fixed-order block reduction.
//   tq2_lt_split  : every block reduces the partial maxima itself (no second pass, no atomics),
//                   then writes x * 2^-e as f16 hi (+ lo) and the GEMMs' scalars.
//   tq2_dequant   : codes staged through shared memory so that each thread reads 2 code bytes
//                   and stores the 8 f16 weights they hold as one 16-byte vector.
//   tq2_lt_scale  : bf16(alpha * f32) for the bf16 -> bf16 path.
//   tq2_rowscale  : (the tiled_sm90 routes) one block a row: its max |x|, then x * 2^-e(row) as
//                   f16 and 2^e(row): one kernel, and each row's scale depends on that row only.
#include "cuda/ternary/tq2_common.cuh"
#include "cuda/ternary/tq2_dequant.hpp"

#include <cfloat>

#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/vec16.hpp"

namespace llmm::cuda_ternary {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGrid = 4096;  // grid-stride passes: enough blocks to fill any current GPU

__device__ __forceinline__ float block_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, red[w]);
  return v;
}

__device__ __forceinline__ float finite_abs(float x) {
  const float a = fabsf(x);
  return a <= FLT_MAX ? a : 0.0f;  // NaN and Inf do not pick the scale (they propagate anyway)
}

// 8 consecutive elements of row `row` from column `col` (col % 8 == 0) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* x, std::int64_t ld, std::int64_t row, std::int64_t col, bool vec,
                                      float (&f)[8]) {
  const T* p = x + row * ld + col;
  if (vec) {
    if constexpr (sizeof(T) == 4) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
      cuda_dense::dev::unpack16<T>(dev::ldg16(p), f);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = dev::to_f32(p[e]);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) tq2_lt_absmax_kernel(const T* x, std::int64_t m, std::int64_t k,
                                                                  std::int64_t ld, bool vec, float* partial) {
  __shared__ float red[kThreads / 32];
  float mx = 0.0f;
  for (std::int64_t row = blockIdx.x; row < m; row += gridDim.x)
    for (std::int64_t col = 8 * static_cast<std::int64_t>(threadIdx.x); col < k; col += 8 * kThreads) {
      float f[8];
      load8(x, ld, row, col, vec, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) mx = fmaxf(mx, finite_abs(f[e]));
    }
  mx = block_max(mx, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = mx;
}

__device__ __forceinline__ std::uint32_t pack_half2(__half lo, __half hi) {
  return static_cast<std::uint32_t>(__half_as_ushort(lo)) | (static_cast<std::uint32_t>(__half_as_ushort(hi)) << 16);
}

template <class T, int PARTS>
__global__ void __launch_bounds__(kThreads) tq2_lt_split_kernel(const T* x, std::int64_t m, std::int64_t k,
                                                                 std::int64_t ld, bool vec, const float* partial,
                                                                 int blocks, __half* parts, std::size_t part_elems,
                                                                 float* scalars) {
  __shared__ float red[kThreads / 32];
  float g = 0.0f;
  for (int b = static_cast<int>(threadIdx.x); b < blocks; b += kThreads) g = fmaxf(g, partial[b]);
  g = block_max(g, red);
  int e = 0;
  if (g > 0.0f) e = min(max(ilogbf(g) - kTq2LtTopExp, kTq2LtMinExp), kTq2LtMaxExp);
  const float down = __int_as_float((127 - e) << 23);  // 2^-e, a normal float for e in [-115, 113]
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    scalars[0] = __int_as_float((127 + e) << 23);
    scalars[1] = __int_as_float((127 + e - kTq2LtLoShift) << 23);
    scalars[2] = 0.0f;
    scalars[3] = 1.0f;
  }
  const std::int64_t per_row = k / 8, items = m * per_row;
  for (std::int64_t it = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; it < items;
       it += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = it / per_row, col = (it - row * per_row) * 8;
    float f[8];
    load8(x, ld, row, col, vec, f);
    std::uint32_t hi[4], lo[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const float a = f[2 * p] * down, b = f[2 * p + 1] * down;  // exact: powers of two
      const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
      hi[p] = pack_half2(ha, hb);
      if constexpr (PARTS == 2) {
        // a - hi is exact in f32; an infinite a keeps its Inf in hi and adds nothing here.
        const float ra = isfinite(a) ? a - __half2float(ha) : 0.0f, rb = isfinite(b) ? b - __half2float(hb) : 0.0f;
        const float up = static_cast<float>(1 << kTq2LtLoShift);
        lo[p] = pack_half2(__float2half_rn(ra * up), __float2half_rn(rb * up));
      }
    }
    __half* dst = parts + row * k + col;
    *reinterpret_cast<uint4*>(dst) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    if constexpr (PARTS == 2) *reinterpret_cast<uint4*>(dst + part_elems) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// One block a row (grid-stride): the row's finite max |x| in a first pass, e from it as the split
// kernel takes it from the global max, then the row as f16(x * 2^-e) and alpha[row] = 2^e. The
// second pass reads the row again (from L1/L2: it was just read).
template <class T>
__global__ void __launch_bounds__(kThreads) tq2_rowscale_f16_kernel(const T* x, std::int64_t m, std::int64_t k,
                                                                     std::int64_t ld, bool vec, __half* out,
                                                                     float* alpha) {
  __shared__ float red[kThreads / 32];
  for (std::int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    float mx = 0.0f;
    for (std::int64_t col = 8 * static_cast<std::int64_t>(threadIdx.x); col < k; col += 8 * kThreads) {
      float f[8];
      load8(x, ld, row, col, vec, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) mx = fmaxf(mx, finite_abs(f[e]));
    }
    mx = block_max(mx, red);
    int e = 0;
    if (mx > 0.0f) e = min(max(ilogbf(mx) - kTq2LtTopExp, kTq2LtMinExp), kTq2LtMaxExp);
    const float down = __int_as_float((127 - e) << 23);  // 2^-e, a normal float for e in [-115, 113]
    if (threadIdx.x == 0) alpha[row] = __int_as_float((127 + e) << 23);
    for (std::int64_t col = 8 * static_cast<std::int64_t>(threadIdx.x); col < k; col += 8 * kThreads) {
      float f[8];
      load8(x, ld, row, col, vec, f);
      std::uint32_t h[4];
#pragma unroll
      for (int p = 0; p < 4; ++p)  // exact scaling by a power of two, then one rounding to f16
        h[p] = pack_half2(__float2half_rn(f[2 * p] * down), __float2half_rn(f[2 * p + 1] * down));
      *reinterpret_cast<uint4*>(out + row * k + col) = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

constexpr int kDequantBytes = 16 * kThreads;  // code bytes per block (16384 weights)

// One block: 4096 code bytes into shared memory with 16-byte loads, then each thread turns
// 2-byte units (8 codes, all of one 128-group) into one 16-byte f16 store; consecutive threads
// store consecutive 16 bytes.
__global__ void __launch_bounds__(kThreads) tq2_dequant_f16_kernel(const std::uint8_t* codes,
                                                                    const std::uint16_t* scales, std::int64_t total,
                                                                    __half* w, bool codes_vec) {
  __shared__ uint4 stage[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kDequantBytes;
  const std::int64_t mine = base + 16 * tid;
  if (mine < total) stage[tid] = codes_vec ? dev::ldg16(codes + mine) : dev::load16_bytes(codes + mine);
  __syncthreads();
  const std::uint16_t* units = reinterpret_cast<const std::uint16_t*>(stage);
#pragma unroll 4
  for (int i = 0; i < kDequantBytes / 2 / kThreads; ++i) {
    const int u = tid + i * kThreads;
    const std::int64_t byte = base + 2 * u;
    if (byte >= total) break;
    // Values of codes 0..3 (-s, 0, +s, +2s; 3 is never stored) as a 4 x 16-bit table.
    const std::uint32_t s = __ldg(scales + (byte >> 5));
    const std::uint32_t two = __half_as_ushort(__float2half_rn(2.0f * dev::f16_bits_to_f32(static_cast<std::uint16_t>(s))));
    const std::uint64_t lut = static_cast<std::uint64_t>(s ^ 0x8000u) | (static_cast<std::uint64_t>(s) << 32) |
                              (static_cast<std::uint64_t>(two) << 48);
    const std::uint32_t c = units[u];
    std::uint32_t out[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const std::uint32_t c0 = (c >> (4 * p)) & 3u, c1 = (c >> (4 * p + 2)) & 3u;
      out[p] = static_cast<std::uint32_t>((lut >> (16 * c0)) & 0xffffu) |
               (static_cast<std::uint32_t>((lut >> (16 * c1)) & 0xffffu) << 16);
    }
    *reinterpret_cast<uint4*>(w + 4 * byte) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

__global__ void __launch_bounds__(kThreads) tq2_lt_scale_bf16_kernel(const float* src, std::int64_t src_ld,
                                                                      const float* alpha, __nv_bfloat16* dst,
                                                                      std::int64_t dst_ld, std::int64_t m,
                                                                      std::int64_t cols, bool dst_vec) {
  const float a = *alpha;
  const std::int64_t groups = (cols + 7) / 8, items = m * groups;
  for (std::int64_t it = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; it < items;
       it += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = it / groups, col = (it - row * groups) * 8;
    const float* s = src + row * src_ld + col;  // src_ld % 4 == 0: 16-byte aligned, in the row's padding
    const float4 v0 = *reinterpret_cast<const float4*>(s), v1 = *reinterpret_cast<const float4*>(s + 4);
    const float f[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    __nv_bfloat16* d = dst + row * dst_ld + col;
    if (dst_vec && col + 8 <= cols) {
      std::uint32_t o[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) o[p] = dev::pack_bf16x2(a * f[2 * p], a * f[2 * p + 1]);
      *reinterpret_cast<uint4*>(d) = make_uint4(o[0], o[1], o[2], o[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (col + e < cols) d[e] = __float2bfloat16_rn(a * f[e]);
    }
  }
}

unsigned grid_for(std::int64_t items) {
  const std::int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

bool input_vec(const Tq2LtInput& x) {
  return detail::aligned16(x.data) && detail::bytes16(x.ld, x.dtype);
}

}  // namespace

void launch_tq2_lt_absmax(const Tq2LtInput& x, float* partial, int blocks, StreamHandle stream) {
  const bool vec = input_vec(x);
  if (x.dtype == DType::F32)
    tq2_lt_absmax_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld, vec,
                                                                 partial);
  else
    tq2_lt_absmax_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x.data), x.m, x.k, x.ld, vec, partial);
  cuda_dense::host::check_launch("tq2_lt_absmax");
}

void launch_tq2_lt_split(const Tq2LtInput& x, const float* partial, int blocks, int parts, void* parts_base,
                         std::size_t part_bytes, float* scalars, StreamHandle stream) {
  const bool vec = input_vec(x);
  const unsigned grid = grid_for(x.m * (x.k / 8));
  __half* p = static_cast<__half*>(parts_base);
  const std::size_t part_elems = part_bytes / 2;
  if (x.dtype == DType::F32 && parts == 2)
    tq2_lt_split_kernel<float, 2><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld, vec,
                                                                 partial, blocks, p, part_elems, scalars);
  else if (x.dtype == DType::F32)
    tq2_lt_split_kernel<float, 1><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld, vec,
                                                                 partial, blocks, p, part_elems, scalars);
  else
    tq2_lt_split_kernel<__nv_bfloat16, 1><<<grid, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x.data), x.m, x.k, x.ld, vec, partial, blocks, p, part_elems, scalars);
  cuda_dense::host::check_launch("tq2_lt_split");
}

void launch_tq2_rowscale_f16(const Tq2LtInput& x, void* out, float* alpha, StreamHandle stream) {
  const bool vec = input_vec(x);
  const unsigned grid = static_cast<unsigned>(x.m < kMaxGrid ? (x.m > 0 ? x.m : 1) : kMaxGrid);
  __half* o = static_cast<__half*>(out);
  if (x.dtype == DType::F32)
    tq2_rowscale_f16_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld, vec,
                                                                  o, alpha);
  else
    tq2_rowscale_f16_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x.data), x.m,
                                                                          x.k, x.ld, vec, o, alpha);
  cuda_dense::host::check_launch("tq2_rowscale_f16");
}

void launch_tq2_dequant_f16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t row0,
                            std::int64_t rows, std::int64_t k, void* w, StreamHandle stream) {
  const std::uint8_t* c = codes + row0 * (k / 4);
  const std::uint16_t* s = scales + row0 * (k / 128);
  const std::int64_t total = rows * (k / 4);  // a multiple of 32: whole 128-groups
  const std::int64_t blocks = (total + kDequantBytes - 1) / kDequantBytes;
  if (blocks > std::int64_t{0x7fffffff}) fail(ErrorCode::Internal, "tq2_dequant_f16: ", blocks, " blocks exceed one grid");
  tq2_dequant_f16_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(c, s, total, static_cast<__half*>(w),
                                                                                detail::aligned16(c));
  cuda_dense::host::check_launch("tq2_dequant_f16");
}

void launch_tq2_lt_scale_bf16(const float* src, std::int64_t src_ld, const float* alpha, void* dst, std::int64_t dst_ld,
                              std::int64_t m, std::int64_t cols, StreamHandle stream) {
  const bool dst_vec = detail::aligned16(dst) && detail::bytes16(dst_ld, DType::BF16);
  tq2_lt_scale_bf16_kernel<<<grid_for(m * ((cols + 7) / 8)), kThreads, 0, stream>>>(
      src, src_ld, alpha, static_cast<__nv_bfloat16*>(dst), dst_ld, m, cols, dst_vec);
  cuda_dense::host::check_launch("tq2_lt_scale_bf16");
}

}  // namespace llmm::cuda_ternary
