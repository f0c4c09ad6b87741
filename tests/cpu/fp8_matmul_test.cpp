// matmul_fp8 on the CPU: the planner's routes and configurations (pure, for an sm_90 device),
// the float64 backend against the reference for every scale kind, the refusals, and the
// activation quantization the W8A8 route's kernel must match bit for bit.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/fp8/fp8_launch.hpp"
#include "llmm/fp8.hpp"
#include "support/expect_error.hpp"
#include "support/fp8_case.hpp"
#include "support/fp8_moe_case.hpp"
#include "support/fp8_ffn_case.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

ArchInfo hopper() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA, a.cc_major = 9, a.cc_minor = 0, a.sm_count = 132;
  return a;
}

MatmulFp8Desc desc(std::int64_t m, std::int64_t n, std::int64_t k, Precision p = Precision::Fast) {
  MatmulFp8Desc d;
  d.m = m, d.n = n, d.k = k, d.precision = p, d.stream_aligned = true, d.lt_aligned = true;
  return d;
}

}  // namespace

TEST(Fp8Plan, RoutesByMPrecisionAndLayout) {
  const ArchInfo h = hopper();
  EXPECT_EQ(plan_matmul_fp8(desc(1, 4096, 4096), h).route, Fp8Route::Stream);
  EXPECT_EQ(plan_matmul_fp8(desc(2, 4096, 4096), h).route, Fp8Route::Stream);
  // 16-bit x from m 3: stream_mma on weights of <= 2^25 codes, and to m 8 on larger ones with
  // tensor or channel scales; larger block-scaled weights on cuBLASLt's W8A8 GEMM.
  EXPECT_EQ(plan_matmul_fp8(desc(3, 4096, 4096), h).route, Fp8Route::StreamMma);
  EXPECT_EQ(plan_matmul_fp8(desc(16, 4096, 4096), h).route, Fp8Route::StreamMma);
  EXPECT_EQ(plan_matmul_fp8(desc(4, 18432, 7168), h).route, Fp8Route::CublasLt);
  MatmulFp8Desc ch = desc(8, 18432, 7168);
  ch.kind = Fp8ScaleKind::Channel;
  EXPECT_EQ(plan_matmul_fp8(ch, h).route, Fp8Route::StreamMma);
  ch.m = 9;
  EXPECT_EQ(plan_matmul_fp8(ch, h).route, Fp8Route::CublasLt);
  ch.kind = Fp8ScaleKind::Tensor, ch.m = 5;
  EXPECT_EQ(plan_matmul_fp8(ch, h).route, Fp8Route::StreamMma);
  // f32 x: no mma operand; stream to m 4, then cuBLASLt.
  MatmulFp8Desc f = desc(4, 4096, 4096);
  f.x_dtype = DType::F32;
  EXPECT_EQ(plan_matmul_fp8(f, h).route, Fp8Route::Stream);
  f.m = 5;
  EXPECT_EQ(plan_matmul_fp8(f, h).route, Fp8Route::CublasLt);
  // Exact keeps x unquantized: stream_mma for 16-bit x at m 3..16 (its products are exact),
  // stream for f32 x.
  EXPECT_EQ(plan_matmul_fp8(desc(8, 18432, 7168, Precision::Exact), h).route, Fp8Route::StreamMma);
  f.precision = Precision::Exact, f.m = 8;
  EXPECT_EQ(plan_matmul_fp8(f, h).route, Fp8Route::Stream);
  EXPECT_EQ(plan_matmul_fp8(desc(17, 4096, 4096), h).route, Fp8Route::CublasLt);
  EXPECT_EQ(plan_matmul_fp8(desc(17, 4096, 4096), h, Fp8Route::CublasLt).route, Fp8Route::CublasLt);
  EXPECT_EQ(plan_matmul_fp8(desc(4096, 4096, 4096, Precision::Exact), h).route, Fp8Route::DequantLt);
  MatmulFp8Desc odd = desc(64, 4096, 4104);  // k % 16 != 0: neither FP8 kernel takes it
  EXPECT_EQ(plan_matmul_fp8(odd, h).route, Fp8Route::DequantLt);
  MatmulFp8Desc mis = desc(8, 4096, 4096);
  mis.stream_aligned = false;
  EXPECT_EQ(plan_matmul_fp8(mis, h, Fp8Route::CublasLt).route, Fp8Route::CublasLt);
  mis.lt_aligned = false;
  expect_error([&] { plan_matmul_fp8(mis, h, Fp8Route::CublasLt); }, ErrorCode::Unsupported, "not 16-byte aligned");
  EXPECT_EQ(plan_matmul_fp8(mis, h).route, Fp8Route::DequantLt);
  MatmulFp8Desc unserved = desc(8, 18432, 7168);  // above the crossover, cuBLASLt has no algorithm
  unserved.lt_served = false;
  EXPECT_EQ(plan_matmul_fp8(unserved, h).route, Fp8Route::StreamMma);
  unserved.x_dtype = DType::F32;
  EXPECT_EQ(plan_matmul_fp8(unserved, h).route, Fp8Route::Stream);
  unserved.x_dtype = DType::BF16, unserved.n = 4096, unserved.k = 4096;
  unserved.m = 17;
  EXPECT_EQ(plan_matmul_fp8(unserved, h).route, Fp8Route::DequantLt);
  ArchInfo ampere = h;
  ampere.cc_major = 8;
  EXPECT_EQ(plan_matmul_fp8(desc(1, 4096, 4096), ampere).route, Fp8Route::DequantLt);
  EXPECT_EQ(plan_matmul_fp8(desc(1, 64, 64), ArchInfo{}).route, Fp8Route::Cpu);
}

