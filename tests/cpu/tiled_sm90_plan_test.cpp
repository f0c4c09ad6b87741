// Host planning of the Hopper tiled engine: which problems each instance takes (and the reason it
// gives otherwise), the tile width, grid and shared memory a launch uses, and the kernel names.
#include <algorithm>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "core/engine/tiled_sm90_plan.hpp"
#include "core/ternary/tq2_tiled_sm90_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#include "llmm/ternary.hpp"
#include "support/dense_case.hpp"

using namespace llmm;
using namespace llmm::engine;
using llmm::test::MN;
using llmm::test::tiled_sm90_width_shape;

namespace {

ArchInfo h200() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA, a.cc_major = 9, a.cc_minor = 0, a.sm_count = 132;
  return a;
}

MatmulDesc xwt(std::int64_t m, std::int64_t n, std::int64_t k, DType t = DType::BF16) {
  MatmulDesc d;
  d.m = m, d.n = n, d.k = k, d.dtype = t, d.transpose_b = true, d.a_vec16 = d.b_vec16 = true;
  return d;
}

cuda_moe::MoeArgs moe(std::int64_t m, std::int64_t top_k, std::int64_t e, std::int64_t n = 1536, std::int64_t k = 2048) {
  static std::uint32_t scratch[4];
  static std::uint16_t data[8];
  cuda_moe::MoeArgs g;
  g.m = m, g.top_k = top_k, g.n_experts = e, g.n = n, g.k = k;
  g.w_dtype = g.in_dtype = g.out_dtype = DType::BF16;
  g.w = data, g.in = data, g.out = nullptr;
  g.expert_stride = n * k, g.in_token_stride = k;
  g.counts = scratch, g.rows = scratch;
  return g;
}

}  // namespace

TEST(TiledSm90Plan, DenseTakesSixteenBitAndExactF32XWtOnSm90Only) {
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(4096, 14336, 4096), h200()), "");
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(1, 1, 1, DType::F16), h200()), "");
  ArchInfo h100a = h200();
  h100a.cc_minor = 1;
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64), h100a).find("sm_90a only"), std::string::npos);
  ArchInfo a100 = h200();
  a100.cc_major = 8;
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64), a100).find("sm_90a only"), std::string::npos);
  // f32 as 3xTF32 with Precision::Exact (the default); Fast f32 belongs to cuBLASLt's TF32.
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(64, 64, 64, DType::F32), h200()), "");
  MatmulDesc fast = xwt(64, 64, 64, DType::F32);
  fast.precision = Precision::Fast;
  EXPECT_NE(tiled_sm90_dense_refusal(fast, h200()).find("3xTF32 (Precision::Exact) only"), std::string::npos);
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64, DType::U8), h200()).find("f16, bf16 or f32"), std::string::npos);
  MatmulDesc d = xwt(64, 64, 64);
  d.transpose_b = false;
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("transpose_b"), std::string::npos);
  d = xwt(64, 64, 64);
  d.b_vec16 = false;
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("16-byte"), std::string::npos);
  d = xwt(64, 64, 64);
  d.batches_disjoint = false;
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("overlap"), std::string::npos);
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 0), h200()).find("k >= 1"), std::string::npos);
  d = xwt(std::int64_t{1} << 40, std::int64_t{1} << 40, 64);  // tile counts that would overflow a product
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("2^31"), std::string::npos);
  // Sizes the kernel holds in 32 bits, even where the tiles would fit: m past 2^31 with one
  // feature tile, and k past 2^31 (both were taken before and narrowed to negative ints).
  d = xwt((std::int64_t{1} << 31) + 5, 1, 64);
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("m, n, k and batch at most 2^31 - 129"), std::string::npos);
  d = xwt(64, 64, (std::int64_t{1} << 31) + 8);
  EXPECT_NE(tiled_sm90_dense_refusal(d, h200()).find("m, n, k and batch at most 2^31 - 129"), std::string::npos);
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(64, 64, 0x7fffffff - 128), h200()), "");
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 0x7fffffff - 127), h200()), "");
  // Through the router: forced, and never chosen by Auto without a measured gate.
  EXPECT_EQ(plan_matmul(xwt(4096, 4096, 4096), h200(), DenseRoute::TiledSm90).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(xwt(64, 64, 64, DType::F32), h200(), DenseRoute::TiledSm90).route, DenseRoute::TiledSm90);
  EXPECT_THROW(plan_matmul(fast, h200(), DenseRoute::TiledSm90), Error);
}

