// matmul_fp8 on the GPU against the float64 reference: every route (stream, cublaslt W8A8,
// dequant_lt) x scale kind x dtype, shapes that are not multiples of 128 (partial scale blocks,
// a K-block count that cuBLASLt's scale pitch pads), padded rows, NaN/Inf propagation, Auto's
// choices.
#include <cmath>
#include <cstdint>
#include <utility>

#include <gtest/gtest.h>

#include "llmm/fp8.hpp"
#include "support/expect_error.hpp"
#include "support/fp8_case.hpp"
#include "support/fp8_moe_case.hpp"
#include "support/fp8_ffn_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"
#include "support/gpu.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

const Fp8ScaleKind kKinds[] = {Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128};

// Row padding that keeps rows 16-byte aligned in `dt`.
std::int64_t pad16(DType dt) { return 16 / static_cast<std::int64_t>(dtype_size(dt)); }

MatmulFp8Options forced(Fp8Route r, Precision p = Precision::Fast) {
  MatmulFp8Options o;
  o.force_route = r, o.precision = p;
  return o;
}

}  // namespace

TEST(Fp8MatmulGpu, StreamEveryKindDtypeAndM) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 100;
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (Fp8ScaleKind kind : kKinds)
      for (std::int64_t m : {1, 3, 8, 16}) {
        Fp8Case c;
        c.m = m, c.n = 131, c.k = 272, c.dtype = dt, c.kind = kind, c.x_pad = pad16(dt), c.y_pad = 3, c.w_pad = 16;
        c.seed = ++seed;
        const Receipt r = run_fp8_case(ctx, c, forced(Fp8Route::Stream));
        EXPECT_EQ(r.route, "stream");
      }
}

// The tensor-core decode: both 16-bit dtypes, every kind, one and two n8 tiles (m 8 / 9), a K
// that ends inside a 64-deep round (272, 400) and one that ends on a tile (512), n not a multiple
// of 16, padded rows; a single tile with its K over 8 warps (n 16, k 4096).
TEST(Fp8MatmulGpu, StreamMmaEveryKindDtypeAndM) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 150;
  for (DType dt : {DType::BF16, DType::F16})
    for (Fp8ScaleKind kind : kKinds)
      for (std::int64_t m : {1, 3, 8, 9, 16})
        for (std::int64_t k : {272, 400, 512}) {
          Fp8Case c;
          c.m = m, c.n = 131, c.k = k, c.dtype = dt, c.kind = kind, c.x_pad = pad16(dt), c.y_pad = 3, c.w_pad = 16;
          c.seed = ++seed;
          const Receipt r = run_fp8_case(ctx, c, forced(Fp8Route::StreamMma));
          EXPECT_EQ(r.route, "stream_mma");
        }
  for (Fp8ScaleKind kind : kKinds) {
    Fp8Case c;
    c.m = 5, c.n = 16, c.k = 4096, c.kind = kind, c.seed = ++seed;
    EXPECT_EQ(run_fp8_case(ctx, c, forced(Fp8Route::StreamMma)).route, "stream_mma");
  }
}