TEST(Fp8Plan, StreamConfigurationAndWorkspace) {
  const ArchInfo h = hopper();
  Fp8Plan p = plan_matmul_fp8(desc(16, 4096, 4096), h, Fp8Route::Stream);
  EXPECT_EQ(p.gemv_vecs, 8);
  EXPECT_EQ(p.gemv_grid_x, 2);
  EXPECT_EQ(p.workspace_bytes, 0u);
  MatmulFp8Desc f = desc(8, 4096, 4096);
  f.x_dtype = DType::F32;  // f32 x: at most 4 vectors a pass
  p = plan_matmul_fp8(f, h, Fp8Route::Stream);
  EXPECT_EQ(p.gemv_vecs, 4);
  EXPECT_EQ(p.gemv_grid_x, 2);
  p = plan_matmul_fp8(desc(3, 64, 256), h, Fp8Route::Stream);
  EXPECT_EQ(p.gemv_vecs, 4);
  EXPECT_EQ(p.gemv_k_lanes, 32);  // 16 chunks of 16: no room to split K further
  // W8A8 block kind, k = 300: 3 K blocks padded to a pitch of 4 for the weight scales.
  MatmulFp8Desc b = desc(100, 200, 304);
  p = plan_matmul_fp8(b, h, Fp8Route::CublasLt);
  ASSERT_EQ(p.route, Fp8Route::CublasLt);
  const std::size_t codes = (100 * 304 + 255) / 256 * 256, xs = (3 * 100 * 4 + 255) / 256 * 256,
                    ws = (2 * 4 * 4 + 255) / 256 * 256;
  EXPECT_EQ(p.workspace_bytes, codes + xs + ws);
  // m = 37 with block scales: cuBLASLt sees 40 tokens (3 zero ones) and writes D into the
  // workspace, [40, 200] bf16, whose first 37 rows are copied to y.
  p = plan_matmul_fp8(desc(37, 200, 304), h, Fp8Route::CublasLt);
  const std::size_t codes40 = (40 * 304 + 255) / 256 * 256, xs40 = (3 * 40 * 4 + 255) / 256 * 256,
                    d40 = (40 * 200 * 2 + 255) / 256 * 256;
  EXPECT_EQ(p.workspace_bytes, codes40 + xs40 + ws + d40);
  MatmulFp8Desc ch = desc(37, 200, 304);
  ch.kind = Fp8ScaleKind::Channel;  // row scales: cuBLASLt takes any m, no staging
  p = plan_matmul_fp8(ch, h, Fp8Route::CublasLt);
  EXPECT_EQ(p.workspace_bytes, (37u * 304 + 255) / 256 * 256 + (37u * 4 + 255) / 256 * 256);
  // DequantLt: the image in x's dtype.
  p = plan_matmul_fp8(desc(100, 200, 304, Precision::Exact), h);
  EXPECT_EQ(p.workspace_bytes, (200u * 304 * 2 + 255) / 256 * 256);
}

