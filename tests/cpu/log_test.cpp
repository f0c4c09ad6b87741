// LLMM_LOG: one stderr line per call naming the op, the problem, the route and why, the kernels;
// nothing when the level is 0.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/llmm.hpp"

using namespace llmm;

namespace {
struct LevelGuard {
  int saved = log_level();
  ~LevelGuard() { set_log_level(saved); }
};
}  // namespace

TEST(Log, OneLinePerCallNamingRouteReasonAndKernel) {
  LevelGuard guard;
  Context ctx = Context::cpu();
  std::vector<float> a(2 * 3, 1.0f), b(4 * 3, 2.0f), c(2 * 4);
  auto call = [&] {
    MatmulOptions o;
    o.transpose_b = true;
    matmul(ctx, View::contiguous(a.data(), DType::F32, {2, 3}), View::contiguous(b.data(), DType::F32, {4, 3}),
           View::contiguous(c.data(), DType::F32, {2, 4}), o);
  };
  set_log_level(1);
  testing::internal::CaptureStderr();
  call();
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out,
            "llmm: matmul batch 1 m 2 n 4 k 3 f32 nt exact -> route cpu (CPU context: float64 reference backend), "
            "1 kernel: cpu_reference_matmul\n");
  set_log_level(0);
  testing::internal::CaptureStderr();
  call();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(log_level(), 0);
}

TEST(Log, MatmulIdAndTernaryCallsAreLoggedToo) {
  LevelGuard guard;
  Context ctx = Context::cpu();
  set_log_level(1);
  std::vector<float> w(2 * 8 * 16, 0.5f), x(3 * 16, 1.0f), out(3 * 2 * 8);
  std::vector<std::uint32_t> ids = {0, 1, 1, 0, 1, 1};
  testing::internal::CaptureStderr();
  matmul_id(ctx, View::contiguous(w.data(), DType::F32, {2, 8, 16}), View::contiguous(x.data(), DType::F32, {3, 16}),
            View::contiguous(ids.data(), DType::U32, {3, 2}), View::contiguous(out.data(), DType::F32, {3, 2, 8}), nullptr,
            MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::MayRepeat, MatmulIdRoute::Direct);
  std::string got = testing::internal::GetCapturedStderr();
  EXPECT_NE(got.find("llmm: matmul_id m 3 top_k 2 n 8 k 16 experts 2 w f32 in f32 out f32 ids u32 shared -> route direct"),
            std::string::npos)
      << got;

  std::vector<float> wf(4 * 128, 0.25f);
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> blocks = tq2_quantize(wf.data(), 4, 128);
  WeightHandle h = cache.get_or_upload(1, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), 4, 128);
  std::vector<float> in(2 * 128, 1.0f), o(2 * 4);
  testing::internal::CaptureStderr();
  gemm_tq2(ctx, h, View::contiguous(in.data(), DType::F32, {2, 128}), View::contiguous(o.data(), DType::F32, {2, 4}));
  got = testing::internal::GetCapturedStderr();
  EXPECT_EQ(got, "llmm: gemm_tq2 m 2 n 4 k 128 in f32 out f32 exact -> route cpu (CPU context: float64 reference backend), 1 kernel: cpu_reference_tq2\n");
}
