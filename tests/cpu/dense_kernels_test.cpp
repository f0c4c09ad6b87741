// Pure host facts of the dense CUDA kernels: the gemv_wide gate (port of tract-metal's
// gemv_wide_config_matches_mlx_gate, with the CUDA choices), layout eligibility, the gemv
// mapping and the kernel names. No GPU needed: pointers are plain values here.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/dense/dense_kernels.hpp"

namespace llmm::cuda_dense {
namespace {

const void* addr(std::uintptr_t v) { return reinterpret_cast<const void*>(v); }
void* maddr(std::uintptr_t v) { return reinterpret_cast<void*>(v); }

// x[m, k] @ w[n, k]^T, contiguous, 16-byte aligned.
DenseArgs skinny(DType t, std::int64_t m, std::int64_t n, std::int64_t k) {
  DenseArgs a;
  a.dtype = t;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = addr(0x10000);
  a.a_ld = k;
  a.b = addr(0x200000);
  a.b_ld = k;
  a.b_trans = true;
  a.c = maddr(0x4000000);
  a.c_ld = n;
  return a;
}

TEST(GemvWideConfig, GateRejectsShapesThatBelongElsewhere) {
  EXPECT_FALSE(gemv_wide_config(2, 128, 256, DType::F16, 7).has_value());  // pre-sm_80
  EXPECT_TRUE(gemv_wide_config(2, 128, 256, DType::F16, 0).has_value());   // unknown device
  EXPECT_TRUE(gemv_wide_config(2, 128, 256, DType::F16, 8).has_value());
  EXPECT_FALSE(gemv_wide_config(0, 128, 256, DType::F16, 9).has_value());   // m == 0
  EXPECT_FALSE(gemv_wide_config(17, 128, 256, DType::F16, 9).has_value());  // 3 passes
  EXPECT_TRUE(gemv_wide_config(16, 128, 256, DType::F16, 9).has_value());
  EXPECT_FALSE(gemv_wide_config(4, 1, 256, DType::F16, 9).has_value());     // n == 1
  EXPECT_FALSE(gemv_wide_config(4, 0, 256, DType::F16, 9).has_value());
  // K must be whole 16-byte vectors: 8 halves, 4 floats.
  EXPECT_FALSE(gemv_wide_config(2, 128, 254, DType::F16, 9).has_value());
  EXPECT_FALSE(gemv_wide_config(2, 128, 252, DType::BF16, 9).has_value());
  EXPECT_TRUE(gemv_wide_config(2, 128, 252, DType::F32, 9).has_value());
  EXPECT_FALSE(gemv_wide_config(2, 128, 250, DType::F32, 9).has_value());
  EXPECT_FALSE(gemv_wide_config(2, 128, 256, DType::U8, 9).has_value());
}

TEST(GemvWideConfig, VectorsPerBlockAndPasses) {
  struct Case {
    std::int64_t m;
    int vecs, passes, grid_x;
  };
  // One pass up to 8 vectors (kernels for 1, 2, 4, 8), two passes of 8 up to 16.
  const Case cases[] = {{1, 1, 1, 1},  {2, 2, 1, 1},  {3, 4, 1, 1},  {4, 4, 1, 1},  {5, 8, 1, 1},
                        {8, 8, 1, 1},  {9, 8, 2, 2},  {12, 8, 2, 2}, {16, 8, 2, 2}};
  for (const Case& c : cases) {
    const auto cfg = gemv_wide_config(c.m, 128, 256, DType::F16, 9);
    ASSERT_TRUE(cfg.has_value()) << "m=" << c.m;
    EXPECT_EQ(cfg->vecs_per_block, c.vecs) << "m=" << c.m;
    EXPECT_EQ(cfg->passes, c.passes) << "m=" << c.m;
    EXPECT_EQ(cfg->grid_x, c.grid_x) << "m=" << c.m;
    EXPECT_GE(cfg->vecs_per_block * cfg->passes, c.m);
  }
}

TEST(GemvWideConfig, MatchesSeedCasesWithCudaChoices) {
  // The seed's three fixed cases, with the values this port picks.
  auto c = gemv_wide_config(8, 128, 256, DType::F16, 9);
  ASSERT_TRUE(c.has_value());
  // 32 row groups of 4 leave the device short of warps, but K = 32 vectors is too short to
  // split further: one warp per row group.
  EXPECT_EQ(*c, (GemvWideConfig{8, 1, 32, 1, 16}));
  c = gemv_wide_config(4, 128, 256, DType::F16, 9);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, (GemvWideConfig{4, 1, 32, 1, 16}));
  // Very large N: mlx drops to grid_x = 1 (passes loop in the block) for n >= 65536; on the
  // H200 that was slower, so the port keeps one block per pass for every N.
  c = gemv_wide_config(12, 131072, 4096, DType::BF16, 9);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->passes, 2);
  EXPECT_EQ(c->grid_x, 2);
  EXPECT_EQ(c->k_lanes, 32);
  c = gemv_wide_config(4, 131072, 256, DType::F16, 9);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->grid_x, 1);
}