TEST(Fp8Plan, StreamMmaTakesSixteenBitXAndSplitsK) {
  const ArchInfo h = hopper();
  // 256 tiles of 16 rows, 64 rounds of 64 k: K split until ~16 warps an SM (8 warps a tile).
  Fp8Plan p = plan_matmul_fp8(desc(8, 4096, 4096), h, Fp8Route::StreamMma);
  ASSERT_EQ(p.route, Fp8Route::StreamMma);
  EXPECT_EQ(p.mma_k_warps, 8);
  EXPECT_EQ(p.workspace_bytes, 0u);
  // 1152 tiles: two warps a tile already give ~17 warps an SM.
  EXPECT_EQ(plan_matmul_fp8(desc(1, 18432, 7168), h, Fp8Route::StreamMma).mma_k_warps, 2);
  // A short K keeps each warp >= 8 rounds: k 512 is 8 rounds, one warp.
  EXPECT_EQ(plan_matmul_fp8(desc(1, 64, 512), h, Fp8Route::StreamMma).mma_k_warps, 1);
  MatmulFp8Desc f = desc(4, 4096, 4096);
  f.x_dtype = DType::F32;
  expect_error([&] { plan_matmul_fp8(f, h, Fp8Route::StreamMma); }, ErrorCode::Unsupported, "not f16 or bf16");
  expect_error([&] { plan_matmul_fp8(desc(17, 64, 64), h, Fp8Route::StreamMma); }, ErrorCode::Unsupported,
               "m is outside 1..16");
}

// Sizes the planner cannot hold: refused with InvalidArgument, never a wrapped workspace size
// (fuzz_plan found k = 2^63 - 1 wrapping the dequant image's 256-byte round-up).
TEST(Fp8Plan, NegativeAndOverflowingSizesAreRefused) {
  ArchInfo volta = hopper();
  volta.cc_major = 7;
  expect_error([&] { plan_matmul_fp8(desc(-1, 64, 64), hopper()); }, ErrorCode::InvalidArgument, "non-negative");
  expect_error([&] { plan_matmul_fp8(desc(20, 1, std::numeric_limits<std::int64_t>::max()), volta); },
               ErrorCode::InvalidArgument, "overflows");
  expect_error([&] { plan_matmul_fp8(desc(std::numeric_limits<std::int64_t>::max(), 4096, 4096), hopper()); },
               ErrorCode::InvalidArgument, "overflows");
}

TEST(Fp8Plan, ForcedRoutesRefuseWhatTheyDoNotTake) {
  const ArchInfo h = hopper();
  expect_error([&] { plan_matmul_fp8(desc(17, 64, 64), h, Fp8Route::Stream); }, ErrorCode::Unsupported, "m is outside 1..16");
  expect_error([&] { plan_matmul_fp8(desc(64, 64, 64, Precision::Exact), h, Fp8Route::CublasLt); }, ErrorCode::Unsupported,
               "Exact");
  expect_error([&] { plan_matmul_fp8(desc(1, 64, 64), ArchInfo{}, Fp8Route::Stream); }, ErrorCode::Unsupported,
               "needs a CUDA context");
  expect_error([&] { plan_matmul_fp8(desc(1, 64, 64), h, Fp8Route::Cpu); }, ErrorCode::Unsupported, "CPU context");
  EXPECT_EQ(plan_matmul_fp8(desc(1, 64, 64), h, Fp8Route::DequantLt).route, Fp8Route::DequantLt);
  // A shape cuBLASLt's heuristic does not serve (matmul_fp8 asks it): cublaslt refused, Auto elsewhere.
  MatmulFp8Desc unserved = desc(64, 4096, 4096);
  unserved.lt_served = false;
  expect_error([&] { plan_matmul_fp8(unserved, h, Fp8Route::CublasLt); }, ErrorCode::Unsupported, "no FP8 algorithm");
  EXPECT_EQ(plan_matmul_fp8(unserved, h).route, Fp8Route::DequantLt);
}

