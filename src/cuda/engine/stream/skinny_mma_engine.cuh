// The streaming engine's tensor-core kernel (skinny_mma v3): out = vectors . W^T for up to 16
// vectors a weight tile, f16/bf16, mma.sync m16n8k16, with the row map as a policy
// (skinny_rows.cuh): dense (batched) matmul and the MoE experts are the same loop.
//
// The grid is two blocks a SM (core/dense/skinny_mma.hpp has the split): cluster i owns tiles
// [T i / clusters, T (i + 1) / clusters) of 16 RT weight rows (the row map numbers them), block
// rank r of the cluster chunks [Kc r / C, Kc (r + 1) / C) of K (32 values a chunk), warp w of the
// block chunks w, w + 8, ... of those. For one chunk a lane copies 16 bytes (8 k-values) from
// each of its rows r and r + 8 of each m16 tile, and 16 bytes of its vector r (and 8 + r): lane
// (r, q) holds physical k = 32c + 8q + 0..7. The reduction is order-free, so physical k
// 8q + {0,1,2,3} plays logical k {2q, 2q+1, 2q+8, 2q+9} of a first m16n8k16 and 8q + {4..7}
// those of a second: the same bijection for A and B, so every register is a plain 32-bit word
// of the copies (no shuffles), and all copies are 16 bytes wide.
// Each warp streams all of its (tile, chunk) pairs through its own ring of cp.async stages (a
// lane reads back only the bytes it copied: no barrier in the loop), across tile boundaries.
// Units the row map marks absent (vectors past a tile's count, rows past n) and past K are
// zero-filled without a read. With the vector image (XI; a row map whose vectors are the same
// for every tile, i.e. dense batch 1) a warp copies its vector chunks once, for all of its tiles,
// and its ring carries weights only (session 26's ncu of v2: L2 76% busy re-reading vectors).
// Sums: a warp's chunks in order, the warps in order (shared memory, a block barrier a tile),
// then the cluster's blocks in rank order (DSMEM, a cluster barrier per round of <= 8 tiles):
// fixed for given tiles, k and SM count.
//
// A row map (Map = MapT<T, rows a tile, vectors a tile>) gives:
//   Args                 the kernel's parameter (by __grid_constant__: no copy)
//   kWeightsEarly        its tiles are known before the grid dependency wait (PDL): the first
//                        stages' weights may stream while the kernels ahead finish
//   kImage               its vectors are the same for every tile (XI allowed)
//   kSmemBytes           its tables in shared memory (SkinnyMmaSmem::map_offset)
//   prologue(tid)        every thread, after the grid dependency wait; ends with a block barrier
//   tiles(), k()         the tile count (after the prologue), K (ints: the host keeps them < 2^31)
//   Tile at(tile)        what a tile index names (may divide: once a thread)
//   next(Tile&)          the tile after it (no division; past the last tile it names nothing read)
//   weight_row(t, row, live) / vector(t, v, live)   a lane's unit sources (at k 0), live = read it
//   store(t, col, row, value)                        output (col, row) of the tile, if it exists
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "core/dense/skinny_mma.hpp"
#include "cuda/common/cluster_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/mma_sync.cuh"
#include "cuda/common/pdl_device.cuh"
#include "cuda/dense/dense_common.cuh"
#include "llmm/error.hpp"

