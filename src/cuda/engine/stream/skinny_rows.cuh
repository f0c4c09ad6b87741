// Row maps of the streaming engine's tensor-core kernel (skinny_mma_engine.cuh has the contract):
//   SkinnyDenseRows   c[b] = a[b] . b[b]^T: tiles of 16 RT weight rows of each batch entry, the
//                     M vectors of that entry; known before the grid dependency wait (PDL),
//                     one set of vectors for every tile at batch 1 (the vector image).
#pragma once
#include <cstdint>

#include "core/dense/dense_args.hpp"
#include "cuda/dense/dense_common.cuh"

namespace llmm::engine::stream {

template <class T, int kRows, int kCols>
struct SkinnyDenseRows {
  using Args = cuda_dense::DenseArgs;
  static constexpr bool kWeightsEarly = true, kImage = true;
  static constexpr int kSmemBytes = 0;
  struct Tile {
    std::int64_t bz = 0, n0 = 0;  // batch entry, first weight row
  };
  const Args& g;
  const std::int64_t tiles_n;
  __device__ SkinnyDenseRows(const Args& a, unsigned char* /*tables*/) : g(a), tiles_n((a.n + kRows - 1) / kRows) {}
  __device__ void prologue(int /*tid*/) {}
  __device__ std::int64_t tiles() const { return tiles_n * g.batch; }
  __device__ std::int64_t k() const { return g.k; }
  __device__ Tile at(std::int64_t tile) const {
    Tile t;
    t.bz = tile / tiles_n, t.n0 = (tile - t.bz * tiles_n) * kRows;
    return t;
  }
  __device__ const T* weight_row(const Tile& t, int row, bool& live) const {
    const std::int64_t n = t.n0 + row;
    live = n < g.n;
    return static_cast<const T*>(g.b) + t.bz * g.b_batch + (live ? n : g.n - 1) * g.b_ld;
  }
  __device__ const T* vector(const Tile& t, int v, bool& live) const {
    live = v < g.m;
    return static_cast<const T*>(g.a) + t.bz * g.a_batch + (live ? v : g.m - 1) * g.a_ld;
  }
  __device__ void store(const Tile& t, int col, int row, float s) const {
    const std::int64_t n = t.n0 + row;
    if (col < g.m && n < g.n) static_cast<T*>(g.c)[t.bz * g.c_batch + col * g.c_ld + n] = cuda_dense::dev::from_f32<T>(s);
  }
};

}  // namespace llmm::engine::stream