// The engine's W8A8 route: by name only (Auto never picks it), Fast only, k % 16, aligned rows,
// sm_90; its workspace holds x's codes and 1 x 128 scales for m padded to a multiple of 4, for
// every kind; it does not need cuBLASLt.
TEST(Fp8Plan, TiledSm90ByNameOnly) {
  const ArchInfo h = hopper();
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128})
    for (std::int64_t m : {1, 17, 512, 4096}) {
      MatmulFp8Desc d = desc(m, 4096, 4096);
      d.kind = kind;
      EXPECT_NE(plan_matmul_fp8(d, h).route, Fp8Route::TiledSm90);
      const Fp8Plan p = plan_matmul_fp8(d, h, Fp8Route::TiledSm90);
      EXPECT_EQ(p.route, Fp8Route::TiledSm90);
      const std::int64_t lt_m = (m + 3) / 4 * 4;
      const auto lay = detail::fp8_workspace_layout(Fp8Route::TiledSm90, m, 4096, 4096, kind, DType::BF16);
      EXPECT_TRUE(lay.act_groups128);
      EXPECT_EQ(lay.lt_m, lt_m);
      EXPECT_EQ(p.workspace_bytes, lay.total);
      EXPECT_GE(lay.act_scales, static_cast<std::size_t>(lt_m * 4096));
      EXPECT_GE(lay.total, lay.act_scales + static_cast<std::size_t>(32 * lt_m * 4));
    }
  MatmulFp8Desc unserved = desc(64, 4096, 4096);
  unserved.lt_served = false;
  EXPECT_EQ(plan_matmul_fp8(unserved, h, Fp8Route::TiledSm90).route, Fp8Route::TiledSm90);
  expect_error([&] { plan_matmul_fp8(desc(64, 64, 64, Precision::Exact), h, Fp8Route::TiledSm90); }, ErrorCode::Unsupported,
               "route tiled_sm90 does not take m 64 n 64 k 64: precision Exact keeps x unquantized (W8A8 needs Fast)");
  expect_error([&] { plan_matmul_fp8(desc(64, 64, 72), h, Fp8Route::TiledSm90); }, ErrorCode::Unsupported,
               "k is not a positive multiple of 16");
  MatmulFp8Desc mis = desc(64, 64, 64);
  mis.lt_aligned = false;
  expect_error([&] { plan_matmul_fp8(mis, h, Fp8Route::TiledSm90); }, ErrorCode::Unsupported, "not 16-byte aligned");
  ArchInfo ada = h;
  ada.cc_minor = 9, ada.cc_major = 8;
  expect_error([&] { plan_matmul_fp8(desc(64, 64, 64), ada, Fp8Route::TiledSm90); }, ErrorCode::Unsupported, "sm_90a only");
  expect_error([&] { plan_matmul_fp8(desc(std::int64_t{1} << 31, 64, 64), h, Fp8Route::TiledSm90); }, ErrorCode::Unsupported,
               "2^31 - 256 or more");
}

TEST(Fp8Plan, E4m3XRunsOnTiledSm90Only) {
  const ArchInfo h = hopper();
  MatmulFp8Desc d = desc(3, 4096, 4096);
  d.x_e4m3 = true, d.x_tma_aligned = true;
  for (std::int64_t m : {1, 3, 64, 4096}) {
    d.m = m;
    const Fp8Plan p = plan_matmul_fp8(d, h);
    EXPECT_EQ(p.route, Fp8Route::TiledSm90) << m;
    EXPECT_EQ(p.workspace_bytes, 0u) << m;  // nothing to quantize
    EXPECT_NE(p.reason.find("x given in e4m3"), std::string::npos) << p.reason;
    EXPECT_EQ(plan_matmul_fp8(d, h, Fp8Route::TiledSm90).route, Fp8Route::TiledSm90);
  }
  for (Fp8Route r : {Fp8Route::Stream, Fp8Route::StreamMma, Fp8Route::CublasLt, Fp8Route::DequantLt})
    expect_error([&] { plan_matmul_fp8(d, h, r); }, ErrorCode::Unsupported,
                 std::string("route ") + fp8_route_name(r) + " reads x in 16 or 32 bits; x given in e4m3 runs on tiled_sm90");
  MatmulFp8Desc exact = d;
  exact.precision = Precision::Exact;
  expect_error([&] { plan_matmul_fp8(exact, h); }, ErrorCode::Unsupported,
               "no CUDA route takes x in e4m3 for m 4096 n 4096 k 4096: precision Exact");
  MatmulFp8Desc loose = d;
  loose.x_tma_aligned = false;
  expect_error([&] { plan_matmul_fp8(loose, h, Fp8Route::TiledSm90); }, ErrorCode::Unsupported,
               "route tiled_sm90 does not take x in e4m3 for m 4096 n 4096 k 4096: x's codes need a 16-byte aligned base");
  MatmulFp8Desc k72 = d;
  k72.k = 72;
  expect_error([&] { plan_matmul_fp8(k72, h); }, ErrorCode::Unsupported, "k is not a positive multiple of 16");
  ArchInfo cpu;
  EXPECT_EQ(plan_matmul_fp8(exact, cpu).route, Fp8Route::Cpu);  // the float64 backend takes any precision
}