namespace llmm::engine::stream {

using cuda_dense::kSkinnyMmaWarps;
using cuda_dense::SkinnyMmaConfig;
using cuda_dense::SkinnyMmaSmem;
inline constexpr int kSkinnyThreads = 32 * kSkinnyMmaWarps;

// part i of `parts` of [0, total) (skinny_mma_split) in 32-bit arithmetic where the product
// total % parts * i fits (parts < 2^16), which a grid of two blocks a SM always is.
__device__ __forceinline__ int skinny_split32(int total, int parts, int i) {
  if (parts < 65536) {
    const unsigned t = static_cast<unsigned>(total), p = static_cast<unsigned>(parts), u = static_cast<unsigned>(i);
    return static_cast<int>(t / p * u + t % p * u / p);
  }
  return static_cast<int>(cuda_dense::skinny_mma_split(total, parts, i));
}

template <template <class, int, int> class MapT, class T, int NT, int RT, int C, bool XI>
__global__ void __launch_bounds__(kSkinnyThreads, 2)
    skinny_mma_kernel(const __grid_constant__ typename MapT<T, 16 * RT, 8 * NT>::Args g) {
  constexpr int kWarps = kSkinnyMmaWarps, kThreads = kSkinnyThreads;
  constexpr int kUnits = 2 * RT + NT, kRows = 16 * RT, kCols = 8 * NT;
  constexpr int kStep = 32 * kWarps;  // elements between a warp's chunks of a tile
  using Map = MapT<T, kRows, kCols>;
  using Tile = typename Map::Tile;
  static_assert(!XI || Map::kImage, "the vector image needs vectors shared by every tile");
  constexpr SkinnyMmaSmem l = cuda_dense::skinny_mma_smem(NT, RT, C, XI, Map::kSmemBytes);
  constexpr int stages = l.stages, kRingUnits = l.units;  // ring units: weights (XI), or weights and vectors
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int r = lane >> 2, q = lane & 3;
  unsigned char* const ring = smem + warp * l.warp_bytes + lane * 16;
  float* const red = reinterpret_cast<float*>(smem + l.red_offset);    // [warp][col][red_stride]
  float* const parts = reinterpret_cast<float*>(smem + l.part_offset);  // [tile of the round][col][row] (C > 1)
  Map map(g, smem + l.map_offset);
  // Every count and index below is 32-bit (the host keeps n, k <= kSkinnyMmaMaxDim and the tiles
  // < 2^31): session 30's ncu/SASS of v3 found the kernel issue-bound, with 64-bit divisions in
  // every tile decode and 64-bit offsets recomputed for every copy.
  const int k = map.k();
  // XI: this lane's units of the warp's vector chunks, [chunk i][n8 tile j] 512 bytes apart.
  unsigned char* const xim =
      XI ? smem + l.image_offset + warp * static_cast<int>(cuda_dense::skinny_mma_image_warp_bytes(NT, k, C)) + lane * 16
         : nullptr;

  const int clusters = static_cast<int>(gridDim.x) / C, ci = static_cast<int>(blockIdx.x) / C;
  const int rank = static_cast<int>(blockIdx.x) % C;
  const int chunks = (k + 31) / 32;
  const int c0 = skinny_split32(chunks, C, rank), c1 = skinny_split32(chunks, C, rank + 1);
  const int mine = static_cast<int>(cuda_dense::skinny_mma_warp_chunks(c1 - c0, warp));  // this warp's chunks a tile
  const int kw = (c0 + warp) * 32 + 8 * q;  // the lane's first k
  // The lane's chunks i of a tile with data (k values [kw + 256 i, + 8): all in or all out, k % 8 == 0).
  const int with_data = k > kw ? (k - kw + kStep - 1) / kStep : 0;
  int t0 = 0, t1 = 0;  // this cluster's tiles (set once the map knows them)
  Tile first{};        // tile t0, decoded once
  const auto own_tiles = [&] {
    const int tiles = map.tiles();
    t0 = skinny_split32(tiles, clusters, ci), t1 = skinny_split32(tiles, clusters, ci + 1);
    if (t0 < t1) first = map.at(t0);
  };

  // The issue cursor: the next (tile, chunk) to copy, its tile, the copies left, and the lane's
  // unit sources at that chunk (advanced by kStep a chunk, rebound at each tile). A unit the map
  // marks absent names a row that exists (the map clamps it) and copies nothing; a chunk past K
  // zero-fills from `safe` (the tile's first weight row) without a read.
  int is_i = 0, is_left = 0, is_off = 0;  // chunk of the tile, copies left, the stage's byte offset
  Tile is_t{};
  const T* src[kUnits];
  bool rd[kUnits];
  const T* safe = nullptr;
  const auto bind = [&] {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) src[2 * rt + h] = map.weight_row(is_t, 16 * rt + 8 * h + r, rd[2 * rt + h]) + kw;
#pragma unroll
    for (int j = 0; j < NT; ++j) src[2 * RT + j] = map.vector(is_t, 8 * j + r, rd[2 * RT + j]) + kw;
    safe = src[0] - kw;
  };
  const auto reset = [&] { is_i = 0, is_left = mine * (t1 - t0), is_off = 0, is_t = first; };
  constexpr int kStageBytes = kRingUnits * 512, kRingBytes = stages * kStageBytes;
  // Units [u0, u1) of the next chunk (weights: [0, 2 RT), vectors: [2 RT, kUnits)), then the
  // cursor moves on; `commit` closes the chunk's commit group. One commit group a chunk, empty
  // past the warp's last chunk, so that wait_group counts chunks.
  const auto issue = [&](int u0, int u1, bool commit) {
    if (is_left > 0) {
      if (is_i == 0) bind();
      unsigned char* const st = ring + is_off;
      if (is_i < with_data) {
#pragma unroll
        for (int u = 0; u < kRingUnits; ++u)
          if (u >= u0 && u < u1) ptx::cp_async16(st + u * 512, src[u], rd[u] ? 16 : 0);
      } else {
#pragma unroll
        for (int u = 0; u < kRingUnits; ++u)
          if (u >= u0 && u < u1) ptx::cp_async16(st + u * 512, safe, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnits; ++u) src[u] += kStep;
      if (++is_i == mine) is_i = 0, map.next(is_t);
      is_off = is_off + kStageBytes == kRingBytes ? 0 : is_off + kStageBytes;
      --is_left;
    }
    if (commit) ptx::cp_async_commit();
  };
  // PDL (launch_skinny_mma_engine): weights are never written by kernels, so where the row map
  // knows its tiles up front the first stages' weight copies go out before the wait for the
  // kernels ahead on the stream (which may still be finishing on other SMs); vectors, ids and
  // every store come after it.
  ptx::grid_launch_dependents();
  if constexpr (Map::kWeightsEarly) {
    own_tiles();
    reset();
    for (int i = 0; i < stages - 1; ++i) issue(0, 2 * RT, false);  // no commit: they join the first vectors' group
  }
  ptx::grid_dependency_wait();
  if constexpr (!Map::kWeightsEarly) {
    map.prologue(static_cast<int>(threadIdx.x));
    own_tiles();
    reset();
    for (int i = 0; i < stages - 1; ++i) issue(0, 2 * RT, false);
  }
  if constexpr (XI) {  // every vector chunk of the warp (the same for all its tiles), from tile t0's vectors
    if (mine > 0 && t0 < t1) {
      const Tile keep = is_t;
      is_t = first;
      const T* vsrc[NT];
      bool vrd[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) vsrc[j] = map.vector(is_t, 8 * j + r, vrd[j]) + kw;
      is_t = keep;
      for (int i = 0; i < mine; ++i) {
        const bool valid = i < with_data;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const bool read = valid && vrd[j];
          ptx::cp_async16(xim + (i * NT + j) * 512, read ? vsrc[j] + i * kStep : safe, read ? 16 : 0);
        }
      }
    }
    // The ring carries weights only: the cursor is where the chunks' vectors would leave it. One
    // commit group a chunk (the first also holds the image).
    for (int i = 0; i < stages - 1; ++i) ptx::cp_async_commit();
  } else {
    reset();  // the same chunks again for their vectors, one commit group each (the first also holds the weights above)
    for (int i = 0; i < stages - 1; ++i) issue(2 * RT, kRingUnits, true);
  }