TEST(TiledSm90Plan, DenseTileWidthFollowsTheWaves) {
  // 4096 x 14336: 16 x 112 = 1792 tiles of 256 (13.6 waves) beat 3584 of 128 (27.2 waves) per
  // token row covered.
  TiledSm90Launch l = tiled_sm90_dense_launch(DType::BF16, 1, 4096, 14336, 132);
  EXPECT_EQ(l.bn, 256);
  EXPECT_EQ(l.tiles, 16 * 112);
  EXPECT_EQ(l.grid, 132);
  EXPECT_EQ(l.bm, kTiledBM);
  // 1536 x 3072: 6 x 24 = 144 tiles of 256 are 2 waves for 1.09 waves of work, 288 of 128 take
  // 3 for 2.2; 11 x 24 = 264 of 144 are 2 whole waves (cost 2 x 176), and 11 x 12 = 132 tall
  // tiles of 144 one (cost 1 x 320).
  l = tiled_sm90_dense_launch(DType::BF16, 1, 1536, 3072, 132);
  EXPECT_EQ(l.bn, 144);
  EXPECT_EQ(l.bm, kTiledTallBM);
  EXPECT_EQ(l.tiles, 132);
  EXPECT_EQ(l.smem_bytes, tiled_sm90_tall_shape(144).fixed_smem_bytes());
  EXPECT_EQ(tiled_sm90_dense_launch_at(DType::BF16, 1, 1536, 3072, 132, 144).tiles, 264);
  // 2048 x 3072: 11 x 24 = 264 tiles of 192 (2 waves) against 192 of 256 (2 waves, 1.45 of
  // work); tall 96 (22 x 12 = 264, 2 waves of 2 x 96 + 32) ties, and 128 rows win the tie.
  l = tiled_sm90_dense_launch(DType::F16, 1, 2048, 3072, 132);
  EXPECT_EQ(l.bn, 192);
  EXPECT_EQ(l.bm, kTiledBM);
  // 1024 x 3072: 120 tiles of 224 in one wave (cost 256), 11 x 12 = 132 tall of 96 (224).
  l = tiled_sm90_dense_launch(DType::BF16, 1, 1024, 3072, 132);
  EXPECT_EQ(l.bn, 96);
  EXPECT_EQ(l.bm, kTiledTallBM);
  // Many waves: tall 128 costs what 256 does, so 128 rows stay.
  EXPECT_EQ(tiled_sm90_dense_launch(DType::BF16, 1, 1536, 27648, 132).bm, kTiledBM);
  // One small tile: the narrowest, one CTA.
  l = tiled_sm90_dense_launch(DType::BF16, 1, 7, 33, 132);
  EXPECT_EQ(l.bn, 64);
  EXPECT_EQ(l.tiles, 1);
  EXPECT_EQ(l.grid, 1);
  for (int bn : kTiledDenseWidths) {
    const TiledSm90Shape s = tiled_sm90_shape(bn);
    EXPECT_LE(s.fixed_smem_bytes(), 232448) << bn;   // an H200 block's opt-in limit
    EXPECT_GE(s.stages, 4) << bn;
    EXPECT_LE(s.stages, 8) << bn;
    EXPECT_EQ(s.stage_bytes() % 1024, 0) << bn;      // every stage's boxes 1024-byte aligned (128-byte swizzle)
  }
  // The depths the MoE and ternary instances were measured at.
  EXPECT_EQ(tiled_sm90_shape(256).stages, 4);
  EXPECT_EQ(tiled_sm90_shape(128).stages, 6);
  EXPECT_EQ(tiled_sm90_shape(64).stages, 8);
  EXPECT_EQ(tiled_sm90_shape(144).stages, 6);
  EXPECT_EQ(tiled_sm90_dense_kernel_name(DType::BF16, 256), "tiled_sm90_dense_bf16_bn256");
  EXPECT_EQ(tiled_sm90_dense_kernel_name(DType::F16, 144), "tiled_sm90_dense_f16_bn144");
  EXPECT_EQ(tiled_sm90_dense_kernel_name(DType::BF16, 144, kTiledTallBM), "tiled_sm90_dense_bf16_bm256_bn144");
  for (int bn : kTiledTallWidths) {
    const TiledSm90Shape s = tiled_sm90_tall_shape(bn);
    EXPECT_LE(s.fixed_smem_bytes(), 232448) << bn;
    EXPECT_GE(s.stages, 4) << bn;
    EXPECT_EQ(s.a_bytes(), 256 * 64 * 2) << bn;
    EXPECT_EQ(s.stage_bytes() % 1024, 0) << bn;
  }
  // f32 never takes tall tiles (its 3xTF32 instance has 128 rows).
  for (std::int64_t m : {1, 1024, 1536, 25})
    EXPECT_EQ(tiled_sm90_dense_launch(DType::F32, 1, m, 3072, 132).bm, kTiledBM) << m;
}

