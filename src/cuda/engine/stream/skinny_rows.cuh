// Row maps of the streaming engine's tensor-core kernel (skinny_mma_engine.cuh has the contract):
//   SkinnyDenseRows   c[b] = a[b] . b[b]^T: tiles of 16 RT weight rows of each batch entry, the
//                     M vectors of that entry; known before the grid dependency wait (PDL),
//                     one set of vectors for every tile at batch 1 (the vector image).
//   SkinnyExpertRows  matmul_id's grouped route: tiles of (a group of <= 8 NT routed rows of one
//                     expert, 16 RT of its weight rows); each block sorts the routed rows
//                     itself (core/moe/moe_skinny.hpp has the steps) after the wait, the vectors
//                     are the group's input rows (by index), outputs go to their routed rows.
#pragma once
#include <cstdint>

#include "core/dense/dense_args.hpp"
#include "core/moe/moe_args.hpp"
#include "core/moe/moe_skinny.hpp"
#include "cuda/dense/dense_common.cuh"
#include "cuda/moe/expert_id.cuh"

namespace llmm::engine::stream {

template <class T, int kRows, int kCols>
struct SkinnyDenseRows {
  using Args = cuda_dense::DenseArgs;
  static constexpr bool kWeightsEarly = true, kImage = true;
  static constexpr int kSmemBytes = 0;
  struct Tile {
    int bz = 0, n0 = 0;  // batch entry, first weight row
  };
  const Args& g;
  const int n, tiles_n;  // n <= kSkinnyMmaMaxDim, tiles_n * batch < 2^31 (skinny_mma_config)
  __device__ SkinnyDenseRows(const Args& a, unsigned char* /*tables*/)
      : g(a), n(static_cast<int>(a.n)), tiles_n(static_cast<int>((a.n + kRows - 1) / kRows)) {}
  __device__ void prologue(int /*tid*/) {}
  __device__ int tiles() const { return tiles_n * static_cast<int>(g.batch); }
  __device__ int k() const { return static_cast<int>(g.k); }
  __device__ Tile at(int tile) const {
    Tile t;
    t.bz = tile / tiles_n, t.n0 = (tile - t.bz * tiles_n) * kRows;
    return t;
  }
  __device__ void next(Tile& t) const {
    t.n0 += kRows;
    if (t.n0 >= n) t.n0 = 0, ++t.bz;
  }
  __device__ const T* weight_row(const Tile& t, int row, bool& live) const {
    const int r = t.n0 + row;
    live = r < n;
    return static_cast<const T*>(g.b) + t.bz * g.b_batch + static_cast<std::int64_t>(live ? r : n - 1) * g.b_ld;
  }
  __device__ const T* vector(const Tile& t, int v, bool& live) const {
    live = v < g.m;
    return static_cast<const T*>(g.a) + t.bz * g.a_batch + (live ? v : g.m - 1) * g.a_ld;
  }
  __device__ void store(const Tile& t, int col, int row, float s) const {
    const int r = t.n0 + row;
    if (col < g.m && r < n) static_cast<T*>(g.c)[t.bz * g.c_batch + col * g.c_ld + r] = cuda_dense::dev::from_f32<T>(s);
  }
};

template <class T, int kRows, int kCols>
struct SkinnyExpertRows {
  using Args = cuda_moe::MoeArgs;
  static constexpr bool kWeightsEarly = false;  // the ids are the kernels' ahead output
  static constexpr bool kImage = false;
  static constexpr int kSmemBytes = cuda_moe::kSkinnyMoeMapBytes;
  static constexpr int kMax = cuda_moe::kSkinnyMoeMaxRows;
  struct Tile {
    int gi = 0, n0 = 0;        // the group, the tile's first weight row
    std::uint32_t expert = 0;  // the group's expert
    int start = 0, count = 1;  // the group's first place in the sorted rows, its rows
  };
  const Args& g;
  std::uint32_t* const keys;    // [kMax] routed row r's key (kSkinnyMoeHead: it starts a group)
  std::uint32_t* const sorted;  // [kMax] the routed rows in key order
  std::uint32_t* const gexp;    // [kMax] group i's expert
  std::uint32_t* const gpos;    // [kMax] group i's position word
  const int n, tiles_n;  // n <= kSkinnyMmaMaxDim, tiles_n * kMax < 2^31 (skinny_mma_moe_refusal)
  int groups = 0;
  __device__ SkinnyExpertRows(const Args& a, unsigned char* tables)
      : g(a),
        keys(reinterpret_cast<std::uint32_t*>(tables)),
        sorted(keys + kMax),
        gexp(sorted + kMax),
        gpos(gexp + kMax),
        n(static_cast<int>(a.n)),
        tiles_n(static_cast<int>((a.n + kRows - 1) / kRows)) {}