TEST(GemvWideConfig, KLanesFillTheDevice) {
  // 3072 x 3072: 768 row groups of 4 rows < 132 SMs x 16 warps -> split K over 4 warps.
  auto c = gemv_wide_config(4, 3072, 3072, DType::BF16, 9, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->k_lanes, 128);
  EXPECT_EQ(c->rows_per_block, 4);
  // 14336 rows: 3584 row groups are enough warps already.
  c = gemv_wide_config(4, 14336, 4096, DType::BF16, 9, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->k_lanes, 32);
  EXPECT_EQ(c->rows_per_block, 16);
  // Two passes count as twice the warps: 1536 -> one doubling to 3072.
  c = gemv_wide_config(16, 3072, 3072, DType::BF16, 9, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->k_lanes, 64);
  EXPECT_EQ(c->rows_per_block, 8);
  // A bigger device asks for more warps.
  c = gemv_wide_config(4, 14336, 4096, DType::BF16, 9, 300);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->k_lanes, 64);
  // sm_count 0 means 132.
  EXPECT_EQ(gemv_wide_config(4, 3072, 3072, DType::BF16, 9, 0),
            gemv_wide_config(4, 3072, 3072, DType::BF16, 9, 132));
  // f32: 1024 rows, K = 1024 vectors -> 4 warps per row group.
  c = gemv_wide_config(2, 4096, 4096, DType::F32, 9, 132);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->k_lanes, 128);
}

TEST(GemvWideSupports, LayoutAndAlignment) {
  DenseArgs a = skinny(DType::BF16, 4, 4096, 4096);
  EXPECT_TRUE(gemv_wide_supports(a));
  DenseArgs t = a;
  t.b_trans = false;
  EXPECT_FALSE(gemv_wide_supports(t));
  t = a;
  t.a_trans = true;
  EXPECT_FALSE(gemv_wide_supports(t));
  t = a;
  t.a = addr(0x10002);  // element-aligned, not 16-byte aligned
  EXPECT_FALSE(gemv_wide_supports(t));
  t = a;
  t.b_ld = 4100;  // 8200 bytes: rows lose 16-byte alignment
  EXPECT_FALSE(gemv_wide_supports(t));
  t = a;
  t.b_ld = 4104;  // padded rows that keep alignment
  EXPECT_TRUE(gemv_wide_supports(t));
  t = a;
  t.a_batch = 3;  // unused with one batch entry
  EXPECT_TRUE(gemv_wide_supports(t));
  t.batch = 2;
  EXPECT_FALSE(gemv_wide_supports(t));
  t.a_batch = 0;  // broadcast
  EXPECT_TRUE(gemv_wide_supports(t));
  t = a;
  t.dtype = DType::U32;
  EXPECT_FALSE(gemv_wide_supports(t));
}

TEST(DenseKernelNames, SayWhatDtypeLayoutVariant) {
  DenseArgs w = skinny(DType::BF16, 8, 3072, 3072);
  const auto cfg = gemv_wide_config(w.m, w.n, w.k, w.dtype, 9, 132);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(gemv_wide_kernel_name(w, *cfg), "gemv_wide_bf16_v8_kl128");
  w.dtype = DType::F32;
  EXPECT_EQ(gemv_wide_kernel_name(w, GemvWideConfig{2, 1, 32, 1, 16}), "gemv_wide_f32_v2_kl32");

  DenseArgs g = skinny(DType::F32, 4096, 14336, 4096);
  EXPECT_EQ(zero_fill_name(g), "zero_fill_f32");
  g.dtype = DType::BF16;
  EXPECT_EQ(zero_fill_name(g), "zero_fill_bf16");
}

TEST(DenseKernels, Vec16Elems) {
  EXPECT_EQ(vec16_elems(DType::F32), 4);
  EXPECT_EQ(vec16_elems(DType::BF16), 8);
  EXPECT_EQ(vec16_elems(DType::U8), 0);
}

}  // namespace
}  // namespace llmm::cuda_dense
