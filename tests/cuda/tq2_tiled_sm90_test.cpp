// gemm_tq2's tq2_tiled_sm90 route (the Hopper tiled engine with the TQ2 decoder: codes by TMA,
// decoded by the consumers into register fragments) and its K-in-parts form tq2_tiled_sm90_splitk
// on the GPU: random sweeps against float64 over input/output dtypes, shapes that are
// not tile multiples, every tile width, strides with poisoned padding, wide input ranges and an
// all-zero scale group; NaN/Inf propagation; the caller-workspace rule; determinism; and each
// refusal (f32 Exact, a misaligned f16 input, another GPU) before anything is launched.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/reference.hpp"
#include "llmm/ternary.hpp"
#include "support/compare.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
constexpr Tq2Route kRoute = Tq2Route::TiledSm90;
bool hopper(const Context& ctx) { return ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0; }
std::size_t bytes_of(const std::vector<BlockTQ2_128>& b) { return b.size() * sizeof(BlockTQ2_128); }
}  // namespace

TEST(Tq2TiledSm90Gpu, SweepDtypesShapesStridesTileWidths) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct Shape { std::int64_t m, n, k; };
  // Small m, non-multiples of the 128-row weight box and of every tile width, n not a multiple
  // of 8 (the transposed scales' padding), long K, and shapes large enough that the launch picks
  // 128- and 256-wide tiles (checked below) and gives a CTA several tiles (the code ring then
  // carries over tile boundaries).
  const Shape shapes[] = {{1, 200, 384},   {17, 1000, 128},  {65, 333, 1024}, {300, 136, 2048}, {3, 13, 256},
                          {600, 520, 256}, {1024, 4224, 128}, {250, 8400, 128}, {513, 2051, 640}};
  std::set<std::string> widths;
  std::uint64_t seed = 3000;
  for (const Shape& s : shapes)
    for (DType in : {DType::F16, DType::BF16, DType::F32})
      for (DType out : {DType::F32, in}) {
        if (in == DType::F32 && out != DType::F32) continue;
        Tq2Case c;
        c.m = s.m, c.n = s.n, c.k = s.k, c.route = kRoute, c.in_dtype = in, c.out_dtype = out;
        c.precision = Precision::Fast;
        // f16 rows are read by TMA straight from the input: strides stay multiples of 8.
        c.pad = in == DType::F16 ? 8 * (s.m % 2) : s.m % 5;
        c.seed_input = false, c.seed = ++seed;
        c.wide_exp = in == DType::F16 ? 4 : 12;  // f16 holds 2^+-4 comfortably; bf16 and f32 far more
        c.zero_group = s.k >= 256;
        Tq2Outcome o = run_tq2_case(ctx, cache, c);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_TRUE(o.padding_untouched) << c.describe();
        EXPECT_TRUE(o.any_nonzero) << c.describe();
        EXPECT_EQ(o.receipt.route, "tq2_tiled_sm90");
        EXPECT_EQ(o.receipt.kernels_launched, in == DType::F16 ? 1 : 2) << o.receipt.kernel;  // tq2_rowscale first
        const std::string& kn = o.receipt.kernel;
        widths.insert(kn.substr(kn.rfind("_bn")));
      }
  EXPECT_EQ(widths, (std::set<std::string>{"_bn64", "_bn128", "_bn256"}));
}

// The seed's own weight and input (f16 through the engine's f16 path, where every product is
// exact): the seed's bound, max abs error < 1e-3.
TEST(Tq2TiledSm90Gpu, SeedParityF16AndBf16) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  for (DType in : {DType::F16, DType::BF16})
    for (std::int64_t n : {8, 40, 3072})
      for (std::int64_t k : {128, 256, 3072})
        for (std::int64_t m : {1, 7, 8, 9, 32, 33, 100, 1536}) {
          Tq2Case c;
          c.m = m, c.n = n, c.k = k, c.route = kRoute, c.in_dtype = in;
          Tq2Outcome o = run_tq2_case(ctx, cache, c);
          EXPECT_LT(o.max_abs_err, 1e-3) << c.describe() << " [" << o.receipt.kernel << "]";
          EXPECT_TRUE(o.any_nonzero) << c.describe();
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        }
}

