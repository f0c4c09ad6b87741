// tq2_stream_v4: the sm_90 streaming engine with the masked int8-digit decoder (EngineI8Masked,
// tq2_i8_digits.cuh),
// m <= 2. What changed against v3 (measured issue-bound: ~150 warp instructions per 512-byte
// group, consumers doing their own cp.async, commits, waits and address arithmetic):
// - one producer lane feeds a ring of shared-memory stages through the copy engine: four
//   tensor-map copies per stage (16 rows x 128 bytes each: 16 rows x 16 groups of codes, 8 KB)
//   and one bulk copy per band of its scales (contiguous in the SoA layout) into a ring of four
//   band slots, each completing in bytes on a "full" mbarrier; consumers only wait, read shared
//   memory, decode and mma, then arrive on the "empty" mbarrier.
//   (Measured on the way: one 256-byte bulk copy per row and stage ran at 0.8 TB/s, the copy
//   engine taking ~40-80 SM cycles an instruction; boxes of 16 rows x 32 bytes x 16 groups and
//   two band slots, 1.4-2.3 TB/s.)
// - persistent blocks own contiguous ranges of 16-row bands; the activation of the whole K is
//   converted once for all blocks by tq2_stage_v4 into the exact shared-memory image each block
//   then loads with one bulk copy and keeps (converting it in every block took a third of the
//   consumers' instructions on 27648x3072: ncu, 2026-11-30). Session 13 brought the in-block
//   conversion back as an option for small images (m <= 4, at most 32 (row, group) items under
//   Auto, four loads in flight a warp): one launch instead of two, to be measured;
// - programmatic dependent launch: the producer starts streaming weights before the kernels ahead
//   on the stream (tq2_stage_v4, and whatever preceded it) have finished (weights are never
//   written by kernels); the consumers wait for them (griddepcontrol.wait) before they read the
//   staged activation or write the output.
// Stage layout: codes [4 copies][16 rows][128 B], each copy's 16-byte unit u of row r stored at
// unit u ^ (r % 8) (the copy engine's 128-byte swizzle: reads down a column of rows hit
// different banks); rows past n and bytes past k/4 arrive as zeros. Band slot: scales
// [16 rows][k/128] f16.
// Results are bitwise independent of the grid (each band's reduction order is fixed: warp w sums
// groups w, w + 8, w + 16, ... in order, then the 8 warps pairwise, smallest digit column first).
#include <cuda_runtime.h>

#include "cuda/common/bulk_copy_sm90.cuh"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_i8_digits.cuh"
#include "cuda/ternary/tq2_stage_i8x4_sm90.cuh"

namespace llmm::cuda_ternary {
namespace {

constexpr int kConsumers = kTq2V4Consumers;
constexpr int kConsumerThreads = 32 * kConsumers;
constexpr int kGs = kTq2V4StageGroups;
static_assert(kGs == 2 * kConsumers, "two groups of each stage per consumer warp");
static_assert(kConsumers == 8, "the band reduction sums 8 warps pairwise");

struct V4Params {
  int stages;
  int n_tiles;  // n8 tiles of digit columns: ceil(4 m / 8)
  Tq2StreamV4Smem smem;
  bool in_vec;
};

// InBlock: the consumer warps convert the activation image themselves (no staging kernel).
template <class TIn, class TOut, int NT, bool InBlock>
__global__ void __launch_bounds__(kTq2V4Threads, 2)
    tq2_stream_v4_kernel(const Tq2Args a, const V4Params p, const __grid_constant__ CUtensorMap codes_map) {
  using E = EngineI8Masked;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The layout's offsets count from the base rounded up to 1024 (tq2_stream_v4_smem keeps the slack).
  unsigned char* const smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  std::uint64_t* const full = reinterpret_cast<std::uint64_t*>(smem + p.smem.bars);
  std::uint64_t* const empty = full + p.stages;
  std::uint64_t* const sc_full = empty + p.stages;  // [kTq2V4ScaleSlots] band slots
  std::uint64_t* const sc_empty = sc_full + kTq2V4ScaleSlots;
  std::uint64_t* const x_full = sc_empty + kTq2V4ScaleSlots;  // the staged activation image
  unsigned char* const ring = smem + p.smem.ring;
  const int groups = static_cast<int>(a.k / kTq2Group);  // k <= 2^20 (tq2_stream_v4_supports)
  const int bands = static_cast<int>((a.n + 15) / 16);    // n < 2^31
  const int b_begin = static_cast<int>(static_cast<std::int64_t>(bands) * blockIdx.x / gridDim.x);
  const int b_end = static_cast<int>(static_cast<std::int64_t>(bands) * (blockIdx.x + 1) / gridDim.x);
  const int slot_bytes = 32 * groups;  // one band's scales

  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      ptx::mbar_init(&full[s], 1);            // the producer's arrive.expect_tx (+ the bytes)
      ptx::mbar_init(&empty[s], kConsumers);  // one arrival per consumer warp
    }
    for (int s = 0; s < kTq2V4ScaleSlots; ++s) {
      ptx::mbar_init(&sc_full[s], 1);
      ptx::mbar_init(&sc_empty[s], 1);  // consumer thread 0, after the band's reduction barrier
    }
    ptx::mbar_init(x_full, 1);
    ptx::mbar_init_fence();
  }
  __syncthreads();
  ptx::grid_launch_dependents();