TEST(Fp8MatmulCpu, E4m3XMatchesTheReference) {
  Context ctx = Context::cpu(2);
  int seed = 0;
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128})
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (bool row_major : {false, true}) {
        Fp8Case c;
        c.m = 5, c.n = 131, c.k = 272, c.dtype = dt, c.kind = kind, c.x_pad = 16, c.y_pad = 3, c.w_pad = 16;
        c.x_e4m3 = true, c.x_scales_row_major = row_major, c.x_scale_pad = 4, c.seed = static_cast<std::uint64_t>(++seed);
        EXPECT_EQ(run_fp8_case(ctx, c, {}).route, "cpu");
      }
  // Exact is the CPU backend's too (float64 products of the given codes).
  Fp8Case c;
  c.m = 2, c.n = 7, c.k = 16, c.x_e4m3 = true;
  MatmulFp8Options exact;
  exact.precision = Precision::Exact;
  EXPECT_EQ(run_fp8_case(ctx, c, exact).route, "cpu");
  // A NaN scale (a token group that held NaN or Inf) makes that token's outputs NaN.
  Fp8Case nf;
  nf.m = 4, nf.n = 9, nf.k = 130, nf.nonfinite = true, nf.x_e4m3 = true;
  run_fp8_case(ctx, nf, {});
}

TEST(Fp8MatmulCpu, E4m3XRefusals) {
  Context ctx = Context::cpu(1);
  std::vector<std::uint8_t> xc(4 * 256, 0x38), w(8 * 256, 0x38);  // 0x38: 1.0
  std::vector<float> xs(4 * 8, 0.5f), ws(1, 1.0f), y(4 * 8, 0.0f);  // xs: room for an overlapping y
  const Fp8ActivationView x{View::contiguous(xc.data(), DType::F8E4M3, {4, 256}),
                            View::strided(xs.data(), DType::F32, {4, 2}, {1, 4})};
  const Fp8WeightView wt{View::contiguous(w.data(), DType::F8E4M3, {8, 256}), Fp8ScaleKind::Tensor,
                         View::contiguous(ws.data(), DType::F32, {1})};
  const View yv = View::contiguous(y.data(), DType::F32, {4, 8});
  matmul_fp8(ctx, x, wt, yv);
  EXPECT_FLOAT_EQ(y[0], 128.0f);  // 256 x (1 x 0.5) x 1
  std::vector<std::uint16_t> yb(4 * 8);
  matmul_fp8(ctx, x, wt, View::contiguous(yb.data(), DType::BF16, {4, 8}));  // y's dtype is the caller's
  EXPECT_EQ(yb[31], 0x4300);                                                // 128 in bf16
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{View::contiguous(xc.data(), DType::U8, {4, 256}), x.scales}, wt, yv); },
               ErrorCode::InvalidArgument, "x codes must be an f8e4m3 [m, k] matrix");
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{x.codes, View::contiguous(xs.data(), DType::F32, {2, 4})}, wt, yv); },
               ErrorCode::InvalidArgument, "the scales of x codes [4, 256] must be an f32 [4, 2] matrix");
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{x.codes, View::contiguous(xs.data(), DType::F32, {4, 1})}, wt, yv); },
               ErrorCode::InvalidArgument, "must be an f32 [4, 2] matrix (one a token and 128 channels)");
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{x.codes, View::contiguous(yb.data(), DType::BF16, {4, 2})}, wt, yv); },
               ErrorCode::InvalidArgument, "f32 [4, 2]");
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{View::contiguous(xc.data(), DType::F8E4M3, {8, 128}), x.scales}, wt, yv); },
               ErrorCode::InvalidArgument, "the scales of x codes [8, 128] must be an f32 [8, 1]");
  std::vector<std::int32_t> yi(4 * 8);
  expect_error([&] { matmul_fp8(ctx, x, wt, View::contiguous(yi.data(), DType::I32, {4, 8})); }, ErrorCode::InvalidArgument,
               "y must be an f32/f16/bf16 [4, 8] matrix");
  expect_error([&] { matmul_fp8(ctx, x, wt, View::contiguous(y.data(), DType::F32, {4, 7})); }, ErrorCode::InvalidArgument,
               "y must be an f32/f16/bf16 [4, 8] matrix");
  const Fp8WeightView w128{View::contiguous(w.data(), DType::F8E4M3, {8, 128}), Fp8ScaleKind::Tensor, wt.scales};
  expect_error([&] { matmul_fp8(ctx, x, w128, yv); }, ErrorCode::InvalidArgument, "has k 256 but the codes");
  expect_error([&] { matmul_fp8(ctx, x, wt, View::contiguous(xs.data(), DType::F32, {4, 8})); }, ErrorCode::InvalidArgument,
               "overlaps an input");
  expect_error([&] { matmul_fp8(ctx, Fp8ActivationView{View::strided(xc.data(), DType::F8E4M3, {4, 256}, {256, 2}), x.scales}, wt, yv); },
               ErrorCode::InvalidArgument, "innermost stride 1");
  const Fp8ActivationView xg{View::contiguous(xc.data(), DType::F8E4M3, {4, 256}, DeviceKind::CUDA, 0), x.scales};
  expect_error([&] { matmul_fp8(ctx, xg, wt, yv); }, ErrorCode::InvalidArgument, "x codes is on");
  MatmulFp8Options o;
  o.force_route = Fp8Route::TiledSm90;
  expect_error([&] { matmul_fp8(ctx, x, wt, yv, o); }, ErrorCode::Unsupported, "needs a CUDA context");
  ws[0] = 0.0f;  // the weight's scales are checked as for 16/32-bit x
  expect_error([&] { matmul_fp8(ctx, x, wt, yv); }, ErrorCode::InvalidArgument, "must be finite and > 0");
  ws[0] = 1.0f;
  // Empty m: nothing runs, nothing is written.
  y[0] = 7.0f;
  const Fp8ActivationView x0{View::contiguous(xc.data(), DType::F8E4M3, {0, 256}), View::contiguous(xs.data(), DType::F32, {0, 2})};
  EXPECT_EQ(matmul_fp8(ctx, x0, wt, View::contiguous(y.data(), DType::F32, {0, 8})).kernels_launched, 0);
  EXPECT_EQ(y[0], 7.0f);
}

