// skinny_mma kernel: C[M, N] = X[M, K] . W[N, K]^T, M <= 16, f16/bf16, mma.sync m16n8k16.
//
// A block owns 32 weight rows (two m16 tiles); its warps split K in chunks of 32. For one chunk a
// lane loads 16 bytes (8 k-values) from each of its rows r and r + 8 of each tile, and 16 bytes
// of its vector r (and 8 + r): lane (r, q) holds physical k = 32c + 8q + 0..7. The reduction is
// order-free, so physical k 8q + {0,1,2,3} plays logical k {2q, 2q+1, 2q+8, 2q+9} of a first
// m16n8k16 and 8q + {4..7} those of a second: the same bijection for A and B, so every register
// is a plain 32-bit word of the loads (no shuffles), and all loads are 16 bytes wide.
// Partial sums meet in shared memory and are added in warp order (deterministic).
#include "core/dense/skinny_mma.hpp"
#include "cuda/common/mma_sync.cuh"
#include "cuda/dense/dense_common.cuh"

namespace llmm::cuda_dense {
namespace {

constexpr int kRowTiles = kSkinnyMmaRowsPerBlock / 16;  // m16 tiles per block
constexpr int kUnroll = 4;                              // K chunks in flight per warp
constexpr int kMaxWarps = 8;

__device__ __forceinline__ uint4 ldg16_or_zero(const void* p, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

template <class T, int NT>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_mma_kernel(DenseArgs g, int warps_k) {
  __shared__ float red[kMaxWarps][kSkinnyMmaRowsPerBlock][8 * NT];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int r = lane >> 2, q = lane & 3;
  const std::int64_t row_blocks = (g.n + kSkinnyMmaRowsPerBlock - 1) / kSkinnyMmaRowsPerBlock;
  const std::int64_t chunks = (g.k + 31) / 32;

  for (std::int64_t bz = blockIdx.y; bz < g.batch; bz += gridDim.y) {
    for (std::int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
      const std::int64_t n0 = rb * kSkinnyMmaRowsPerBlock;
      const T* w = static_cast<const T*>(g.b) + bz * g.b_batch;
      const T* x = static_cast<const T*>(g.a) + bz * g.a_batch;
      const T* wrow[kRowTiles][2];
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows past N re-read row N-1 (results dropped)
          std::int64_t row = n0 + 16 * t + 8 * h + r;
          wrow[t][h] = w + (row < g.n ? row : g.n - 1) * g.b_ld + 8 * q;
        }
      const T* xrow[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        std::int64_t v = 8 * j + r;
        xrow[j] = x + (v < g.m ? v : g.m - 1) * g.a_ld + 8 * q;
      }
      float acc[kRowTiles][NT][4] = {};

      for (std::int64_t c0 = warp; c0 < chunks; c0 += static_cast<std::int64_t>(warps_k) * kUnroll) {
        uint4 wv[kUnroll][kRowTiles][2], xv[kUnroll][NT];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t c = c0 + static_cast<std::int64_t>(u) * warps_k;
          const std::int64_t kk = c * 32;
          const bool valid = c < chunks && kk + 8 * q < g.k;  // k % 8 == 0: all 8 values in or out
#pragma unroll
          for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[u][t][h] = ldg16_or_zero(wrow[t][h] + kk, valid);
#pragma unroll
          for (int j = 0; j < NT; ++j) xv[u][j] = ldg16_or_zero(xrow[j] + kk, valid);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              const uint4& lo = wv[u][t][0];  // row r
              const uint4& hi = wv[u][t][1];  // row r + 8
              ptx::mma_16816<T>(acc[t][j], lo.x, hi.x, lo.y, hi.y, xv[u][j].x, xv[u][j].y);
              ptx::mma_16816<T>(acc[t][j], lo.z, hi.z, lo.w, hi.w, xv[u][j].z, xv[u][j].w);
            }
      }
      // C fragment: c0, c1 at (row r, vectors 2q, 2q+1), c2, c3 at row r + 8.
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          red[warp][16 * t + r][8 * j + 2 * q] = acc[t][j][0];
          red[warp][16 * t + r][8 * j + 2 * q + 1] = acc[t][j][1];
          red[warp][16 * t + r + 8][8 * j + 2 * q] = acc[t][j][2];
          red[warp][16 * t + r + 8][8 * j + 2 * q + 1] = acc[t][j][3];
        }
      __syncthreads();
      T* out = static_cast<T*>(g.c) + bz * g.c_batch;
      for (int i = static_cast<int>(threadIdx.x); i < kSkinnyMmaRowsPerBlock * 8 * NT; i += warps_k * 32) {
        const int v = i / kSkinnyMmaRowsPerBlock, row = i % kSkinnyMmaRowsPerBlock;  // rows fastest: coalesced
        float s = 0.0f;
        for (int wq = 0; wq < warps_k; ++wq) s += red[wq][row][v];  // fixed order
        if (v < g.m && n0 + row < g.n) out[v * g.c_ld + n0 + row] = dev::from_f32<T>(s);
      }
      __syncthreads();  // red is reused by the next row block
    }
  }
}

template <class T>
void launch_typed(const DenseArgs& g, const SkinnyMmaConfig& c, StreamHandle s) {
  const std::int64_t row_blocks = (g.n + kSkinnyMmaRowsPerBlock - 1) / kSkinnyMmaRowsPerBlock;
  dim3 grid(static_cast<unsigned>(row_blocks < 0x7fffffff ? row_blocks : 0x7fffffff),
            static_cast<unsigned>(g.batch < 65535 ? g.batch : 65535));
  dim3 block(static_cast<unsigned>(c.warps_k * 32));
  if (c.n_tiles == 1) skinny_mma_kernel<T, 1><<<grid, block, 0, s>>>(g, c.warps_k);
  else skinny_mma_kernel<T, 2><<<grid, block, 0, s>>>(g, c.warps_k);
}

}  // namespace

void launch_skinny_mma(const DenseArgs& g, const SkinnyMmaConfig& c, StreamHandle s) {
  if ((c.n_tiles != 1 && c.n_tiles != 2) || (c.warps_k != 4 && c.warps_k != 8) || g.m > 8 * c.n_tiles)
    fail(ErrorCode::Internal, "launch_skinny_mma: bad configuration n_tiles ", c.n_tiles, " warps_k ", c.warps_k, " for m ", g.m);
  if (g.dtype == DType::F16) launch_typed<__half>(g, c, s);
  else if (g.dtype == DType::BF16) launch_typed<__nv_bfloat16>(g, c, s);
  else fail(ErrorCode::Internal, "launch_skinny_mma: dtype ", dtype_name(g.dtype));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(ErrorCode::Cuda, "skinny_mma launch failed: ", cudaGetErrorString(e));
}

}  // namespace llmm::cuda_dense