  int cs_off = 0;  // the stage the next chunk is read from
  int round_tiles = 0;  // C > 1: tiles whose block sums wait in `parts`
  Tile et = first, round_first = first;  // the tile being summed, the round's first
  const auto flush_round = [&] {
    // The cluster's blocks in rank order; rank r adds every C-th group of 256 values.
    ptx::cluster_sync();
    const int total = round_tiles * kCols * kRows;
    const std::uint32_t base = ptx::smem_addr(parts);
    for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < total; e += C * kThreads) {
      const int tl = e / (kCols * kRows), col = (e / kRows) % kCols, row = e % kRows;
      float s = 0.0f;
#pragma unroll
      for (int b = 0; b < C; ++b) s += ptx::ld_shared_cluster_f32(ptx::cluster_map_shared(base + 4u * e, b));
      Tile t = round_first;
      for (int a = 0; a < tl; ++a) map.next(t);
      map.store(t, col, row, s);
    }
    // No block leaves, or refills parts, while another reads it: every value read above is used
    // before this arrive, so it needs no release (the barrier only orders the reads).
    ptx::cluster_sync_relaxed();
    round_tiles = 0;
  };
  for (int tile = t0; tile < t1; ++tile) {
    float acc[RT][NT][4] = {};
    for (int i = 0; i < mine; ++i) {
      issue(0, kUnits, true);  // into the stage read one step ago (its values consumed by its mma already)
      ptx::cp_async_wait<stages - 1>();  // this step's chunk has landed (this lane's own copies)
      const unsigned char* const st = ring + cs_off;
      uint4 v[kUnits];
#pragma unroll
      for (int u = 0; u < kRingUnits; ++u) v[u] = *reinterpret_cast<const uint4*>(st + u * 512);
      if constexpr (XI)
#pragma unroll
        for (int j = 0; j < NT; ++j) v[2 * RT + j] = *reinterpret_cast<const uint4*>(xim + (i * NT + j) * 512);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint4& lo = v[2 * rt];      // row r
          const uint4& hi = v[2 * rt + 1];  // row r + 8
          const uint4& xb = v[2 * RT + j];
          ptx::mma_16816<T>(acc[rt][j], lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
          ptx::mma_16816<T>(acc[rt][j], lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
        }
      cs_off = cs_off + kStageBytes == kRingBytes ? 0 : cs_off + kStageBytes;
    }
    // C fragment: c0, c1 at (row r, vectors 2q, 2q+1), c2, c3 at row r + 8.
    float* const mine_red = red + warp * kCols * l.red_stride;
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          mine_red[(8 * j + 2 * q + (e & 1)) * l.red_stride + 16 * rt + r + 8 * (e >> 1)] = acc[rt][j][e];
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < kRows * kCols; e += kThreads) {
      const int col = e / kRows, row = e % kRows;  // rows fastest: coalesced stores
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += red[(w * kCols + col) * l.red_stride + row];  // fixed order
      if constexpr (C == 1) map.store(et, col, row, s);
      else parts[(round_tiles * kCols + col) * kRows + row] = s;
    }
    __syncthreads();  // red is rewritten by the next tile
    map.next(et);
    if constexpr (C > 1) {
      if (++round_tiles == cuda_dense::kSkinnyMmaPartTiles || tile + 1 == t1) {
        flush_round();
        round_first = et;
      }
    }
  }
  ptx::cp_async_wait<0>();  // the empty groups past the last chunk
}

