// tq2_moe_stream_sm90: ternary experts at decode (matmul_id_tq2, small m) on the sm_90 streaming
// engine: the ring kernel of tq2_stream_v5 (tq2_ring_sm90.cuh) with RoutedMap, a routed-row map
// instead of one weight (see tq2_moe_stream_plan.hpp).
//
// Item (routed row r, super-band s, part p), r-major. The producer lane reads e = ids[r] and
// streams expert e's rows e n + 128 s .. + 127 (the stack is one [n_experts n][k / 4] code matrix;
// rows past the expert's n belong to the next expert or lie out of bounds and are never written)
// and their transposed scales (expert e's columns start at e n8). Consumer warp w multiplies band
// 8 s + w by r's activation row: a one-row image (4 digit columns and the zero column, v5's m = 1
// layout): with K whole the block's consumers convert the rows its items use from the input
// (one launch); with K in parts a staging kernel writes every row's image (and zeroes the
// counters) and each block loads its rows by one bulk copy. An id outside [0, n_experts)
// streams nothing and writes zeros. Parts as v5: the last part to arrive at (r, band) sums the
// f32 partials in part order.
#include <cuda_runtime.h>

#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ternary/tq2_ring_sm90.cuh"
#include "cuda/ternary/tq2_moe_stream.hpp"
#include "cuda/ternary/tq2_stage_i8x4_sm90.cuh"
#include "llmm/error.hpp"

