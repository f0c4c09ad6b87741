// tq2_moe_stream_sm90: ternary experts at decode (matmul_id_tq2, small m) on the sm_90 streaming
// engine: tq2_stream_v5's producer ring, warp-owned row bands and int8-digit decoder
// (EngineI8Masked), with a routed-row map instead of one weight (see tq2_moe_stream_plan.hpp).
//
// Item (routed row r, super-band s, part p), r-major. The producer lane reads e = ids[r] and
// streams expert e's rows e n + 128 s .. + 127 (the stack is one [n_experts n][k / 4] code matrix;
// rows past the expert's n belong to the next expert or lie out of bounds and are never written)
// and their transposed scales (expert e's columns start at e n8). Consumer warp w multiplies band
// 8 s + w by r's activation row: a one-row image (4 digit columns and the zero column, v5's m = 1
// layout), loaded with the block's other rows by one bulk copy. An id outside [0, n_experts)
// streams nothing and writes zeros. Parts as v5: the last part to arrive at (r, band) sums the
// f32 partials in part order.
#include <cuda_runtime.h>

#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ternary/tq2_band_stage_sm90.cuh"
#include "cuda/ternary/tq2_moe_stream.hpp"
#include "cuda/ternary/tq2_stage_i8x4_sm90.cuh"
#include "llmm/error.hpp"