TEST(Tq2TiledSm90Gpu, NonFiniteInputsPropagate) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 4000;
  for (std::int64_t m : {1, 40, 300})
    for (DType in : {DType::F16, DType::BF16, DType::F32}) {
      Tq2Case c;
      c.m = m, c.n = 200, c.k = 384, c.route = kRoute, c.precision = Precision::Fast, c.in_dtype = in;
      c.seed_input = false, c.nonfinite_every = m == 1 ? 1 : 3, c.seed = ++seed;
      Tq2Outcome o = run_tq2_case(ctx, cache, c);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
      EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
    }
}

TEST(Tq2TiledSm90Gpu, DeterministicWithCallerWorkspace) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  for (DType in : {DType::F16, DType::BF16}) {
    Tq2Case c;
    c.m = 500, c.n = 3072, c.k = 3072, c.route = kRoute, c.in_dtype = in, c.out_dtype = in;
    c.seed_input = false, c.caller_workspace = true;
    const std::uint64_t allocs = BufferPool::alloc_count();
    Tq2Outcome a = run_tq2_case(ctx, cache, c), b = run_tq2_case(ctx, cache, c);
    EXPECT_EQ(BufferPool::alloc_count(), allocs) << "a caller workspace must leave the pool alone";
    EXPECT_TRUE(a.cmp.ok()) << a.cmp.summary();
    EXPECT_EQ(a.out_bytes, b.out_bytes) << "tq2_tiled_sm90 " << dtype_name(in) << " is not bitwise deterministic";
  }
}

// The router takes the engine for a 16-bit prefill whose tiles fill the SMs (m 128, n 13824: 108
// tiles), and sends an f16 input the engine's TMA cannot read (row stride not a multiple of 8)
// to tq2_dequant_lt instead of refusing it; both correct against float64.
TEST(Tq2TiledSm90Gpu, RouterTakesTheEngineAndFallsBackForUnreadableF16) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct R { DType in; std::int64_t pad; const char* route; };
  for (R r : {R{DType::F16, 0, "tq2_tiled_sm90"}, R{DType::BF16, 3, "tq2_tiled_sm90"}, R{DType::F16, 3, "tq2_dequant_lt"}}) {
    Tq2Case c;
    c.m = 128, c.n = 13824, c.k = 256, c.route = Tq2Route::Auto, c.in_dtype = r.in, c.out_dtype = DType::F32;
    c.precision = Precision::Fast, c.pad = r.pad, c.seed_input = false, c.seed = 4100 + static_cast<std::uint64_t>(r.pad);
    Tq2Outcome o = run_tq2_case(ctx, cache, c);
    EXPECT_EQ(o.receipt.route, r.route) << c.describe();
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
    EXPECT_TRUE(o.padding_untouched) << c.describe();
  }
}