// Every width of the dense 16-bit instance is the plan's choice for some shape with tails (what
// DenseGpu.TiledSm90EveryTileWidth runs), and the widths the plan returns are only those.
TEST(TiledSm90Plan, EveryDenseWidthIsReachable) {
  for (int bn : kTiledDenseWidths) {
    const std::optional<MN> s = tiled_sm90_width_shape(bn, 132);
    ASSERT_TRUE(s.has_value()) << bn;
    EXPECT_NE(s->m % bn, 0) << bn;
    EXPECT_EQ(tiled_sm90_dense_launch(DType::BF16, 1, s->m, s->n, 132).bn, bn);
  }
  for (int bn : kTiledTallWidths) {
    const std::optional<MN> s = tiled_sm90_width_shape(bn, 132, kTiledTallBM);
    ASSERT_TRUE(s.has_value()) << "tall " << bn;
    EXPECT_NE(s->m % bn, 0) << bn;
    const TiledSm90Launch l = tiled_sm90_dense_launch(DType::F16, 1, s->m, s->n, 132);
    EXPECT_EQ(l.bn, bn);
    EXPECT_EQ(l.bm, kTiledTallBM);
    EXPECT_EQ(tiled_sm90_dense_launch_at(DType::F16, 1, s->m, s->n, 132, bn, kTiledTallBM), l);
  }
  // The launch at a given width (the bench's calibration rows) is the plan's own at its pick.
  for (std::int64_t m : {1, 700, 1536, 4096})
    for (DType t : {DType::BF16, DType::F32}) {
      const TiledSm90Launch l = tiled_sm90_dense_launch(t, 2, m, 3072, 132);
      EXPECT_EQ(tiled_sm90_dense_launch_at(t, 2, m, 3072, 132, l.bn, l.bm), l) << m;
    }
  EXPECT_EQ(tiled_sm90_dense_launch_at(DType::F16, 1, 1536, 3072, 132, 128).tiles, 288);
  EXPECT_THROW(tiled_sm90_dense_launch_at(DType::BF16, 1, 64, 64, 132, 80), Error);   // no such instance
  EXPECT_THROW(tiled_sm90_dense_launch_at(DType::F32, 1, 64, 64, 132, 256), Error);   // f32: 128 and 64 only
  EXPECT_THROW(tiled_sm90_dense_launch_at(DType::F32, 1, 64, 64, 132, 128, kTiledTallBM), Error);   // no f32 tall tiles
  EXPECT_THROW(tiled_sm90_dense_launch_at(DType::BF16, 1, 64, 64, 132, 256, kTiledTallBM), Error);  // tall: up to 160
  EXPECT_THROW(tiled_sm90_dense_launch_at(DType::BF16, 1, 64, 64, 132, 128, 192), Error);           // no such rows
  for (std::int64_t m : {1, 63, 65, 500, 1536, 2047, 5000, 20000})
    for (std::int64_t n : {8, 300, 3072, 14336}) {
      const TiledSm90Launch l = tiled_sm90_dense_launch(DType::BF16, 1, m, n, 132);
      const int bn = l.bn;
      if (l.bm == kTiledTallBM)
        EXPECT_NE(std::find(std::begin(kTiledTallWidths), std::end(kTiledTallWidths), bn), std::end(kTiledTallWidths))
            << m << " x " << n << ": tall " << bn;
      else
        EXPECT_NE(std::find(std::begin(kTiledDenseWidths), std::end(kTiledDenseWidths), bn), std::end(kTiledDenseWidths))
            << m << " x " << n << ": " << bn;
      EXPECT_TRUE(l.bm == kTiledBM || l.bm == kTiledTallBM) << l.bm;
    }
}