namespace llmm::cuda_ternary {
namespace {

constexpr int kConsumers = kTq2V5Consumers;
constexpr int kG = kTq2V5StageGroups;

struct MoeStreamParams {
  int stages, parts, part_groups, top_k;
  bool slotted;
  std::int64_t items, routed, items_per_row;  // items_per_row = bands x parts
  std::int64_t n8;                                // an expert's transposed-scale columns
  int row_bytes, col_stride, xs_off, image_smem, rows_cap;
  const unsigned char* image;  // the staged rows (workspace)
  std::uint32_t* counters;     // [routed][ceil(n / 16)] arrivals of parts (zeroed by the staging kernel)
  float* partials;             // [parts][routed][n] (parts > 1)
};

// The expert of routed row r, or -1 when the id is out of range (u32/i32 words, or i64).
__device__ __forceinline__ int expert_of(const cuda_moe::MoeArgs& g, std::int64_t r) {
  const std::uint64_t v = g.ids64 ? static_cast<std::uint64_t>(static_cast<const std::int64_t*>(g.ids)[r])
                                  : static_cast<const std::uint32_t*>(g.ids)[r];
  return v < static_cast<std::uint64_t>(g.n_experts) ? static_cast<int>(v) : -1;
}

// Overlap: the stage's groups as straight-line code (tq2_band_stage_sm90.cuh), for grids of at
// most one block per SM; else the guarded loop, whose ~72 registers let two blocks of 9 warps
// share an SM (the scheduler holding 5 of the 18 warps needs 5 x 32 x regs <= 16384).
template <class TIn, class TOut, bool Overlap>
__global__ void __launch_bounds__(kTq2V5Threads, 1)
    tq2_moe_stream_sm90_kernel(const Tq2MoeArgs a, const MoeStreamParams p, const __grid_constant__ CUtensorMap codes_map,
                               const __grid_constant__ CUtensorMap scales_map) {
  using E = EngineI8Masked;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  const cuda_moe::MoeArgs& g = a.g;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem);
  std::uint64_t* const empty = full + p.stages;
  std::uint64_t* const x_full = empty + p.stages;
  unsigned char* const ring = smem + 1024;
  const int groups = static_cast<int>(g.k / kTq2Group);
  const std::int64_t i_begin = p.items * blockIdx.x / gridDim.x, i_end = p.items * (blockIdx.x + 1) / gridDim.x;

  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], kConsumers);
    }
    ptx::mbar_init(x_full, 1);
    ptx::mbar_init_fence();
  }
  __syncthreads();
  ptx::grid_launch_dependents();
  // The ids, the activation and the output may belong to the kernels before this one.
  ptx::grid_dependency_wait();

  if (warp == kConsumers) {
    if (lane != 0) return;
    // Producer. Normal L2 priority: rows routed to the same expert read the same lines.
    const std::uint64_t policy = ptx::l2_evict_normal_policy();
    int slot = 0;
    std::uint32_t parity = 0;
    for (std::int64_t it = i_begin; it < i_end; ++it) {
      const std::int64_t r = it / p.items_per_row, rem = it - r * p.items_per_row;
      const int s = static_cast<int>(rem / p.parts), part = static_cast<int>(rem - static_cast<std::int64_t>(s) * p.parts);
      const int e = expert_of(g, r);
      if (e < 0) continue;
      const int row0 = static_cast<int>(e * g.n) + kTq2V5Rows * s;
      const int col0 = static_cast<int>(2 * (e * p.n8 + kTq2V5Rows * s));
      const int g0 = part * p.part_groups, g1 = min(groups, g0 + p.part_groups);
      for (int gs = g0; gs < g1; gs += kG) {
        ptx::mbar_wait(&empty[slot], parity ^ 1u);
        unsigned char* const st = ring + slot * kTq2V5StageBytes;
        ptx::mbar_arrive_expect_tx(&full[slot], kTq2V5StageBytes);  // out-of-bounds parts of a box count too
        ptx::tensor_copy_2d_g2s(st, &codes_map, 32 * gs, row0, &full[slot], policy);
        ptx::tensor_copy_2d_g2s(st + kTq2V5CodeBytes, &scales_map, col0, gs, &full[slot], policy);
        if (++slot == p.stages) slot = 0, parity ^= 1u;
      }
    }
    return;  // the consumers wait for every copy issued here before they finish
  }

  // Consumers: the image rows this block's items use, one bulk copy (the host's rows_cap bounds
  // them; tq2_moe_stream_block_rows is the same rule).
  const std::int64_t per_row = p.items_per_row;
  std::int64_t first = i_begin / per_row, last = (i_end - 1) / per_row;
  if (!p.slotted) first /= p.top_k, last /= p.top_k;
  if (last - first + 1 > p.rows_cap) __trap();  // a host/device rule mismatch: fail loudly
  if (threadIdx.x == 0) {
    const std::uint32_t bytes = static_cast<std::uint32_t>((last - first + 1) * p.row_bytes);
    ptx::mbar_arrive_expect_tx(x_full, bytes);
    ptx::bulk_copy_g2s(smem + p.image_smem, p.image + first * p.row_bytes, bytes, x_full, ptx::l2_evict_last_policy());
  }
  ptx::mbar_wait(x_full, 0);

  const int gq = lane >> 2, t4 = lane & 3;
  const BandLane bl(warp, lane);
  const int col = gq < E::kSplit ? gq : E::kSplit;  // this lane's digit column, or the zero column
  TOut* const out = static_cast<TOut*>(g.out);
  const std::int64_t bands16 = (g.n + 15) / 16;
  int slot = 0;
  std::uint32_t parity = 0;
  for (std::int64_t it = i_begin; it < i_end; ++it) {
    const std::int64_t r = it / per_row, rem = it - r * per_row;
    const int s = static_cast<int>(rem / p.parts), part = static_cast<int>(rem - static_cast<std::int64_t>(s) * p.parts);
    const int e = expert_of(g, r);
    const int band = kConsumers * s + warp;
    const std::int64_t row0 = 16 * static_cast<std::int64_t>(band) + gq;
    const bool writer = t4 == 0;  // columns 0..3 of lanes t4 = 0, 1 are the row's four digits
    if (e < 0) {  // streams nothing: zeros (every part writes the same)
      if (writer && 16 * static_cast<std::int64_t>(band) < g.n)
        for (int h = 0; h < 2; ++h)
          if (row0 + 8 * h < g.n) out[r * g.n + row0 + 8 * h] = dev::from_f32<TOut>(0.0f);
      continue;
    }
    const unsigned char* const rb = smem + p.image_smem + ((p.slotted ? r : r / p.top_k) - first) * p.row_bytes;
    const unsigned char* const xb[1] = {rb + p.xs_off + col * p.col_stride};
    const float2* const coef = reinterpret_cast<const float2*>(rb) + 2 * t4;
    const int g0 = part * p.part_groups, g1 = min(groups, g0 + p.part_groups);
    float total[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    for (int gs = g0; gs < g1; gs += kG) {
      ptx::mbar_wait(&full[slot], parity);
      band_stage<1, Overlap>(ring + slot * kTq2V5StageBytes, gs, g1, bl, xb, coef, total);
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&empty[slot]);
      if (++slot == p.stages) slot = 0, parity ^= 1u;
    }
    if (16 * static_cast<std::int64_t>(band) >= g.n) continue;  // warp-uniform: rows past n
    float v[2];
    {
      const float lo = total[0][0] + total[0][1], hi = total[0][2] + total[0][3];
      v[0] = lo + __shfl_xor_sync(0xffffffffu, lo, 1);
      v[1] = hi + __shfl_xor_sync(0xffffffffu, hi, 1);
    }
    if (p.parts > 1) {
      if (writer) {
        float* const dst = p.partials + (part * p.routed + r) * g.n;
        if (row0 < g.n) dst[row0] = v[0];
        if (row0 + 8 < g.n) dst[row0 + 8] = v[1];
      }
      __threadfence();
      __syncwarp();
      std::uint32_t arrived = 0;
      if (lane == 0) arrived = atomicAdd(&p.counters[r * bands16 + band], 1u);
      if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<std::uint32_t>(p.parts - 1)) continue;
      __threadfence();  // every other part's partial is visible now
    }
    if (!writer) continue;
    for (int h = 0; h < 2; ++h) {
      const std::int64_t row = row0 + 8 * h;
      if (row >= g.n) continue;
      float t = v[h];
      if (p.parts > 1) {
        // The last part sums every part's partial (its own included) in part order.
        const float* const src = p.partials + r * g.n + row;
        const std::int64_t step = p.routed * g.n;
        t = 0.0f;
        int q = 0;
        for (; q + 4 <= p.parts; q += 4) {
          const float x0 = __ldcg(src + q * step), x1 = __ldcg(src + (q + 1) * step);
          const float x2 = __ldcg(src + (q + 2) * step), x3 = __ldcg(src + (q + 3) * step);
          t = (((t + x0) + x1) + x2) + x3;
        }
        for (; q < p.parts; ++q) t += __ldcg(src + q * step);
      }
      if (t != t) {  // a non-finite input (marked) or an overflow: the IEEE value
        const std::int64_t wrow = static_cast<std::int64_t>(e) * g.n + row;
        const TIn* const x = static_cast<const TIn*>(g.in) + (r / g.top_k) * g.in_token_stride + (r % g.top_k) * g.in_slot_stride;
        t = dev::ieee_dot_row(x, a.codes + wrow * (g.k / 4), a.scales + wrow * (g.k / kTq2Group), g.k);
      }
      out[r * g.n + row] = dev::from_f32<TOut>(t);
    }
  }
}

