// The first kernel of the sm_90 streaming engine (tq2_stream_v4, tq2_stream_v5): the activation
// converted once for all blocks into EngineI8Masked's records and coefficients, laid out as the
// shared-memory image each block of the second kernel then loads with one bulk copy. Launched
// with programmatic dependent launch: it lets the second kernel start streaming weights at once
// and waits for the kernels before it (the activation may be theirs) before it reads or writes.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/ternary/tq2_i8_digits.cuh"

namespace llmm::cuda_ternary {
namespace {

struct StageImage {
  int col_stride = 0;  // bytes per record column
  int xs_off = 0;      // the record columns' offset from the image base (after the coefficients)
  int n_tiles = 1;     // n8 tiles of digit columns: ceil(4 m / 8)
  bool in_vec = false;
  std::uint32_t* zero = nullptr;  // words to zero as well (v5's band counters), or null
  int zero_words = 0;
};

// One warp per (token, group) item writes that item's records and coefficients into the
// workspace; the warps past the items write the zero column, the unused columns' coefficients
// and the zero words. 256 threads a block.
template <class TIn>
__global__ void __launch_bounds__(256) tq2_stage_i8x4_kernel(const Tq2Args a, const StageImage p) {
  using E = EngineI8Masked;
  ptx::grid_launch_dependents();
  ptx::grid_dependency_wait();  // the activation may come from the previous kernel
  const int groups = static_cast<int>(a.k / kTq2Group), cols = static_cast<int>(a.m) * E::kSplit;
  const int col_stride = p.col_stride, tile_cols = 8 * p.n_tiles;
  auto* const image = static_cast<unsigned char*>(a.workspace);
  auto* const coef = reinterpret_cast<float2*>(image);
  unsigned char* const xs = image + p.xs_off;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int item = static_cast<int>(blockIdx.x) * 8 + static_cast<int>(threadIdx.x >> 5);
  const int items = static_cast<int>(a.m) * groups;
  if (item < items) {
    const int m = item / groups, gl = item - m * groups;
    const TIn* const in = static_cast<const TIn*>(a.in);
    const float4 x = stream::load_x4<TIn>(in + m * a.in_ld + static_cast<std::int64_t>(gl) * kTq2Group + 4 * lane, p.in_vec);
    E::convert(x, lane, m, xs + gl * E::kRecBytes, col_stride, coef + gl * tile_cols);
    return;
  }
  const int t = (item - items) * 32 + lane, threads = (static_cast<int>(gridDim.x) * 8 - items) * 32;
  for (int i = t; i < col_stride / 16; i += threads) reinterpret_cast<uint4*>(xs + cols * col_stride)[i] = make_uint4(0, 0, 0, 0);
  const int unused = tile_cols - cols;
  for (int i = t; i < groups * unused; i += threads)
    coef[(i / unused) * tile_cols + cols + i % unused] = make_float2(0.0f, 0.0f);
  for (int i = t; i < p.zero_words; i += threads) p.zero[i] = 0u;
}

// Enqueues tq2_stage_i8x4 for a.m x (k / 128) items plus `extra_blocks` blocks of the other work.
template <class TIn>
void launch_tq2_stage_i8x4(const Tq2Args& a, const StageImage& p, int extra_blocks, cudaStream_t stream) {
  const std::int64_t items = a.m * (a.k / kTq2Group);
  cuda_common::launch_pdl(&tq2_stage_i8x4_kernel<TIn>, dim3(static_cast<unsigned>((items + 7) / 8 + extra_blocks)), dim3(256), 0,
                          stream, a, p);
}

}  // namespace
}  // namespace llmm::cuda_ternary
