// Pure host facts of the ternary CUDA kernels: the argument contract, eligibility, the stream
// kernel's configuration, alignment flags and kernel names. No GPU needed: pointers are values.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/ternary/tq2_kernels.hpp"

namespace llmm::cuda_ternary {
namespace {

template <class T>
T* at(std::uintptr_t v) { return reinterpret_cast<T*>(v); }

Tq2Args args(std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::F32,
             DType out = DType::F32, bool exact = true) {
  Tq2Args a;
  a.codes = at<const std::uint8_t>(0x100000);
  a.scales = at<const std::uint16_t>(0x200000);
  a.m = m;
  a.n = n;
  a.k = k;
  a.in = at<const void>(0x300000);
  a.in_dtype = in;
  a.in_ld = k;
  a.out = at<void>(0x400000);
  a.out_dtype = out;
  a.out_ld = n;
  a.exact = exact;
  return a;
}

TEST(Tq2Kernels, ArgsContract) {
  EXPECT_TRUE(tq2_args_ok(args(1, 8, 128)));
  EXPECT_TRUE(tq2_args_ok(args(1536, 27648, 3072)));
  EXPECT_FALSE(tq2_args_ok(args(0, 8, 128)));
  EXPECT_FALSE(tq2_args_ok(args(1, 0, 128)));
  EXPECT_FALSE(tq2_args_ok(args(1, 8, 64)));    // below one block
  EXPECT_FALSE(tq2_args_ok(args(1, 8, 192)));   // not a multiple of 128
  EXPECT_FALSE(tq2_args_ok(args(1, 8, 128, DType::U8)));
  EXPECT_FALSE(tq2_args_ok(args(1, 8, 128, DType::F32, DType::F16)));  // out: f32 or input's
  EXPECT_TRUE(tq2_args_ok(args(1, 8, 128, DType::F16, DType::F16)));
  EXPECT_TRUE(tq2_args_ok(args(1, 8, 128, DType::BF16, DType::F32)));
  EXPECT_FALSE(tq2_args_ok(args(1, 8, 128, DType::BF16, DType::F16)));
  Tq2Args a = args(2, 8, 256);
  a.in_ld = 255;
  EXPECT_FALSE(tq2_args_ok(a));
  a = args(2, 8, 256);
  a.out_ld = 7;
  EXPECT_FALSE(tq2_args_ok(a));
  a = args(2, 8, 256);
  a.scales = nullptr;
  EXPECT_FALSE(tq2_args_ok(a));
}

TEST(Tq2Kernels, Splits) {
  EXPECT_EQ(tq2_tiled_splits(args(64, 8, 128, DType::F32, DType::F32, true)), 2);
  EXPECT_EQ(tq2_tiled_splits(args(64, 8, 128, DType::F32, DType::F32, false)), 1);
  EXPECT_EQ(tq2_tiled_splits(args(64, 8, 128, DType::BF16, DType::BF16, true)), 1);
}

TEST(Tq2Kernels, Alignment) {
  Tq2Args a = args(4, 8, 128);
  EXPECT_TRUE(tq2_input_vec16(a));
  EXPECT_TRUE(tq2_codes_vec16(a));
  a.in = at<const void>(0x300004);  // f32-aligned, not 16-byte aligned
  EXPECT_FALSE(tq2_input_vec16(a));
  a = args(4, 8, 128);
  a.in_ld = 130;  // rows of 520 bytes
  EXPECT_FALSE(tq2_input_vec16(a));
  a.in_ld = 132;
  EXPECT_TRUE(tq2_input_vec16(a));
  a = args(4, 8, 128, DType::F16, DType::F16);
  a.in_ld = 136;  // 272 bytes
  EXPECT_TRUE(tq2_input_vec16(a));
  a.in_ld = 132;  // 264 bytes
  EXPECT_FALSE(tq2_input_vec16(a));
  a = args(4, 8, 128);
  a.codes = at<const std::uint8_t>(0x100001);
  EXPECT_FALSE(tq2_codes_vec16(a));
  // Misaligned rows never make a call ineligible: the kernels fall back to narrower loads.
  EXPECT_TRUE(tq2_tiled_supports(a));
}

TEST(Tq2Kernels, Names) {
  EXPECT_EQ(tq2_tiled_kernel_name(args(1536, 27648, 3072)), "tq2_tiled_f32_f32_bf16x2");
  EXPECT_EQ(tq2_tiled_kernel_name(args(1536, 27648, 3072, DType::F32, DType::F32, false)),
            "tq2_tiled_f32_f32_bf16x1");
  EXPECT_EQ(tq2_tiled_kernel_name(args(100, 40, 256, DType::BF16, DType::BF16)), "tq2_tiled_bf16_bf16_bf16");
  EXPECT_EQ(tq2_tiled_kernel_name(args(100, 40, 256, DType::F16, DType::F32)), "tq2_tiled_f16_f32_f16");
  EXPECT_EQ(tq2_tiled_kernel_name(args(100, 40, 200)), "");  // k not a multiple of 128
}

TEST(Tq2Kernels, TiledSharedMemoryFitsSm80AndSm90) {
  // 3 x 32 KB f32 ring + 6 KB codes + hi/lo 36 KB + 18 KB decoded weights.
  EXPECT_EQ(tq2_tiled_smem_bytes(DType::F32, 2), 159744);
  EXPECT_EQ(tq2_tiled_smem_bytes(DType::F32, 1), 141312);
  EXPECT_EQ(tq2_tiled_smem_bytes(DType::F16, 1), 79872);
  EXPECT_LE(tq2_tiled_smem_bytes(DType::F32, 2), 166912);  // A100 opt-in limit
  EXPECT_TRUE(tq2_tiled_supports(args(1, 8, 128)));
  EXPECT_TRUE(tq2_tiled_supports(args(1537, 27649, 3072)));
}

TEST(Tq2Kernels, StreamV2Config) {
  // Splits: f32 Exact 3 while m * 3 <= 8, else 2; Fast and 16-bit input 1.
  EXPECT_EQ(tq2_stream_v2_splits(args(2, 8, 128)), 3);
  EXPECT_EQ(tq2_stream_v2_splits(args(3, 8, 128)), 2);
  EXPECT_EQ(tq2_stream_v2_splits(args(3, 8, 128, DType::F32, DType::F32, false)), 1);
  EXPECT_EQ(tq2_stream_v2_splits(args(3, 8, 128, DType::BF16, DType::BF16)), 1);
  EXPECT_FALSE(tq2_stream_v2_config(args(17, 8, 128)).has_value());
  EXPECT_EQ(tq2_stream_v2_kernel_name(args(17, 8, 128)), "");
  // Row tiles: the most (8, 4, 2) that still give >= 1.5 blocks per SM, else 1.
  auto c = tq2_stream_v2_config(args(1, 27648, 3072), 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->row_tiles, 8);  // 216 blocks
  EXPECT_EQ(c->n_tiles, 1);
  EXPECT_EQ(c->chunk_groups, 24);  // the whole K fits in shared memory
  EXPECT_EQ(tq2_stream_v2_config(args(1, 14336, 4096), 132)->row_tiles, 4);  // 224 blocks
  EXPECT_EQ(tq2_stream_v2_config(args(1, 3072, 3072), 132)->row_tiles, 1);
  EXPECT_EQ(tq2_stream_v2_kernel_name(args(1, 27648, 3072), 132), "tq2_stream_v2_f32_f32_f16x3_n8_r128");
  // m = 16 Exact: 32 columns, 4 n8 tiles; K in chunks that fit the shared-memory budget.
  c = tq2_stream_v2_config(args(16, 4096, 14336), 132);
  EXPECT_EQ(c->splits, 2);
  EXPECT_EQ(c->n_tiles, 4);
  EXPECT_LT(c->chunk_groups, 14336 / 128);
  EXPECT_GE(c->chunk_groups, 1);
  EXPECT_LE(c->smem_bytes, kTq2V2SmemBudget);
  for (std::int64_t m = 1; m <= 16; ++m)
    for (std::int64_t k : {128, 3072, 14336}) {
      auto cm = tq2_stream_v2_config(args(m, 4096, k), 132);
      ASSERT_TRUE(cm.has_value());
      EXPECT_LE(cm->smem_bytes, kTq2V2SmemBudget) << m << " " << k;
      EXPECT_GE(8 * cm->n_tiles, m * cm->splits);
    }
}

TEST(Tq2Kernels, StreamV4Config) {
  EXPECT_TRUE(tq2_stream_v4_supports(args(2, 8, 128)));
  EXPECT_TRUE(tq2_stream_v4_supports(args(8, 8, 128)));
  EXPECT_FALSE(tq2_stream_v4_supports(args(9, 8, 128)));
  for (std::int64_t m = 1; m <= kTq2V4MaxM; ++m) EXPECT_EQ(tq2_stream_v4_config(args(m, 64, 1024))->n_tiles, (m + 1) / 2) << m;
  Tq2Args a = args(1, 8, 128);
  a.scales = at<const std::uint16_t>(0x200008);
  EXPECT_FALSE(tq2_stream_v4_supports(a));  // bulk copies need 16-byte aligned scales
  // dit_proj m = 1: the 3072-wide activation fits twice per SM: 2 blocks x 6 stages (1728 bands
  // over 264 blocks).
  auto c = tq2_stream_v4_config(args(1, 27648, 3072), 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->blocks_per_sm, 2);
  EXPECT_EQ(c->stages, kTq2V4MaxStages);
  EXPECT_EQ(c->grid, 264);
  // Auto stages the image (tq2_stream_in_block); a forced InBlock names the in-block kernel.
  EXPECT_EQ(tq2_stream_v4_kernel_name(args(1, 27648, 3072), 132), "tq2_stream_v4_f32_f32_i8x4_n8_s6_b2");
  Tq2Args forced = args(1, 27648, 3072);
  forced.stream_image = Tq2StreamImage::InBlock;
  EXPECT_EQ(tq2_stream_v4_kernel_name(forced, 132), "tq2_stream_v4_f32_f32_i8x4_n8_s6_b2_inblock");
  EXPECT_EQ(tq2_stream_v4_kernel_name(args(2, 27648, 3072), 132), "tq2_stream_v4_f32_f32_i8x4_n8_s6_b2");
  EXPECT_EQ(tq2_stream_v4_config(args(1, 40, 3072), 132)->grid, 3);  // never more blocks than bands
  // Long K: one block per SM, the ring shrinks to what fits; past that the kernel is refused.
  auto cl = tq2_stream_v4_config(args(1, 8192, 28672), 132);
  ASSERT_TRUE(cl.has_value());
  EXPECT_EQ(cl->blocks_per_sm, 1);
  EXPECT_GE(cl->stages, kTq2V4MinStages);
  EXPECT_LE(cl->smem_bytes, kTq2V4SmemOptin);
  EXPECT_FALSE(tq2_stream_v4_supports(args(2, 8192, 28672)));
  EXPECT_FALSE(tq2_stream_v4_supports(args(1, 64, std::int64_t{128} << 40)));
  EXPECT_FALSE(tq2_stream_v4_supports(args(1, std::int64_t{1} << 31, 128)));  // tensor-map rows are int32
  EXPECT_FALSE(tq2_stream_v4_supports(args(8, 4096, 14336)));  // 33 record columns of 14 KB
  for (std::int64_t m : {1, 2, 5, 8})
    for (std::int64_t k : {128, 384, 2560, 6912, 14336}) {
      if (m >= 5 && k >= 6912) continue;
      auto ck = tq2_stream_v4_config(args(m, 4096, k), 132);
      ASSERT_TRUE(ck.has_value()) << m << " " << k;
      const Tq2StreamV4Smem l = tq2_stream_v4_smem(m, k, ck->stages);
      EXPECT_EQ(l.total, ck->smem_bytes);
      EXPECT_LE(ck->smem_bytes * ck->blocks_per_sm, kTq2V4SmemOptin);
      // Regions in order, 16-byte aligned (bulk-copy targets, uint4 stores).
      EXPECT_EQ(l.ring % 128, 0);  // tensor-copy targets
      EXPECT_EQ(kTq2V4StageBytes % 128, 0);
      EXPECT_EQ(l.scales % 16, 0);
      EXPECT_EQ(l.xs % 16, 0);
      EXPECT_EQ(l.col_stride % 16, 0);
      EXPECT_LT(l.ring, l.scales);
      EXPECT_LT(l.scales, l.red);
      EXPECT_LT(l.red, l.coef);
      EXPECT_LT(l.coef, l.xs);
    }
}

TEST(Tq2Kernels, StreamV5PartsConfigAndWorkspace) {
  // The suite's decode shapes: 27648x3072 (216 super-bands: K whole), 3072x3072 (24: parts of 4
  // groups), 14336x4096 (112: 2 parts of 16), 8192x28672 (64: 4 parts of 56).
  EXPECT_EQ(tq2_stream_v5_parts(27648, 3072), (Tq2StreamV5Parts{1, 24}));
  EXPECT_EQ(tq2_stream_v5_parts(3072, 3072), (Tq2StreamV5Parts{6, 4}));
  EXPECT_EQ(tq2_stream_v5_parts(14336, 4096), (Tq2StreamV5Parts{2, 16}));
  EXPECT_EQ(tq2_stream_v5_parts(8192, 28672), (Tq2StreamV5Parts{4, 56}));
  EXPECT_EQ(tq2_stream_v5_parts(9001, 1152), (Tq2StreamV5Parts{3, 4}));  // 4 + 4 + 1 groups
  EXPECT_EQ(tq2_stream_v5_parts(17, 128), (Tq2StreamV5Parts{1, 4}));
  EXPECT_EQ(tq2_stream_v5_parts(std::int64_t{1} << 20, 4096), (Tq2StreamV5Parts{1, 32}));  // 8192 super-bands: K whole
  for (std::int64_t n : {1, 200, 5000, 70000, 1 << 24})
    for (std::int64_t k : {128, 384, 1152, 6912, 28672, 1 << 20}) {
      const Tq2StreamV5Parts p = tq2_stream_v5_parts(n, k);
      const std::int64_t groups = k / 128;
      EXPECT_EQ(p.part_groups % kTq2V5StageGroups, 0) << n << " " << k;
      EXPECT_LT(static_cast<std::int64_t>(p.parts - 1) * p.part_groups, groups) << n << " " << k;  // no empty part
      EXPECT_GE(static_cast<std::int64_t>(p.parts) * p.part_groups, groups) << n << " " << k;
    }
  Tq2Args a = args(1, 27648, 3072);
  EXPECT_FALSE(tq2_stream_v5_supports(a));  // no transposed scales
  a.scales_t = at<const std::uint16_t>(0x500000), a.scales_t_ld = 27648;
  auto c = tq2_stream_v5_config(a, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->blocks_per_sm, 2);
  EXPECT_EQ(c->items, 216);
  EXPECT_EQ(c->grid, 216);
  EXPECT_LE(c->smem_bytes * 2, kTq2V4SmemOptin);
  // m = 1: Auto stages the image (the staging kernel first, then the engine).
  EXPECT_FALSE(c->stage_in_block);
  EXPECT_EQ(tq2_stream_v5_kernel_name(a, 132), "tq2_stream_v5_f32_f32_i8x4_n8_s" + std::to_string(c->stages) + "_b2_p1");
  EXPECT_EQ(tq2_stream_v5_stage_kernel_name(a), "tq2_stage_v5_f32_i8x4");
  EXPECT_EQ(tq2_stream_image_refusal(a, true), "");
  a.stream_image = Tq2StreamImage::InBlock;  // forced: one launch, no staging kernel
  EXPECT_TRUE(tq2_stream_v5_config(a, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_v5_kernel_name(a, 132),
            "tq2_stream_v5_f32_f32_i8x4_n8_s" + std::to_string(c->stages) + "_b2_p1_inblock");
  EXPECT_EQ(tq2_stream_v5_stage_kernel_name(a), "");
  EXPECT_EQ(tq2_stream_image_refusal(a, true), "");
  a.stream_image = Tq2StreamImage::Auto, a.m = 2;  // staged
  EXPECT_FALSE(tq2_stream_v5_config(a, 132)->stage_in_block);
  a.stream_image = Tq2StreamImage::InBlock;  // forced: any m with K whole
  EXPECT_TRUE(tq2_stream_v5_config(a, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_image_refusal(a, true), "");
  a.stream_image = Tq2StreamImage::Auto, a.m = 1;
  a.scales_t_ld = 27644;  // not a multiple of 8
  EXPECT_FALSE(tq2_stream_v5_supports(a));
  a.scales_t_ld = 27648, a.scales_t = at<const std::uint16_t>(0x500008);
  EXPECT_FALSE(tq2_stream_v5_supports(a));  // tensor maps need 16-byte aligned bases
  // Workspace: the image (as v4's), a counter per 16 rows, partials [parts][m][n] f32.
  const std::size_t image = tq2_stream_v4_stage_bytes(2, 3072);
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(2, 27648, 3072), (image + 15) / 16 * 16 + 1728 * 4);
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(2, 14336, 4096),
            (tq2_stream_v4_stage_bytes(2, 4096) + 15) / 16 * 16 + 896 * 4 + 2 * 2 * 14336 * 4);
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(1, 17, 128), (tq2_stream_v4_stage_bytes(1, 128) + 15) / 16 * 16 + 16);
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(17, 17, 128), 0u);  // m > 16
  // Long K: one block per SM; past the shared memory the kernel is refused.
  Tq2Args l = args(1, 8192, 28672);
  l.scales_t = at<const std::uint16_t>(0x500000), l.scales_t_ld = 8192;
  auto cl = tq2_stream_v5_config(l, 132);
  ASSERT_TRUE(cl.has_value());
  EXPECT_EQ(cl->blocks_per_sm, 1);
  EXPECT_GE(cl->stages, kTq2V5MinStages);
  EXPECT_LE(cl->smem_bytes, kTq2V4SmemOptin);
  EXPECT_EQ(cl->grid, 132);
  EXPECT_FALSE(cl->stage_in_block);  // 224 items for 8 warps: staged once for all blocks
  l.m = 2;  // the whole image does not fit: one part's slice at a time (StreamV5SlicedImage)
  EXPECT_TRUE(tq2_stream_v5_supports(l));
  EXPECT_TRUE(tq2_stream_v5_config(l, 132)->sliced);
  l.m = 7;  // neither the whole image nor a slice of the 4 parts fits: 6 parts of 40 groups
  EXPECT_TRUE(tq2_stream_v5_supports(l));
  EXPECT_EQ(tq2_stream_v5_config(l, 132)->parts, (Tq2StreamV5Parts{6, 40}));
  EXPECT_TRUE(tq2_stream_v5_config(l, 132)->sliced);
  l.m = 9;  // wide: parts of 16 groups
  EXPECT_TRUE(tq2_stream_v5_supports(l));
  l.m = 17;
  EXPECT_FALSE(tq2_stream_v5_supports(l));
}