  if (warp == kConsumers) {
    if (lane != 0) return;
    // Producer: band b's scales into slot (b - b_begin) % 4, then its stages into the ring.
    const std::uint64_t policy = ptx::l2_evict_first_policy();
    const int row_bytes = static_cast<int>(a.k / 4);
    int slot = 0;
    std::uint32_t parity = 0;
    for (int b = b_begin; b < b_end; ++b) {
      const int i = b - b_begin, bs = i % kTq2V4ScaleSlots;
      ptx::mbar_wait(&sc_empty[bs], ((i / kTq2V4ScaleSlots) & 1) ^ 1u);
      const std::int64_t rows = a.n - 16 * static_cast<std::int64_t>(b) < 16 ? a.n - 16 * static_cast<std::int64_t>(b) : 16;
      const auto bytes = static_cast<std::uint32_t>((rows * groups * 2 + 15) & ~std::int64_t{15});  // tail: kTq2ScalesTailBytes
      ptx::mbar_arrive_expect_tx(&sc_full[bs], bytes);
      ptx::bulk_copy_g2s(smem + p.smem.scales + bs * slot_bytes, a.scales + static_cast<std::int64_t>(b) * 16 * groups, bytes,
                         &sc_full[bs], policy);
      for (int g0 = 0; g0 < groups; g0 += kGs) {
        ptx::mbar_wait(&empty[slot], parity ^ 1u);
        // Copies that start past the row's end are not issued (their groups are skipped below).
        const int x0 = 32 * g0, copies = (row_bytes - x0 + 127) / 128 < 4 ? (row_bytes - x0 + 127) / 128 : 4;
        ptx::mbar_arrive_expect_tx(&full[slot], 2048u * copies);
        for (int c = 0; c < copies; ++c)
          ptx::tensor_copy_2d_g2s(ring + slot * kTq2V4StageBytes + 2048 * c, &codes_map, x0 + 128 * c, 16 * b, &full[slot],
                                  policy);
        if (++slot == p.stages) slot = 0, parity ^= 1u;
      }
    }
    return;  // consumers wait for every copy issued here before they finish
  }

  // Consumers. The activation and the output may belong to the previous kernel on the stream.
  ptx::grid_dependency_wait();
  const int tid = static_cast<int>(threadIdx.x);
  const int cols = static_cast<int>(a.m) * E::kSplit;
  const int col_stride = p.smem.col_stride;
  const float2* const coef = reinterpret_cast<const float2*>(smem + p.smem.coef);
  const unsigned char* const xs = smem + p.smem.xs;
  float* const red = reinterpret_cast<float*>(smem + p.smem.red);

  if constexpr (InBlock) {
    // The image as tq2_stage_v4 writes it, converted here (the first stages are in flight), then
    // the consumers meet (the producer warp is not in the barrier).
    const int groups_i = static_cast<int>(a.k / kTq2Group), rows = static_cast<int>(a.m);
    stage_items_batched_i8x4<TIn, 4>(static_cast<const TIn*>(a.in), a.in_ld, rows, groups_i, warp, kConsumers, p.in_vec, lane,
                                     smem + p.smem.coef, p.smem.xs - p.smem.coef, col_stride, 8 * p.n_tiles);
    stage_fill_unused_i8x4(smem + p.smem.coef, 1, 0, cols, 8 * p.n_tiles, groups_i, p.smem.xs - p.smem.coef, col_stride, tid,
                           kConsumerThreads);
    ptx::named_barrier_sync(1, kConsumerThreads);
  } else {
    // The staged records and coefficients (tq2_stage_v4's image), one bulk copy.
    if (tid == 0) {
      const auto bytes = static_cast<std::uint32_t>(a.workspace_bytes);
      ptx::mbar_arrive_expect_tx(x_full, bytes);
      ptx::bulk_copy_g2s(smem + p.smem.coef, a.workspace, bytes, x_full, ptx::l2_evict_last_policy());
    }
    ptx::mbar_wait(x_full, 0);
  }