// f32 (3xTF32): 128- or 64-wide tiles only (a consumer holds two accumulators), its own ring.
TEST(TiledSm90Plan, DenseF32TilesAreAtMost128Wide) {
  TiledSm90Launch l = tiled_sm90_dense_launch(DType::F32, 1, 4096, 14336, 132);
  EXPECT_EQ(l.bn, 128);
  EXPECT_EQ(l.tiles, 32 * 112);
  EXPECT_EQ(l.smem_bytes, tiled_sm90_f32_shape(128).fixed_smem_bytes());
  l = tiled_sm90_dense_launch(DType::F32, 1, 32, 27648, 132);  // 216 tiles either way: the narrower
  EXPECT_EQ(l.bn, 64);
  EXPECT_EQ(l.smem_bytes, tiled_sm90_f32_shape(64).fixed_smem_bytes());
  for (std::int64_t m : {1, 200, 1536, 5000, 100000}) EXPECT_NE(tiled_sm90_dense_launch(DType::F32, 1, m, 3072, 132).bn, 256) << m;
  for (int bn : {64, 128}) {
    const TiledSm90Shape s = tiled_sm90_f32_shape(bn);
    EXPECT_LE(s.fixed_smem_bytes(), 232448) << bn;
    EXPECT_GE(s.stages, 4) << bn;
    EXPECT_EQ(s.b_bytes(), 2 * bn * 128) << bn;  // rounded rows and remainders
    EXPECT_EQ(s.barrier_bytes(), 3 * s.stages * 8) << bn;
  }
  EXPECT_EQ(tiled_sm90_dense_kernel_name(DType::F32, 128), "tiled_sm90_dense_f32_3xtf32_bn128");
}

TEST(TiledSm90Plan, MoeTakesAlignedSixteenBitGroupedCalls) {
  EXPECT_EQ(tiled_sm90_moe_refusal(moe(4096, 8, 128), h200()), "");
  cuda_moe::MoeArgs g = moe(64, 8, 128);
  g.in_dtype = DType::F32;
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("same dtype"), std::string::npos);
  g = moe(64, 8, 128, 1536, 36);
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("multiple of 8"), std::string::npos);
  g = moe(64, 8, 128);
  g.expert_stride += 4;
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("expert stride"), std::string::npos);
  g = moe(64, 8, 128);
  g.in_slot_stride = 3;
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("input strides"), std::string::npos);
  g = moe(64, 8, 2048);
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("1..1024 experts"), std::string::npos);
  // 2^31 routed rows would overflow the kernel's 32-bit row positions even where the tile count
  // fits (n <= 128: one feature tile): refused, so the router takes the mma.sync kernel.
  g = moe(std::int64_t{1} << 28, 8, 128, 128, 2048);
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("2^31 - 1 routed rows"), std::string::npos);
  g = moe((std::int64_t{1} << 28) - 1, 8, 128, 128, 2048);
  EXPECT_EQ(tiled_sm90_moe_refusal(g, h200()), "");
  g = moe(64, 8, 128);
  g.counts = nullptr;
  EXPECT_NE(tiled_sm90_moe_refusal(g, h200()).find("scratch"), std::string::npos);
  ArchInfo a100 = h200();
  a100.cc_major = 8;
  EXPECT_NE(tiled_sm90_moe_refusal(moe(64, 8, 128), a100).find("sm_90a only"), std::string::npos);
}

TEST(TiledSm90Plan, MoeWideTilesWithNarrowOnesChosenOnTheDevice) {
  for (std::int64_t m : {1, 64, 4096, 16384}) EXPECT_EQ(tiled_sm90_moe_launch(moe(m, 8, 128), 132).bn, 256) << m;
  // PDL after the route's previous kernel up to 4096 routed rows (measured faster there, slower at 32768)
  EXPECT_TRUE(tiled_sm90_moe_launch(moe(512, 8, 128), 132).pdl);
  EXPECT_FALSE(tiled_sm90_moe_launch(moe(513, 8, 128), 132).pdl);
  EXPECT_TRUE(tiled_sm90_moe_launch(moe(16, 8, 128), 132).pdl);
  const TiledSm90Launch l = tiled_sm90_moe_launch(moe(4096, 8, 1024), 132);
  EXPECT_EQ(l.grid, 132);
  EXPECT_LE(l.smem_bytes, 232448);  // 1024 experts' tile and row starts still fit
  // The bound on tiles: every row in a narrow tile, plus one partial tile per active expert.
  EXPECT_EQ(l.tiles, (4096 * 8 / 64 + 1024) * 12);
  EXPECT_EQ(tiled_sm90_moe_kernel_name(moe(1, 1, 1), l), "tiled_sm90_moe_bf16_bf16_bf16_bn256x64");
  EXPECT_FALSE(l.staged);  // no staging room in the args
  // Staged when the scratch holds every routed row of k 16-bit elements, not one byte less.
  static std::uint16_t room[8];
  cuda_moe::MoeArgs g = moe(64, 8, 128);
  g.staged = room, g.staged_bytes = 64 * 8 * 2048 * 2;
  TiledSm90Launch s = tiled_sm90_moe_launch(g, 132);
  EXPECT_TRUE(s.staged);
  EXPECT_EQ(tiled_sm90_moe_kernel_name(g, s), "tiled_sm90_moe_bf16_bf16_bf16_bn256x64_staged");
  g.staged_bytes -= 1;
  EXPECT_FALSE(tiled_sm90_moe_launch(g, 132).staged);
}

