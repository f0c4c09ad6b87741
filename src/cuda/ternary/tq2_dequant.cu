// Kernels of the tq2_dequant_lt route (see core/ternary/tq2_dequant_lt_plan.hpp for the route):
// memory-bound elementwise passes with 16-byte loads and fully coalesced 16-byte stores.
//   tq2_rowscale  : one block a row: its max |x|, then x * 2^-e(row) as f16 (and, for f32 Exact,
//                   the f16 remainder) and 2^e(row): one kernel, each row's scale from that row
//                   only (the tiled_sm90 routes and tq2_dequant_lt); the experts' staging copy
//                   (tq2_rowscale_stage) does the same a warp a row, in expert order.
//   tq2_dequant   : codes staged through shared memory so that each thread reads 2 code bytes
//                   and stores the 8 f16 weights they hold as one 16-byte vector.
//   tq2_lt_scale_rows : out[i][j] = alpha[i] * D[i][j] after tq2_dequant_lt's GEMMs (f32 in
//                   place, or bf16 from the f32 temp).
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

// 8 consecutive elements of a row from column `col` (col % 8 == 0) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* row, std::int64_t col, bool vec, float (&f)[8]) {
  const T* p = row + col;
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

__device__ __forceinline__ std::uint32_t pack_half2(__half lo, __half hi) {
  return static_cast<std::uint32_t>(__half_as_ushort(lo)) | (static_cast<std::uint32_t>(__half_as_ushort(hi)) << 16);
}