TEST(Fp8MatmulCpu, MatchesTheReferenceForEveryScaleKind) {
  Context ctx = Context::cpu(2);
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128})
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      Fp8Case c;
      c.m = 3, c.n = 131, c.k = 272, c.dtype = dt, c.kind = kind, c.x_pad = 5, c.y_pad = 3, c.w_pad = 16;
      c.seed = static_cast<std::uint64_t>(kind) * 10 + static_cast<std::uint64_t>(dt);
      EXPECT_EQ(run_fp8_case(ctx, c, {}).route, "cpu");
    }
}

TEST(Fp8MatmulCpu, NonFiniteInputsGiveNonFiniteOutputs) {
  Context ctx = Context::cpu(2);
  Fp8Case c;
  c.m = 4, c.n = 9, c.k = 130, c.nonfinite = true;
  run_fp8_case(ctx, c, {});
}

TEST(Fp8MatmulCpu, Refusals) {
  Context ctx = Context::cpu(1);
  std::vector<float> x(4 * 32, 0.5f), y(4 * 8, 0.0f), s(1, 1.0f), s8(8, 1.0f);
  std::vector<std::uint8_t> w(8 * 32, 0x38);
  const View xv = View::contiguous(x.data(), DType::F32, {4, 32});
  const View yv = View::contiguous(y.data(), DType::F32, {4, 8});
  const Fp8WeightView wt{View::contiguous(w.data(), DType::F8E4M3, {8, 32}), Fp8ScaleKind::Tensor,
                         View::contiguous(s.data(), DType::F32, {1})};
  matmul_fp8(ctx, xv, wt, yv);
  EXPECT_FLOAT_EQ(y[0], 16.0f);  // 32 x 0.5 x 1.0
  expect_error([&] { matmul_fp8(ctx, xv, {View::contiguous(w.data(), DType::U8, {8, 32}), Fp8ScaleKind::Tensor, wt.scales}, yv); },
               ErrorCode::InvalidArgument, "f8e4m3 [n, k]");
  expect_error([&] { matmul_fp8(ctx, View::contiguous(x.data(), DType::F32, {8, 16}), wt, yv); }, ErrorCode::InvalidArgument,
               "has k 16");
  std::vector<std::uint16_t> yb(4 * 8);
  expect_error([&] { matmul_fp8(ctx, xv, wt, View::contiguous(yb.data(), DType::BF16, {4, 8})); }, ErrorCode::InvalidArgument,
               "x's dtype");
  expect_error([&] { matmul_fp8(ctx, xv, {wt.codes, Fp8ScaleKind::Channel, wt.scales}, yv); }, ErrorCode::InvalidArgument,
               "channel scales of a [8, 32] weight must be a contiguous f32 [8, 1]");
  expect_error([&] { matmul_fp8(ctx, xv, {wt.codes, Fp8ScaleKind::Block128, View::contiguous(s8.data(), DType::F32, {8})}, yv); },
               ErrorCode::InvalidArgument, "block scales");
  expect_error([&] { matmul_fp8(ctx, View::strided(x.data(), DType::F32, {4, 32}, {1, 4}), wt, yv); },
               ErrorCode::InvalidArgument, "innermost stride 1");
  expect_error([&] { matmul_fp8(ctx, xv, wt, View::contiguous(x.data(), DType::F32, {4, 8})); }, ErrorCode::InvalidArgument,
               "overlaps");
  s[0] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { matmul_fp8(ctx, xv, wt, yv); }, ErrorCode::InvalidArgument, "must be finite and > 0");
  s[0] = 1.0f;
  const View xg = View::contiguous(x.data(), DType::F32, {4, 32}, DeviceKind::CUDA, 0);
  expect_error([&] { matmul_fp8(ctx, xg, wt, yv); }, ErrorCode::InvalidArgument, "but the context is cpu");
  MatmulFp8Options o;
  o.force_route = Fp8Route::Stream;
  expect_error([&] { matmul_fp8(ctx, xv, wt, yv, o); }, ErrorCode::Unsupported, "needs a CUDA context");
  // Empty m: nothing runs, nothing is written.
  y[0] = 7.0f;
  EXPECT_EQ(matmul_fp8(ctx, View::contiguous(x.data(), DType::F32, {0, 32}), wt, View::contiguous(y.data(), DType::F32, {0, 8}))
                .kernels_launched,
            0);
  EXPECT_EQ(y[0], 7.0f);
  // An empty x with strides (0, 0) (NumPy 2's empty arrays): no element, so any strides do.
  EXPECT_EQ(matmul_fp8(ctx, View::strided(x.data(), DType::F32, {0, 32}, {0, 0}), wt,
                       View::strided(y.data(), DType::F32, {0, 8}, {0, 0}))
                .kernels_launched,
            0);
}