// An expert's rows in tile classes (the kernel's ExpertRows calls this function): every row in
// exactly one tile and the last tile not empty, wide tiles only while a 5/8-full wide tile's worth
// is left, one mid (128) tile for a rest of 65..160, never more tiles than the host's bound.
TEST(TiledSm90Plan, MoeExpertTileClassesCoverEveryRowOnce) {
  EXPECT_EQ(tiled_sm90_mid_bn(256), 128);
  EXPECT_EQ(tiled_sm90_mid_bn(128), 0);
  EXPECT_EQ(tiled_sm90_mid_bn(64), 0);
  struct Want { int count, wide, mid, narrow; };
  for (Want w : {Want{0, 0, 0, 0}, Want{1, 0, 0, 1}, Want{64, 0, 0, 1}, Want{65, 0, 1, 0}, Want{128, 0, 1, 0},
                 Want{129, 0, 1, 1}, Want{160, 0, 1, 1}, Want{161, 1, 0, 0}, Want{256, 1, 0, 0}, Want{257, 1, 0, 1},
                 Want{384, 1, 1, 0}, Want{385, 1, 1, 1}, Want{417, 2, 0, 0}}) {
    const ExpertTileSplit s = tiled_sm90_expert_split(w.count, 256);
    EXPECT_EQ(s.wide, w.wide) << w.count;
    EXPECT_EQ(s.mid, w.mid) << w.count;
    EXPECT_EQ(s.narrow, w.narrow) << w.count;
  }
  for (int bn : {64, 128, 256})
    for (int count = 0; count <= 3000; ++count) {
      const ExpertTileSplit s = tiled_sm90_expert_split(count, bn);
      const int mid_bn = tiled_sm90_mid_bn(bn), narrow_bn = bn > 64 ? 64 : bn;
      EXPECT_TRUE(s.mid == 0 || mid_bn != 0) << bn << " " << count;
      const int covered = s.wide * bn + s.mid * mid_bn + s.narrow * narrow_bn;
      const int last = s.narrow ? narrow_bn : s.mid ? mid_bn : bn;  // tiles run wide, mid, narrow
      EXPECT_GE(covered, count) << bn << " " << count;
      EXPECT_LT(covered - last, count + (count == 0 ? 1 : 0)) << bn << " " << count;  // the last tile has rows
      EXPECT_LE(s.wide + s.mid + s.narrow, (count + 63) / 64) << bn << " " << count;
    }
}

// gemm_tq2's tq2_tiled_sm90 route: the instance's refusals, its workspace (an f16 copy of bf16
// and f32 activations after one power-of-two scale a row; none for f16) and kernel names.
TEST(TiledSm90Plan, Tq2TakesF16Bf16AndF32FastOnSm90Only) {
  const ArchInfo a = h200();
  EXPECT_EQ(tiled_sm90_tq2_refusal(1536, 27648, 3072, DType::BF16, DType::BF16, true, a), "");
  EXPECT_EQ(tiled_sm90_tq2_refusal(1, 8, 128, DType::F16, DType::F32, true, a), "");
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, 8, 128, DType::F32, DType::F32, false, a), "");
  EXPECT_NE(tiled_sm90_tq2_refusal(7, 8, 128, DType::F32, DType::F32, true, a).find("f32 Exact is not on the engine"),
            std::string::npos);
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, 8, 128, DType::BF16, DType::F16, false, a), "needs an f32 or input-dtype output");
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, 8, 192, DType::BF16, DType::F32, false, a), "needs k a positive multiple of 128");
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, std::int64_t{1} << 31, 128, DType::BF16, DType::F32, false, a),
            "needs 1 <= m, n, k < 2^31");
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, (std::int64_t{1} << 30) - 127, 128, DType::BF16, DType::F32, false, a),
            "needs n <= 2^30 - 128 (the scale copy addresses a row's scales by byte offset)");
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, (std::int64_t{1} << 30) - 128, 128, DType::BF16, DType::F32, false, a), "");
  EXPECT_EQ(tiled_sm90_tq2_refusal(0x7fffffff, 1 << 29, 128, DType::BF16, DType::F32, false, a),
            "more than 2^31 - 1 tiles");
  ArchInfo ampere = a;
  ampere.cc_major = 8;
  EXPECT_EQ(tiled_sm90_tq2_refusal(7, 8, 128, DType::BF16, DType::F32, false, ampere),
            "the Hopper tiled engine is built for sm_90a only");
  EXPECT_EQ(tiled_sm90_tq2_kernel_name(DType::BF16, 256), "tiled_sm90_tq2_f16_bf16_bn256");
}