// W8A8 on the Hopper engine (route tiled_sm90, by name): every kind and dtype, m and n off the
// 128 tiles (a partial token tile, m not a multiple of 4: padded scale rows), k 272 (a partial
// 128-k block) and 2048, padded rows, non-finite inputs; against the float64 product of the
// quantized x (1 x 128 groups) and the exact weights.
TEST(Fp8MatmulGpu, TiledSm90W8A8EveryKindAndDtype) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) GTEST_SKIP() << "the Hopper engine runs on sm_90 only";
  std::uint64_t seed = 2100;
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const Shape sh : {Shape{37, 200, 272}, Shape{300, 384, 2048}, Shape{129, 136, 128}})
    for (Fp8ScaleKind kind : kKinds)
      for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
        Fp8Case c;
        c.m = sh.m, c.n = sh.n, c.k = sh.k, c.dtype = dt, c.kind = kind, c.seed = ++seed;
        c.x_pad = pad16(dt), c.y_pad = pad16(dt), c.w_pad = 16;  // rows stay 16-byte aligned (the route's gate)
        c.nonfinite = sh.m == 37;
        const Receipt r = run_fp8_case(ctx, c, forced(Fp8Route::TiledSm90));
        EXPECT_EQ(r.route, "tiled_sm90");
        EXPECT_NE(r.kernel.find("tiled_sm90_dense_w8a8_" + std::string(dtype_name(dt)) + "_bn128"), std::string::npos) << r.kernel;
      }
  // Exact keeps x unquantized: refused by name.
  Fp8Case c;
  c.m = 64, c.n = 128, c.k = 256;
  expect_error([&] { run_fp8_case(ctx, c, forced(Fp8Route::TiledSm90, Precision::Exact)); }, ErrorCode::Unsupported,
               "W8A8 needs Fast");
}

TEST(Fp8MatmulGpu, E4m3XOnTiledSm90EveryKindAndDtype) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) GTEST_SKIP() << "the Hopper engine runs on sm_90 only";
  std::uint64_t seed = 2300;
  struct Shape {
    std::int64_t m, n, k;
  };
  // m 1 and 5 (scale rows shorter than a box), 37 (NaN/Inf tokens), 300 (three token tiles); k 128 (one group).
  for (const Shape sh : {Shape{1, 200, 272}, Shape{5, 136, 128}, Shape{37, 200, 272}, Shape{300, 384, 2048}})
    for (Fp8ScaleKind kind : kKinds)
      for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
        Fp8Case c;
        c.m = sh.m, c.n = sh.n, c.k = sh.k, c.dtype = dt, c.kind = kind, c.seed = ++seed;
        c.x_pad = 16, c.y_pad = pad16(dt), c.w_pad = 16, c.x_scale_pad = 4 * static_cast<std::int64_t>(seed % 3);
        c.x_e4m3 = true, c.nonfinite = sh.m == 37;
        const Receipt auto_r = run_fp8_case(ctx, c, {});
        EXPECT_EQ(auto_r.route, "tiled_sm90");
        EXPECT_EQ(auto_r.kernels_launched, 1);  // nothing to quantize
        EXPECT_NE(auto_r.kernel.find("tiled_sm90_dense_w8a8_" + std::string(dtype_name(dt)) + "_bn128"), std::string::npos)
            << auto_r.kernel;
      }
  // Scales [m][groups] (row-major) are not what the engine's TMA reads: refused, naming the layout.
  Fp8Case c;
  c.m = 64, c.n = 128, c.k = 256, c.x_e4m3 = true, c.x_scales_row_major = true, c.x_pad = 16;
  expect_error([&] { run_fp8_case(ctx, c, {}); }, ErrorCode::Unsupported, "token-major layout");
  c.x_scales_row_major = false;
  expect_error([&] { run_fp8_case(ctx, c, forced(Fp8Route::Auto, Precision::Exact)); }, ErrorCode::Unsupported,
               "precision Exact");
  expect_error([&] { run_fp8_case(ctx, c, forced(Fp8Route::CublasLt)); }, ErrorCode::Unsupported, "reads x in 16 or 32 bits");
}

TEST(Fp8MatmulGpu, CublasLtW8A8EveryKindAndDtype) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 200;
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (Fp8ScaleKind kind : kKinds)
      for (std::int64_t k : {272, 512}) {  // 3 K blocks (the weight scales repacked to a pitch of 4), 4 blocks
        Fp8Case c;
        c.m = 37, c.n = 136, c.k = k, c.dtype = dt, c.kind = kind, c.x_pad = 3, c.y_pad = pad16(dt), c.w_pad = 16;
        c.seed = ++seed;
        const Receipt r = run_fp8_case(ctx, c, forced(Fp8Route::CublasLt));
        EXPECT_EQ(r.route, "cublaslt");
      }
}