  const int g = lane >> 2, t4 = lane & 3;
  const unsigned char* xb[NT];  // this lane's column 8 nt + g, or the zero column
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) xb[nt] = xs + (8 * nt + g < cols ? 8 * nt + g : cols) * col_stride;
  const int rec0 = E::rec_offset(2 * t4), rec1 = E::rec_offset(2 * t4 + 1);
  // Group j = w (+ 8) of a stage: copy j / 4, 16-byte unit 2 (j % 4) + t4 / 2 of rows g and
  // g + 8, swizzled by row % 8 = g; + 1024: row g + 8; + 4096: group w + 8.
  const int code_off = (warp >> 2) * 2048 + g * 128 + (((2 * (warp & 3) + (t4 >> 1)) ^ g) << 4) + 8 * (t4 & 1);
  TOut* const out = static_cast<TOut*>(a.out);
  int slot = 0;
  std::uint32_t parity = 0;
  for (int b = b_begin; b < b_end; ++b) {
    const int i = b - b_begin, bs = i % kTq2V4ScaleSlots;
    float total[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) total[nt][0] = total[nt][1] = total[nt][2] = total[nt][3] = 0.0f;
    ptx::mbar_wait(&sc_full[bs], (i / kTq2V4ScaleSlots) & 1);
    // Running pointers to this warp's group w of the stage (its records, coefficients and the
    // scales of rows g, g + 8): one add each per stage instead of per-group index arithmetic.
    const auto* const sc = reinterpret_cast<const std::uint16_t*>(smem + p.smem.scales + bs * slot_bytes);
    const std::uint16_t* s0 = sc + g * groups + warp;
    const std::uint16_t* s1 = sc + (g + 8) * groups + warp;
    int xoff = warp * E::kRecBytes;  // group w's records, in every column
    const float2* cf = coef + warp * 8 * NT + 2 * t4;
    const int mine_left = groups - warp;  // this warp's groups of the band: gl - warp < mine_left
    for (int g0 = 0; g0 < groups; g0 += kGs) {
      ptx::mbar_wait(&full[slot], parity);
      const unsigned char* const st = ring + slot * kTq2V4StageBytes + code_off;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (g0 + kConsumers * h < mine_left) {  // warp-uniform: the band's last stage may hold fewer groups
          stream::Group cur;
          cur.c[0] = *reinterpret_cast<const uint2*>(st + h * 4096);
          cur.c[1] = *reinterpret_cast<const uint2*>(st + h * 4096 + 1024);
          cur.s = static_cast<std::uint32_t>(s0[kConsumers * h]) | (static_cast<std::uint32_t>(s1[kConsumers * h]) << 16);
          const unsigned char* xg[NT];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) xg[nt] = xb[nt] + xoff + h * kConsumers * E::kRecBytes;
          E::template group<NT>(cur, xg, rec0, rec1, cf + h * kConsumers * 8 * NT, total);
        }
      }
      s0 += kGs, s1 += kGs, xoff += kGs * E::kRecBytes, cf += kGs * 8 * NT;
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&empty[slot]);
      if (++slot == p.stages) slot = 0, parity ^= 1u;
    }
    // Band reduction: C fragment c0, c1 at (row g, columns 2 t4, 2 t4 + 1), c2, c3 at row g + 8.
    // Double-buffered: the next band writes the other half, and the one after waits for this
    // band's barrier, which every reader below has passed.
    const int rb = i & 1;  // reduction buffer
    constexpr int kPart = 16 * 8 * NT;  // one warp's partials: [16 rows][8 NT columns]
    float* const mine = red + (rb * kConsumers + warp) * kPart;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mine[g * 8 * NT + 8 * nt + 2 * t4] = total[nt][0];
      mine[g * 8 * NT + 8 * nt + 2 * t4 + 1] = total[nt][1];
      mine[(g + 8) * 8 * NT + 8 * nt + 2 * t4] = total[nt][2];
      mine[(g + 8) * 8 * NT + 8 * nt + 2 * t4 + 1] = total[nt][3];
    }
    ptx::named_barrier_sync(1, kConsumerThreads);
    if (tid == 0) ptx::mbar_arrive(&sc_empty[bs]);  // every warp has read this band's scales
    if (tid < 16 * a.m) {
      const int rr = tid & 15, m = tid >> 4;
      const std::int64_t row = 16 * static_cast<std::int64_t>(b) + rr;
      if (row < a.n) {
        const float* const part = red + rb * kConsumers * kPart + rr * 8 * NT + m * E::kSplit;
        // Fixed pairwise order over the 8 warps (a shorter dependency chain than a running sum:
        // this thread's latency delays the next band's barrier), lowest digit first.
        float d[E::kSplit];
#pragma unroll
        for (int s = 0; s < E::kSplit; ++s) {
          float v[kConsumers];
#pragma unroll
          for (int q = 0; q < kConsumers; ++q) v[q] = part[q * kPart + s];
          d[s] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        }
        float t = ((d[0] + d[1]) + d[2]) + d[3];
        if (t != t) t = dev::ieee_dot<TIn>(a, m, row);  // a non-finite input (marked) or an overflow
        out[m * a.out_ld + row] = dev::from_f32<TOut>(t);
      }
    }
  }
}