TEST(TiledSm90Plan, Tq2RouteWorkspaceAndKernels) {
  using cuda_ternary::tq2_tiled_sm90_plan;
  const auto f16 = tq2_tiled_sm90_plan(4, 64, 256, DType::F16, DType::F16, true, 132);
  EXPECT_FALSE(f16.scaled);
  EXPECT_EQ(f16.bytes, 0u);
  EXPECT_EQ(f16.rowscale_kernel, "");
  EXPECT_EQ(f16.engine_kernel, "tiled_sm90_tq2_f16_f16_bn64");
  const auto bf = tq2_tiled_sm90_plan(1536, 27648, 3072, DType::BF16, DType::F32, true, 132);
  EXPECT_TRUE(bf.scaled);
  EXPECT_EQ(bf.alpha_off, 0u);
  EXPECT_EQ(bf.part_off, 1536u * 4u);  // a scale per row, then the f16 copy
  EXPECT_EQ(bf.bytes, 1536u * 4u + 1536u * 3072u * 2u);
  EXPECT_EQ(bf.rowscale_kernel, "tq2_rowscale_bf16_f16");
  EXPECT_EQ(tq2_tiled_sm90_plan(5, 64, 256, DType::F32, DType::F32, false, 132).part_off, 256u);  // 20 bytes, aligned up
  // The dense launch with the ternary ring, within an H200 block's shared memory.
  TiledSm90Launch dense = tiled_sm90_dense_launch(DType::BF16, 1, 1536, 27648, 132);
  dense.smem_bytes = tiled_sm90_tq2_shape(dense.bn).fixed_smem_bytes();
  EXPECT_EQ(bf.launch, dense);
  for (std::int64_t m : {1, 100, 200, 5000}) EXPECT_LE(tiled_sm90_tq2_launch(m, 3072, 132).smem_bytes, 232448) << m;
  // The ternary width rule charges a stage's decode as 192 token columns: wider tiles than dense
  // where the waves allow (512 x 28672: 4 waves of 256 rather than 7 of 128).
  EXPECT_EQ(tiled_sm90_dense_launch(DType::BF16, 1, 512, 28672, 132).bn, 128);
  EXPECT_EQ(tiled_sm90_tq2_launch(512, 28672, 132).bn, 256);
  EXPECT_TRUE(tiled_sm90_tq2_preferred(512, 28672, 132));
  EXPECT_TRUE(tiled_sm90_tq2_preferred(128, 13824, 132));   // 108 tiles, 82% of one wave
  EXPECT_FALSE(tiled_sm90_tq2_preferred(512, 2560, 132));   // 80 tiles
  EXPECT_FALSE(tiled_sm90_tq2_preferred(2048, 2560, 132));  // 160 tiles: 61% of 2 waves
  EXPECT_EQ(bf.engine_kernel, tiled_sm90_tq2_kernel_name(DType::F32, bf.launch.bn));
  Tq2Options o;
  o.force_route = Tq2Route::TiledSm90;
  o.precision = Precision::Fast;
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32, o), bf.bytes);
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F16, DType::F32, o), 0u);
  o.precision = Precision::Exact;
  try {
    (void)tq2_workspace_bytes(4, 64, 256, DType::F32, DType::F32, o);
    ADD_FAILURE() << "f32 Exact workspace for tq2_tiled_sm90 was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("route tq2_tiled_sm90 cannot run"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)tq2_tiled_sm90_plan(4, 64, 256, DType::F32, DType::F32, true, 132), Error);
  // The route's forced plan: sm_90 only, any m; Auto never picks it before it is calibrated.
  EXPECT_EQ(plan_tq2(4, 64, 256, DType::BF16, h200(), Tq2Route::TiledSm90), Tq2Route::TiledSm90);
  ArchInfo ampere = h200();
  ampere.cc_major = 8;
  EXPECT_THROW((void)plan_tq2(4, 64, 256, DType::BF16, ampere, Tq2Route::TiledSm90), Error);
  EXPECT_STREQ(tq2_route_name(Tq2Route::TiledSm90), "tq2_tiled_sm90");
}