// Refusals come before anything is launched or written: f32 Exact (the engine has no second
// f16 part yet), an f16 input whose row stride TMA cannot read, a short or misaligned caller
// workspace, an injected launch failure of the first kernel; and the route off sm_90.
TEST(Tq2TiledSm90Gpu, RefusalsLaunchNothing) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) {
    expect_error([&] { plan_tq2(64, 64, 256, DType::BF16, ctx.arch(), kRoute); }, ErrorCode::Unsupported,
                 "the Hopper tiled engine is built for sm_90a only");
    return;
  }
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(64, 256, 5);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 64, 256);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  auto run = [&](DType in_dt, std::int64_t in_ld, Tq2Options o, ErrorCode code, const std::string& what) {
    HostTensor in = host_tensor(in_dt, {4, in_ld}), out = host_tensor(DType::F32, {4, 64});
    fill_random(in.view, 11);
    std::vector<unsigned char> poison_bytes(out.bytes.size(), 0xFF);
    out.bytes = poison_bytes;
    out.view.data = out.bytes.data();
    DeviceTensor din = to_device(in), dout = to_device(out);
    View x = View::strided(din.view.data, in_dt, {4, 256}, {in_ld, 1}, DeviceKind::CUDA, 0);
    o.force_route = kRoute;
    expect_error([&] { gemm_tq2(ctx, w, x, dout.view, o); }, code, what);
    ctx.synchronize();
    std::vector<unsigned char> back(out.bytes.size());
    copy_to_host(back.data(), dout.buffer.data(), back.size());
    EXPECT_EQ(back, poison_bytes) << what;
  };
  Tq2Options exact;
  exact.precision = Precision::Exact;
  run(DType::F32, 256, exact, ErrorCode::Unsupported,
      "gemm_tq2: route tq2_tiled_sm90 cannot run (m: 4, n: 64, k: 256, f32 -> f32, exact): f32 Exact is not on the engine");
  run(DType::F16, 260, {}, ErrorCode::Unsupported, "it needs a 16-byte aligned base and a row stride that is a multiple of 8");
  Tq2Options small;
  small.precision = Precision::Fast;
  const std::size_t need = tq2_workspace_bytes(4, 64, 256, DType::BF16, DType::F32, [] {
    Tq2Options o;
    o.force_route = kRoute;
    return o;
  }());
  ASSERT_GT(need, 0u);
  DeviceBuffer ws(need + 256);
  small.workspace = ws.data(), small.workspace_bytes = need - 1;
  run(DType::BF16, 256, small, ErrorCode::InvalidArgument,
      "bytes route tq2_tiled_sm90 needs for m 4, n 64, k 256 (bf16)");
  small.workspace = static_cast<unsigned char*>(ws.data()) + 16, small.workspace_bytes = need;
  run(DType::BF16, 256, small, ErrorCode::InvalidArgument, "is not 256-byte aligned (route tq2_tiled_sm90)");
  rec.before_launch = [](const std::string& k) { fail(ErrorCode::Cuda, "injected: ", k); };
  run(DType::BF16, 256, {}, ErrorCode::Cuda, "injected: tq2_rowscale_bf16_f16");
  run(DType::F16, 256, {}, ErrorCode::Cuda, "injected: tiled_sm90_tq2_f16_f32_bn64");
  EXPECT_TRUE(rec.launched.empty());
  ctx.set_launch_recorder(nullptr);
}

// tq2_tiled_sm90_splitk: each tile's K in parts summed in part order by the last part to arrive.
// Shapes whose n leaves parts > 1 (checked), m off every tile width, uneven last parts (k-blocks
// not a multiple of the parts), n not a multiple of 8, all dtypes, strides with poisoned padding,
// a zero scale group; then bitwise determinism and that Auto takes it where the plan says.
TEST(Tq2TiledSm90Gpu, SplitKSweepAgainstFloat64) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90_splitk is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct Shape { std::int64_t m, n, k; };
  const Shape shapes[] = {{1, 136, 2048},   {17, 200, 3200},  {65, 1000, 2560}, {300, 520, 4096},
                          {128, 2560, 6912}, {513, 333, 8192}, {40, 2051, 5120}};
  std::set<int> parts_seen;
  std::uint64_t seed = 5000;
  for (const Shape& s : shapes)
    for (DType in : {DType::F16, DType::BF16, DType::F32})
      for (DType out : {DType::F32, in}) {
        if (in == DType::F32 && out != DType::F32) continue;
        const int parts = engine::tiled_sm90_tq2_split_parts(s.n, s.k);
        ASSERT_GT(parts, 1) << s.n << " x " << s.k;
        parts_seen.insert(parts);
        Tq2Case c;
        c.m = s.m, c.n = s.n, c.k = s.k, c.route = Tq2Route::TiledSm90SplitK, c.in_dtype = in, c.out_dtype = out;
        c.precision = Precision::Fast;
        c.pad = in == DType::F16 ? 8 * (s.m % 2) : s.m % 5;
        c.seed_input = false, c.seed = ++seed;
        c.wide_exp = in == DType::F16 ? 4 : 12;
        c.zero_group = true;
        c.caller_workspace = s.m % 2 == 0;
        Tq2Outcome o = run_tq2_case(ctx, cache, c);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_TRUE(o.padding_untouched) << c.describe();
        EXPECT_TRUE(o.any_nonzero) << c.describe();
        EXPECT_EQ(o.receipt.route, "tq2_tiled_sm90_splitk");
        EXPECT_EQ(o.receipt.kernels_launched, in == DType::F16 ? 2 : 3) << o.receipt.kernel;  // + the counters' memset
        const std::string tail = "_k" + std::to_string(parts);
        EXPECT_EQ(o.receipt.kernel.substr(o.receipt.kernel.size() - tail.size()), tail) << o.receipt.kernel;
        if (s.m == 128 && in == DType::BF16) {  // bitwise the same on a second run
          Tq2Outcome again = run_tq2_case(ctx, cache, c);
          EXPECT_EQ(o.out_bytes, again.out_bytes) << c.describe() << " is not bitwise deterministic";
        }
      }
  EXPECT_GE(parts_seen.size(), 4u);
  // Auto: BitNet-2B down at m 128 (20 tiles x 6 parts) takes the split route, and agrees with float64.
  Tq2Case c;
  c.m = 128, c.n = 2560, c.k = 6912, c.route = Tq2Route::Auto, c.in_dtype = DType::BF16, c.out_dtype = DType::BF16;
  c.precision = Precision::Fast, c.seed_input = false, c.seed = 5100;
  Tq2Outcome o = run_tq2_case(ctx, cache, c);
  EXPECT_EQ(o.receipt.route, "tq2_tiled_sm90_splitk");
  EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
}

