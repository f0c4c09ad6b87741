// skinny_mma kernel: C[M, N] = X[M, K] . W[N, K]^T, M <= 16, f16/bf16, mma.sync m16n8k16.
//
// A block owns 32 weight rows (two m16 tiles), or 16 (one tile: small N, so that every SM gets
// blocks); its warps split K in chunks of 32. For one chunk a lane copies 16 bytes (8 k-values)
// from each of its rows r and r + 8 of each tile, and 16 bytes of its vector r (and 8 + r):
// lane (r, q) holds physical k = 32c + 8q + 0..7. The reduction is order-free, so physical k
// 8q + {0,1,2,3} plays logical k {2q, 2q+1, 2q+8, 2q+9} of a first m16n8k16 and 8q + {4..7}
// those of a second: the same bijection for A and B, so every register is a plain 32-bit word
// of the copies (no shuffles), and all copies are 16 bytes wide.
// Each warp streams its chunks through its own ring of kStages stages in shared memory by
// cp.async (a lane reads back only the bytes it copied: no barrier in the loop). Until session
// 26 the chunks were register loads (__ldg), and ptxas placed each chunk's loads after the
// previous chunk's mma (SASS: three 16-byte loads in flight a lane where the source had 16),
// which held the kernel at 0.6-0.9x cuBLAS; the copies' depth does not depend on the scheduler.
// Partial sums meet in shared memory and are added in warp order (deterministic).
#include "core/dense/skinny_mma.hpp"
#include "cuda/common/mma_sync.cuh"
#include "cuda/dense/dense_common.cuh"