// One block, one row x[0 .. k): its finite max |x| in a first pass, e from it
// (e = clamp(ilogb(max) - 14, -115, 113), 0 for a row without a finite nonzero), then the row as
// hi = f16(x * 2^-e) and, PARTS == 2, lo = f16((x * 2^-e - hi) * 2^11) (the f32 Exact remainder)
// into out[0 .. k) (and out[part_elems ..]), and *alpha = 2^e. The second pass reads the row
// again (from L1/L2: it was just read). Every thread of the block calls it (block_max syncs).
template <class T, int PARTS>
__device__ __forceinline__ void scale_row(const T* x, std::int64_t k, bool vec, __half* out, std::size_t part_elems,
                                          float* alpha, float* red) {
  float mx = 0.0f;
  for (std::int64_t col = 8 * static_cast<std::int64_t>(threadIdx.x); col < k; col += 8 * kThreads) {
    float f[8];
    load8(x, col, vec, f);
#pragma unroll
    for (int e = 0; e < 8; ++e) mx = fmaxf(mx, finite_abs(f[e]));
  }
  mx = block_max(mx, red);
  int e = 0;
  if (mx > 0.0f) e = min(max(ilogbf(mx) - kTq2LtTopExp, kTq2LtMinExp), kTq2LtMaxExp);
  const float down = __int_as_float((127 - e) << 23);  // 2^-e, a normal float for e in [-115, 113]
  if (threadIdx.x == 0) *alpha = __int_as_float((127 + e) << 23);
  for (std::int64_t col = 8 * static_cast<std::int64_t>(threadIdx.x); col < k; col += 8 * kThreads) {
    float f[8];
    load8(x, col, vec, f);
    std::uint32_t h[4], l[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {  // exact scaling by a power of two, then one rounding to f16
      const float a = f[2 * p] * down, b = f[2 * p + 1] * down;
      const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
      h[p] = pack_half2(ha, hb);
      if constexpr (PARTS == 2) {
        // a - hi is exact in f32; an infinite a keeps its Inf in hi and adds nothing here.
        const float ra = isfinite(a) ? a - __half2float(ha) : 0.0f, rb = isfinite(b) ? b - __half2float(hb) : 0.0f;
        const float up = static_cast<float>(1 << kTq2LtLoShift);
        l[p] = pack_half2(__float2half_rn(ra * up), __float2half_rn(rb * up));
      }
    }
    *reinterpret_cast<uint4*>(out + col) = make_uint4(h[0], h[1], h[2], h[3]);
    if constexpr (PARTS == 2) *reinterpret_cast<uint4*>(out + part_elems + col) = make_uint4(l[0], l[1], l[2], l[3]);
  }
}

// One block a row (grid-stride) of x [m, k], rows ld apart, into [m][k] f16 part(s).
template <class T, int PARTS>
__global__ void __launch_bounds__(kThreads) tq2_rowscale_f16_kernel(const T* x, std::int64_t m, std::int64_t k,
                                                                     std::int64_t ld, bool vec, __half* out,
                                                                     std::size_t part_elems, float* alpha) {
  __shared__ float red[kThreads / 32];
  for (std::int64_t row = blockIdx.x; row < m; row += gridDim.x)
    scale_row<T, PARTS>(x + row * ld, k, vec, out + row * k, part_elems, alpha + row, red);
}

// This lane's 8-element chunks of x[0 .. k) (a warp reads 256 consecutive elements a step),
// kBatch loads in flight before any is used: fn(col, f) for each chunk, in order.
template <int kBatch, class T, class Fn>
__device__ __forceinline__ void warp_row_chunks(const T* x, std::int64_t k, bool vec, int lane, Fn&& fn) {
  for (std::int64_t c0 = 8 * lane; c0 < k; c0 += 8 * 32 * kBatch) {
    float f[kBatch][8];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (c0 + 8 * 32 * b < k) load8(x, c0 + 8 * 32 * b, vec, f[b]);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (c0 + 8 * 32 * b < k) fn(c0 + 8 * 32 * b, f[b]);
  }
}

// scale_row's result from one warp (no block barrier), for many short rows: four chunk loads in
// flight a lane in both passes, the max by shuffles. The same e, the same roundings: bitwise what
// scale_row<T, 1> writes.
template <class T>
__device__ __forceinline__ void scale_row_warp(const T* x, std::int64_t k, bool vec, __half* out, float* alpha, int lane) {
  float mx = 0.0f;
  warp_row_chunks<4>(x, k, vec, lane, [&](std::int64_t, const float(&f)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) mx = fmaxf(mx, finite_abs(f[e]));
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  int e = 0;
  if (mx > 0.0f) e = min(max(ilogbf(mx) - kTq2LtTopExp, kTq2LtMinExp), kTq2LtMaxExp);
  const float down = __int_as_float((127 - e) << 23);
  if (lane == 0) *alpha = __int_as_float((127 + e) << 23);
  warp_row_chunks<4>(x, k, vec, lane, [&](std::int64_t col, const float(&f)[8]) {
    std::uint32_t h[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) h[p] = pack_half2(__float2half_rn(f[2 * p] * down), __float2half_rn(f[2 * p + 1] * down));
    *reinterpret_cast<uint4*>(out + col) = make_uint4(h[0], h[1], h[2], h[3]);
  });
}

// The same over routed rows in expert order: staged row i (i < sum(counts), after moe_map on the
// same stream) is the input row of rows[i] = token * top_k + slot, scaled by its own 2^e into
// staged[i][0 .. k) with alpha[i]. One warp a row (up to 32768 routed rows at m = 4096, top 8:
// one block a row, two barriers each, measured ~160 us over the f16 input's copy there). Blocks
// first sum counts[] themselves (no host sync).
template <class T>
__global__ void __launch_bounds__(kThreads) tq2_rowscale_stage_kernel(const T* x, Tq2RowGather g, std::int64_t k,
                                                                       bool vec, __half* staged, float* alpha) {
  __shared__ std::uint32_t sums[kThreads / 32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  std::uint32_t part = 0;
  for (int e = static_cast<int>(threadIdx.x); e < g.n_experts; e += kThreads) part += g.counts[e];
  part = __reduce_add_sync(0xffffffffu, part);
  if (lane == 0) sums[warp] = part;
  __syncthreads();
  std::uint32_t total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += sums[w];
  constexpr int kWarps = kThreads / 32;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * kWarps) {
    const std::uint32_t r = g.rows[i];
    const std::int64_t t = r / static_cast<std::uint32_t>(g.top_k), sl = r - t * g.top_k;
    scale_row_warp<T>(x + t * g.token_stride + sl * g.slot_stride, k, vec, staged + i * k, alpha + i, lane);
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

__device__ __forceinline__ void store1(float* d, float v) { *d = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* d, float v) { *d = __float2bfloat16_rn(v); }

// dst[i][j] = OutT(alpha[i] * src[i][j]): alpha[i] a power of two, so an f32 dst is exact (or
// the correctly rounded underflow/overflow) and a bf16 dst rounds once. src may be dst (f32, in
// place): each element is read and written by the same thread.
template <class OutT>
__global__ void __launch_bounds__(kThreads) tq2_lt_scale_rows_kernel(const float* src, std::int64_t src_ld,
                                                                      const float* alpha, OutT* dst,
                                                                      std::int64_t dst_ld, std::int64_t m,
                                                                      std::int64_t cols, bool vec) {
  const std::int64_t groups = (cols + 7) / 8, items = m * groups;
  for (std::int64_t it = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; it < items;
       it += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = it / groups, col = (it - row * groups) * 8;
    const float a = __ldg(alpha + row);
    const float* s = src + row * src_ld + col;
    OutT* d = dst + row * dst_ld + col;
    if (vec && col + 8 <= cols) {  // src and dst rows 16-byte aligned
      const float4 v0 = *reinterpret_cast<const float4*>(s), v1 = *reinterpret_cast<const float4*>(s + 4);
      if constexpr (sizeof(OutT) == 4) {
        *reinterpret_cast<float4*>(d) = make_float4(a * v0.x, a * v0.y, a * v0.z, a * v0.w);
        *reinterpret_cast<float4*>(d + 4) = make_float4(a * v1.x, a * v1.y, a * v1.z, a * v1.w);
      } else {
        *reinterpret_cast<uint4*>(d) = make_uint4(dev::pack_bf16x2(a * v0.x, a * v0.y), dev::pack_bf16x2(a * v0.z, a * v0.w),
                                                  dev::pack_bf16x2(a * v1.x, a * v1.y), dev::pack_bf16x2(a * v1.z, a * v1.w));
      }
    } else {
      for (int e = 0; e < 8 && col + e < cols; ++e) store1(d + e, a * s[e]);
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

void launch_tq2_rowscale_f16(const Tq2LtInput& x, int parts, void* out, std::size_t part_bytes, float* alpha,
                             StreamHandle stream) {
  const bool vec = input_vec(x);
  const unsigned grid = static_cast<unsigned>(x.m < kMaxGrid ? (x.m > 0 ? x.m : 1) : kMaxGrid);
  __half* o = static_cast<__half*>(out);
  const std::size_t pe = part_bytes / 2;
  if (parts == 2 && x.dtype == DType::F32)
    tq2_rowscale_f16_kernel<float, 2><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld,
                                                                     vec, o, pe, alpha);
  else if (parts == 1 && x.dtype == DType::F32)
    tq2_rowscale_f16_kernel<float, 1><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.m, x.k, x.ld,
                                                                     vec, o, pe, alpha);
  else if (parts == 1 && x.dtype == DType::BF16)
    tq2_rowscale_f16_kernel<__nv_bfloat16, 1><<<grid, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x.data), x.m, x.k, x.ld, vec, o, pe, alpha);
  else
    fail(ErrorCode::Internal, "tq2_rowscale_f16: ", parts, " parts of a ", dtype_name(x.dtype), " input");
  cuda_dense::host::check_launch("tq2_rowscale_f16");
}

void launch_tq2_rowscale_stage_f16(const void* x, DType dtype, std::int64_t k, const Tq2RowGather& g, void* staged,
                                   float* alpha, StreamHandle stream) {
  if (g.routed <= 0) return;
  const bool vec = detail::aligned16(x) && detail::bytes16(g.token_stride, dtype) && detail::bytes16(g.slot_stride, dtype);
  const std::int64_t blocks = (g.routed + kThreads / 32 - 1) / (kThreads / 32);  // a warp a row
  const unsigned grid = static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
  __half* o = static_cast<__half*>(staged);
  if (dtype == DType::F32)
    tq2_rowscale_stage_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), g, k, vec, o, alpha);
  else if (dtype == DType::BF16)
    tq2_rowscale_stage_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), g, k,
                                                                            vec, o, alpha);
  else
    fail(ErrorCode::Internal, "tq2_rowscale_stage_f16: a ", dtype_name(dtype), " input");
  cuda_dense::host::check_launch("tq2_rowscale_stage_f16");
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

void launch_tq2_lt_scale_rows(const float* src, std::int64_t src_ld, const float* alpha, void* dst, DType dst_dtype,
                              std::int64_t dst_ld, std::int64_t m, std::int64_t cols, StreamHandle stream) {
  const bool vec = detail::aligned16(src) && detail::bytes16(src_ld, DType::F32) && detail::aligned16(dst) &&
                   detail::bytes16(dst_ld, dst_dtype);
  const unsigned grid = grid_for(m * ((cols + 7) / 8));
  if (dst_dtype == DType::F32)
    tq2_lt_scale_rows_kernel<float><<<grid, kThreads, 0, stream>>>(src, src_ld, alpha, static_cast<float*>(dst), dst_ld,
                                                                   m, cols, vec);
  else if (dst_dtype == DType::BF16)
    tq2_lt_scale_rows_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        src, src_ld, alpha, static_cast<__nv_bfloat16*>(dst), dst_ld, m, cols, vec);
  else
    fail(ErrorCode::Internal, "tq2_lt_scale_rows: ", dtype_name(dst_dtype), " output");
  cuda_dense::host::check_launch("tq2_lt_scale_rows");
}

}  // namespace llmm::cuda_ternary
