// tq2_stream_v5: the sm_90 streaming engine with warp-owned row bands, m <= 16 (see
// tq2_kernels.hpp for the design and what it changes against v4).
//
// The ring kernel (tq2_ring_sm90.cuh) with V5Map: items (super-band s of 128 rows, part p of
// K), s-major; block j takes items [items j / grid, items (j + 1) / grid). Consumer warp w
// decodes band 8 s + w against the one image of all m tokens (columns 4 m digit records and the
// zero column), staged by tq2_stage_v5 or, with K whole and a small image, converted by each
// block's consumer warps (one launch). Where the whole image does not fit (long K at m >= 2), it
// is staged one slice a part and items go part-major; a block loads its item's slice when the
// part changes (tq2_stream_v5_image_plan). Rows past n arrive as zeros and are never written. Results
// are bitwise independent of the grid and of m (parts depend on n and k alone), and of where the
// image was made (the same conversion either way).
#include <cuda_runtime.h>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_ring_sm90.cuh"
#include "cuda/ternary/tq2_stage_i8x4_sm90.cuh"

namespace llmm::cuda_ternary {
namespace {

LLMM_TRACE(unsigned long long* g_trace = nullptr;)  // tq2_ring_trace_arm

struct V5Params {
  RingParams ring;
  int coef, xs, col_stride;   // shared-memory offsets of the image (from the 1024-aligned base)
  std::uint32_t image_bytes;  // the staged image (sliced: one part's slice, part p's at p image_bytes), one bulk copy
  int tile_cols;              // coefficient columns a group: 8 n_tiles
  bool in_vec;                // the input's base and row stride allow 16-byte loads
};

// The row map: one weight [n, k], items (super-band, part), one image of the m tokens. InBlock:
// the consumer warps convert the image from the input (K whole: no counters to zero); else
// tq2_stage_v5 stages it and each block loads it with one bulk copy.
template <bool InBlock, bool Sliced = false>
struct V5Map {
  static_assert(!(InBlock && Sliced), "an in-block image keeps K whole");
  using Args = Tq2Args;
  using Params = V5Params;
  static constexpr bool kOneSet = true;
  static constexpr bool kLanesPerItem = false;
  static constexpr bool kWaitBeforeProducer = false;
  static constexpr bool kConvertsImage = InBlock;
  static constexpr bool kWarpPairs = true;  // consumer warps in pairs at n8 tiles <= 4 (tq2_ring_sm90.cuh)
  static constexpr bool kMayReloadImage = Sliced;  // its own instantiation: the others' code stays as it was
  const Tq2Args& a;
  const Params& p;
  __device__ __forceinline__ V5Map(const Tq2Args& a_, const Params& p_) : a(a_), p(p_) {}
  __device__ __forceinline__ std::uint64_t producer_policy() const { return ptx::l2_evict_first_policy(); }
  __device__ __forceinline__ bool weights(const RingItem& it, int& code_row, int& scale_col) const {
    code_row = kTq2V5Rows * it.s;
    scale_col = 2 * kTq2V5Rows * it.s;
    return true;
  }
  __device__ __forceinline__ ImageSpan bind_block(std::int64_t, std::int64_t) const {
    return {InBlock ? nullptr : static_cast<const unsigned char*>(a.workspace), p.image_bytes, p.coef, 1};
  }
  __device__ __forceinline__ bool sliced() const { return Sliced; }
  __device__ __forceinline__ ImageSpan part_span(int part) const {
    return {static_cast<const unsigned char*>(a.workspace) + static_cast<std::int64_t>(part) * p.image_bytes, p.image_bytes,
            p.coef, 1};
  }
  // The image of the m tokens at dst, as tq2_stage_v5 writes it: m x groups (row, group) items
  // by the consumer warps, four loads in flight a warp; then the zero column and the unused
  // columns' coefficients.
  template <class TIn>
  __device__ __forceinline__ void convert_image(unsigned char* dst, int, int warp, int lane) const {
    if constexpr (InBlock) {
      const int groups = static_cast<int>(a.k / kTq2Group), rows = static_cast<int>(a.m);
      stage_items_batched_i8x4<TIn, 4>(static_cast<const TIn*>(a.in), a.in_ld, rows, groups, warp, kTq2V5Consumers, p.in_vec,
                                       lane, dst, p.xs - p.coef, p.col_stride, p.tile_cols);
      stage_fill_unused_i8x4(dst, 1, 0, rows * EngineI8Masked::kSplit, p.tile_cols, groups, p.xs - p.coef, p.col_stride,
                             warp * 32 + lane, 32 * kTq2V5Consumers);
    }
  }
  // A sliced image holds groups [g0, g0 + part_groups) as its groups 0..: the offsets shift back
  // by g0 groups so that the decode's group index gl (absolute) lands in the slice. (The shifted
  // base may lie before the image; every address formed from it with gl >= g0 lies inside.)
  template <int NT>
  __device__ __forceinline__ void lanes(const RingItem& item, int lane, int (&xoff)[NT], int& coff) const {
    const int cols = static_cast<int>(a.m) * EngineI8Masked::kSplit, g = lane >> 2;
    const int g0 = Sliced ? item.g0 : 0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      xoff[nt] = p.xs + (8 * nt + g < cols ? 8 * nt + g : cols) * p.col_stride - g0 * EngineI8Masked::kRecBytes;  // or the zero column
    coff = p.coef + 2 * (lane & 3) * static_cast<int>(sizeof(float2)) - g0 * p.tile_cols * static_cast<int>(sizeof(float2));
  }
  __device__ __forceinline__ int tokens() const { return static_cast<int>(a.m); }
  __device__ __forceinline__ std::int64_t n() const { return a.n; }
  __device__ __forceinline__ std::int64_t k() const { return a.k; }
  __device__ __forceinline__ void* out() const { return a.out; }
  __device__ __forceinline__ std::int64_t out_ld() const { return a.out_ld; }
  __device__ __forceinline__ std::int64_t out_row(const RingItem&, int tok) const { return tok; }
  template <class TIn>
  __device__ __forceinline__ float ieee(const RingItem&, int tok, std::int64_t row) const {
    return dev::ieee_dot<TIn>(a, tok, row);
  }
};

// The kernel for the config: NT <= 4 (m <= 8) whole, in-block (m <= 4) or sliced; NT 6 and 8
// (m = 9..16) sliced only.
template <class TIn, class TOut, int NT>
auto v5_kernel(const Tq2StreamV5Config& c) {
  using K = decltype(&tq2_ring_sm90_kernel<V5Map<false, true>, TIn, TOut, NT, NT == 1>);
  K kernel = nullptr;
  if constexpr (NT <= 4) {
    if (!c.stage_in_block && !c.sliced) kernel = &tq2_ring_sm90_kernel<V5Map<false>, TIn, TOut, NT, NT == 1>;
    if constexpr (NT * 8 <= 4 * kTq2StreamInBlockMaxM)  // in-block images: m <= 4 (two n8 tiles) only
      if (c.stage_in_block) kernel = &tq2_ring_sm90_kernel<V5Map<true>, TIn, TOut, NT, NT == 1>;
  }
  if (c.sliced) kernel = &tq2_ring_sm90_kernel<V5Map<false, true>, TIn, TOut, NT, NT == 1>;
  return kernel;
}

template <class TIn, class TOut, int NT>
void launch_nt(const Tq2Args& a, const Tq2StreamV5Config& c, StreamHandle stream) {
  auto* const kernel = v5_kernel<TIn, TOut, NT>(c);
  if (!kernel) fail(ErrorCode::Internal, "tq2_stream_v5: no kernel built for m ", a.m, " with this image (n tiles ", NT, ")");
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  const int ig = c.sliced ? c.parts.part_groups : 0;  // groups of the image (0: all of K)
  const Tq2StreamV5Smem l = tq2_stream_v5_smem(a.m, a.k, c.stages, ig);
  const std::int64_t bands = (a.n + 15) / 16;
  const std::int64_t image = (l.xs - l.coef) + (4 * a.m + 1) * l.col_stride;  // one slice when sliced
  const std::int64_t images = image * (c.sliced ? c.parts.parts : 1);
  const std::int64_t image16 = (images + 15) / 16 * 16, counters16 = (bands * 4 + 15) / 16 * 16;
  auto* const ws = static_cast<unsigned char*>(a.workspace);
  V5Params p{};
  p.ring.stages = c.stages, p.ring.parts = c.parts.parts, p.ring.part_groups = c.parts.part_groups;
  p.ring.items = c.items, p.ring.items_per_set = c.items, p.ring.partial_rows = a.m, p.ring.part_major = c.sliced;
  p.ring.counters = reinterpret_cast<std::uint32_t*>(ws + image16);
  p.ring.partials = c.parts.parts > 1 ? reinterpret_cast<float*>(ws + image16 + counters16) : nullptr;
  p.coef = l.coef, p.xs = l.xs, p.col_stride = l.col_stride, p.image_bytes = static_cast<std::uint32_t>(image);
  p.tile_cols = 8 * c.n_tiles, p.in_vec = tq2_input_vec16(a);
  if (c.stage_in_block) p.ring.counters = nullptr;  // K whole: no counters, no workspace
  LLMM_TRACE(p.ring.trace = g_trace;)
  // Codes as bytes [n rows][k/4], boxes of 128 rows x 128 bytes (4 groups), 128-byte swizzle.
  const std::uint64_t cdims[2] = {static_cast<std::uint64_t>(a.k / 4), static_cast<std::uint64_t>(a.n)};
  const std::uint32_t cbox[2] = {128, kTq2V5Rows};
  const CUtensorMap codes =
      cuda_common::make_tensor_map_u8_2d(a.codes, cdims, static_cast<std::uint64_t>(a.k / 4), cbox, true, "tq2_stream_v5");
  // Transposed scales as bytes [k/128][2 ld], boxes of 4 groups x 128 rows (256 bytes).
  const std::uint64_t sdims[2] = {static_cast<std::uint64_t>(2 * a.scales_t_ld), static_cast<std::uint64_t>(a.k / kTq2Group)};
  const std::uint32_t sbox[2] = {2 * kTq2V5Rows, kTq2V5StageGroups};
  const CUtensorMap scales = cuda_common::make_tensor_map_u8_2d(a.scales_t, sdims, static_cast<std::uint64_t>(2 * a.scales_t_ld),
                                                                sbox, false, "tq2_stream_v5");
  // tq2_stage_v5 (tq2_stage_i8x4): the image, plus the band counters zeroed by the extra blocks.
  if (!c.stage_in_block) {
    StageImage im{l.col_stride, l.xs - l.coef, c.n_tiles, tq2_input_vec16(a), p.ring.counters, static_cast<int>(bands)};
    if (c.sliced) im.part_groups = c.parts.part_groups, im.part_bytes = image;
    LLMM_TRACE(im.trace = g_trace;)
    launch_tq2_stage_i8x4<TIn>(a, im, 1 + static_cast<int>(bands / 8192), stream);
    cuda_dense::host::check_launch(tq2_stream_v5_stage_kernel_name(a));
  }
  cuda_common::launch_pdl(kernel, dim3(static_cast<unsigned>(c.grid)), dim3(kTq2V5Threads), static_cast<std::size_t>(c.smem_bytes),
                          stream, a, p, codes, scales);
}

// f(std::integral_constant<int, NT>) for the n8 tiles v5 builds (1..4, 6, 8); false for others.
template <class F>
bool with_v5_n_tiles(int n_tiles, F&& f) {
  switch (n_tiles) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}

}  // namespace

#if defined(LLMM_RING_TRACE) && LLMM_RING_TRACE
void tq2_ring_trace_arm(unsigned long long* buf) { g_trace = buf; }
#endif

int tq2_stream_v5_resident_blocks(const Tq2Args& a) {
  const auto c = tq2_stream_v5_config(a, cuda_dense::host::current_sm_count());
  if (!c) return 0;
  int blocks = 0;
  with_in_out(a, [&](auto in, auto out) {
    using TIn = decltype(in);
    using TOut = decltype(out);
    const auto query = [&](auto* kernel) {
      if (!kernel) return;
      cuda_common::set_smem_bytes(kernel, c->smem_bytes);
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kTq2V5Threads, static_cast<std::size_t>(c->smem_bytes)) !=
          cudaSuccess)
        blocks = 0;
    };
    with_v5_n_tiles(c->n_tiles, [&](auto nt) { query(v5_kernel<TIn, TOut, nt()>(*c)); });
  });
  return blocks;
}

void launch_tq2_stream_v5(const Tq2Args& a, StreamHandle stream) {
  const auto c = tq2_stream_v5_config(a, cuda_dense::host::current_sm_count());
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v5: arguments outside the kernel's contract (m ", a.m, ", k ", a.k, ")");
  const std::size_t need = tq2_stream_v5_workspace_bytes(a.m, a.n, a.k);
  if (!c->stage_in_block && (!a.workspace || a.workspace_bytes != need || reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0))
    fail(ErrorCode::Internal, "tq2_stream_v5: needs a 16-byte aligned workspace of exactly ", need, " bytes, got ",
         a.workspace_bytes);
  const std::string name = tq2_stream_v5_kernel_name(a);
  with_in_out(a, [&](auto in, auto out) {
    using TIn = decltype(in);
    using TOut = decltype(out);
    if (!with_v5_n_tiles(c->n_tiles, [&](auto nt) { launch_nt<TIn, TOut, nt()>(a, *c, stream); }))
      fail(ErrorCode::Internal, "tq2_stream_v5: no kernel for ", c->n_tiles, " n8 tiles");
  });
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