TEST(Fp8MatmulGpu, DequantLtEveryKindAnyLayout) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 300;
  for (DType dt : {DType::BF16, DType::F32})
    for (Fp8ScaleKind kind : kKinds)
      for (std::int64_t m : {1, 40}) {
        Fp8Case c;  // k not a multiple of 16, odd pads: only dequant_lt takes it
        c.m = m, c.n = 133, c.k = 261, c.dtype = dt, c.kind = kind, c.x_pad = 1, c.y_pad = 1, c.w_pad = 3;
        c.seed = ++seed;
        const Receipt r = run_fp8_case(ctx, c, {});
        EXPECT_EQ(r.route, "dequant_lt");
      }
}

TEST(Fp8MatmulGpu, NonFiniteInputsOnEveryRoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  for (Fp8Route route : {Fp8Route::Stream, Fp8Route::StreamMma, Fp8Route::CublasLt, Fp8Route::DequantLt})
    for (Fp8ScaleKind kind : kKinds) {
      Fp8Case c;
      c.m = route == Fp8Route::Stream || route == Fp8Route::StreamMma ? 4 : 24, c.n = 136, c.k = 256, c.kind = kind, c.nonfinite = true;
      c.seed = 400 + static_cast<std::uint64_t>(route);
      run_fp8_case(ctx, c, forced(route));
    }
}

TEST(Fp8MatmulGpu, AutoPicksStreamThenW8A8AndExactKeepsXUnquantized) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  Fp8Case c;
  c.n = 256, c.k = 384;
  c.m = 2;
  EXPECT_EQ(run_fp8_case(ctx, c, {}).route, "stream");
  c.m = 64;
  EXPECT_EQ(run_fp8_case(ctx, c, {}).route, "cublaslt");
  MatmulFp8Options exact;
  exact.precision = Precision::Exact;
  EXPECT_EQ(run_fp8_case(ctx, c, exact).route, "dequant_lt");
}

// matmul_id on FP8 experts: the direct kernel's e4m3 decoder (16-byte and element paths) and the
// grouped mma.sync kernel's (weights decoded and scaled into bf16 tiles), every scale kind and
// input dtype, against the dense FP8 oracle row by row.
TEST(Fp8ExpertsGpu, DirectEveryKindAndDtype) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 500;
  for (Fp8ScaleKind kind : kKinds)
    for (DType dt : {DType::BF16, DType::F16, DType::F32})
      for (std::int64_t k : {272, 203}) {  // 16-byte loads; element by element
        Fp8MoeCase c;
        c.kind = kind, c.x_dtype = dt, c.out_dtype = k == 272 ? DType::F32 : dt, c.k = k, c.n = 131;
        c.route = MatmulIdRoute::Direct, c.seed = ++seed;
        const Receipt r = run_fp8_moe_case(ctx, c);
        EXPECT_EQ(r.route, "direct");
      }
}

TEST(Fp8ExpertsGpu, GroupedEveryKindAndDtype) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 600;
  for (Fp8ScaleKind kind : kKinds)
    for (DType dt : {DType::BF16, DType::F16, DType::F32})
      for (std::int64_t k : {272, 203}) {
        Fp8MoeCase c;
        c.m = 70, c.top_k = 3, c.experts = 6, c.n = 200, c.kind = kind, c.x_dtype = dt, c.k = k;
        c.out_dtype = dt, c.route = MatmulIdRoute::GroupedPrefill, c.seed = ++seed;
        c.grouped_kernel = MatmulIdGroupedKernel::MmaSync;  // bf16 x with k 272 would take the engine (below)
        const Receipt r = run_fp8_moe_case(ctx, c);
        EXPECT_EQ(r.route, "grouped_prefill");
        EXPECT_NE(r.kernel.find("moe_grouped_f8e4m3"), std::string::npos) << r.kernel;
      }
}