namespace llmm::cuda_ternary {
namespace {

// The expert of routed row r, or -1 when the id is out of range (u32/i32 words, or i64).
__device__ __forceinline__ int expert_of(const cuda_moe::MoeArgs& g, std::int64_t r) {
  const std::uint64_t v = g.ids64 ? static_cast<std::uint64_t>(static_cast<const std::int64_t*>(g.ids)[r])
                                  : static_cast<const std::uint32_t*>(g.ids)[r];
  return v < static_cast<std::uint64_t>(g.n_experts) ? static_cast<int>(v) : -1;
}

struct RoutedParams {
  RingParams ring;
  int top_k;
  bool slotted, in_vec;  // in_vec: the input's base and strides allow 16-byte loads
  std::int64_t n8;       // an expert's transposed-scale columns
  int row_bytes, col_stride, xs_off, image_smem, rows_cap;
  const unsigned char* image;  // the staged rows (workspace); null when the blocks convert them
};

// The row map: items (routed row r, super-band, part), one image row per activation row.
// InBlock: the consumer warps convert the block's rows from the input (K whole); else they load
// the rows the staging kernel wrote.
template <bool InBlock>
struct RoutedMap {
  using Args = Tq2MoeArgs;
  using Params = RoutedParams;
  static constexpr bool kOneSet = false;
  static constexpr bool kLanesPerItem = true;
  static constexpr bool kWaitBeforeProducer = true;  // the producer reads the ids
  static constexpr bool kConvertsImage = InBlock;
  static constexpr bool kWarpPairs = false;  // a warp a 16-row band at every m (tq2_ring_sm90.cuh)
  static constexpr bool kMayReloadImage = false;
  const Tq2MoeArgs& a;
  const Params& p;
  std::int64_t first = 0;  // the block's first image row
  __device__ __forceinline__ RoutedMap(const Tq2MoeArgs& a_, const Params& p_) : a(a_), p(p_) {}
  // Normal L2 priority: rows routed to the same expert read the same lines.
  __device__ __forceinline__ std::uint64_t producer_policy() const { return ptx::l2_evict_normal_policy(); }
  __device__ __forceinline__ bool weights(const RingItem& it, int& code_row, int& scale_col) const {
    const int e = expert_of(a.g, it.set);
    code_row = static_cast<int>(e * a.g.n) + kTq2V5Rows * it.s;
    scale_col = static_cast<int>(2 * (e * p.n8 + kTq2V5Rows * it.s));
    return e >= 0;
  }
  // The image rows this block's items use (the host's rows_cap bounds them;
  // tq2_moe_stream_block_rows is the same rule): one bulk copy, or converted here.
  __device__ __forceinline__ ImageSpan bind_block(std::int64_t i_begin, std::int64_t i_end) {
    const std::int64_t per_row = p.ring.items_per_set;
    first = i_begin / per_row;
    std::int64_t last = (i_end - 1) / per_row;
    if (!p.slotted) first /= p.top_k, last /= p.top_k;
    if (last - first + 1 > p.rows_cap) __trap();  // a host/device rule mismatch: fail loudly
    const int rows = static_cast<int>(last - first + 1);
    return {InBlock ? nullptr : p.image + first * p.row_bytes, static_cast<std::uint32_t>(rows * p.row_bytes), p.image_smem,
            rows};
  }
  // Image rows first .. first + rows - 1 at dst, as tq2_stage_i8x4 writes them (one warp per
  // (row, group) item: records and coefficients; then each row's zero column and the
  // coefficients of its unused columns 4..7), by the kTq2V5Consumers consumer warps.
  template <class TIn>
  __device__ __forceinline__ void convert_image(unsigned char* dst, int rows, int warp, int lane) const {
    const cuda_moe::MoeArgs& g = a.g;
    const int groups = static_cast<int>(g.k / kTq2Group);
    const std::int64_t tk = p.slotted ? p.top_k : 1, slot_ld = p.slotted ? g.in_slot_stride : 0;
    for (int item = warp; item < rows * groups; item += kTq2V5Consumers) {  // warp-uniform
      const int j = item / groups, gl = item - j * groups;
      const std::int64_t i = first + j;
      const TIn* const in = static_cast<const TIn*>(g.in) + (i / tk) * g.in_token_stride + (i % tk) * slot_ld;
      stage_row_group_i8x4(in, gl, p.in_vec, lane, 0, dst + j * p.row_bytes, p.xs_off, p.col_stride, 8);
    }
    stage_fill_unused_i8x4(dst, rows, p.row_bytes, EngineI8Masked::kSplit, 8, groups, p.xs_off, p.col_stride, warp * 32 + lane,
                           32 * kTq2V5Consumers);
  }
  // Lanes g < 4 read digit column g of the item's row, the others its zero column.
  template <int NT>
  __device__ __forceinline__ void lanes(const RingItem& it, int lane, int (&xoff)[NT], int& coff) const {
    static_assert(NT == 1, "one activation row per item");
    const int rb = p.image_smem + static_cast<int>((p.slotted ? it.set : it.set / p.top_k) - first) * p.row_bytes;
    const int gq = lane >> 2, col = gq < EngineI8Masked::kSplit ? gq : EngineI8Masked::kSplit;
    xoff[0] = rb + p.xs_off + col * p.col_stride;
    coff = rb + 2 * (lane & 3) * static_cast<int>(sizeof(float2));
  }
  __device__ __forceinline__ int tokens() const { return 1; }
  __device__ __forceinline__ std::int64_t n() const { return a.g.n; }
  __device__ __forceinline__ std::int64_t k() const { return a.g.k; }
  __device__ __forceinline__ void* out() const { return a.g.out; }
  __device__ __forceinline__ std::int64_t out_ld() const { return a.g.n; }
  __device__ __forceinline__ std::int64_t out_row(const RingItem& it, int) const { return it.set; }
  template <class TIn>
  __device__ __forceinline__ float ieee(const RingItem& it, int, std::int64_t row) const {
    const cuda_moe::MoeArgs& g = a.g;
    const std::int64_t r = it.set, wrow = static_cast<std::int64_t>(expert_of(g, r)) * g.n + row;
    const TIn* const x = static_cast<const TIn*>(g.in) + (r / g.top_k) * g.in_token_stride + (r % g.top_k) * g.in_slot_stride;
    return dev::ieee_dot_row(x, a.codes + wrow * (g.k / 4), a.scales + wrow * (g.k / kTq2Group), g.k);
  }
};

// The streaming kernel for the config: images in the block or staged, the decode with or
// without the overlapped (ILP) variant.
template <class TIn, class TOut>
auto moe_kernel(const Tq2MoeStreamConfig& c) {
  using K = void (*)(Tq2MoeArgs, RoutedParams, CUtensorMap, CUtensorMap);
  return c.stage_in_block ? (c.overlap ? K{&tq2_ring_sm90_kernel<RoutedMap<true>, TIn, TOut, 1, true>}
                                       : K{&tq2_ring_sm90_kernel<RoutedMap<true>, TIn, TOut, 1, false>})
                          : (c.overlap ? K{&tq2_ring_sm90_kernel<RoutedMap<false>, TIn, TOut, 1, true>}
                                       : K{&tq2_ring_sm90_kernel<RoutedMap<false>, TIn, TOut, 1, false>});
}

template <class TIn, class TOut>
void launch_typed(const Tq2MoeArgs& a, const Tq2MoeStreamConfig& c, void* workspace, StreamHandle stream) {
  const cuda_moe::MoeArgs& g = a.g;
  const bool slotted = g.in_slot_stride != 0;
  auto* const ws = static_cast<unsigned char*>(workspace);
  const int groups = static_cast<int>(g.k / kTq2Group);
  const std::int64_t bands16 = (g.n + 15) / 16;
  const std::size_t es = dtype_size(g.in_dtype);
  const bool vec = reinterpret_cast<std::uintptr_t>(g.in) % 16 == 0 && (g.in_token_stride * es) % 16 == 0 &&
                   (g.in_slot_stride * es) % 16 == 0;
  RoutedParams p{};
  p.ring.stages = c.stages, p.ring.parts = c.parts.parts, p.ring.part_groups = c.parts.part_groups;
  p.ring.items = c.items, p.ring.items_per_set = c.bands * c.parts.parts, p.ring.partial_rows = c.routed;
  p.ring.counters = c.parts.parts > 1 ? reinterpret_cast<std::uint32_t*>(ws + c.counters_off) : nullptr;
  p.ring.partials = c.parts.parts > 1 ? reinterpret_cast<float*>(ws + c.partials_off) : nullptr;
  p.top_k = static_cast<int>(g.top_k), p.slotted = slotted, p.in_vec = vec;
  p.n8 = (g.n + 7) / 8 * 8;
  p.row_bytes = c.row_bytes, p.col_stride = c.col_stride, p.xs_off = groups * 64, p.image_smem = c.image_smem;
  p.rows_cap = c.rows_cap, p.image = c.stage_in_block ? nullptr : ws;

  if (!c.stage_in_block) {
    // Stage: one m = 1 image per activation row (a token's, or a (token, slot)'s), and the
    // parts' counters zeroed.
    Tq2Args sa;
    sa.m = c.image_rows, sa.n = g.n, sa.k = g.k;
    sa.in_dtype = g.in_dtype, sa.in = g.in, sa.in_ld = g.in_token_stride;
    sa.out_dtype = g.out_dtype;
    sa.workspace = ws, sa.workspace_bytes = c.workspace_bytes;
    StageImage im{c.col_stride, groups * 64, 1, vec, p.ring.counters, p.ring.counters ? static_cast<int>(c.routed * bands16) : 0};
    im.top_k = slotted ? static_cast<int>(g.top_k) : 1, im.slot_ld = slotted ? g.in_slot_stride : 0, im.row_bytes = c.row_bytes;
    const std::int64_t zero_work = c.image_rows * (c.col_stride / 16 + groups * 4) + im.zero_words;
    launch_tq2_stage_i8x4<TIn>(sa, im, 1 + static_cast<int>(zero_work / 65536), stream);
    cuda_dense::host::check_launch(tq2_moe_stream_stage_kernel_name(g.in_dtype));
  }

  const auto kernel = moe_kernel<TIn, TOut>(c);
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  // Codes of the whole stack as bytes [n_experts n][k / 4], boxes of 128 rows x 128 bytes, swizzled.
  const std::uint64_t cdims[2] = {static_cast<std::uint64_t>(g.k / 4), static_cast<std::uint64_t>(g.n_experts * g.n)};
  const std::uint32_t cbox[2] = {128, kTq2V5Rows};
  const CUtensorMap codes = cuda_common::make_tensor_map_u8_2d(a.codes, cdims, static_cast<std::uint64_t>(g.k / 4), cbox, true,
                                                               "tq2_moe_stream_sm90");
  // Transposed scales as bytes [k / 128][2 ld], boxes of 4 groups x 128 rows (256 bytes).
  const std::uint64_t sdims[2] = {static_cast<std::uint64_t>(2 * a.scales_t_ld), static_cast<std::uint64_t>(groups)};
  const std::uint32_t sbox[2] = {2 * kTq2V5Rows, kTq2V5StageGroups};
  const CUtensorMap scales = cuda_common::make_tensor_map_u8_2d(a.scales_t, sdims, static_cast<std::uint64_t>(2 * a.scales_t_ld),
                                                                sbox, false, "tq2_moe_stream_sm90");
  cuda_common::launch_pdl(kernel, dim3(static_cast<unsigned>(c.grid)), dim3(kTq2V5Threads), static_cast<std::size_t>(c.smem_bytes),
                          stream, a, p, codes, scales);
}

template <class TIn, class TOut>
int resident_blocks_typed(const Tq2MoeStreamConfig& c) {
  const auto kernel = moe_kernel<TIn, TOut>(c);
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kTq2V5Threads, static_cast<std::size_t>(c.smem_bytes)) !=
      cudaSuccess)
    return 0;
  return blocks;
}

}  // namespace

