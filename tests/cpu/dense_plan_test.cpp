// plan_matmul, the dense router: a pure function, tested without a GPU.
#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "core/dense/dense_kernels.hpp"
#include "core/dense/skinny_mma.hpp"
#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/matmul.hpp"

using namespace llmm;

namespace {
ArchInfo h200() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA;
  a.name = "NVIDIA H200";
  a.cc_major = 9;
  a.sm_count = 132;
  a.l2_bytes = 60 << 20;
  return a;
}
MatmulDesc desc(std::int64_t m, std::int64_t n, std::int64_t k, DType t = DType::BF16, bool tb = true) {
  MatmulDesc d;
  d.m = m, d.n = n, d.k = k, d.dtype = t, d.transpose_b = tb, d.a_vec16 = true, d.b_vec16 = true;
  return d;
}
}  // namespace

// plan_matmul(-5, 3, 3) returned a plan: negative sizes and non-float dtypes are refused now.
TEST(DensePlan, RefusesNegativeSizesAndNonFloatDtypes) {
  for (MatmulDesc d : {desc(-5, 3, 3), desc(3, -1, 3), desc(3, 3, -2)}) {
    EXPECT_THROW(plan_matmul(d, ArchInfo{}), Error);
    EXPECT_THROW(plan_matmul(d, h200()), Error);
  }
  MatmulDesc d = desc(4, 4, 4);
  d.batch = -1;
  EXPECT_THROW(plan_matmul(d, h200()), Error);
  try {
    plan_matmul(desc(-5, 3, 3), ArchInfo{});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("plan_matmul: sizes must be >= 0 (batch: 1, m: -5, n: 3, k: 3)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan_matmul(desc(4, 4, 4, DType::U32), h200()), Error);
}

TEST(DensePlan, CpuContextUsesReference) {
  EXPECT_EQ(plan_matmul(desc(64, 64, 64), ArchInfo{}).route, DenseRoute::Cpu);
  EXPECT_THROW(plan_matmul(desc(1, 64, 64), ArchInfo{}, DenseRoute::Gemv), Error);
}

TEST(DensePlan, RoutesByShape) {
  ArchInfo a = h200();
  // Matrix-vector: gemv for very long 16-bit outputs (the lm head), cuBLASLt's gemv below
  // (measured), gemv_wide on small 16-bit weights and on f32 with n >= 3072, k <= 4096.
  EXPECT_EQ(plan_matmul(desc(1, 128256, 4096), a).route, DenseRoute::Gemv);
  EXPECT_EQ(plan_matmul(desc(1, 128256, 4096, DType::F32), a).route, DenseRoute::GemvWide);
  EXPECT_EQ(plan_matmul(desc(1, 128256, 8192, DType::F32), a).route, DenseRoute::Gemv);  // K > 4096
  EXPECT_EQ(plan_matmul(desc(128256, 1, 4096), a).route, DenseRoute::Gemv);
  EXPECT_EQ(plan_matmul(desc(1, 65536, 64, DType::F32, false), a).route, DenseRoute::Gemv);  // vector x matrix
  EXPECT_EQ(plan_matmul(desc(1, 14336, 4096), a).route, DenseRoute::CublasLt);  // 2^25.8 weights
  EXPECT_EQ(plan_matmul(desc(1, 14336, 4096, DType::F32), a).route, DenseRoute::GemvWide);
  EXPECT_EQ(plan_matmul(desc(1, 2560, 2560, DType::F32), a).route, DenseRoute::CublasLt);   // n < 3072
  EXPECT_EQ(plan_matmul(desc(1, 2560, 6912, DType::F32), a).route, DenseRoute::CublasLt);   // K > 4096
  EXPECT_EQ(plan_matmul(desc(4096, 1, 4096), a).route, DenseRoute::CublasLt);
  for (DType t : {DType::BF16, DType::F16})
    for (int m : {1, 2}) {
      EXPECT_EQ(plan_matmul(desc(m, 3072, 3072, t), a).route, DenseRoute::GemvWide) << m;
      EXPECT_EQ(plan_matmul(desc(m, 2560, 6912, t), a).route, DenseRoute::GemvWide) << m;  // any K below the size
      EXPECT_EQ(plan_matmul(desc(m, 8192, 4096, t), a).route, DenseRoute::GemvWide) << m;  // exactly 2^25
      EXPECT_EQ(plan_matmul(desc(m, 8193, 4096, t), a).route, DenseRoute::CublasLt) << m;
      MatmulDesc batched = desc(m, 3072, 3072, t);
      batched.batch = 4;  // 2^25.1 weights in all
      EXPECT_EQ(plan_matmul(batched, a).route, DenseRoute::CublasLt) << m;
      EXPECT_EQ(plan_matmul(desc(m, 3072, 3072, t, false), a).route, DenseRoute::CublasLt) << m;  // w [K, N]
    }
  EXPECT_EQ(plan_matmul(desc(2, 128256, 4096), a).route, DenseRoute::GemvWide);  // the lm head at m 2
  EXPECT_EQ(plan_matmul(desc(2, 128256, 8192), a).route, DenseRoute::CublasLt);
  for (int m = 2; m <= 16; ++m) {
    EXPECT_EQ(plan_matmul(desc(m, 14336, 4096), a).route, DenseRoute::CublasLt) << m;
    EXPECT_EQ(plan_matmul(desc(m, 14336, 4096, DType::F16), a).route, DenseRoute::CublasLt) << m;
    EXPECT_EQ(plan_matmul(desc(m, 4096, 14336), a).route, DenseRoute::CublasLt) << m;
    if (m > 2) EXPECT_EQ(plan_matmul(desc(m, 3072, 3072), a).route, DenseRoute::CublasLt) << m;
    EXPECT_EQ(plan_matmul(desc(m, 14336, 4096, DType::F32), a).route, DenseRoute::GemvWide) << m;
  }
  EXPECT_EQ(plan_matmul(desc(8, 3072, 3072, DType::F32), a).route, DenseRoute::GemvWide);
  EXPECT_EQ(plan_matmul(desc(17, 14336, 4096), a).route, DenseRoute::CublasLt);
  for (DType t : {DType::BF16, DType::F32}) {
    EXPECT_EQ(plan_matmul(desc(8, 14336, 4096, t, false), a).route, DenseRoute::CublasLt);  // w not [N, K]
    MatmulDesc mis = desc(8, 14336, 4096, t);
    mis.b_vec16 = false;
    EXPECT_EQ(plan_matmul(mis, a).route, DenseRoute::CublasLt);
    MatmulDesc odd_k = desc(8, 14336, 4094, t);  // k not a vector multiple: rows not 16-byte aligned either
    odd_k.a_vec16 = odd_k.b_vec16 = false;
    EXPECT_EQ(plan_matmul(odd_k, a).route, DenseRoute::CublasLt);
  }
  EXPECT_EQ(plan_matmul(desc(64, 64, 0), a).route, DenseRoute::Naive);
  EXPECT_EQ(plan_matmul(desc(4096, 14336, 4096), a).route, DenseRoute::CublasLt);
  // f32 Exact x . w^T: the Hopper engine's 3xTF32 where its tiles fill at least half the SMs
  // (17 x 14336: 112 tiles of 64; 256 x 3072: 4 x 24 = 96), else SGEMM (128 x 3072: 48 tiles).
  EXPECT_EQ(plan_matmul(desc(17, 14336, 4096, DType::F32), a).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(desc(4096, 14336, 4096, DType::F32), a).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(desc(256, 3072, 3072, DType::F32), a).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(desc(25, 32000, 1280, DType::F32), a).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(desc(128, 3072, 3072, DType::F32), a).route, DenseRoute::CublasLt);
  MatmulDesc f = desc(4096, 14336, 4096, DType::F32);
  f.precision = Precision::Fast;  // TF32: cuBLASLt's
  EXPECT_EQ(plan_matmul(f, a).route, DenseRoute::CublasLt);
  EXPECT_EQ(plan_matmul(desc(4096, 14336, 4096, DType::F32, false), a).route, DenseRoute::CublasLt);  // w [K, N]
  f = desc(4096, 14336, 4096, DType::F32);
  f.a_vec16 = false;
  EXPECT_EQ(plan_matmul(f, a).route, DenseRoute::CublasLt);
  f = desc(4096, 14336, 4096, DType::F32);
  f.batch = 3;  // batches count as tiles too
  EXPECT_EQ(plan_matmul(f, a).route, DenseRoute::TiledSm90);
  f = desc(64, 3072, 3072, DType::F32);
  EXPECT_EQ(plan_matmul(f, a).route, DenseRoute::CublasLt);  // 24 tiles
  f.batch = 3;                                                // 72
  EXPECT_EQ(plan_matmul(f, a).route, DenseRoute::TiledSm90);
  ArchInfo h100a = a;
  h100a.cc_minor = 1;  // not the sm_90a build
  EXPECT_EQ(plan_matmul(desc(4096, 14336, 4096, DType::F32), h100a).route, DenseRoute::CublasLt);
  ArchInfo old = a;
  old.cc_major = 7;
  EXPECT_EQ(plan_matmul(desc(512, 512, 512), old).route, DenseRoute::Naive);
}

TEST(DensePlan, GemvWideConfigTravelsInThePlan) {
  DensePlan p = plan_matmul(desc(8, 14336, 4096, DType::F32), h200());
  ASSERT_EQ(p.route, DenseRoute::GemvWide);
  EXPECT_GT(p.gemv_wide_vecs, 0);
  EXPECT_GT(p.gemv_wide_k_lanes, 0);
  EXPECT_GT(p.gemv_wide_grid_x, 0);
  EXPECT_FALSE(p.reason.empty());
}

// The dispatcher launches gemv_wide_config_of(the plan's fields): it must be the whole config
// gemv_wide_config computes for the planned shape, for every m, dtype and a spread of n, k, SMs.
TEST(DensePlan, GemvWidePlanFieldsNameTheWholeConfig) {
  using namespace llmm::cuda_dense;
  int checked = 0;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (std::int64_t m = 1; m <= 16; ++m)
      for (std::int64_t n : {2, 3, 100, 2560, 3072, 14336, 128256})
        for (std::int64_t k : {8, 64, 256, 2560, 4096, 14336})
          for (int sms : {1, 66, 132}) {
            ArchInfo a = h200();
            a.sm_count = sms;
            const auto want = gemv_wide_config(m, n, k, dt, a.cc_major, a.sm_count);
            if (!want) continue;
            DensePlan p = plan_matmul(desc(m, n, k, dt), a, DenseRoute::GemvWide);
            ASSERT_EQ(p.route, DenseRoute::GemvWide);
            EXPECT_EQ(gemv_wide_config_of(p.gemv_wide_vecs, p.gemv_wide_k_lanes, p.gemv_wide_grid_x), *want)
                << "m " << m << " n " << n << " k " << k << " " << dtype_name(dt) << " sms " << sms;
            ++checked;
          }
  EXPECT_GT(checked, 1000);
}

// The dispatcher launches the tiled engine at the plan's tile: the planner's pick, on Auto's f32
// Exact route and forced 16-bit alike; zero on other routes.
TEST(DensePlan, TiledSm90TileTravelsInThePlan) {
  using namespace llmm::engine;
  int checked = 0;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (std::int64_t m : {1, 7, 64, 1024, 1536, 4096})
      for (std::int64_t n : {33, 3072, 14336, 27648}) {
        DensePlan p = plan_matmul(desc(m, n, 4096, dt), h200(), DenseRoute::TiledSm90);
        ASSERT_EQ(p.route, DenseRoute::TiledSm90);
        const TiledSm90Launch l = tiled_sm90_dense_launch(dt, 1, m, n, 132);
        EXPECT_EQ(p.tiled_bn, l.bn) << m << " x " << n;
        EXPECT_EQ(p.tiled_bm, l.bm) << m << " x " << n;
        EXPECT_EQ(tiled_sm90_dense_launch_at(dt, 1, m, n, 132, p.tiled_bn, p.tiled_bm), l);
        ++checked;
      }
  EXPECT_EQ(checked, 72);
  DensePlan auto_f32 = plan_matmul(desc(4096, 14336, 4096, DType::F32), h200());
  ASSERT_EQ(auto_f32.route, DenseRoute::TiledSm90);  // Auto's f32 Exact route on sm_90a
  EXPECT_EQ(auto_f32.tiled_bn, tiled_sm90_dense_launch(DType::F32, 1, 4096, 14336, 132).bn);
  DensePlan lt = plan_matmul(desc(4096, 14336, 4096), h200(), DenseRoute::CublasLt);
  EXPECT_EQ(lt.tiled_bn, 0);
  EXPECT_EQ(lt.tiled_bm, 0);
}

TEST(DensePlan, SkinnyMmaConfigTravelsInThePlan) {
  using namespace llmm::cuda_dense;
  DensePlan p = plan_matmul(desc(9, 3072, 4096), h200(), DenseRoute::SkinnyMma);
  ASSERT_EQ(p.route, DenseRoute::SkinnyMma);
  auto c = skinny_mma_config(DType::BF16, 1, 9, 3072, 4096, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(p.skinny_n_tiles, c->n_tiles);
  EXPECT_EQ(p.skinny_row_tiles, c->row_tiles);
  EXPECT_EQ(p.skinny_cluster, c->cluster);
  EXPECT_EQ(p.skinny_blocks, c->blocks);
  EXPECT_EQ(p.skinny_cluster, 4);
  DensePlan q = plan_matmul(desc(9, 3072, 4096), h200(), DenseRoute::CublasLt);  // other routes carry none
  EXPECT_EQ(q.skinny_n_tiles + q.skinny_row_tiles + q.skinny_cluster + q.skinny_blocks, 0);
}

TEST(DensePlan, ForcedRoutesAreCheckedNotTrusted) {
  ArchInfo a = h200();
  EXPECT_EQ(plan_matmul(desc(64, 64, 64), a, DenseRoute::Tiled).route, DenseRoute::Tiled);
  EXPECT_EQ(plan_matmul(desc(64, 64, 64), a, DenseRoute::Naive).route, DenseRoute::Naive);
  EXPECT_EQ(plan_matmul(desc(1, 64, 64), a, DenseRoute::CublasLt).route, DenseRoute::CublasLt);
  try {
    plan_matmul(desc(4, 4, 4), a, DenseRoute::Gemv);
    ADD_FAILURE() << "gemv accepted m = n = 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("matmul: route gemv cannot run (m: 4, n: 4, k: 4, bf16): needs m == 1 or n == 1"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_matmul(desc(8, 64, 64, DType::BF16, false), a, DenseRoute::GemvWide), Error);
  EXPECT_THROW(plan_matmul(desc(8, 64, 64, DType::F32), a, DenseRoute::SkinnyMma), Error);
  EXPECT_THROW(plan_matmul(desc(17, 64, 64), a, DenseRoute::SkinnyMma), Error);
  EXPECT_THROW(plan_matmul(desc(0, 64, 64), a, DenseRoute::SkinnyMma), Error);
  // k = 0 was planned, then refused inside the dispatcher as an internal error (fuzz_plan, session 27)
  EXPECT_THROW(plan_matmul(desc(4, 64, 0), a, DenseRoute::SkinnyMma), Error);
  EXPECT_EQ(plan_matmul(desc(1, 64, 64), a, DenseRoute::SkinnyMma).route, DenseRoute::SkinnyMma);
  EXPECT_EQ(plan_matmul(desc(16, 64, 64), a, DenseRoute::SkinnyMma).route, DenseRoute::SkinnyMma);
  EXPECT_THROW(plan_matmul(desc(64, 64, 64), a, DenseRoute::Cpu), Error);
  EXPECT_THROW(plan_matmul(desc(64, 64, 0), a, DenseRoute::CublasLt), Error);
  EXPECT_STREQ(route_name(DenseRoute::GemvWide), "gemv_wide");
}

// The kernel's split (skinny_mma_split, skinny_mma_warp_chunks) gives every (tile, K chunk) of a
// weight to exactly one warp of one block, for the planned grid and for any cluster count the
// launcher may cap it to; and the split is floor(total i / parts) without overflow.
TEST(DensePlan, SkinnyMmaSplitCoversEveryChunkOnce) {
  using namespace llmm::cuda_dense;
  for (std::int64_t total : {0LL, 1LL, 7LL, 192LL, 1000003LL, (1LL << 62) + 12345})
    for (std::int64_t parts : {1LL, 2LL, 3LL, 66LL, 264LL, 527LL})
      for (std::int64_t i = 0; i <= parts; ++i) {
        const __int128 want = static_cast<__int128>(total) * i / parts;
        ASSERT_EQ(static_cast<__int128>(skinny_mma_split(total, parts, i)), want) << total << " " << parts << " " << i;
      }
  alignas(16) static std::uint16_t buf[64];
  struct S { std::int64_t batch, n, k; };
  for (S s : {S{1, 3072, 3072}, S{1, 3000, 2056}, S{1, 4096, 2056}, S{2, 3001, 2048}, S{1, 257, 2056}, S{1, 33, 24}, S{3, 100, 128},
              S{1, 1, 8}})
    for (int cap : {0, 1, 3, 7}) {
      DenseArgs g;
      g.dtype = DType::BF16, g.batch = s.batch, g.m = 5, g.n = s.n, g.k = s.k, g.b_trans = true;
      g.a = buf, g.b = buf, g.a_ld = s.k, g.b_ld = s.k;
      auto c = skinny_mma_config(g, 9, 132);
      ASSERT_TRUE(c);
      const std::int64_t rows = 16 * c->row_tiles, tiles = (s.n + rows - 1) / rows * s.batch, chunks = (s.k + 31) / 32;
      std::int64_t clusters = c->blocks / c->cluster;
      if (cap > 0 && cap < clusters) clusters = cap;
      std::vector<int> seen(static_cast<std::size_t>(tiles * chunks), 0);
      for (std::int64_t ci = 0; ci < clusters; ++ci) {
        const std::int64_t t0 = skinny_mma_split(tiles, clusters, ci), t1 = skinny_mma_split(tiles, clusters, ci + 1);
        EXPECT_LT(t0, t1) << "a cluster without tiles";
        for (int r = 0; r < c->cluster; ++r) {
          const std::int64_t c0 = skinny_mma_split(chunks, c->cluster, r), c1 = skinny_mma_split(chunks, c->cluster, r + 1);
          for (int w = 0; w < kSkinnyMmaWarps; ++w)
            for (std::int64_t t = t0; t < t1; ++t)
              for (std::int64_t i = 0; i < skinny_mma_warp_chunks(c1 - c0, w); ++i) {
                const std::int64_t chunk = c0 + w + i * kSkinnyMmaWarps;
                ASSERT_LT(chunk, c1);
                ++seen[static_cast<std::size_t>(t * chunks + chunk)];
              }
        }
      }
      for (std::size_t u = 0; u < seen.size(); ++u)
        ASSERT_EQ(seen[u], 1) << "n " << s.n << " k " << s.k << " batch " << s.batch << " cap " << cap << ": tile "
                              << u / chunks << " chunk " << u % chunks;
    }
}

TEST(DensePlan, SkinnyMmaConfig) {
  using namespace llmm::cuda_dense;
  alignas(16) static std::uint16_t buf[64];
  DenseArgs g;
  g.dtype = DType::BF16, g.m = 8, g.n = 128256, g.k = 4096, g.b_trans = true;
  g.a = buf, g.b = buf, g.a_ld = 4096, g.b_ld = 4096;
  auto c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->n_tiles, 1);
  // Many tiles: no cluster; 8016 tiles of 16 rows (31 for the busiest of 264 blocks) beat 4008
  // of 32 (16 a block: 32 rows' worth of 16).
  EXPECT_EQ(c->row_tiles, 1);
  EXPECT_EQ(c->cluster, 1);
  EXPECT_EQ(c->blocks, 264);  // two a SM
  EXPECT_FALSE(c->x_image);  // K 4096 in one block: 64 KB of vector chunks do not fit beside the rings
  EXPECT_EQ(skinny_mma_kernel_name(g, *c), "skinny_mma_bf16_n8_r16_c1");
  g.m = 9, g.n = 3072, g.dtype = DType::F16;
  c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->n_tiles, 2);
  // 192 tiles of 16 rows on 66 clusters of 4 (K in quarters): 3 tiles for the busiest, 0.75 of a
  // tile's bytes a block, against 1 for any other split.
  EXPECT_EQ(c->row_tiles, 1);
  EXPECT_EQ(c->cluster, 4);
  EXPECT_EQ(c->blocks, 264);
  // Batch 1 and K / 4 = 1024 a block: the warps' vector chunks (32 KB) fit beside weight-only rings.
  EXPECT_TRUE(c->x_image);
  EXPECT_LE(skinny_mma_smem(2, 1, 4, true).bytes + kSkinnyMmaWarps * skinny_mma_image_warp_bytes(2, 4096, 4), kSkinnyMmaSmemLimit);
  EXPECT_EQ(kSkinnyMmaWarps * skinny_mma_image_warp_bytes(2, 4096, 4), 32 * 1024);
  EXPECT_EQ(skinny_mma_kernel_name(g, *c), "skinny_mma_f16_n16_r16_c4_xi");
  for (std::int64_t m : {1, 2, 5, 8, 16}) {  // only n_tiles depends on m: the sums' order does not
    g.m = m;
    auto cm = skinny_mma_config(g, 9, 132);
    ASSERT_TRUE(cm);
    EXPECT_EQ(cm->row_tiles, c->row_tiles);
    EXPECT_EQ(cm->cluster, c->cluster);
    EXPECT_EQ(cm->blocks, c->blocks);
    EXPECT_EQ(cm->n_tiles, m <= 8 ? 1 : 2);
  }
  c = skinny_mma_config(g, 8, 132);  // sm_80: no clusters
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cluster, 1);
  EXPECT_EQ(c->row_tiles, 1);
  EXPECT_EQ(c->blocks, 192);  // one tile a block; never more blocks than tiles
  g.k = 64;  // two chunks of K: a cluster would leave its warps without one
  EXPECT_EQ(skinny_mma_config(g, 9, 132)->cluster, 1);
  g.k = 4096, g.batch = 2;  // batch entries count as tiles: 192 of 32 rows on 66 clusters of 4
  c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->row_tiles, 2);
  EXPECT_EQ(c->cluster, 4);
  EXPECT_EQ(c->blocks, 264);
  EXPECT_FALSE(c->x_image);  // one image holds one batch entry's vectors
  g.n = 14336, g.batch = 1;  // 448 tiles of 32 rows: 7 a cluster of 4 (<= 8 wait in shared memory)
  c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->row_tiles, 2);
  EXPECT_EQ(c->cluster, 4);
  g.n = 3 * 16 * 2 * 66 * 8;  // 3 x 8 x 66 tiles of 32 rows: clusters of 4 would own 24 each
  c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cluster, 1);
  EXPECT_EQ(skinny_mma_config(g, 9, 0), c);  // sm_count unknown: 132
  EXPECT_EQ(skinny_mma_config(g, 9, 66)->blocks, 132);
  g.batch = 1, g.n = 3072;
  g.m = 17;
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.m = 0;
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.m = 1;  // one vector: an n8 tile with one live column
  c = skinny_mma_config(g, 9, 132);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->n_tiles, 1);
  g.m = 4, g.k = 4092;  // k not a multiple of 8
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.k = 4096, g.a_ld = 4100;  // row stride of 8200 bytes: not 16-byte aligned
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.a_ld = 4096, g.a = buf + 1;  // misaligned base
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.a = buf, g.b_trans = false;
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.b_trans = true, g.dtype = DType::F32;
  EXPECT_FALSE(skinny_mma_config(g, 9, 132));
  g.dtype = DType::BF16;
  EXPECT_FALSE(skinny_mma_config(g, 7, 80));  // pre-sm_80
  // The kernel's 32-bit counts (sizes only: nothing is read).
  EXPECT_TRUE(skinny_mma_config(DType::BF16, 1, 4, kSkinnyMmaMaxDim, 4096, 9, 132));
  EXPECT_FALSE(skinny_mma_config(DType::BF16, 1, 4, kSkinnyMmaMaxDim + 1, 4096, 9, 132));
  EXPECT_TRUE(skinny_mma_config(DType::BF16, 1, 4, 3072, kSkinnyMmaMaxDim, 9, 132));
  EXPECT_FALSE(skinny_mma_config(DType::BF16, 1, 4, 3072, kSkinnyMmaMaxDim + 8, 9, 132));
  EXPECT_TRUE(skinny_mma_config(DType::BF16, kSkinnyMmaMaxTiles / 192, 4, 3072, 4096, 9, 132));  // 192 tiles of 16 rows
  EXPECT_FALSE(skinny_mma_config(DType::BF16, kSkinnyMmaMaxTiles / 192 + 1, 4, 3072, 4096, 9, 132));
  EXPECT_TRUE(skinny_mma_config(g, 0, 0));    // unknown device: accepted
}