// The Hopper engine's FP8 instance (codes converted to bf16 boxes by producer warps, staged bf16
// rows): every scale kind, f32 and bf16 outputs, n and k off the tile multiples (n 200: a partial
// 128-row tile; k 272: a partial 64-k stage and a partial 128-k scale block), k 1024 (eight scale
// blocks), few rows (narrow tiles) and one expert with 500 (wide, mid and narrow tiles), an
// out-of-range id, a NaN-poisoned output; against the float64 reference.
TEST(Fp8ExpertsGpu, TiledSm90EveryKindAndShape) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) GTEST_SKIP() << "the Hopper engine runs on sm_90 only";
  std::uint64_t seed = 700;
  struct Shape {
    std::int64_t m, n, k, top_k, experts, skew;
  };
  for (const Shape sh : {Shape{70, 200, 272, 3, 6, 0}, Shape{300, 384, 1024, 2, 5, 500}, Shape{9, 136, 128, 4, 40, 0}})
    for (Fp8ScaleKind kind : kKinds)
      for (DType out : {DType::F32, DType::BF16}) {
        Fp8MoeCase c;
        c.m = sh.m, c.n = sh.n, c.k = sh.k, c.top_k = sh.top_k, c.experts = sh.experts, c.skew_rows = sh.skew;
        c.kind = kind, c.x_dtype = DType::BF16, c.out_dtype = out, c.route = MatmulIdRoute::GroupedPrefill;
        c.grouped_kernel = MatmulIdGroupedKernel::TiledSm90, c.seed = ++seed;
        const Receipt r = run_fp8_moe_case(ctx, c);
        EXPECT_NE(r.kernel.find("tiled_sm90_moe_f8e4m3_bf16"), std::string::npos) << r.kernel;
        EXPECT_NE(r.kernel.find("_staged"), std::string::npos) << r.kernel;
      }
}

// Non-finite weights and inputs reach the outputs they feed and no other: a NaN code of expert
// 0's row 5 and an infinite x element, on the FP8 engine.
TEST(Fp8ExpertsGpu, TiledSm90PropagatesNonFinite) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) GTEST_SKIP() << "the Hopper engine runs on sm_90 only";
  const std::int64_t m = 40, n = 136, k = 256, top_k = 2, experts = 3;
  HostTensor codes = host_tensor(DType::F8E4M3, {experts, n, k});
  auto* cb = static_cast<std::uint8_t*>(codes.view.data);
  for (std::int64_t i = 0; i < experts * n * k; ++i) cb[i] = static_cast<std::uint8_t>(0x30 + (i * 7) % 16);  // 0.5 .. ~1.9
  cb[5 * k + 17] = 0x7F;  // NaN: expert 0, row 5
  HostTensor scales = host_tensor(DType::F32, {experts, 1, 1});
  for (int e = 0; e < experts; ++e) static_cast<float*>(scales.view.data)[e] = 0.25f;
  HostTensor x = host_tensor(DType::BF16, {m, k});
  fill_random(x.view, 77);
  static_cast<std::uint16_t*>(x.view.data)[7 * k + 3] = 0x7F80;  // +Inf in token 7
  HostTensor ids = host_tensor(DType::I32, {m, top_k});
  auto* id = static_cast<std::int32_t*>(ids.view.data);
  for (std::int64_t r = 0; r < m * top_k; ++r) id[r] = static_cast<std::int32_t>((r * 5 + r / 7) % experts);
  HostTensor out = host_tensor(DType::F32, {m, top_k, n});
  DeviceTensor dc = to_device(codes), ds = to_device(scales), dx = to_device(x), di = to_device(ids), dout = to_device(out);
  MatmulIdOptions o;
  o.grouped_kernel = MatmulIdGroupedKernel::TiledSm90;
  const Receipt r = matmul_id(ctx, Fp8Experts{dc.view, Fp8ScaleKind::Tensor, ds.view}, dx.view, di.view, dout.view, nullptr,
                              MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::MayRepeat, MatmulIdRoute::GroupedPrefill, o);
  ctx.synchronize();
  to_host(dout, out);
  ASSERT_NE(r.kernel.find("tiled_sm90_moe_f8e4m3"), std::string::npos) << r.kernel;
  const float* y = static_cast<const float*>(out.view.data);
  int bad = 0;
  for (std::int64_t row = 0; row < m * top_k; ++row)
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = y[row * n + j];
      const bool nan_w = id[row] == 0 && j == 5, inf_x = row / top_k == 7;
      // +Inf times positive weights: +Inf, unless a NaN weight meets it too.
      const bool ok = nan_w ? std::isnan(v) : inf_x ? (std::isinf(v) && v > 0) : std::isfinite(v);
      if (!ok && ++bad <= 5) ADD_FAILURE() << "row " << row << " (expert " << id[row] << ") col " << j << ": " << v;
    }
  EXPECT_EQ(bad, 0);
}

