// matmul_fp8's streaming decode on tensor cores: y [m, n] = x [m, k] . dequant(w)^T for m <= 16
// with 16-bit x, e4m3 weights widened exactly to x's type in registers and fed to mma.sync
// m16n8k16 (weights as A: 16 rows a warp tile; x as B: 8 or 16 vectors), f32 accumulators. The
// FMA decoder (gemv_wide) spends 2 m flops a weight on the CUDA cores and is compute-bound from
// m ~ 4; here a weight costs a conversion and 1/128 of an mma whatever m is, so the weights
// stream at the copy limit up to m 16.
//
// No shared-memory staging: the dot product does not care in which order k is summed, so the mma
// tile's logical k is a permutation of the physical k under which each lane's A and B registers
// come straight from its own 16-byte loads. Lane (g = lane / 4, q = lane % 4) loads 16
// consecutive codes of rows g and g + 8, and 16 consecutive values of vector g (and g + 8), at
// physical k = 64 r + 16 q of round r; mma step s (0..3) of the round uses the lane's values
// 4 s .. 4 s + 3 as its logical k {2q, 2q + 1} (registers a0, a1, b0) and {2q + 8, 2q + 9} (a2,
// a3, b1). Every lane of a quad maps logical k to the same physical k, as the mma requires.
//
// Block scales: a round's 64 k lie in one 128-deep block, and a 16-row tile in one 128-row block,
// so each round is accumulated in its own registers and added to the total times its one scale
// (the total stays f32; nothing crosses a block inside the tensor core). Channel and tensor
// scales multiply the row totals. K is split over kw warps of a block; their partial sums are
// added in warp order (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/common/mma_sync.cuh"
#include "cuda/dense/dense_common.cuh"
#include "cuda/fp8/fp8_kernels.hpp"

namespace llmm::cuda_fp8 {
namespace {

namespace host = cuda_dense::host;

constexpr int kMmaThreads = 256;  // 8 warps
constexpr int kRoundK = 64;       // physical k a warp consumes per round
constexpr int kUnroll = 4;        // rounds whose loads are in flight together

struct GemvMmaParams {
  const std::uint8_t* codes;  // [n, k], row stride w_ld
  std::int64_t w_ld;
  const float* scales;
  Fp8ScaleKind kind;
  std::int64_t k_blocks;  // ceil(k / 128): the block kind's scale row length
  const void* x;          // [m, k] of T, row stride x_ld
  std::int64_t x_ld;
  void* y;  // [m, n] of T, row stride y_ld
  std::int64_t y_ld;
  std::int64_t m, n, k;
  int kw;  // warps along K per 16-row tile (1, 2, 4, 8)
};

// Two e4m3 codes (the low and high byte of c) as a packed pair of T, exactly (every e4m3 value is
// an f16 and a bf16; NaN stays NaN).
template <class T>
__device__ __forceinline__ std::uint32_t widen2(std::uint32_t c) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(c & 0xffffu), __NV_E4M3);
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const std::uint32_t*>(&b);
  }
}

