// tq2_stream_v5: the sm_90 streaming engine with warp-owned row bands, m <= 8 (see
// tq2_kernels.hpp for the design and what it changes against v4).
//
// Work: items (super-band s of 128 rows, part p of K), items s-major; block j takes items
// [items j / grid, items (j + 1) / grid). One producer lane streams each item's stages (128 rows
// x 4 groups of codes by one tensor-map copy, 128-byte swizzled, and their scales from the
// transposed copy by a second, 4 groups x 128 rows) through a ring on full/empty mbarriers.
// Consumer warp w decodes band 8 s + w (rows 16 w .. 16 w + 15 of the stage) with v4's masked
// int8-digit decoder (EngineI8Masked), groups in order, into one C fragment, and at the end of
// the item either writes the output (one part) or its f32 partial, the last part to arrive
// summing the partials in part order. Rows past n arrive as zeros and are never written.
// Results are bitwise independent of the grid and of m (parts depend on n and k alone).
#include <cuda_runtime.h>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_band_stage_sm90.cuh"
#include "cuda/ternary/tq2_stage_i8x4_sm90.cuh"

namespace llmm::cuda_ternary {
namespace {

constexpr int kConsumers = kTq2V5Consumers;
constexpr int kG = kTq2V5StageGroups;
static_assert(kTq2V5Rows == 16 * kConsumers, "a band of 16 rows per consumer warp");
static_assert(kTq2V5StageBytes % 1024 == 0, "stages stay 1024-byte aligned (swizzled copy targets)");

struct V5Params {
  int stages, parts, part_groups;
  std::int64_t items;
  int coef, xs, col_stride;   // shared-memory offsets of the image (from the 1024-aligned base)
  std::uint32_t image_bytes;  // the staged image, one bulk copy
  std::uint32_t* counters;    // [bands] arrivals of parts (zeroed by the staging kernel)
  float* partials;            // [parts][m][n] (parts > 1)
};

template <class TIn, class TOut, int NT>
__global__ void __launch_bounds__(kTq2V5Threads, 1)
    tq2_stream_v5_kernel(const Tq2Args a, const V5Params p, const __grid_constant__ CUtensorMap codes_map,
                         const __grid_constant__ CUtensorMap scales_map) {
  using E = EngineI8Masked;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem);
  std::uint64_t* const empty = full + p.stages;
  std::uint64_t* const x_full = empty + p.stages;
  unsigned char* const ring = smem + 1024;
  const int groups = static_cast<int>(a.k / kTq2Group);
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

  if (warp == kConsumers) {
    if (lane != 0) return;
    // Producer. Weights are never written by kernels: streaming starts before the kernels ahead
    // on the stream have finished.
    const std::uint64_t policy = ptx::l2_evict_first_policy();
    int slot = 0;
    std::uint32_t parity = 0;
    for (std::int64_t it = i_begin; it < i_end; ++it) {
      const int s = static_cast<int>(it / p.parts), part = static_cast<int>(it - static_cast<std::int64_t>(s) * p.parts);
      const int g0 = part * p.part_groups, g1 = min(groups, g0 + p.part_groups);
      for (int gs = g0; gs < g1; gs += kG) {
        ptx::mbar_wait(&empty[slot], parity ^ 1u);
        unsigned char* const st = ring + slot * kTq2V5StageBytes;
        ptx::mbar_arrive_expect_tx(&full[slot], kTq2V5StageBytes);  // out-of-bounds parts of a box count too
        ptx::tensor_copy_2d_g2s(st, &codes_map, 32 * gs, kTq2V5Rows * s, &full[slot], policy);
        ptx::tensor_copy_2d_g2s(st + kTq2V5CodeBytes, &scales_map, 2 * kTq2V5Rows * s, gs, &full[slot], policy);
        if (++slot == p.stages) slot = 0, parity ^= 1u;
      }
    }
    return;  // the consumers wait for every copy issued here before they finish
  }

  // Consumers. The activation and the output may belong to the previous kernel on the stream.
  ptx::grid_dependency_wait();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(x_full, p.image_bytes);
    ptx::bulk_copy_g2s(smem + p.coef, a.workspace, p.image_bytes, x_full, ptx::l2_evict_last_policy());
  }
  ptx::mbar_wait(x_full, 0);