// One launch of the kernel for (NT, RT, C, XI): the shared memory the layout needs (plus
// image_bytes), clusters of C, two blocks a SM capped at what fits at once, PDL on sm_90. `what`
// names the op in errors.
template <template <class, int, int> class MapT, class T, int NT, int RT, int C, bool XI>
void launch_skinny_mma_engine(const typename MapT<T, 16 * RT, 8 * NT>::Args& g, const SkinnyMmaConfig& c,
                              std::int64_t image_bytes, cudaStream_t stream, const char* what) {
  using Map = MapT<T, 16 * RT, 8 * NT>;
  auto* const kernel = &skinny_mma_kernel<MapT, T, NT, RT, C, XI>;
  constexpr SkinnyMmaSmem l = cuda_dense::skinny_mma_smem(NT, RT, C, XI, Map::kSmemBytes);
  if (l.bytes + image_bytes > cuda_dense::kSkinnyMmaSmemLimit)
    fail(ErrorCode::Internal, what, ": ", l.bytes + image_bytes, " bytes of shared memory planned (a vector image of ",
         image_bytes, ")");
  const int smem_bytes = l.bytes + static_cast<int>(image_bytes);
  // Per device and cheap (not a stream operation, fine under graph capture): set every launch,
  // with the largest carveout so that two blocks share an SM (launch_pdl.cuh says why).
  cuda_common::set_smem_bytes(kernel, smem_bytes);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail(ErrorCode::Cuda, what, ": cannot reserve ", smem_bytes, " bytes of shared memory: ", cudaGetErrorString(e));
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kSkinnyThreads);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  unsigned n_attrs = 0;
  if (C > 1) {
    attrs[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[n_attrs].val.clusterDim.x = C, attrs[n_attrs].val.clusterDim.y = 1, attrs[n_attrs].val.clusterDim.z = 1;
    ++n_attrs;
  }
  cfg.attrs = n_attrs ? attrs : nullptr;  // the occupancy query sees the cluster only
  cfg.numAttrs = n_attrs;
  // The plan assumes two blocks a SM; where fewer clusters fit at once, run as many as fit (a
  // second wave would double the time; the sums do not change). Cached per device and kernel.
  int device = 0;
  (void)cudaGetDevice(&device);
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> fit[64];  // (kernel, shared memory) -> clusters or blocks
  int fits = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& m = fit[device & 63];
    const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), smem_bytes};
    auto it = m.find(key);
    if (it != m.end()) {
      fits = it->second;
    } else {
      cfg.gridDim = dim3(static_cast<unsigned>(c.blocks));
      if (C > 1) {
        if (cudaOccupancyMaxActiveClusters(&fits, kernel, &cfg) != cudaSuccess) fits = 0;
      } else {
        int per_sm = 0, sms = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSkinnyThreads,
                                                          static_cast<std::size_t>(smem_bytes)) == cudaSuccess &&
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess)
          fits = per_sm * sms;
      }
      (void)cudaGetLastError();
      m.emplace(key, fits);
    }
  }
  int clusters = c.blocks / C;
  if (fits > 0 && fits < clusters) clusters = fits;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * C));
  if (cuda_common::pdl_enabled()) {  // sm_90 unless LLMM_DISABLE_PDL=1 (A/B)
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attrs, cfg.numAttrs = ++n_attrs;
  }
  e = cudaLaunchKernelEx(&cfg, kernel, g);
  if (e != cudaSuccess) fail(ErrorCode::Cuda, what, " launch failed: ", cudaGetErrorString(e));
}