int tq2_moe_stream_resident_blocks(const Tq2MoeStreamConfig& c, DType in_dtype, DType out_dtype) {
  Tq2Args types;
  types.in_dtype = in_dtype, types.out_dtype = out_dtype;
  int blocks = 0;
  with_in_out(types, [&](auto in, auto out) { blocks = resident_blocks_typed<decltype(in), decltype(out)>(c); });
  return blocks;
}

void launch_tq2_moe_stream_sm90(const Tq2MoeArgs& a, void* workspace, std::size_t workspace_bytes, StreamHandle stream) {
  const cuda_moe::MoeArgs& g = a.g;
  const auto c = tq2_moe_stream_config(g.m, g.top_k, g.n, g.k, g.n_experts, g.in_slot_stride != 0,
                                       cuda_dense::host::current_sm_count());
  if (!c) fail(ErrorCode::Internal, "tq2_moe_stream_sm90: arguments outside the kernel's contract (m ", g.m, ", k ", g.k, ")");
  if (workspace_bytes != c->workspace_bytes || (c->workspace_bytes && !workspace) ||
      reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0)
    fail(ErrorCode::Internal, "tq2_moe_stream_sm90: needs a 16-byte aligned workspace of exactly ", c->workspace_bytes,
         " bytes, got ", workspace_bytes);
  if (!a.scales_t || reinterpret_cast<std::uintptr_t>(a.scales_t) % 16 != 0 || a.scales_t_ld % 8 != 0 ||
      reinterpret_cast<std::uintptr_t>(a.codes) % 16 != 0)
    fail(ErrorCode::Internal, "tq2_moe_stream_sm90: needs 16-byte aligned codes and transposed scales (ld a multiple of 8)");
  const std::string name = tq2_moe_stream_kernel_name(*c, g.in_dtype, g.out_dtype);
  Tq2Args types;
  types.in_dtype = g.in_dtype, types.out_dtype = g.out_dtype;
  with_in_out(types, [&](auto in, auto out) { launch_typed<decltype(in), decltype(out)>(a, *c, workspace, stream); });
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