TEST(Fp8Activations, PerTokenGroupsScaleToTheLargestMagnitude) {
  std::vector<float> x(2 * 200);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (1 + i % 5));
  for (int l = 128; l < 200; ++l) x[200 + l] = 0.0f;  // row 1's second group: all zero
  x[3] = std::numeric_limits<float>::infinity();      // row 0's first group: not finite
  const Fp8Activations a = quantize_fp8_activations(View::contiguous(x.data(), DType::F32, {2, 200}), 128);
  ASSERT_EQ(a.scales.size(), 4u);
  EXPECT_TRUE(std::isnan(a.scales[0 * 2 + 0]));
  EXPECT_EQ(a.scales[1 * 2 + 1], 1.0f);
  float amax = 0;
  for (int l = 0; l < 128; ++l) amax = std::max(amax, std::fabs(x[200 + l]));
  EXPECT_EQ(a.scales[0 * 2 + 1], amax / 448.0f);
  for (int l = 0; l < 128; ++l) {
    const float v = x[200 + l], got = e4m3fn_bits_to_f32(a.codes[200 + l]) * a.scales[1];
    EXPECT_LE(std::fabs(got - v), std::ldexp(std::fabs(v), -4) + amax * std::ldexp(1.0f, -9) / 448.0f * 8) << l;
  }
  for (int l = 128; l < 200; ++l) EXPECT_EQ(a.codes[200 + l], 0);
  // Row 0's second group quantizes normally although its first group is not finite.
  EXPECT_TRUE(std::isfinite(a.scales[1 * 2 + 0]));
  expect_error([&] { quantize_fp8_activations(View::contiguous(x.data(), DType::F32, {2, 200}), 0); }, ErrorCode::InvalidArgument,
               "group 0");
}

// ---------------------------------------------------------------------------------------------
// matmul_id on FP8 experts (CPU backend: the float64 reference) against the dense FP8 oracle row
// by row; the refusals.

TEST(Fp8ExpertsCpu, MatchesTheDenseOracleRowByRow) {
  Context ctx = Context::cpu(2);
  std::uint64_t seed = 50;
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128})
    for (MatmulIdRoute route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
      Fp8MoeCase c;
      c.kind = kind, c.route = route, c.seed = ++seed, c.n = 130, c.k = 200;
      run_fp8_moe_case(ctx, c);
    }
}