namespace llmm::cuda_dense {
namespace {

constexpr int kMaxWarps = 8;

// A warp's ring: kStages stages of kUnits 16-byte units a lane (2 per weight row tile, 1 per
// n8 tile of vectors), unit i of lane l at (i * 32 + l) * 16 (conflict-free 16-byte reads).
template <int NT, int kRowTiles>
struct SkinnyRing {
  static constexpr int kUnits = 2 * kRowTiles + NT;
  static constexpr int kStages = kUnits <= 3 ? 8 : 4;  // ~12 KB a warp either way
  static constexpr int kStageBytes = kUnits * 32 * 16;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kRows = 16 * kRowTiles;
  static constexpr int kRedBytes = kMaxWarps * kRows * 8 * NT * 4;  // the warps' partial sums
  static constexpr int kSmemBytes = kMaxWarps * kWarpBytes + kRedBytes;
};

// Chunk i of this warp into stage i % kStages of the lane's ring; past the lane's K, and units
// not in `live` (vectors past m: their columns are never stored), zero-filled without a read
// (the source named is the row's first 16 bytes, in bounds; with m < 8 the clamped vector rows
// were the same address in up to 8 lanes of one copy). One commit group a chunk slot, empty
// past the warp's last chunk, so that wait_group counts chunks.
template <int kUnits, int kStages, class T>
__device__ __forceinline__ void skinny_issue(unsigned char* ring, const T* const (&src)[kUnits], unsigned live,
                                             std::int64_t i, std::int64_t mine, int warp, int warps_k, int q,
                                             std::int64_t k) {
  if (i < mine) {
    const std::int64_t kk = (warp + i * warps_k) * 32;
    const bool valid = kk + 8 * q < k;  // k % 8 == 0: all 8 values in or out
    unsigned char* const st = ring + static_cast<int>(i % kStages) * (kUnits * 512);
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const bool read = valid && ((live >> u) & 1u);
      ptx::cp_async16(st + u * 512, read ? src[u] + kk : src[u], read ? 16 : 0);
    }
  }
  ptx::cp_async_commit();
}

template <class T, int NT, int kRowTiles>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_mma_kernel(DenseArgs g, int warps_k) {
  using Ring = SkinnyRing<NT, kRowTiles>;
  constexpr int kRows = Ring::kRows, kStages = Ring::kStages, kUnits = Ring::kUnits;
  extern __shared__ __align__(16) unsigned char smem[];
  float (*red)[kRows][8 * NT] = reinterpret_cast<float (*)[kRows][8 * NT]>(smem + kMaxWarps * Ring::kWarpBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int r = lane >> 2, q = lane & 3;
  unsigned char* const ring = smem + warp * Ring::kWarpBytes + lane * 16;
  const std::int64_t row_blocks = (g.n + kRows - 1) / kRows;
  const std::int64_t chunks = (g.k + 31) / 32;
  // This warp's chunks: warp, warp + warps_k, ... (the K order of every output, whatever m is).
  const std::int64_t mine = warp < chunks ? (chunks - 1 - warp) / warps_k + 1 : 0;

  for (std::int64_t bz = blockIdx.y; bz < g.batch; bz += gridDim.y) {
    for (std::int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
      const std::int64_t n0 = rb * kRows;
      const T* w = static_cast<const T*>(g.b) + bz * g.b_batch;
      const T* x = static_cast<const T*>(g.a) + bz * g.a_batch;
      const T* src[kUnits];  // this lane's 8 k-values of each unit at chunk 0
      unsigned live = (1u << (2 * kRowTiles)) - 1u;  // weight units always; vector units below m
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows past N re-read row N-1 (results dropped)
          std::int64_t row = n0 + 16 * t + 8 * h + r;
          src[2 * t + h] = w + (row < g.n ? row : g.n - 1) * g.b_ld + 8 * q;
        }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        std::int64_t v = 8 * j + r;
        src[2 * kRowTiles + j] = x + (v < g.m ? v : g.m - 1) * g.a_ld + 8 * q;
        if (v < g.m) live |= 1u << (2 * kRowTiles + j);
      }
      float acc[kRowTiles][NT][4] = {};
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) skinny_issue<kUnits, kStages>(ring, src, live, i, mine, warp, warps_k, q, g.k);
      for (std::int64_t i = 0; i < mine; ++i) {
        // Into the stage read at i - 1 (its values consumed by its mma already).
        skinny_issue<kUnits, kStages>(ring, src, live, i + kStages - 1, mine, warp, warps_k, q, g.k);
        ptx::cp_async_wait<kStages - 1>();  // chunk i has landed (this lane's own copies)
        const unsigned char* const st = ring + static_cast<int>(i % kStages) * Ring::kStageBytes;
        uint4 v[kUnits];
#pragma unroll
        for (int u = 0; u < kUnits; ++u) v[u] = *reinterpret_cast<const uint4*>(st + u * 512);
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint4& lo = v[2 * t];      // row r
            const uint4& hi = v[2 * t + 1];  // row r + 8
            const uint4& xb = v[2 * kRowTiles + j];
            ptx::mma_16816<T>(acc[t][j], lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
            ptx::mma_16816<T>(acc[t][j], lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
          }
      }
      ptx::cp_async_wait<0>();  // the empty groups past the last chunk, before the ring is reused
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
      for (int i = static_cast<int>(threadIdx.x); i < kRows * 8 * NT; i += warps_k * 32) {
        const int v = i / kRows, row = i % kRows;  // rows fastest: coalesced
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
  const std::int64_t rows = 16 * c.row_tiles, row_blocks = (g.n + rows - 1) / rows;
  dim3 grid(static_cast<unsigned>(row_blocks < 0x7fffffff ? row_blocks : 0x7fffffff),
            static_cast<unsigned>(g.batch < 65535 ? g.batch : 65535));
  dim3 block(static_cast<unsigned>(c.warps_k * 32));
  auto run = [&](auto kernel, int smem) {
    // Per device and cheap (not a stream operation, fine under graph capture): set every launch.
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::Cuda, "skinny_mma: cannot reserve ", smem, " bytes of shared memory: ", cudaGetErrorString(e));
    }
    kernel<<<grid, block, static_cast<std::size_t>(smem), s>>>(g, c.warps_k);
  };
  if (c.row_tiles == 1) {
    if (c.n_tiles == 1) run(skinny_mma_kernel<T, 1, 1>, SkinnyRing<1, 1>::kSmemBytes);
    else run(skinny_mma_kernel<T, 2, 1>, SkinnyRing<2, 1>::kSmemBytes);
  } else {
    if (c.n_tiles == 1) run(skinny_mma_kernel<T, 1, 2>, SkinnyRing<1, 2>::kSmemBytes);
    else run(skinny_mma_kernel<T, 2, 2>, SkinnyRing<2, 2>::kSmemBytes);
  }
}

}  // namespace

void launch_skinny_mma(const DenseArgs& g, const SkinnyMmaConfig& c, StreamHandle s) {
  if ((c.n_tiles != 1 && c.n_tiles != 2) || (c.warps_k != 4 && c.warps_k != 8) || (c.row_tiles != 1 && c.row_tiles != 2) ||
      g.m > 8 * c.n_tiles)
    fail(ErrorCode::Internal, "launch_skinny_mma: bad configuration n_tiles ", c.n_tiles, " warps_k ", c.warps_k, " row_tiles ",
         c.row_tiles, " for m ", g.m);
  if (g.dtype == DType::F16) launch_typed<__half>(g, c, s);
  else if (g.dtype == DType::BF16) launch_typed<__nv_bfloat16>(g, c, s);
  else fail(ErrorCode::Internal, "launch_skinny_mma: dtype ", dtype_name(g.dtype));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(ErrorCode::Cuda, "skinny_mma launch failed: ", cudaGetErrorString(e));
}

}  // namespace llmm::cuda_dense