// The image rule: in-block only when forced (Auto stages: in-block measured slower), with K
// whole (parts 1) and m <= 4; Staged never; a forced InBlock with K in parts is refused.
TEST(Tq2Kernels, StreamV5ImageRule) {
  for (std::int64_t m : {1, 2, 4, 8})
    for (int parts : {1, 2, 6}) {
      const bool built = m <= kTq2StreamInBlockMaxM;
      EXPECT_FALSE(tq2_stream_in_block(m, parts, Tq2StreamImage::Auto)) << m << " " << parts;
      EXPECT_EQ(tq2_stream_in_block(m, parts, Tq2StreamImage::InBlock), parts == 1 && built) << m << " " << parts;
      EXPECT_FALSE(tq2_stream_in_block(m, parts, Tq2StreamImage::Staged)) << m << " " << parts;
    }
  Tq2Args a = args(1, 3072, 3072);  // 24 super-bands: K in 6 parts
  a.scales_t = at<const std::uint16_t>(0x500000), a.scales_t_ld = 3072;
  ASSERT_EQ(tq2_stream_v5_parts(3072, 3072).parts, 6);
  EXPECT_FALSE(tq2_stream_v5_config(a, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_image_refusal(a, true), "");
  a.stream_image = Tq2StreamImage::InBlock;
  EXPECT_NE(tq2_stream_image_refusal(a, true).find("6 parts"), std::string::npos) << tq2_stream_image_refusal(a, true);
  Tq2Args b = args(5, 27648, 512);  // K whole, but m 5
  b.scales_t = at<const std::uint16_t>(0x500000), b.scales_t_ld = 27648, b.stream_image = Tq2StreamImage::InBlock;
  EXPECT_NE(tq2_stream_image_refusal(b, true).find("m <= 4"), std::string::npos) << tq2_stream_image_refusal(b, true);
  EXPECT_FALSE(tq2_stream_v5_config(b, 132)->stage_in_block);
  // v4: no parts; Auto stages, a forced InBlock converts in the block at m <= 4.
  Tq2Args v4 = args(1, 2560, 2560);  // BitNet-2B o: 20 groups, staged under Auto
  ASSERT_TRUE(tq2_stream_v4_config(v4, 132).has_value());
  EXPECT_FALSE(tq2_stream_v4_config(v4, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_v4_stage_kernel_name(v4), "tq2_stage_v4_f32_i8x4");
  v4.stream_image = Tq2StreamImage::InBlock;
  EXPECT_TRUE(tq2_stream_v4_config(v4, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_v4_stage_kernel_name(v4), "");
  EXPECT_NE(tq2_stream_v4_kernel_name(v4, 132).find("_inblock"), std::string::npos);
  v4 = args(1, 2560, 6912);  // BitNet-2B down: staged
  ASSERT_TRUE(tq2_stream_v4_config(v4, 132).has_value());
  EXPECT_FALSE(tq2_stream_v4_config(v4, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_v4_stage_kernel_name(v4), "tq2_stage_v4_f32_i8x4");
  v4.stream_image = Tq2StreamImage::InBlock;
  EXPECT_TRUE(tq2_stream_v4_config(v4, 132)->stage_in_block);
  EXPECT_EQ(tq2_stream_image_refusal(v4, false), "");
  v4.m = 5;
  EXPECT_NE(tq2_stream_image_refusal(v4, false).find("m <= 4"), std::string::npos);
}

// Long K: where the whole activation image does not fit beside a 2-stage ring and K is in
// parts, v5 holds one part's slice (m <= 4); items go part-major; the workspace holds a slice a
// part. Llama-70B down (8192 x 28672): whole at m = 1, sliced at m = 2..4 (4 parts of 56
// groups), neither at m = 5.
TEST(Tq2Kernels, StreamV5SlicedImage) {
  EXPECT_EQ(tq2_stream_v5_image_plan(1, 8192, 28672), (Tq2StreamV5ImagePlan{false, 224}));
  for (std::int64_t m : {2, 3, 4}) EXPECT_EQ(tq2_stream_v5_image_plan(m, 8192, 28672), (Tq2StreamV5ImagePlan{true, 56})) << m;
  for (std::int64_t m : {5, 6}) EXPECT_EQ(tq2_stream_v5_image_plan(m, 8192, 28672), (Tq2StreamV5ImagePlan{true, 56})) << m;
  // m = 7..8: not even a 56-group slice fits: the fewest parts whose slice fits at m = 8 (6 of 40
  // groups, the last 24), the same at m = 7 and 8; m = 1..6 keep narrow's 4 parts.
  for (std::int64_t m : {7, 8}) {
    EXPECT_EQ(tq2_stream_v5_image_plan(m, 8192, 28672), (Tq2StreamV5ImagePlan{true, 40})) << m;
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 8192, 28672), (Tq2StreamV5Parts{6, 40})) << m;
  }
  for (std::int64_t m : {1, 2, 6}) EXPECT_EQ(tq2_stream_v5_parts_for(m, 8192, 28672), (Tq2StreamV5Parts{4, 56})) << m;
  // Llama-70B up (28672 x 8192): K whole (1 part) to m = 5, where the image fits; at m = 6..8
  // 2 parts of 32 groups, sliced.
  for (std::int64_t m : {1, 5}) EXPECT_EQ(tq2_stream_v5_image_plan(m, 28672, 8192), (Tq2StreamV5ImagePlan{false, 64})) << m;
  for (std::int64_t m : {6, 8}) {
    EXPECT_EQ(tq2_stream_v5_image_plan(m, 28672, 8192), (Tq2StreamV5ImagePlan{true, 32})) << m;
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 28672, 8192), (Tq2StreamV5Parts{2, 32})) << m;
  }
  // The longest K v5 takes, on one super-band: narrow's 228 parts of 36 groups fit at m = 8.
  EXPECT_EQ(tq2_stream_v5_parts(64, std::int64_t{1} << 20), (Tq2StreamV5Parts{228, 36}));
  EXPECT_EQ(tq2_stream_v5_image_plan(8, 64, std::int64_t{1} << 20), (Tq2StreamV5ImagePlan{true, 36}));
  EXPECT_EQ(tq2_stream_v5_parts_for(8, 64, std::int64_t{1} << 20), (Tq2StreamV5Parts{228, 36}));
  EXPECT_EQ(tq2_stream_v5_image_plan(2, 27648, 3072), (Tq2StreamV5ImagePlan{false, 24}));  // fits whole
  EXPECT_EQ(tq2_stream_v5_image_plan(2, 0, 28672), (Tq2StreamV5ImagePlan{false, 0}));
  EXPECT_EQ(tq2_stream_v5_image_plan(17, 64, 256), (Tq2StreamV5ImagePlan{false, 0}));
  Tq2Args a = args(2, 8192, 28672);
  a.scales_t = at<const std::uint16_t>(0x500000), a.scales_t_ld = 8192;
  EXPECT_TRUE(tq2_stream_v5_supports(a));
  const auto c = tq2_stream_v5_config(a, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->sliced);
  EXPECT_FALSE(c->stage_in_block);
  EXPECT_EQ(c->parts.parts, 4);
  EXPECT_EQ(c->items, 64 * 4);
  EXPECT_LE(c->smem_bytes * c->blocks_per_sm, kTq2V4SmemOptin);
  EXPECT_EQ(c->smem_bytes, tq2_stream_v5_smem(2, 28672, c->stages, 56).total);
  EXPECT_NE(tq2_stream_v5_kernel_name(a, 132).find("_p4_sliced"), std::string::npos) << tq2_stream_v5_kernel_name(a, 132);
  EXPECT_EQ(tq2_stream_v5_stage_kernel_name(a), "tq2_stage_v5_f32_i8x4");
  // A slice: coefficients of 56 groups x 8 columns, then 9 record columns of 56 x 128 + 64 bytes.
  const std::int64_t slice = 56 * 8 * 8 + 9 * (56 * 128 + 64);
  EXPECT_EQ(tq2_stream_v5_image_bytes(2, 28672, 56), slice);
  EXPECT_EQ(slice % 16, 0);  // each part's slice is a bulk-copy source
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(2, 8192, 28672),
            static_cast<std::size_t>((4 * slice + 15) / 16 * 16 + 8192 / 16 * 4 + 4 * 2 * 8192 * 4));
  // m = 1 keeps the whole image (unchanged), and a forced in-block image stays refused with K in parts.
  Tq2Args one = a;
  one.m = 1;
  EXPECT_FALSE(tq2_stream_v5_config(one, 132)->sliced);
  a.stream_image = Tq2StreamImage::InBlock;
  EXPECT_NE(tq2_stream_image_refusal(a, true), "");
  EXPECT_FALSE(tq2_stream_v5_config(a, 132)->stage_in_block);
}

