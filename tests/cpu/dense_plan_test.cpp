// plan_matmul, the dense router: a pure function, tested without a GPU.
#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "core/dense/dense_kernels.hpp"
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
  EXPECT_THROW(plan_matmul(desc(1, 64, 64), ArchInfo{}, DenseRoute::GemvWide), Error);
}

TEST(DensePlan, RoutesByShape) {
  ArchInfo a = h200();
  // Matrix-vector: gemv_wide for very long outputs (the lm head), on small 16-bit weights and on
  // f32 with n >= 3072, k <= 4096; cuBLASLt's gemv for the rest (measured) and other layouts.
  EXPECT_EQ(plan_matmul(desc(1, 128256, 4096), a).route, DenseRoute::GemvWide);
  EXPECT_EQ(plan_matmul(desc(1, 128256, 4096, DType::F32), a).route, DenseRoute::GemvWide);
  EXPECT_EQ(plan_matmul(desc(1, 128256, 8192, DType::F32), a).route, DenseRoute::GemvWide);  // K > 4096
  EXPECT_EQ(plan_matmul(desc(128256, 1, 4096), a).route, DenseRoute::CublasLt);  // matrix x vector
  EXPECT_EQ(plan_matmul(desc(1, 65536, 64, DType::F32, false), a).route, DenseRoute::CublasLt);  // w [K, N]
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
  EXPECT_EQ(plan_matmul(desc(64, 64, 0), a).route, DenseRoute::ZeroFill);
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
  // Before sm_80 no llmm kernel is built: cuBLASLt takes every shape, gemv and gemv_wide's too.
  EXPECT_EQ(plan_matmul(desc(512, 512, 512), old).route, DenseRoute::CublasLt);
  EXPECT_EQ(plan_matmul(desc(1, 131072, 4096), old).route, DenseRoute::CublasLt);
  EXPECT_EQ(plan_matmul(desc(2, 3072, 3072, DType::F32), old).route, DenseRoute::CublasLt);
  EXPECT_EQ(plan_matmul(desc(64, 64, 0), old).route, DenseRoute::ZeroFill);
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

TEST(DensePlan, ForcedRoutesAreCheckedNotTrusted) {
  ArchInfo a = h200();
  EXPECT_EQ(plan_matmul(desc(64, 64, 64), a, DenseRoute::TiledSm90).route, DenseRoute::TiledSm90);
  EXPECT_EQ(plan_matmul(desc(64, 64, 0), a, DenseRoute::ZeroFill).route, DenseRoute::ZeroFill);
  EXPECT_THROW(plan_matmul(desc(64, 64, 64), a, DenseRoute::ZeroFill), Error);  // k > 0 is no zero fill
  EXPECT_EQ(plan_matmul(desc(1, 64, 64), a, DenseRoute::CublasLt).route, DenseRoute::CublasLt);
  try {
    plan_matmul(desc(4, 4, 4, DType::BF16, false), a, DenseRoute::GemvWide);
    ADD_FAILURE() << "gemv_wide accepted w [K, N]";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("matmul: route gemv_wide cannot run (m: 4, n: 4, k: 4, bf16): needs x[M, K] . w[N, K]^T"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_matmul(desc(8, 64, 64, DType::BF16, false), a, DenseRoute::GemvWide), Error);
  EXPECT_THROW(plan_matmul(desc(64, 64, 64), a, DenseRoute::Cpu), Error);
  EXPECT_THROW(plan_matmul(desc(64, 64, 0), a, DenseRoute::CublasLt), Error);
  EXPECT_STREQ(route_name(DenseRoute::GemvWide), "gemv_wide");
}