template <class TIn, class TOut>
void launch_typed(const Tq2MoeArgs& a, const Tq2MoeStreamConfig& c, void* workspace, StreamHandle stream) {
  const cuda_moe::MoeArgs& g = a.g;
  const bool slotted = g.in_slot_stride != 0;
  auto* const ws = static_cast<unsigned char*>(workspace);
  const int groups = static_cast<int>(g.k / kTq2Group);
  const std::int64_t bands16 = (g.n + 15) / 16;
  MoeStreamParams p{};
  p.stages = c.stages, p.parts = c.parts.parts, p.part_groups = c.parts.part_groups, p.top_k = static_cast<int>(g.top_k);
  p.slotted = slotted, p.items = c.items, p.routed = c.routed, p.items_per_row = c.bands * c.parts.parts;
  p.n8 = (g.n + 7) / 8 * 8;
  p.row_bytes = c.row_bytes, p.col_stride = c.col_stride, p.xs_off = groups * 64, p.image_smem = c.image_smem;
  p.rows_cap = c.rows_cap, p.image = ws;
  p.counters = c.parts.parts > 1 ? reinterpret_cast<std::uint32_t*>(ws + c.counters_off) : nullptr;
  p.partials = c.parts.parts > 1 ? reinterpret_cast<float*>(ws + c.partials_off) : nullptr;

  // Stage: one m = 1 image per activation row (a token's, or a (token, slot)'s).
  Tq2Args sa;
  sa.m = c.image_rows, sa.n = g.n, sa.k = g.k;
  sa.in_dtype = g.in_dtype, sa.in = g.in, sa.in_ld = g.in_token_stride;
  sa.out_dtype = g.out_dtype;
  sa.workspace = ws, sa.workspace_bytes = c.workspace_bytes;
  const std::size_t es = dtype_size(g.in_dtype);
  const bool vec = reinterpret_cast<std::uintptr_t>(g.in) % 16 == 0 && (g.in_token_stride * es) % 16 == 0 &&
                   (g.in_slot_stride * es) % 16 == 0;
  StageImage im{c.col_stride, groups * 64, 1, vec, p.counters, p.counters ? static_cast<int>(c.routed * bands16) : 0};
  im.top_k = slotted ? static_cast<int>(g.top_k) : 1, im.slot_ld = slotted ? g.in_slot_stride : 0, im.row_bytes = c.row_bytes;
  const std::int64_t zero_work = c.image_rows * (c.col_stride / 16 + groups * 4) + im.zero_words;
  launch_tq2_stage_i8x4<TIn>(sa, im, 1 + static_cast<int>(zero_work / 65536), stream);
  cuda_dense::host::check_launch(tq2_moe_stream_stage_kernel_name(g.in_dtype));

  auto* kernel = c.overlap ? &tq2_moe_stream_sm90_kernel<TIn, TOut, true> : &tq2_moe_stream_sm90_kernel<TIn, TOut, false>;
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  // Codes of the whole stack as bytes [n_experts n][k / 4], boxes of 128 rows x 128 bytes, swizzled.
  const std::uint64_t cdims[2] = {static_cast<std::uint64_t>(g.k / 4), static_cast<std::uint64_t>(g.n_experts * g.n)};
  const std::uint32_t cbox[2] = {128, kTq2V5Rows};
  const CUtensorMap codes = cuda_common::make_tensor_map_u8_2d(a.codes, cdims, static_cast<std::uint64_t>(g.k / 4), cbox, true,
                                                               "tq2_moe_stream_sm90");
  // Transposed scales as bytes [k / 128][2 ld], boxes of 4 groups x 128 rows (256 bytes).
  const std::uint64_t sdims[2] = {static_cast<std::uint64_t>(2 * a.scales_t_ld), static_cast<std::uint64_t>(groups)};
  const std::uint32_t sbox[2] = {2 * kTq2V5Rows, kG};
  const CUtensorMap scales = cuda_common::make_tensor_map_u8_2d(a.scales_t, sdims, static_cast<std::uint64_t>(2 * a.scales_t_ld),
                                                                sbox, false, "tq2_moe_stream_sm90");
  cuda_common::launch_pdl(kernel, dim3(static_cast<unsigned>(c.grid)), dim3(kTq2V5Threads), static_cast<std::size_t>(c.smem_bytes),
                          stream, a, p, codes, scales);
}

}  // namespace

void launch_tq2_moe_stream_sm90(const Tq2MoeArgs& a, void* workspace, std::size_t workspace_bytes, StreamHandle stream) {
  const cuda_moe::MoeArgs& g = a.g;
  const auto c = tq2_moe_stream_config(g.m, g.top_k, g.n, g.k, g.n_experts, g.in_slot_stride != 0,
                                       cuda_dense::host::current_sm_count());
  if (!c) fail(ErrorCode::Internal, "tq2_moe_stream_sm90: arguments outside the kernel's contract (m ", g.m, ", k ", g.k, ")");
  if (!workspace || workspace_bytes != c->workspace_bytes || reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0)
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
