// The tile shapes of the Hopper tiled engine (src/cuda/engine/tiled), shared by the host plan and
// the kernels so that both compute the same shared-memory layout. No CUDA headers.
//
// One CTA = 3 warpgroups: a producer (TMA / cp.async, few registers) and two consumers. Weights
// are always the wgmma A operand: each consumer owns 64 weight rows (output features), so a tile
// is 128 features x BN activation rows (tokens), or (tall dense tiles, kTiledTallBM) 128 rows a
// consumer in two 64-row halves, 256 a tile; K moves in slices of one 128-byte swizzle row
// (64 16-bit or 32 f32 elements) through a ring of `stages` shared-memory stages.
#pragma once
#include <cstdint>

namespace llmm::engine {

inline constexpr int kTiledBM = 128;      // weight rows per tile (2 consumer warpgroups x 64)
inline constexpr int kTiledBK = 64;       // 16-bit elements of K per stage: 128 bytes
inline constexpr int kTiledF32BK = 32;    // f32 elements of K per stage (the 3xTF32 instance): 128 bytes
inline constexpr int kTiledThreads = 384;  // producer + 2 consumer warpgroups
inline constexpr int kTiledFeatureGroup = 8;  // feature tiles swept together (L2 reuse of tokens and weights)
// Epilogue: each consumer stages 32 tokens x 64 features of f32 at a time, rows padded to 68
// floats so that the fragment's scattered writes hit 32 different banks.
inline constexpr int kTiledEpiTokens = 32;
inline constexpr int kTiledEpiStride = 68;
// 16-bit outputs (not K parts) instead: 64 tokens x 64 features converted in registers, written
// by stmatrix (transposed: a token row's 8 features a 16-byte unit) in 128-byte rows, unit u of
// row r at u ^ (r % 8), 8 KB a consumer in the same area.
inline constexpr int kTiledEpi16Tokens = 64;
inline constexpr int kTiledEpi16Bytes = kTiledEpi16Tokens * 128;
static_assert(2 * kTiledEpi16Bytes <= 2 * kTiledEpiTokens * kTiledEpiStride * 4, "the 16-bit epilogue's rows must fit the staging area");
// Width of the narrow tiles a row map may mix with its wide ones (MoE: experts with few rows).
inline constexpr int kTiledNarrowBN = 64;
// FP8 weights: a stage's e4m3 codes [128 rows][64 k], and the 16-bit boxes the consumers convert
// them into: two of [64 rows][64 k] a consumer (one written while the other's wgmmas run).
inline constexpr int kTiledFp8CodeBytes = kTiledBM * kTiledBK;
inline constexpr int kTiledFp8BoxBytes = 2 * 2 * 64 * kTiledBK * 2;

struct TiledSm90Shape {
  int bn = 0;      // tokens per tile (the wgmma N): kTiledDenseWidths, or 64, 128, 256
  int stages = 0;  // depth of the shared-memory ring
  // Bytes of a stage's weight part: a 16-bit box [128 rows][64 k], or (ternary) the box's codes
  // and scales padded to keep the token part 1024-byte aligned.
  int a_region = kTiledBM * kTiledBK * 2;
  // Token parts of a stage, each [bn rows][128 bytes]: 1, or 2 for the 3xTF32 instance (the rows
  // as TMA brought them, then rounded to tf32 in place, and their tf32 remainders).
  int b_parts = 1;
  // FP8 weights (Fp8Weights): the weight part is the stage's e4m3 codes as TMA brought them;
  // each consumer converts its 64 rows into one of its two 16-bit boxes (kTiledFp8BoxBytes after
  // the stages, before the epilogue's staging), which its wgmmas read.
  bool convert = false;
  // FP8 x FP8 (Fp8MmaWeights): a stage's K is kTiledW8a8BK one-byte elements (the 128-byte rows
  // hold 128 codes), and after its token rows come their bn f32 scales of that 128-k block, in a
  // region of this many bytes (1024-byte aligned: the next stage's swizzle); 0 otherwise.
  int scale_region = 0;
  constexpr int a_bytes() const { return a_region; }
  constexpr int b_part_bytes() const { return bn * kTiledBK * 2; }
  constexpr int b_bytes() const { return b_parts * b_part_bytes(); }
  constexpr int stage_bytes() const { return a_bytes() + b_bytes() + scale_region; }
  constexpr int ring_bytes() const { return stages * stage_bytes() + (convert ? kTiledFp8BoxBytes : 0); }
  constexpr int epi_bytes() const { return 2 * kTiledEpiTokens * kTiledEpiStride * 4; }
  // full and empty a stage; with two token parts also `raw` (the TMA rows landed, not yet split).
  constexpr int barrier_bytes() const { return (b_parts > 1 ? 3 : 2) * stages * 8; }
  // The ring (1024-byte aligned for the 128-byte swizzle), the epilogue staging, the mbarriers;
  // a row map's own bytes come after, and 1024 bytes of slack let the kernel align its base.
  constexpr int fixed_smem_bytes() const { return 1024 + ring_bytes() + epi_bytes() + barrier_bytes(); }
};

// The MoE row maps' tile classes for one expert's `count` routed rows at kernel width bn: wide
// tiles of bn while at least a wide tile's worth is left (or more than 5/8 of one remains); a
// rest of 65..160 rows starts with one mid tile of 128 (bn 256 only); what is left goes in narrow
// tiles of kTiledNarrowBN. Each tile streams the expert's whole weight box: a rest of 128 rows in
// two narrow tiles streamed it twice, at n64 wgmmas that read as many weight bytes from shared
// memory as token bytes. Tiles run wide, then mid, then narrow. Never more tiles than
// ceil(count / 64) (the host's tile-table bound adds one per active expert on top).
struct ExpertTileSplit {
  int wide = 0, mid = 0, narrow = 0;
};
constexpr int tiled_sm90_mid_bn(int bn) { return bn > 2 * kTiledNarrowBN ? 2 * kTiledNarrowBN : 0; }
constexpr ExpertTileSplit tiled_sm90_expert_split(int count, int bn) {
  const int narrow_bn = bn > kTiledNarrowBN ? kTiledNarrowBN : bn, mid_bn = tiled_sm90_mid_bn(bn);
  ExpertTileSplit s;
  s.wide = count / bn;
  int rest = count - s.wide * bn;
  if (bn == narrow_bn || rest > bn * 5 / 8) {
    s.wide += rest > 0;
    return s;
  }
  if (mid_bn != 0 && rest > narrow_bn) s.mid = 1, rest -= mid_bn;
  s.narrow = rest > 0 ? (rest + narrow_bn - 1) / narrow_bn : 0;
  return s;
}

// The staged MoE row map's tile hand-out (ExpertRowsParams::tile_counter): the producer claims
// each next tile from the counter and passes it to the consumers through a ring of this many
// slots (a full and an empty mbarrier and a tile number each).
inline constexpr int kTiledSchedDepth = 4;
inline constexpr int kTiledSchedBytes = kTiledSchedDepth * (8 + 8 + 4);
static_assert(kTiledSchedBytes % 8 == 0, "the row map's bytes after the slots stay 8-byte aligned");
// The MoE row maps' own shared memory (after the fixed part): the tile hand-out slots, a tile's
// row sources (8 bytes a row), each consumer's copy of its output rows (4 bytes a row), tile and
// row starts per expert.
constexpr int tiled_sm90_moe_extra_bytes(int bn, int n_experts) {
  return kTiledSchedBytes + bn * 8 + 2 * bn * 4 + 2 * (n_experts + 1) * 4;
}

// The MoE instance that sorts the routed rows itself (ExpertRowsFused: one kernel, no moe_map
// and no staging copy before it) takes up to this many routed rows (m * top_k). Each CTA holds
// the sorted list as u16 row numbers after the row map's bytes; the sort's per-warp counters
// [12][n_experts] and totals borrow the ring before the first stage is loaded.
inline constexpr int kTiledMoeFusedMaxRows = 2048;
static_assert(kTiledMoeFusedMaxRows <= 65536, "the fused row list holds u16 row numbers");
constexpr int tiled_sm90_moe_fused_extra_bytes(int bn, int n_experts, int routed) {
  return tiled_sm90_moe_extra_bytes(bn, n_experts) + (routed * 2 + 15) / 16 * 16;
}
// What the fused sort borrows from the ring: (12 + 1) x n_experts u32.
constexpr int tiled_sm90_moe_fused_sort_bytes(int n_experts) { return (kTiledThreads / 32 + 1) * n_experts * 4; }

// Ternary weights (Tq2Weights): a stage's weight part is its 128 rows' codes, 16 bytes a row
// (64 k), then their 128 f16 scales of that k (the transposed scale copy makes them
// contiguous), both by TMA; the consumers decode them into registers.
inline constexpr int kTiledCodeBytes = kTiledBM * kTiledBK / 4;                // 2048
inline constexpr int kTiledCodeStageBytes = kTiledCodeBytes + kTiledBM * 2;   // 2304 with the scales
inline constexpr int kTiledCodeRegion = 3072;                                  // padded to 1024

// Stages: as many as a 212 KB ring holds (of the 227 KB an H200 block may have; the rest is the
// epilogue's staging, the barriers and a MoE row map's bytes), at most 8: 4 at bn 256, 6 at 128
// and 144, 8 at 64.
inline constexpr int kTiledRingBudget = 212 * 1024;
constexpr TiledSm90Shape tiled_sm90_shape(int bn) {
  const int stage = TiledSm90Shape{bn, 1}.stage_bytes(), fit = kTiledRingBudget / stage;
  return TiledSm90Shape{bn, fit < 8 ? fit : 8};
}
static_assert(tiled_sm90_shape(256).stages == 4 && tiled_sm90_shape(128).stages == 6 && tiled_sm90_shape(64).stages == 8,
              "the MoE and ternary instances' rings (measured at these depths)");

// The dense 16-bit instance's tile widths, widest first (the plan takes the first of equal cost):
// multiples of 16 (the 16-bit epilogue stores 16 tokens a stmatrix) between 64 and 256, so that
// a token count can be cut into tiles that fill whole waves (1536 rows in 11 tiles of 144: 264
// tiles = 2 waves on 132 SMs at n 3072, where 128 makes 288 = 2.2 waves). The MoE and ternary
// instances run 256, 128 and 64 only.
inline constexpr int kTiledDenseWidths[] = {256, 224, 192, 160, 144, 128, 96, 64};
// Tall tiles (dense 16-bit only): 256 weight rows, each consumer issuing two m64 wgmmas a k16
// step on the same token columns, so a stage does twice a 128-row tile's work for one round of
// barriers and token loads. They let a ragged tile count fill the SMs at twice the width's area
// (1536 x 3072: 132 tiles of 256 x 144 = one wave, where 128-row tiles need 264 of 144). Up to
// 160 tokens: a consumer holds bn accumulators a thread (2 x bn / 2), and 4 stages fit the ring.
inline constexpr int kTiledTallBM = 256;
inline constexpr int kTiledTallWidths[] = {160, 144, 128, 96, 64};
constexpr TiledSm90Shape tiled_sm90_tall_shape(int bn) {
  const int stage = TiledSm90Shape{bn, 1, kTiledTallBM * kTiledBK * 2}.stage_bytes(), fit = kTiledRingBudget / stage;
  return TiledSm90Shape{bn, fit < 8 ? fit : 8, kTiledTallBM * kTiledBK * 2};
}
// The 3xTF32 (f32) instance's widths (tiled_sm90_f32_shape), and the MoE and ternary instances'.
inline constexpr int kTiledF32Widths[] = {128, 64};
inline constexpr int kTiledWidths3[] = {256, 128, 64};

// Ternary weights: the small weight part leaves room for deeper rings.
constexpr TiledSm90Shape tiled_sm90_tq2_shape(int bn) {
  return TiledSm90Shape{bn, bn >= 256 ? 5 : bn >= 128 ? 10 : 16, kTiledCodeRegion};
}

// f32 x . w^T as 3xTF32 (Tf32x3Weights): a stage is the weights' f32 box [128 rows][32 k] (16 KB,
// as a 16-bit box) and two token parts [bn][32 k] (rounded rows, remainders). Only bn 64 and 128:
// a consumer holds its accumulator and a second one for the stage's sum (per-stage promotion),
// which at bn 256 would need 256 registers a thread.
constexpr TiledSm90Shape tiled_sm90_f32_shape(int bn) {
  return TiledSm90Shape{bn, bn >= 128 ? 4 : 6, kTiledBM * kTiledBK * 2, 2};
}

// FP8 e4m3 weights (Fp8Weights): a stage's weight part is its codes [128 rows][64 k] (8 KB); the
// consumers' 16-bit boxes (32 KB) come out of the ring's budget: 4 stages at bn 256, 7 at 128.
constexpr TiledSm90Shape tiled_sm90_fp8_shape(int bn) {
  const TiledSm90Shape one{bn, 1, kTiledFp8CodeBytes, 1, true};
  const int fit = (kTiledRingBudget - kTiledFp8BoxBytes) / one.stage_bytes();
  return TiledSm90Shape{bn, fit < 8 ? fit : 8, kTiledFp8CodeBytes, 1, true};
}

// FP8 weights times FP8 tokens (Fp8MmaWeights, W8A8): a stage is one 128-k block, the weights'
// codes [128 rows][128 k] (16 KB), the staged tokens' codes [bn][128 k] and their scales (bn + 4
// from a 16-byte aligned row: 1 KB region). bn 128 only: a consumer holds its accumulator and
// the block's sum before promotion (2 x 64 registers; 2 x 128 at bn 256 would not fit). 6 stages.
inline constexpr int kTiledW8a8BK = 128;
constexpr TiledSm90Shape tiled_sm90_w8a8_shape(int bn) {
  TiledSm90Shape one{bn, 1, kTiledBM * kTiledW8a8BK};
  one.scale_region = ((bn + 4) * 4 + 1023) / 1024 * 1024;  // bn + 4 scales: Fp8MmaWeights::copy_x_scales
  const int fit = kTiledRingBudget / one.stage_bytes();
  one.stages = fit < 8 ? fit : 8;
  return one;
}

// The most dynamic shared memory an sm_90 block may have (227 KB).
inline constexpr int kTiledMaxSmem = 232448;
static_assert(tiled_sm90_tq2_shape(64).fixed_smem_bytes() <= kTiledMaxSmem &&
                  tiled_sm90_tq2_shape(128).fixed_smem_bytes() <= kTiledMaxSmem &&
                  tiled_sm90_tq2_shape(256).fixed_smem_bytes() <= kTiledMaxSmem,
              "a ternary ring does not fit");
static_assert([] {
  for (int bn : kTiledDenseWidths)
    if (tiled_sm90_shape(bn).fixed_smem_bytes() > kTiledMaxSmem || tiled_sm90_shape(bn).stages < 4) return false;
  return true;
}(), "a dense ring does not fit, or is shallower than 4 stages");
static_assert([] {
  for (int bn : kTiledTallWidths)
    if (tiled_sm90_tall_shape(bn).fixed_smem_bytes() > kTiledMaxSmem || tiled_sm90_tall_shape(bn).stages < 4) return false;
  return true;
}(), "a tall ring does not fit, or is shallower than 4 stages");
static_assert(tiled_sm90_fp8_shape(256).stages == 4 && tiled_sm90_fp8_shape(64).fixed_smem_bytes() <= kTiledMaxSmem &&
                  tiled_sm90_fp8_shape(128).fixed_smem_bytes() <= kTiledMaxSmem &&
                  tiled_sm90_fp8_shape(256).fixed_smem_bytes() + tiled_sm90_moe_extra_bytes(256, 1024) <= kTiledMaxSmem,
              "an FP8 ring does not fit (with the MoE row map's bytes at bn 256)");
static_assert(tiled_sm90_fp8_shape(256).stage_bytes() % 1024 == 0 && kTiledFp8BoxBytes % 1024 == 0,
              "the FP8 boxes must stay 1024-byte aligned (the 128-byte swizzle)");
static_assert(tiled_sm90_w8a8_shape(128).stages == 6 && tiled_sm90_w8a8_shape(128).stage_bytes() % 1024 == 0 &&
                  tiled_sm90_w8a8_shape(128).fixed_smem_bytes() + tiled_sm90_moe_extra_bytes(128, 1024) <= kTiledMaxSmem &&
                  tiled_sm90_w8a8_shape(128).b_part_bytes() == 128 * kTiledW8a8BK,
              "the W8A8 ring: 6 stages of 1024-byte aligned parts with the MoE row map's bytes; a token row is 128 codes");
static_assert(tiled_sm90_f32_shape(64).fixed_smem_bytes() <= kTiledMaxSmem &&
                  tiled_sm90_f32_shape(128).fixed_smem_bytes() <= kTiledMaxSmem,
              "an f32 ring does not fit");

// The fused MoE instance at its limits (1024 experts, kTiledMoeFusedMaxRows rows, bn 256), with
// the kernel's ~100 bytes of static shared memory: the block fits, and the sort fits the ring.
static_assert(tiled_sm90_shape(256).fixed_smem_bytes() + tiled_sm90_moe_fused_extra_bytes(256, 1024, kTiledMoeFusedMaxRows) + 256 <=
                  kTiledMaxSmem,
              "the fused MoE instance's shared memory does not fit");
static_assert(tiled_sm90_moe_fused_sort_bytes(1024) <= tiled_sm90_shape(256).ring_bytes(), "the fused sort does not fit the ring");

}  // namespace llmm::engine