  // Every thread (blockDim.x >= kMax: one routed row a thread); ends with a block barrier. The
  // table is padded to a multiple of 4 keys (kSkinnyMoePad) and read 4 keys a load: the two
  // O(routed) loops are most of the prologue before the first weight copy.
  __device__ void prologue(int tid) {
    using namespace cuda_moe;
    const int routed = static_cast<int>(g.m * g.top_k);  // <= kMax (skinny_mma_moe_refusal)
    const int padded = (routed + 3) & ~3;
    const bool mine = tid < routed;
    std::uint32_t key = 0;
    if (mine) {
      const std::uint32_t e = dev::expert_of(g, tid);
      key = skinny_moe_key(e == kNoExpert ? kSkinnyMoeNone : e, tid);
      keys[tid] = key;
    } else if (tid < padded) {
      keys[tid] = kSkinnyMoePad;
    }
    __syncthreads();
    SkinnyMoeRank rk;
    if (mine) {
      for (int j = 0; j < padded; j += 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(keys + j);
        skinny_moe_rank_step(rk, v.x, key), skinny_moe_rank_step(rk, v.y, key);
        skinny_moe_rank_step(rk, v.z, key), skinny_moe_rank_step(rk, v.w, key);
      }
      sorted[rk.position] = static_cast<std::uint32_t>(tid);
    }
    const bool head = mine && skinny_moe_starts_group(key, rk, kCols);
    __syncthreads();  // every key read unmarked
    if (head) keys[tid] = key | kSkinnyMoeHead;
    groups = __syncthreads_count(head);
    if (head) {
      int gi = 0;
      for (int j = 0; j < padded; j += 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(keys + j);
        gi += skinny_moe_head_below(v.x, key) + skinny_moe_head_below(v.y, key) + skinny_moe_head_below(v.z, key) +
              skinny_moe_head_below(v.w, key);
      }
      const int rows = rk.total - rk.before < kCols ? rk.total - rk.before : kCols;
      gexp[gi] = skinny_moe_expert(key), gpos[gi] = skinny_moe_group_pos(rk.position, rows);
    }
    const int none = __syncthreads_count(mine && skinny_moe_expert(key) == kSkinnyMoeNone);  // and the tables are whole
    // Zero rows of out-of-range ids (sorted last): a warp a row, rows spread over the grid.
    if (none > 0) {
      const int warps = static_cast<int>(blockDim.x >> 5), lane = tid & 31;
      for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * warps + (tid >> 5); j < none;
           j += static_cast<std::int64_t>(gridDim.x) * warps) {
        const std::int64_t r = sorted[routed - none + j];
        for (std::int64_t c = lane; c < g.n; c += 32) put(r * g.n + c, 0.0f);
      }
    }
  }
  // out[idx] = s in the output dtype (a switch uniform across the grid).
  __device__ void put(std::int64_t idx, float s) const {
    switch (g.out_dtype) {
      case DType::F16: static_cast<__half*>(g.out)[idx] = __float2half_rn(s); break;
      case DType::BF16: static_cast<__nv_bfloat16*>(g.out)[idx] = __float2bfloat16_rn(s); break;
      default: static_cast<float*>(g.out)[idx] = s; break;
    }
  }
  __device__ int tiles() const { return groups * tiles_n; }
  __device__ int k() const { return static_cast<int>(g.k); }
  __device__ Tile at(int tile) const {
    Tile t;
    t.gi = tile / tiles_n, t.n0 = (tile - t.gi * tiles_n) * kRows;
    load_group(t);
    return t;
  }
  __device__ void next(Tile& t) const {
    t.n0 += kRows;
    if (t.n0 >= n) {
      t.n0 = 0;
      if (++t.gi < groups) load_group(t);  // (past the last group: no table entry, nothing read)
    }
  }
  __device__ void load_group(Tile& t) const {
    t.expert = gexp[t.gi];
    const std::uint32_t pos = gpos[t.gi];
    t.start = cuda_moe::skinny_moe_group_start(pos), t.count = cuda_moe::skinny_moe_group_rows(pos);
  }
  __device__ const T* weight_row(const Tile& t, int row, bool& live) const {
    const int r = t.n0 + row;
    live = r < n;
    return static_cast<const T*>(g.w) + static_cast<std::int64_t>(t.expert) * g.expert_stride +
           static_cast<std::int64_t>(live ? r : n - 1) * g.k;
  }
  __device__ const T* vector(const Tile& t, int v, bool& live) const {
    live = v < t.count;
    const std::uint32_t rr = sorted[t.start + (live ? v : t.count - 1)];
    const std::uint32_t tok = rr / static_cast<std::uint32_t>(g.top_k), slot = rr - tok * static_cast<std::uint32_t>(g.top_k);
    return static_cast<const T*>(g.in) + static_cast<std::int64_t>(tok) * g.in_token_stride +
           static_cast<std::int64_t>(slot) * g.in_slot_stride;
  }
  __device__ void store(const Tile& t, int col, int row, float s) const {
    const int r = t.n0 + row;
    if (col >= t.count || r >= n) return;
    put(static_cast<std::int64_t>(sorted[t.start + col]) * g.n + r, s);
  }
};

}  // namespace llmm::engine::stream