  const int g = lane >> 2, t4 = lane & 3;
  const int cols = static_cast<int>(a.m) * E::kSplit;
  const float2* const coef = reinterpret_cast<const float2*>(smem + p.coef);
  const unsigned char* xb[NT];  // this lane's column 8 nt + g, or the zero column
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) xb[nt] = smem + p.xs + (8 * nt + g < cols ? 8 * nt + g : cols) * p.col_stride;
  const BandLane bl(warp, lane);
  TOut* const out = static_cast<TOut*>(a.out);
  int slot = 0;
  std::uint32_t parity = 0;
  for (std::int64_t it = i_begin; it < i_end; ++it) {
    const int s = static_cast<int>(it / p.parts), part = static_cast<int>(it - static_cast<std::int64_t>(s) * p.parts);
    const int g0 = part * p.part_groups, g1 = min(groups, g0 + p.part_groups);
    float total[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) total[nt][0] = total[nt][1] = total[nt][2] = total[nt][3] = 0.0f;
    for (int gs = g0; gs < g1; gs += kG) {
      ptx::mbar_wait(&full[slot], parity);
      band_stage<NT, NT == 1>(ring + slot * kTq2V5StageBytes, gs, g1, bl, xb, coef + 2 * t4, total);
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&empty[slot]);
      if (++slot == p.stages) slot = 0, parity ^= 1u;
    }
    // C fragment: total[nt][0, 1] at row g, columns 8 nt + 2 t4 (+ 1), [2, 3] at row g + 8. A
    // column is digit c % 4 of token c / 4: lanes t4 and t4 ^ 1 hold the four digits of token
    // 2 nt + t4 / 2; the even lane sums (d0 + d1) + (d2 + d3).
    const int band = kConsumers * s + warp;
    if (16 * static_cast<std::int64_t>(band) >= a.n) continue;  // warp-uniform: rows past n
    float v[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float lo = total[nt][0] + total[nt][1], hi = total[nt][2] + total[nt][3];
      v[nt][0] = lo + __shfl_xor_sync(0xffffffffu, lo, 1);
      v[nt][1] = hi + __shfl_xor_sync(0xffffffffu, hi, 1);
    }
    const std::int64_t row0 = 16 * static_cast<std::int64_t>(band) + g;
    const bool writer = (t4 & 1) == 0;
    if (p.parts > 1) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int tok = 2 * nt + (t4 >> 1);
        if (!writer || tok >= a.m) continue;
        float* const dst = p.partials + (static_cast<std::int64_t>(part) * a.m + tok) * a.n;
        if (row0 < a.n) dst[row0] = v[nt][0];
        if (row0 + 8 < a.n) dst[row0 + 8] = v[nt][1];
      }
      __threadfence();
      __syncwarp();
      std::uint32_t arrived = 0;
      if (lane == 0) arrived = atomicAdd(&p.counters[band], 1u);
      if (__shfl_sync(0xffffffffu, arrived, 0) != static_cast<std::uint32_t>(p.parts - 1)) continue;
      __threadfence();  // every other part's partial is visible now
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int tok = 2 * nt + (t4 >> 1);
      if (!writer || tok >= a.m) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = row0 + 8 * h;
        if (row >= a.n) continue;
        float t = v[nt][h];
        if (p.parts > 1) {
          // The last part sums every part's partial (its own included) in part order, four loads
          // in flight at a time.
          const float* const src = p.partials + static_cast<std::int64_t>(tok) * a.n + row;
          const std::int64_t step = a.m * a.n;
          t = 0.0f;
          int q = 0;
          for (; q + 4 <= p.parts; q += 4) {
            const float x0 = __ldcg(src + q * step), x1 = __ldcg(src + (q + 1) * step);
            const float x2 = __ldcg(src + (q + 2) * step), x3 = __ldcg(src + (q + 3) * step);
            t = (((t + x0) + x1) + x2) + x3;
          }
          for (; q < p.parts; ++q) t += __ldcg(src + q * step);
        }
        if (t != t) t = dev::ieee_dot<TIn>(a, tok, row);  // a non-finite input (marked) or an overflow
        out[tok * a.out_ld + row] = dev::from_f32<TOut>(t);
      }
    }
  }
}