template <class T, int NT, bool kBlock>
__global__ void __launch_bounds__(kMmaThreads) gemv_mma_e4m3_kernel(GemvMmaParams p) {
  constexpr int kWarps = kMmaThreads / 32;
  __shared__ float partial[kWarps][16][NT * 8];

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, q = lane & 3;
  const int kw = p.kw, sub = warp % kw, tile_in_block = warp / kw, tiles_per_block = kWarps / kw;
  const std::int64_t row0 = (std::int64_t{blockIdx.x} * tiles_per_block + tile_in_block) * 16;
  const bool tile_live = row0 < p.n;  // warp-uniform; a dead tile still joins the block's barriers

  const std::int64_t ra = min(row0 + g, p.n - 1), rb = min(row0 + g + 8, p.n - 1);  // clamp tail rows
  const std::uint8_t* wa = p.codes + ra * p.w_ld;
  const std::uint8_t* wb = p.codes + rb * p.w_ld;
  const T* xv[NT];
  bool xlive[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const std::int64_t v = t * 8 + g;
    xlive[t] = v < p.m;
    xv[t] = static_cast<const T*>(p.x) + min(v, p.m - 1) * p.x_ld;
  }

  float total[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) total[t][e] = 0.0f;

  const std::int64_t rounds = (p.k + kRoundK - 1) / kRoundK;
  if (tile_live) {
    for (std::int64_t r0 = sub; r0 < rounds; r0 += std::int64_t{kw} * kUnroll) {
      // The weights (DRAM) of kUnroll rounds in flight first; each round's x (L1/L2: every warp
      // reads the same vectors) just before its mma.
      uint4 av[kUnroll], bv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t l = (r0 + std::int64_t{u} * kw) * kRoundK + q * 16;
        const bool in = l < p.k;  // k % 16 == 0: a 16-value chunk is all in or all out
        av[u] = in ? cuda_dense::dev::ldg16(wa + l) : make_uint4(0, 0, 0, 0);
        bv[u] = in ? cuda_dense::dev::ldg16(wb + l) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t r = r0 + std::int64_t{u} * kw;
        const std::int64_t l = r * kRoundK + q * 16;
        uint4 xw[NT][2];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const bool xin = l < p.k && xlive[t];
          xw[t][0] = xin ? cuda_dense::dev::ldg16(xv[t] + l) : make_uint4(0, 0, 0, 0);
          xw[t][1] = xin ? cuda_dense::dev::ldg16(xv[t] + l + 8) : make_uint4(0, 0, 0, 0);
        }
        float acc[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
        const std::uint32_t* ca = reinterpret_cast<const std::uint32_t*>(&av[u]);
        const std::uint32_t* cb = reinterpret_cast<const std::uint32_t*>(&bv[u]);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          // Codes 4s..4s+3 of each row: the low pair is logical k {2q, 2q+1}, the high pair {2q+8, 2q+9}.
          const std::uint32_t a0 = widen2<T>(ca[s]), a2 = widen2<T>(ca[s] >> 16);
          const std::uint32_t a1 = widen2<T>(cb[s]), a3 = widen2<T>(cb[s] >> 16);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            // Values 4s..4s+3 of the vector: words 2s (b0) and 2s+1 (b1) of its two 16-byte loads.
            const std::uint32_t* xs = reinterpret_cast<const std::uint32_t*>(&xw[t][s >> 1]);
            ptx::mma_16816<T>(acc[t], a0, a1, a2, a3, xs[(2 * s) & 3], xs[(2 * s + 1) & 3]);
          }
        }
        float sc = 1.0f;
        if constexpr (kBlock) {
          if (r < rounds) sc = __ldg(p.scales + (row0 / 128) * p.k_blocks + (r * kRoundK) / 128);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int e = 0; e < 4; ++e) total[t][e] = kBlock ? fmaf(sc, acc[t][e], total[t][e]) : total[t][e] + acc[t][e];
      }
    }
  }

  // The C fragment: total[t][0..1] row g, vectors t*8 + 2q, +1; total[t][2..3] row g + 8.
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    partial[warp][g][t * 8 + 2 * q] = total[t][0];
    partial[warp][g][t * 8 + 2 * q + 1] = total[t][1];
    partial[warp][g + 8][t * 8 + 2 * q] = total[t][2];
    partial[warp][g + 8][t * 8 + 2 * q + 1] = total[t][3];
  }
  __syncthreads();
  // The first warp of each tile adds its kw warps' sums in warp order and writes the tile.
  if (sub == 0 && tile_live) {
    for (int i = lane; i < 16 * NT * 8; i += 32) {
      const int row = i % 16, v = i / 16;  // consecutive lanes: consecutive rows of one vector
      float s = 0.0f;
      for (int w = 0; w < kw; ++w) s += partial[warp + w][row][v];
      const std::int64_t j = row0 + row;
      if (j < p.n && v < p.m) {
        const float rs = p.kind == Fp8ScaleKind::Tensor ? __ldg(p.scales) : p.kind == Fp8ScaleKind::Channel ? __ldg(p.scales + j) : 1.0f;
        static_cast<T*>(p.y)[v * p.y_ld + j] = cuda_dense::dev::from_f32<T>(s * rs);
      }
    }
  }
}

template <class T, int NT>
void launch_t(const GemvMmaParams& p, unsigned blocks, StreamHandle s) {
  if (p.kind == Fp8ScaleKind::Block128)
    gemv_mma_e4m3_kernel<T, NT, true><<<blocks, kMmaThreads, 0, s>>>(p);
  else
    gemv_mma_e4m3_kernel<T, NT, false><<<blocks, kMmaThreads, 0, s>>>(p);
}

}  // namespace

std::string gemv_mma_e4m3_kernel_name(const detail::Fp8LaunchArgs& a, int k_warps) {
  return std::string("gemv_mma_e4m3_") + std::string(dtype_name(a.dtype)) + (a.m > 8 ? "_v16" : "_v8") + "_kw" +
         std::to_string(k_warps) + "_" + fp8_scale_kind_name(a.kind);
}

void launch_gemv_mma_e4m3(const detail::Fp8LaunchArgs& a, int k_warps, StreamHandle s) {
  const std::string name = gemv_mma_e4m3_kernel_name(a, k_warps);
  const bool ok = (a.dtype == DType::F16 || a.dtype == DType::BF16) && a.m >= 1 && a.m <= 16 && a.n >= 1 && a.k >= 16 &&
                  a.k % 16 == 0 && (k_warps == 1 || k_warps == 2 || k_warps == 4 || k_warps == 8);
  if (!ok) fail(ErrorCode::Internal, name, ": configuration does not fit m ", a.m, " n ", a.n, " k ", a.k);
  GemvMmaParams p{a.codes, a.w_ld, a.scales, a.kind, (a.k + 127) / 128, a.x, a.x_ld, a.y, a.y_ld, a.m, a.n, a.k, k_warps};
  const std::int64_t tiles = (a.n + 15) / 16, per_block = (kMmaThreads / 32) / k_warps;
  const auto blocks = static_cast<unsigned>((tiles + per_block - 1) / per_block);
  if (a.dtype == DType::F16) {
    if (a.m > 8) launch_t<__half, 2>(p, blocks, s); else launch_t<__half, 1>(p, blocks, s);
  } else {
    if (a.m > 8) launch_t<__nv_bfloat16, 2>(p, blocks, s); else launch_t<__nv_bfloat16, 1>(p, blocks, s);
  }
  host::check_launch(name);
}

}  // namespace llmm::cuda_fp8