// gemm_tq2's tiled_sm90_splitk route: K in parts that depend on n and k only (132 SMs' worth of
// one token tile's units, >= 16 k-blocks a part, <= 16, none empty), the launch, its workspace
// (slots and counters, any input dtype), kernel names, refusals and the router's rule.
TEST(TiledSm90Plan, Tq2SplitKPartsDependOnNAndKOnly) {
  EXPECT_EQ(tiled_sm90_tq2_split_parts(2560, 6912), 6);   // 20 tiles; 108 k-blocks in parts of 18
  EXPECT_EQ(tiled_sm90_tq2_split_parts(3072, 3072), 3);   // 24 tiles; 48 k-blocks in parts of 16
  EXPECT_EQ(tiled_sm90_tq2_split_parts(3840, 2560), 2);   // 30 tiles; 40 in parts of 20
  EXPECT_EQ(tiled_sm90_tq2_split_parts(200, 3200), 3);    // 50 k-blocks: 17 + 17 + 16
  EXPECT_EQ(tiled_sm90_tq2_split_parts(8, 1 << 20), 16);  // at most 16
  EXPECT_EQ(tiled_sm90_tq2_split_parts(27648, 3072), 1);  // 216 tiles fill the SMs alone
  EXPECT_EQ(tiled_sm90_tq2_split_parts(200, 1984), 1);    // 31 k-blocks: no two parts of 16
  for (std::int64_t n : {8, 200, 520, 2560, 3072, 8192, 16896})
    for (std::int64_t k : {128, 1024, 2048, 3200, 6912, 14336, 28672}) {
      const int parts = tiled_sm90_tq2_split_parts(n, k);
      const std::int64_t kblocks = k / 64;
      for (std::int64_t m : {1, 17, 128, 129, 500, 4096}) {
        const TiledSm90Launch l = tiled_sm90_tq2_split_launch(m, n, k, 132);
        EXPECT_EQ(l.parts, parts) << n << " " << k << " " << m;  // never a function of m
        if (parts < 2) continue;
        EXPECT_GE(l.kb_per_part, 16) << n << " " << k;
        EXPECT_LT(static_cast<std::int64_t>(l.parts - 1) * l.kb_per_part, kblocks) << n << " " << k;  // none empty
        EXPECT_GE(static_cast<std::int64_t>(l.parts) * l.kb_per_part, kblocks) << n << " " << k;
        EXPECT_EQ(l.tiles, (m + l.bn - 1) / l.bn * ((n + 127) / 128));
        EXPECT_EQ(l.grid, std::min<std::int64_t>(132, l.tiles * l.parts));
        EXPECT_EQ(tiled_sm90_tq2_split_launch(m, n, k, 114).kb_per_part, l.kb_per_part);  // the device sets the grid only
        EXPECT_EQ(tiled_sm90_tq2_split_launch(m, n, k, 114).bn, l.bn);
      }
    }
  // BitNet-2B down at m 128: 20 tiles of 128 tokens x 6 parts = 120 units, one wave.
  const TiledSm90Launch d = tiled_sm90_tq2_split_launch(128, 2560, 6912, 132);
  EXPECT_EQ(d.bn, 128);
  EXPECT_EQ(d.tiles, 20);
  EXPECT_EQ(d.kb_per_part, 18);
  EXPECT_EQ(tiled_sm90_tq2_split_slot_bytes(d), 20u * 6u * 2u * 64u * 128u * 4u);
  EXPECT_EQ(tiled_sm90_tq2_split_counter_bytes(d), 20u * 2u * 4u);
  EXPECT_EQ(tiled_sm90_tq2_kernel_name(DType::BF16, 128, 6), "tiled_sm90_tq2_f16_bf16_bn128_k6");
  EXPECT_EQ(tiled_sm90_tq2_kernel_name(DType::BF16, 128, 1), "tiled_sm90_tq2_f16_bf16_bn128");
  // The router: parts > 1, m <= 128, the units filling the SMs.
  EXPECT_TRUE(tiled_sm90_tq2_split_preferred(128, 2560, 6912, 132));
  EXPECT_TRUE(tiled_sm90_tq2_split_preferred(128, 4096, 14336, 132));
  EXPECT_TRUE(tiled_sm90_tq2_split_preferred(17, 2560, 6912, 132));
  EXPECT_FALSE(tiled_sm90_tq2_split_preferred(129, 2560, 6912, 132));
  EXPECT_FALSE(tiled_sm90_tq2_split_preferred(128, 3072, 3072, 132));   // 24 tiles x 3 parts: 72 units
  EXPECT_FALSE(tiled_sm90_tq2_split_preferred(128, 27648, 3072, 132));  // one part
  // Refusals: the engine's, and the units' int index.
  EXPECT_EQ(tiled_sm90_tq2_split_refusal(128, 3072, 3072, DType::BF16, DType::BF16, false), "");
  EXPECT_NE(tiled_sm90_tq2_split_refusal(7, 8, 128, DType::F32, DType::F32, true).find("f32 Exact"), std::string::npos);
  constexpr std::int64_t kBig = 0x7fffffff;  // 2^25 x 8 tiles of 64 tokens x 8 parts
  EXPECT_EQ(tiled_sm90_tq2_split_refusal(kBig, 1024, 8192, DType::BF16, DType::F32, false),
            "more than 2^31 - 1 work units (tiles x K parts)");
  EXPECT_EQ(tiled_sm90_tq2_shape_refusal(kBig, 1024, 8192, DType::BF16, DType::F32, false), "");
  EXPECT_EQ(tiled_sm90_tq2_split_refusal(kBig / 4, 1024, 8192, DType::BF16, DType::F32, false), "");

  // The route's plan: slots then counters after the scaled sections, for f16 input too.
  using cuda_ternary::tq2_tiled_sm90_plan;
  const auto f16 = tq2_tiled_sm90_plan(128, 2560, 6912, DType::F16, DType::F16, false, 132, true);
  EXPECT_EQ(f16.launch, d);
  EXPECT_EQ(f16.slots_off, 0u);
  EXPECT_EQ(f16.counters_off, tiled_sm90_tq2_split_slot_bytes(d));
  EXPECT_EQ(f16.counter_bytes, 20u * 2u * 4u);
  EXPECT_EQ(f16.bytes, f16.counters_off + 256u);
  EXPECT_EQ(f16.engine_kernel, "tiled_sm90_tq2_f16_f16_bn128_k6");
  const auto bf = tq2_tiled_sm90_plan(128, 2560, 6912, DType::BF16, DType::BF16, false, 132, true);
  EXPECT_TRUE(bf.scaled);
  EXPECT_EQ(bf.slots_off, bf.part_off + 128u * 6912u * 2u);
  EXPECT_EQ(bf.bytes, bf.counters_off + 256u);
  const auto one = tq2_tiled_sm90_plan(128, 27648, 3072, DType::F16, DType::F16, false, 132, true);  // one part
  EXPECT_EQ(one.bytes, 0u);
  EXPECT_EQ(one.launch.bn, tiled_sm90_tq2_launch(128, 27648, 132).bn);
  EXPECT_EQ(one.engine_kernel, "tiled_sm90_tq2_f16_f16_bn128");
  Tq2Options o;
  o.force_route = Tq2Route::TiledSm90SplitK;
  o.precision = Precision::Fast;
  EXPECT_EQ(tq2_workspace_bytes(128, 2560, 6912, DType::F16, DType::F16, o), f16.bytes);
  EXPECT_EQ(tq2_workspace_bytes(128, 2560, 6912, DType::BF16, DType::BF16, o), bf.bytes);
  o.force_route = Tq2Route::Auto;  // Auto may take it: its workspace covers the split route's
  EXPECT_GE(tq2_workspace_bytes(128, 2560, 6912, DType::F16, DType::F16, o), f16.bytes);
  EXPECT_EQ(plan_tq2(128, 2560, 6912, DType::BF16, h200()), Tq2Route::TiledSm90SplitK);
  EXPECT_EQ(plan_tq2(128, 8192, 28672, DType::BF16, h200()), Tq2Route::TiledSm90SplitK);  // before the engine
  EXPECT_EQ(plan_tq2(512, 8192, 28672, DType::BF16, h200()), Tq2Route::TiledSm90);
  EXPECT_EQ(plan_tq2(1024, 3072, 3072, DType::BF16, h200()), Tq2Route::DequantLt);  // 96 tiles, m > 128
  EXPECT_EQ(plan_tq2(128, 2560, 6912, DType::F32, h200()), Tq2Route::DequantLt);  // precision unknown: f32 stays
  EXPECT_EQ(plan_tq2(4096, 2560, 6912, DType::BF16, h200(), Tq2Route::TiledSm90SplitK), Tq2Route::TiledSm90SplitK);
  ArchInfo ampere = h200();
  ampere.cc_major = 8;
  EXPECT_THROW((void)plan_tq2(128, 2560, 6912, DType::BF16, ampere, Tq2Route::TiledSm90SplitK), Error);
  EXPECT_STREQ(tq2_route_name(Tq2Route::TiledSm90SplitK), "tq2_tiled_sm90_splitk");
}