// m = 9..16 ("wide"): 6 or 8 n8 tiles, the image always a slice (one part's groups, all of K when
// K is in one part), parts from (n, k) alone, at least the narrow parts and few enough groups that
// the m = 16 slice fits beside 4 stages; one block per SM (registers).
TEST(Tq2Kernels, StreamV5Wide) {
  for (std::int64_t m : {1, 2, 8}) EXPECT_EQ(tq2_stream_v5_n_tiles(m), (m + 1) / 2) << m;
  for (std::int64_t m : {9, 10, 12}) EXPECT_EQ(tq2_stream_v5_n_tiles(m), 6) << m;
  for (std::int64_t m : {13, 16}) EXPECT_EQ(tq2_stream_v5_n_tiles(m), 8) << m;
  // Parts: narrow ones at m <= 8; wide ones the same for every m in 9..16.
  EXPECT_EQ(tq2_stream_v5_parts_for(8, 27648, 3072), tq2_stream_v5_parts(27648, 3072));
  for (std::int64_t m : {9, 13, 16}) {
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 27648, 3072), (Tq2StreamV5Parts{2, 12})) << m;   // 24 groups: 2 x 12
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 8192, 28672), (Tq2StreamV5Parts{14, 16})) << m;  // was 4 x 56
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 3072, 3072), tq2_stream_v5_parts(3072, 3072)) << m;  // 6 x 4 already fit
    EXPECT_EQ(tq2_stream_v5_parts_for(m, 100000, 256), (Tq2StreamV5Parts{1, 2})) << m;    // one part of 2 groups
  }
  for (std::int64_t k : {128, 3072, 8192, 28672, 128 * 1001}) {
    const Tq2StreamV5Parts p = tq2_stream_v5_parts_for(16, 4096, k);
    EXPECT_GE(p.parts, tq2_stream_v5_parts(4096, k).parts) << k;
    EXPECT_GT(tq2_stream_v5_smem(16, k, kTq2V5WideStages, p.parts == 1 ? static_cast<int>(k / 128) : p.part_groups).total, 0) << k;
    EXPECT_EQ((k / 128 + p.part_groups - 1) / p.part_groups, p.parts) << k;
  }
  Tq2Args a = args(16, 27648, 3072);
  a.scales_t = at<const std::uint16_t>(0x500000), a.scales_t_ld = 27648;
  EXPECT_EQ(tq2_stream_v5_image_plan(16, 27648, 3072), (Tq2StreamV5ImagePlan{true, 12}));
  const auto c = tq2_stream_v5_config(a, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->sliced);
  EXPECT_EQ(c->n_tiles, 8);
  EXPECT_EQ(c->blocks_per_sm, 1);
  EXPECT_EQ(c->items, 216 * 2);
  EXPECT_EQ(c->grid, 132);
  EXPECT_GE(c->stages, kTq2V5WideStages);
  EXPECT_EQ(c->smem_bytes, tq2_stream_v5_smem(16, 3072, c->stages, 12).total);
  EXPECT_LE(c->smem_bytes, kTq2V4SmemOptin);
  EXPECT_EQ(tq2_stream_v5_kernel_name(a, 132).substr(0, 39), "tq2_stream_v5_f32_f32_i8x4_n64_s" + std::to_string(c->stages) + "_b1_p2");
  // Coefficients of 12 groups x 64 columns, then 65 record columns of 12 x 128 + 64 bytes; two
  // slices, a counter per 16 rows, partials [2][16][27648].
  const std::int64_t slice = 12 * 64 * 8 + 65 * (12 * 128 + 64);
  EXPECT_EQ(tq2_stream_v5_image_bytes(16, 3072, 12), slice);
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(16, 27648, 3072),
            static_cast<std::size_t>((2 * slice + 15) / 16 * 16 + 27648 / 16 * 4 + 2 * 16 * 27648 * 4));
  // m = 9: 6 tiles, the same parts.
  a.m = 9;
  EXPECT_EQ(tq2_stream_v5_config(a, 132)->n_tiles, 6);
  EXPECT_EQ(tq2_stream_v5_config(a, 132)->parts, (Tq2StreamV5Parts{2, 12}));
  // One part (k = 256): a slice of all of K.
  Tq2Args s = args(12, 1000, 256);
  s.scales_t = at<const std::uint16_t>(0x500000), s.scales_t_ld = 1000;
  const auto cs = tq2_stream_v5_config(s, 132);
  ASSERT_TRUE(cs.has_value());
  EXPECT_TRUE(cs->sliced);
  EXPECT_EQ(cs->parts, (Tq2StreamV5Parts{1, 2}));
  EXPECT_EQ(tq2_stream_v5_workspace_bytes(12, 1000, 256),
            static_cast<std::size_t>((tq2_stream_v5_image_bytes(12, 256, 2) + 15) / 16 * 16 + ((1000 + 15) / 16 * 4 + 15) / 16 * 16));
  // Narrow sliced kernels with 4 n8 tiles hold one block per SM (116 registers).
  Tq2Args d = args(8, 4096, 14336);
  d.scales_t = at<const std::uint16_t>(0x500000), d.scales_t_ld = 4096;
  ASSERT_TRUE(tq2_stream_v5_config(d, 132)->sliced);
  EXPECT_EQ(tq2_stream_v5_config(d, 132)->blocks_per_sm, 1);
}

}  // namespace
}  // namespace llmm::cuda_ternary