template <class TIn, class TOut, int NT>
void launch_nt(const Tq2Args& a, const Tq2StreamV5Config& c, StreamHandle stream) {
  auto* kernel = &tq2_stream_v5_kernel<TIn, TOut, NT>;
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  const Tq2StreamV5Smem l = tq2_stream_v5_smem(a.m, a.k, c.stages);
  const std::int64_t bands = (a.n + 15) / 16;
  const std::int64_t image = (l.xs - l.coef) + (4 * a.m + 1) * l.col_stride;
  const std::int64_t image16 = (image + 15) / 16 * 16, counters16 = (bands * 4 + 15) / 16 * 16;
  auto* const ws = static_cast<unsigned char*>(a.workspace);
  V5Params p{c.stages, c.parts.parts, c.parts.part_groups, c.items, l.coef, l.xs, l.col_stride,
             static_cast<std::uint32_t>(image), reinterpret_cast<std::uint32_t*>(ws + image16),
             c.parts.parts > 1 ? reinterpret_cast<float*>(ws + image16 + counters16) : nullptr};
  // Codes as bytes [n rows][k/4], boxes of 128 rows x 128 bytes (4 groups), 128-byte swizzle.
  const std::uint64_t cdims[2] = {static_cast<std::uint64_t>(a.k / 4), static_cast<std::uint64_t>(a.n)};
  const std::uint32_t cbox[2] = {128, kTq2V5Rows};
  const CUtensorMap codes =
      cuda_common::make_tensor_map_u8_2d(a.codes, cdims, static_cast<std::uint64_t>(a.k / 4), cbox, true, "tq2_stream_v5");
  // Transposed scales as bytes [k/128][2 ld], boxes of 4 groups x 128 rows (256 bytes).
  const std::uint64_t sdims[2] = {static_cast<std::uint64_t>(2 * a.scales_t_ld), static_cast<std::uint64_t>(a.k / kTq2Group)};
  const std::uint32_t sbox[2] = {2 * kTq2V5Rows, kG};
  const CUtensorMap scales = cuda_common::make_tensor_map_u8_2d(a.scales_t, sdims, static_cast<std::uint64_t>(2 * a.scales_t_ld),
                                                                sbox, false, "tq2_stream_v5");
  // tq2_stage_v5 (tq2_stage_i8x4): the image, plus the band counters zeroed by the extra blocks.
  const StageImage im{l.col_stride, l.xs - l.coef, c.n_tiles, tq2_input_vec16(a), p.counters, static_cast<int>(bands)};
  launch_tq2_stage_i8x4<TIn>(a, im, 1 + static_cast<int>(bands / 8192), stream);
  cuda_dense::host::check_launch(tq2_stream_v5_stage_kernel_name(a));
  cuda_common::launch_pdl(kernel, dim3(static_cast<unsigned>(c.grid)), dim3(kTq2V5Threads), static_cast<std::size_t>(c.smem_bytes),
                          stream, a, p, codes, scales);
}

}  // namespace

void launch_tq2_stream_v5(const Tq2Args& a, StreamHandle stream) {
  const auto c = tq2_stream_v5_config(a, cuda_dense::host::current_sm_count());
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v5: arguments outside the kernel's contract (m ", a.m, ", k ", a.k, ")");
  const std::size_t need = tq2_stream_v5_workspace_bytes(a.m, a.n, a.k);
  if (!a.workspace || a.workspace_bytes != need || reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0)
    fail(ErrorCode::Internal, "tq2_stream_v5: needs a 16-byte aligned workspace of exactly ", need, " bytes, got ",
         a.workspace_bytes);
  const std::string name = tq2_stream_v5_kernel_name(a);
  with_in_out(a, [&](auto in, auto out) {
    with_n_tiles(c->n_tiles, [&](auto nt) { launch_nt<decltype(in), decltype(out), nt()>(a, *c, stream); });
  });
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
