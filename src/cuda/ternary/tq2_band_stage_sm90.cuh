// One consumer warp's work on one stage of the sm_90 streaming engine's ring (tq2_stream_v5,
// tq2_moe_stream_sm90): its rows and groups of the stage's 128 rows x kTq2V5StageGroups groups
// (codes 128-byte swizzled, then the stage's scales [group][128 rows] f16; BandLane below),
// decoded by EngineI8Masked against the activation image and added into C fragments.
//
// Overlap = true runs a full stage's groups as straight-line code: each group is an independent
// chain (shared loads, four dependent int8 mma, conversions), and without a branch between them
// the compiler overlaps the chains, at ~104 registers instead of ~72. Session 10 (ncu of
// tq2_moe_stream_sm90 at m = 1, one block per SM): with a warp-uniform guard before every group
// the chains ran one after another, ~45% of the stall samples; overlapped, m = 1 ran 1.12-1.25x
// faster (and v5 at m <= 2 1.03-1.05x), but where two blocks should share an SM the registers
// allow only one and m >= 4 ran 1.15-1.4x slower. So launchers overlap only where one block per
// SM is all the grid has (tq2_moe_stream_sm90) or the kernel has one n8 tile (v5, m <= 2).
#pragma once
#include "cuda/ternary/tq2_i8_digits.cuh"

namespace llmm::cuda_ternary {

// The weight rows of the mma's A rows g and g + 8 in a warp's 16-row band: 16 w + row and
// 16 w + 8 + row, row = band_row(g) = 2 (g % 4) + g / 4. Why not row = g: the stage's codes are
// 128-byte swizzled (16-byte unit c of row r at c ^ (r % 8)), and a lane reads 8 bytes of the
// units 2 j, 2 j + 1 of its row; the 64-bit loads go out a half-warp (rows g = 0..3) at a time, and
// rows r and r ^ 1 put those two units in the same banks: 2-way conflicts, 4 wavefronts a load
// instead of 2 (ncu, session 17: 4.0 conflicts per 16-row group, 18% of the shared loads'
// wavefronts). Rows 0, 2, 4, 6 (and 1, 3, 5, 7) map the units to four different bank sets. The
// permutation is the mma's A rows only: B and the digit layout do not change, and the output row
// of C rows g, g + 8 follows it.
__device__ __forceinline__ constexpr int band_row(int g) { return 2 * (g & 3) + (g >> 2); }

// A consumer warp's rows and groups of a stage. Tiles = 1: warp w decodes rows 16 w .. 16 w + 15
// over all the stage's groups. Tiles = 2 (n_tiles <= kTq2RingPairMaxTiles): warps 2 p and 2 p + 1
// share rows 32 p .. 32 p + 31 (two 16-row tiles) and warp 2 p + h decodes groups 2 h, 2 h + 1 of
// each stage for both tiles, so each B fragment (and each coefficient load) serves two tiles: at m
// = 1 the B and coefficient loads were 12 of a 16-row group's 18 shared wavefronts (ncu source
// counters, session 18). The pair then adds its halves (tq2_ring_sm90.cuh); warp w still ends
// with tile w % 2 of its pair, i.e. rows 16 w .. 16 w + 15, as with Tiles = 1.
template <int Tiles>
struct BandLane {
  static constexpr int kGroups = kTq2V5StageGroups / Tiles;  // groups of a stage this warp decodes
  int row_off;  // this lane's code bytes of tile 0 (tile t: + 2048 t): row r0 + row (+ 1024: + 8), half t4 % 2 of a unit
  int sc_off;   // this lane's scale of tile 0's row r0 + row at the warp's first group (tile t: + 32 t bytes)
  int j0;       // the warp's first group of a stage
  int row, t4;  // row: band_row(lane / 4), its rows' offset in a tile (and their swizzle, row % 8)
  int rec0, rec1;  // its words' record offsets (EngineI8Masked::rec_offset)
  __device__ __forceinline__ BandLane(int warp, int lane)
      : row_off((first_row(warp) + band_row(lane >> 2)) * 128 + 8 * (lane & 1)),
        sc_off(kTq2V5CodeBytes + (first_row(warp) + band_row(lane >> 2)) * 2 + first_group(warp) * 2 * kTq2V5Rows),
        j0(first_group(warp)),
        row(band_row(lane >> 2)),
        t4(lane & 3),
        rec0(EngineI8Masked::rec_offset(2 * (lane & 3))),
        rec1(EngineI8Masked::rec_offset(2 * (lane & 3) + 1)) {}
  static __device__ __forceinline__ int first_row(int warp) { return Tiles == 1 ? 16 * warp : 32 * (warp >> 1); }
  static __device__ __forceinline__ int first_group(int warp) { return Tiles == 1 ? 0 : kGroups * (warp & 1); }
};

// This warp's groups of the stage at `st` (stage groups gs .. gs + kTq2V5StageGroups - 1, those
// below g1). xb[nt]: this lane's record column (group 0); cf: its coefficients of group 0 (+ gl *
// 8 NT per group); total[t]: tile t's C fragment.
template <int NT, bool Overlap, int Tiles>
__device__ __forceinline__ void band_stage(const unsigned char* st, int gs, int g1, const BandLane<Tiles>& l,
                                           const unsigned char* const (&xb)[NT], const float2* cf,
                                           float (&total)[Tiles][NT][4]) {
  using E = EngineI8Masked;
  constexpr int kG = BandLane<Tiles>::kGroups;
  const auto one = [&](int i) {
    const int j = l.j0 + i, gl = gs + j;
    stream::Group cur[Tiles];
    const unsigned char* const q = st + l.row_off + (((2 * j + (l.t4 >> 1)) ^ l.row) << 4);
    const auto* const sc = reinterpret_cast<const std::uint16_t*>(st + l.sc_off + i * 2 * kTq2V5Rows);
#pragma unroll
    for (int t = 0; t < Tiles; ++t) {
      cur[t].c[0] = *reinterpret_cast<const uint2*>(q + 2048 * t);
      cur[t].c[1] = *reinterpret_cast<const uint2*>(q + 2048 * t + 1024);
      cur[t].s = static_cast<std::uint32_t>(sc[16 * t]) | (static_cast<std::uint32_t>(sc[16 * t + 8]) << 16);
    }
    const unsigned char* xg[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xg[nt] = xb[nt] + gl * E::kRecBytes;
    E::template group_tiles<NT, Tiles>(cur, xg, l.rec0, l.rec1, cf + gl * 8 * NT, total);
  };
  if (Overlap && gs + kTq2V5StageGroups <= g1) {
#pragma unroll
    for (int i = 0; i < kG; ++i) one(i);
  } else {  // warp-uniform: a part's last stage may hold fewer groups
#pragma unroll
    for (int i = 0; i < kG; ++i)
      if (gs + l.j0 + i < g1) one(i);
  }
}

}  // namespace llmm::cuda_ternary
