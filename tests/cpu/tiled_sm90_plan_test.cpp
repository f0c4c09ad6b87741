// Host planning of the Hopper tiled engine: which problems each instance takes (and the reason it
// gives otherwise), the tile width, grid and shared memory a launch uses, and the kernel names.
#include <gtest/gtest.h>

#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"

using namespace llmm;
using namespace llmm::engine;

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

TEST(TiledSm90Plan, DenseTakesSixteenBitXWtOnSm90Only) {
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(4096, 14336, 4096), h200()), "");
  EXPECT_EQ(tiled_sm90_dense_refusal(xwt(1, 1, 1, DType::F16), h200()), "");
  ArchInfo h100a = h200();
  h100a.cc_minor = 1;
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64), h100a).find("sm_90a only"), std::string::npos);
  ArchInfo a100 = h200();
  a100.cc_major = 8;
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64), a100).find("sm_90a only"), std::string::npos);
  EXPECT_NE(tiled_sm90_dense_refusal(xwt(64, 64, 64, DType::F32), h200()).find("f16 or bf16"), std::string::npos);
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
  // Through the router: forced, and never chosen by Auto without a measured gate.
  EXPECT_EQ(plan_matmul(xwt(4096, 4096, 4096), h200(), DenseRoute::TiledSm90).route, DenseRoute::TiledSm90);
  EXPECT_THROW(plan_matmul(xwt(64, 64, 64, DType::F32), h200(), DenseRoute::TiledSm90), Error);
}

TEST(TiledSm90Plan, DenseTileWidthFollowsTheWaves) {
  // 4096 x 14336: 16 x 112 = 1792 tiles of 256 (13.6 waves) beat 3584 of 128 (27.2 waves) per
  // token row covered.
  TiledSm90Launch l = tiled_sm90_dense_launch(1, 4096, 14336, 132);
  EXPECT_EQ(l.bn, 256);
  EXPECT_EQ(l.tiles, 16 * 112);
  EXPECT_EQ(l.grid, 132);
  // 1536 x 3072: 6 x 24 = 144 tiles of 256 are 2 waves for 1.09 waves of work; 288 of 128 fill 3.
  l = tiled_sm90_dense_launch(1, 1536, 3072, 132);
  EXPECT_EQ(l.bn, 128);
  // One small tile: the narrowest, one CTA.
  l = tiled_sm90_dense_launch(1, 7, 33, 132);
  EXPECT_EQ(l.bn, 64);
  EXPECT_EQ(l.tiles, 1);
  EXPECT_EQ(l.grid, 1);
  for (int bn : {64, 128, 256}) {
    const TiledSm90Shape s = tiled_sm90_shape(bn);
    EXPECT_LE(s.fixed_smem_bytes(), 232448) << bn;   // an H200 block's opt-in limit
    EXPECT_GE(s.ring_bytes(), 3 * s.stage_bytes()) << bn;
  }
  EXPECT_EQ(tiled_sm90_dense_kernel_name(DType::BF16, 256), "tiled_sm90_dense_bf16_bn256");
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