TEST(Fp8ExpertsCpu, Refusals) {
  Context ctx = Context::cpu(1);
  std::vector<std::uint8_t> codes(2 * 8 * 32, 0x38);
  std::vector<float> scales(2, 1.0f), x(3 * 32, 1.0f), out(3 * 1 * 8);
  std::vector<std::int32_t> ids(3, 1);
  const View cv = View::contiguous(codes.data(), DType::F8E4M3, {2, 8, 32});
  const View xv = View::contiguous(x.data(), DType::F32, {3, 32});
  const View iv = View::contiguous(ids.data(), DType::I32, {3, 1});
  const View ov = View::contiguous(out.data(), DType::F32, {3, 1, 8});
  matmul_id(ctx, Fp8Experts{cv, Fp8ScaleKind::Tensor, View::contiguous(scales.data(), DType::F32, {2, 1, 1})}, xv, iv, ov,
            nullptr);
  EXPECT_FLOAT_EQ(out[0], 32.0f);
  // FP8 codes through the plain overload (no scales): refused, not read as something else.
  expect_error([&] { matmul_id(ctx, cv, xv, iv, ov, nullptr, MatmulIdInputLayout::SharedPerToken,
                               MatmulIdMultiplicity::DistinctPerToken, MatmulIdRoute::Auto); },
               ErrorCode::InvalidArgument, "need their scales");
  expect_error([&] { matmul_id(ctx, Fp8Experts{cv, Fp8ScaleKind::Channel, View::contiguous(scales.data(), DType::F32, {2})},
                               xv, iv, ov, nullptr); },
               ErrorCode::InvalidArgument, "channel scales of 2 [8, 32] experts must be a contiguous f32 [2, 8, 1]");
  expect_error([&] { matmul_id(ctx, Fp8Experts{View::contiguous(codes.data(), DType::U8, {2, 8, 32}), Fp8ScaleKind::Tensor,
                                               View::contiguous(scales.data(), DType::F32, {2})},
                               xv, iv, ov, nullptr); },
               ErrorCode::InvalidArgument, "must be f8e4m3");
  scales[1] = -1.0f;
  expect_error([&] { matmul_id(ctx, Fp8Experts{cv, Fp8ScaleKind::Tensor, View::contiguous(scales.data(), DType::F32, {2})}, xv,
                               iv, ov, nullptr); },
               ErrorCode::InvalidArgument, "must be finite and > 0");
}

// moe_ffn on FP8 experts (CPU backend) against make_moe_ffn's plain-loop reference of weights
// snapped to exact FP8 values.
TEST(Fp8MoeFfnCpu, MatchesThePlainLoopReference) {
  Context ctx = Context::cpu(2);
  for (Fp8ScaleKind kind : {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128}) {
    MoeFfnCase c;
    c.m = 5, c.hidden = 136, c.inter = 72, c.top_k = 2, c.experts = 4, c.out_of_range_every = 4;
    c.seed = 70 + static_cast<std::uint64_t>(kind);
    auto st = snap_to_fp8(c, kind);
    MoeFfnBuffers b = make_moe_ffn(c);
    moe_ffn(ctx, b.x.view, Fp8Experts{st->gu_codes.view, kind, st->gu_scales.view},
            Fp8Experts{st->dn_codes.view, kind, st->dn_scales.view}, b.ids.view, b.topk_weights.view, b.out.view);
    EXPECT_EQ(compare_moe_ffn(b, b.out, 1e-12, std::ldexp(1.0, -24)), "") << c.describe();
  }
}

TEST(Fp8MoeFfnCpu, Refusals) {
  Context ctx = Context::cpu(1);
  MoeFfnCase c;
  c.hidden = 32, c.inter = 16;
  auto st = snap_to_fp8(c, Fp8ScaleKind::Channel);
  MoeFfnBuffers b = make_moe_ffn(c);
  const Fp8Experts gu{st->gu_codes.view, Fp8ScaleKind::Channel, st->gu_scales.view};
  const Fp8Experts dn{st->dn_codes.view, Fp8ScaleKind::Channel, st->dn_scales.view};
  expect_error([&] { moe_ffn(ctx, b.x.view, Fp8Experts{gu.codes, Fp8ScaleKind::Block128, gu.scales}, dn, b.ids.view,
                             b.topk_weights.view, b.out.view); },
               ErrorCode::InvalidArgument, "w_gate_up's block scales must be a contiguous f32 [4, 1, 1]");
  expect_error([&] { moe_ffn(ctx, b.x.view, st->gu_codes.view, st->dn_codes.view, b.ids.view, b.topk_weights.view, b.out.view); },
               ErrorCode::InvalidArgument, "FP8 experts come with their scales");
}