TEST(Tq2TiledSm90Gpu, SplitKNonFiniteAndRefusals) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) {
    expect_error([&] { plan_tq2(64, 64, 2048, DType::BF16, ctx.arch(), Tq2Route::TiledSm90SplitK); },
                 ErrorCode::Unsupported, "the Hopper tiled engine is built for sm_90a only");
    return;
  }
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 5200;
  for (std::int64_t m : {1, 40, 300})
    for (DType in : {DType::F16, DType::BF16}) {
      Tq2Case c;
      c.m = m, c.n = 200, c.k = 3200, c.route = Tq2Route::TiledSm90SplitK, c.precision = Precision::Fast, c.in_dtype = in;
      c.seed_input = false, c.nonfinite_every = m == 1 ? 1 : 3, c.seed = ++seed;
      Tq2Outcome o = run_tq2_case(ctx, cache, c);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
      EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
    }
  // An f16 input needs a workspace on this route (the parts' slots): a short one is refused
  // before anything runs, as is an injected failure of the memset or the kernel.
  const std::int64_t n = 200, k = 3200;
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(n, k, 5);
  WeightHandle w = cache.get_or_upload(77, b.data(), bytes_of(b), n, k);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  HostTensor in = host_tensor(DType::F16, {4, k}), out = host_tensor(DType::F32, {4, n});
  fill_random(in.view, 11);
  std::vector<unsigned char> poison_bytes(out.bytes.size(), 0xFF);
  out.bytes = poison_bytes;
  out.view.data = out.bytes.data();
  DeviceTensor din = to_device(in), dout = to_device(out);
  Tq2Options o;
  o.force_route = Tq2Route::TiledSm90SplitK;
  const std::size_t need = tq2_workspace_bytes(4, n, k, DType::F16, DType::F32, o);
  ASSERT_GT(need, 0u);
  DeviceBuffer ws(need);
  o.workspace = ws.data(), o.workspace_bytes = need - 1;
  expect_error([&] { gemm_tq2(ctx, w, din.view, dout.view, o); }, ErrorCode::InvalidArgument,
               "bytes route tq2_tiled_sm90_splitk needs for m 4, n 200, k 3200 (f16)");
  o.workspace_bytes = need;
  for (const char* injected : {"tq2_split_counters_zero", "tiled_sm90_tq2_f16_f32_bn64_k3"}) {
    const std::string name = injected;
    rec.before_launch = [name](const std::string& kn) {
      if (kn == name) fail(ErrorCode::Cuda, "injected: ", kn);
    };
    expect_error([&] { gemm_tq2(ctx, w, din.view, dout.view, o); }, ErrorCode::Cuda, "injected: " + name);
  }
  ctx.synchronize();
  std::vector<unsigned char> back(out.bytes.size());
  copy_to_host(back.data(), dout.buffer.data(), back.size());
  EXPECT_EQ(back, poison_bytes);
  EXPECT_TRUE(rec.launched.empty());
  ctx.set_launch_recorder(nullptr);
}

