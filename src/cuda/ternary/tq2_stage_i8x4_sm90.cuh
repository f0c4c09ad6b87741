// The first kernel of the sm_90 streaming engine (tq2_stream_v4, tq2_stream_v5): the activation
// converted once for all blocks into EngineI8Masked's records and coefficients, laid out as the
// shared-memory image each block of the second kernel then loads with one bulk copy. Launched
// with programmatic dependent launch: it lets the second kernel start streaming weights at once
// and waits for the kernels before it (the activation may be theirs) before it reads or writes.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/trace_sm90.cuh"
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
  // Activation row i is at in + (i / top_k) in_ld + (i % top_k) slot_ld (v4, v5: top_k 1).
  int top_k = 1;
  std::int64_t slot_ld = 0;
  // 0: one image of a.m rows (v4, v5). Else row i is an image of its own (one row, n_tiles 1) at
  // byte i row_bytes, so that a block can load just the rows it uses (tq2_moe_stream_sm90).
  int row_bytes = 0;
  // v5's sliced image (tq2_stream_v5_image_plan): > 0, one image of a.m rows a part of K, its
  // part_groups groups (col_stride and xs_off are the slice's), part p at byte p part_bytes.
  int part_groups = 0;
  std::int64_t part_bytes = 0;
  LLMM_TRACE(unsigned long long* trace = nullptr;)  // timeline probes (trace builds only, trace_sm90.cuh)
};

// One warp: group gl of the activation row at `row` converted into the image at `base`, as record
// column(s) `col` (EngineI8Masked::convert) with `tile_cols` coefficient columns a group.
template <class TIn>
__device__ __forceinline__ void stage_row_group_i8x4(const TIn* row, int gl, bool in_vec, int lane, int col, unsigned char* base,
                                                     int xs_off, int col_stride, int tile_cols) {
  using E = EngineI8Masked;
  const float4 x = stream::load_x4<TIn>(row + static_cast<std::int64_t>(gl) * kTq2Group + 4 * lane, in_vec);
  E::convert(x, lane, col, base + xs_off + gl * E::kRecBytes, col_stride, reinterpret_cast<float2*>(base) + gl * tile_cols);
}

// One warp, one image of `rows` activation rows (row j at in + j in_ld, record column j): items
// (row j, group gl) = first, first + step, ... < rows x groups, kBatch input loads issued before
// any of them is converted, so that a warp pays the load latency once a batch, not once an item
// (the in-block image of tq2_stream_v5, where every block converts the rows at kernel start).
template <class TIn, int kBatch>
__device__ __forceinline__ void stage_items_batched_i8x4(const TIn* in, std::int64_t in_ld, int rows, int groups, int first,
                                                         int step, bool in_vec, int lane, unsigned char* base, int xs_off,
                                                         int col_stride, int tile_cols) {
  using E = EngineI8Masked;
  const int items = rows * groups;
  for (int b0 = first; b0 < items; b0 += kBatch * step) {  // warp-uniform
    float4 x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int it = b0 + b * step;
      if (it < items) {
        const int j = it / groups, gl = it - j * groups;
        x[b] = stream::load_x4<TIn>(in + j * in_ld + static_cast<std::int64_t>(gl) * kTq2Group + 4 * lane, in_vec);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int it = b0 + b * step;
      if (it < items) {
        const int j = it / groups, gl = it - j * groups;
        E::convert(x[b], lane, j, base + xs_off + gl * E::kRecBytes, col_stride, reinterpret_cast<float2*>(base) + gl * tile_cols);
      }
    }
  }
}

// Thread t of `threads`: the rest of `images` images (`image_bytes` apart) whose first `cols` of
// `tile_cols` record columns are written: each image's zero column (col_stride / 16 vectors),
// then the coefficients of its unused columns, which the decode reads and must find zero.
__device__ __forceinline__ void stage_fill_unused_i8x4(unsigned char* image, int images, std::int64_t image_bytes, int cols,
                                                       int tile_cols, int groups, int xs_off, int col_stride, int t,
                                                       int threads) {
  const int unused = tile_cols - cols, zero_vecs = col_stride / 16, per_image = zero_vecs + groups * unused;
  for (int i = t; i < images * per_image; i += threads) {
    const int j = i / per_image, w = i - j * per_image;
    unsigned char* const base = image + j * image_bytes;
    if (w < zero_vecs) {
      reinterpret_cast<uint4*>(base + xs_off + cols * col_stride)[w] = make_uint4(0, 0, 0, 0);
    } else {
      const int u = w - zero_vecs;
      reinterpret_cast<float2*>(base)[(u / unused) * tile_cols + cols + u % unused] = make_float2(0.0f, 0.0f);
    }
  }
}

// One warp per (token, group) item writes that item's records and coefficients into the
// workspace; the warps past the items write the zero column, the unused columns' coefficients
// and the zero words. 256 threads a block.
template <class TIn>
__global__ void __launch_bounds__(256) tq2_stage_i8x4_kernel(const Tq2Args a, const StageImage p) {
  using E = EngineI8Masked;
  LLMM_TRACE(if (threadIdx.x == 0) cuda_common::trace_stage(p.trace, cuda_common::kEvStageEntry);)
  ptx::grid_launch_dependents();
  ptx::grid_dependency_wait();  // the activation may come from the previous kernel
  LLMM_TRACE(if (threadIdx.x == 0) cuda_common::trace_stage(p.trace, cuda_common::kEvStageDepWait);)
  const bool own = p.row_bytes != 0, sliced = p.part_groups > 0;
  const int groups = static_cast<int>(a.k / kTq2Group), rows = static_cast<int>(a.m);
  const int image_groups = sliced ? p.part_groups : groups;
  const int parts = sliced ? (groups + p.part_groups - 1) / p.part_groups : 1;
  const int cols = (own ? 1 : rows) * E::kSplit, images = own ? rows : parts;  // record columns of one image
  const std::int64_t image_stride = own ? p.row_bytes : p.part_bytes;
  const int col_stride = p.col_stride, tile_cols = 8 * p.n_tiles;
  auto* const image = static_cast<unsigned char*>(a.workspace);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int item = static_cast<int>(blockIdx.x) * 8 + static_cast<int>(threadIdx.x >> 5);
  const int items = rows * groups;
  if (item < items) {
    const int i = item / groups, gl = item - i * groups;
    const int part = gl / image_groups;  // 0 unless sliced
    const TIn* const in = static_cast<const TIn*>(a.in) + (i / p.top_k) * a.in_ld + (i % p.top_k) * p.slot_ld;
    // The element offset into the input stays gl's: only the image's group index is the slice's.
    stage_row_group_i8x4(in + static_cast<std::int64_t>(part) * image_groups * kTq2Group, gl - part * image_groups,
                         p.in_vec, lane, own ? 0 : i,
                         image + (own ? static_cast<std::int64_t>(i) * p.row_bytes : static_cast<std::int64_t>(part) * image_stride),
                         p.xs_off, col_stride, tile_cols);
    LLMM_TRACE(if (lane == 0) cuda_common::trace_stage_last(p.trace, cuda_common::kEvStageEnd);)
    return;
  }
  const int t = (item - items) * 32 + lane, threads = (static_cast<int>(gridDim.x) * 8 - items) * 32;
  stage_fill_unused_i8x4(image, images, image_stride, cols, tile_cols, image_groups, p.xs_off, col_stride, t, threads);
  for (int i = t; i < p.zero_words; i += threads) p.zero[i] = 0u;
  LLMM_TRACE(if (lane == 0) cuda_common::trace_stage_last(p.trace, cuda_common::kEvStageEnd);)
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