template <class TIn, class TOut, int NT>
void launch_nt(const Tq2Args& a, const Tq2StreamV4Config& c, StreamHandle stream) {
  auto* kernel = &tq2_stream_v4_kernel<TIn, TOut, NT, false>;
  if constexpr (NT * 8 <= 4 * kTq2StreamInBlockMaxM)  // in-block images: m <= 4 (two n8 tiles) only
    if (c.stage_in_block) kernel = &tq2_stream_v4_kernel<TIn, TOut, NT, true>;
  if (c.stage_in_block && kernel == &tq2_stream_v4_kernel<TIn, TOut, NT, false>)
    fail(ErrorCode::Internal, "tq2_stream_v4: an in-block image planned for m ", a.m);
  cuda_common::set_smem_bytes(kernel, c.smem_bytes);
  const V4Params p{c.stages, c.n_tiles, tq2_stream_v4_smem(a.m, a.k, c.stages), tq2_input_vec16(a)};
  // Codes as bytes [n rows][k/4], boxes of 16 rows x 128 bytes, 128-byte swizzle.
  const std::uint64_t dims[2] = {static_cast<std::uint64_t>(a.k / 4), static_cast<std::uint64_t>(a.n)};
  const std::uint32_t box[2] = {128, 16};
  const CUtensorMap map =
      cuda_common::make_tensor_map_u8_2d(a.codes, dims, static_cast<std::uint64_t>(a.k / 4), box, true, "tq2_stream_v4");
  // tq2_stage_v4 (tq2_stage_i8x4): one warp per (token, group) item, plus one block for the zero
  // column and the unused coefficients.
  if (!c.stage_in_block) {
    launch_tq2_stage_i8x4<TIn>(a, StageImage{p.smem.col_stride, p.smem.xs - p.smem.coef, p.n_tiles, p.in_vec, nullptr, 0}, 1,
                               stream);
    cuda_dense::host::check_launch(tq2_stream_v4_stage_kernel_name(a));
  }
  cuda_common::launch_pdl(kernel, dim3(static_cast<unsigned>(c.grid)), dim3(kTq2V4Threads), static_cast<std::size_t>(c.smem_bytes),
                          stream, a, p, map);
}

}  // namespace

void launch_tq2_stream_v4(const Tq2Args& a, StreamHandle stream) {
  const auto c = tq2_stream_v4_config(a, cuda_dense::host::current_sm_count());
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v4: arguments outside the kernel's contract (m ", a.m, ", k ", a.k, ")");
  if (!c->stage_in_block && (!a.workspace || a.workspace_bytes != tq2_stream_v4_stage_bytes(a.m, a.k) ||
                             reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0))
    fail(ErrorCode::Internal, "tq2_stream_v4: needs a 16-byte aligned workspace of exactly ", tq2_stream_v4_stage_bytes(a.m, a.k),
         " bytes, got ", a.workspace_bytes);
  const std::string name = tq2_stream_v4_kernel_name(a);
  with_in_out(a, [&](auto in, auto out) {
    with_n_tiles(c->n_tiles, [&](auto nt) { launch_nt<decltype(in), decltype(out), nt()>(a, *c, stream); });
  });
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