TEST(Fp8ExpertsGpu, AutoDirectAtDecodeGroupedAtPrefill) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  Fp8MoeCase c;
  c.m = 2;
  EXPECT_EQ(run_fp8_moe_case(ctx, c).route, "direct");
  c.m = 64;
  const Receipt r = run_fp8_moe_case(ctx, c);
  EXPECT_EQ(r.route, "grouped_prefill");
  // bf16 x on sm_90: the engine's FP8 instance over the context's staged scratch.
  if (ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)
    EXPECT_NE(r.kernel.find("tiled_sm90_moe_f8e4m3_bf16_f32_bn256x64_staged"), std::string::npos) << r.kernel;
}

// moe_ffn on FP8 experts on the GPU (direct at decode, the grouped kernel at prefill) against the
// plain-loop reference of the exactly-FP8 weights: bf16 x, the activation stored in bf16.
TEST(Fp8MoeFfnGpu, DecodeAndPrefillEveryKind) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  // inter 136: down's k is not a multiple of 16 (moe_grouped; gate_up on the engine's FP8
  // instance); inter 144: both GEMMs on it, the sorted pipeline.
  for (Fp8ScaleKind kind : kKinds)
    for (const auto& [m, inter] : {std::pair<std::int64_t, std::int64_t>{3, 136}, {300, 136}, {300, 144}}) {
      MoeFfnCase c;
      c.m = m, c.hidden = 272, c.inter = inter, c.top_k = 2, c.experts = 6, c.out_of_range_every = 5;
      c.x_dtype = DType::BF16, c.seed = 900 + static_cast<std::uint64_t>(m) + static_cast<std::uint64_t>(kind);
      auto st = snap_to_fp8(c, kind);
      MoeFfnBuffers b = make_moe_ffn(c);
      DeviceTensor x = to_device(b.x), ids = to_device(b.ids), tw = to_device(b.topk_weights), out = to_device(b.out);
      DeviceTensor gc = to_device(st->gu_codes), gs = to_device(st->gu_scales), dc = to_device(st->dn_codes),
                   ds = to_device(st->dn_scales);
      const Receipt r = moe_ffn(ctx, x.view, Fp8Experts{gc.view, kind, gs.view}, Fp8Experts{dc.view, kind, ds.view}, ids.view,
                                tw.view, out.view);
      ctx.synchronize();
      to_host(out, b.out);
      // bf16: the activation rounded once (and on the grouped route x and the weights' products'
      // operands to bf16): a few bf16 units of the magnitude.
      EXPECT_EQ(compare_moe_ffn(b, b.out, 4 * std::ldexp(1.0, -8), std::ldexp(1.0, -8)), "") << c.describe() << " " << r.kernel;
      EXPECT_EQ(r.route, m == 3 ? "direct" : "grouped_prefill") << r.kernel;
      if (m > 3 && ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0) {
        EXPECT_NE(r.kernel.find("tiled_sm90_moe_f8e4m3_bf16_bf16_bn256x64_staged"), std::string::npos) << r.kernel;
        EXPECT_EQ(r.kernel.find("moe_grouped") == std::string::npos, inter == 144) << r.kernel;
      }
    }
}