// The configuration's instance: n_tiles, row_tiles and cluster as planned (checked), the image
// only where the row map allows one and the config asks for it.
template <template <class, int, int> class MapT, class T, int NT, int RT, bool XI>
void launch_skinny_cluster(const typename MapT<T, 16, 8>::Args& g, const SkinnyMmaConfig& c, std::int64_t image_bytes,
                           cudaStream_t s, const char* what) {
  switch (c.cluster) {
    case 1: launch_skinny_mma_engine<MapT, T, NT, RT, 1, XI>(g, c, image_bytes, s, what); break;
    case 2: launch_skinny_mma_engine<MapT, T, NT, RT, 2, XI>(g, c, image_bytes, s, what); break;
    default: launch_skinny_mma_engine<MapT, T, NT, RT, 4, XI>(g, c, image_bytes, s, what); break;
  }
}
template <template <class, int, int> class MapT, class T, int NT, int RT>
void launch_skinny_image(const typename MapT<T, 16, 8>::Args& g, const SkinnyMmaConfig& c, std::int64_t image_bytes,
                         cudaStream_t s, const char* what) {
  if constexpr (MapT<T, 16, 8>::kImage) {
    if (c.x_image) return launch_skinny_cluster<MapT, T, NT, RT, true>(g, c, image_bytes, s, what);
  }
  launch_skinny_cluster<MapT, T, NT, RT, false>(g, c, 0, s, what);
}
template <template <class, int, int> class MapT, class T>
void launch_skinny_config(const typename MapT<T, 16, 8>::Args& g, const SkinnyMmaConfig& c, std::int64_t image_bytes,
                          cudaStream_t s, const char* what) {
  if ((c.n_tiles != 1 && c.n_tiles != 2) || (c.row_tiles != 1 && c.row_tiles != 2) ||
      (c.cluster != 1 && c.cluster != 2 && c.cluster != 4) || c.blocks < c.cluster || c.blocks % c.cluster != 0 ||
      (c.x_image && !MapT<T, 16, 8>::kImage))
    fail(ErrorCode::Internal, what, ": bad configuration n_tiles ", c.n_tiles, " row_tiles ", c.row_tiles, " cluster ",
         c.cluster, " blocks ", c.blocks, " image ", c.x_image);
  if (c.row_tiles == 1) {
    if (c.n_tiles == 1) launch_skinny_image<MapT, T, 1, 1>(g, c, image_bytes, s, what);
    else launch_skinny_image<MapT, T, 2, 1>(g, c, image_bytes, s, what);
  } else {
    if (c.n_tiles == 1) launch_skinny_image<MapT, T, 1, 2>(g, c, image_bytes, s, what);
    else launch_skinny_image<MapT, T, 2, 2>(g, c, image_bytes, s, what);
  }
}

}  // namespace llmm::engine::stream