namespace {
// Rows of 2^20, 1 and 2^-20 in turn, bf16 and f32 (Fast), through each of `routes`, every output
// against float64 with the bound of exact products and f32 sums (f32 input: plus its rounding to
// 11 bits).
void expect_rows_of_very_different_magnitude(const std::vector<Tq2Route>& routes) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_tiled_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  const std::int64_t m = 40, n = 520, k = 2048;  // 2 K parts on the split route
  std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(n, k, 13);
  WeightHandle w = cache.get_or_upload(90, blocks.data(), bytes_of(blocks), n, k);
  std::vector<float> wf = tq2_dequantize(blocks.data(), bytes_of(blocks), n, k);
  for (DType in_dt : {DType::BF16, DType::F32})
    for (Tq2Route route : routes) {
      HostTensor in = host_tensor_3d(in_dt, 1, m, k), out = host_tensor_3d(DType::F32, 1, m, n);
      for (std::int64_t r = 0; r < m; ++r) {
        const View row = View::strided(in.bytes.data() + static_cast<std::size_t>(r * k) * dtype_size(in_dt), in_dt, {1, k},
                                       {k, 1});
        fill_random(row, 700 + static_cast<std::uint64_t>(r), std::ldexp(1.0, r % 3 == 0 ? 20 : r % 3 == 1 ? 0 : -20));
      }
      DeviceTensor din = to_device(in), dout = to_device(out);
      auto as2d = [](const View& v) { return View::strided(v.data, v.dtype, {v.dim(1), v.dim(2)}, {v.stride(1), 1}, v.device); };
      Tq2Options o;
      o.force_route = route, o.precision = Precision::Fast;
      gemm_tq2(ctx, w, as2d(din.view), as2d(dout.view), o);
      ctx.synchronize();
      to_host(dout, out);
      cpu::MatmulF64 ref = cpu::matmul_f64({in.view, View::contiguous(wf.data(), DType::F32, {1, n, k}), false, true});
      const double u_in = in_dt == DType::BF16 ? 0.0 : std::ldexp(1.0, -11);
      EXPECT_TRUE(matches_reference(out.view, ref, Tolerance{1e-300, 1.0, u_in + k * std::ldexp(1.0, -24), 0}))
          << tq2_route_name(route) << " " << dtype_name(in_dt);
    }
}
}  // namespace

// Each activation row gets its own power of two (tq2_rowscale): rows 2^40 apart in magnitude are
// each exact in the engine's f16 copy. With one scale for the whole activation (sessions 8-11)
// the small row fell below f16's range (2^-20 x 2^-6 < 2^-25) and came out as zeros.
TEST(Tq2TiledSm90Gpu, RowsOfVeryDifferentMagnitudeEachKeepTheirPrecision) {
  expect_rows_of_very_different_magnitude({Tq2Route::TiledSm90, Tq2Route::TiledSm90SplitK});
}

// tq2_dequant_lt too: tq2_rowscale's f16 parts, the GEMMs' f32 result scaled per row after
// (tq2_lt_scale_rows). Until session 13 it scaled the whole activation by one power of two and
// lost 6750 of these 20800 outputs on the H200.
TEST(Tq2TiledSm90Gpu, DequantLtRowsOfVeryDifferentMagnitudeEachKeepTheirPrecision) {
  expect_rows_of_very_different_magnitude({Tq2Route::DequantLt});
}
