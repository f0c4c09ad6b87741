// gemm_tq2 on the GPU: the seed's parity sweeps for every kernel version (max abs err < 1e-3 in
// Exact, output not all zero), the anti-cap-of-8 case through the host API, random sweeps over
// dtypes/precisions/strides with poisoned outputs, determinism, refusals, the pool proof.
#include <cmath>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "cuda/ternary/launch.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
std::size_t bytes_of(const std::vector<BlockTQ2_128>& b) { return b.size() * sizeof(BlockTQ2_128); }
bool streaming(Tq2Route r) {
  return r == Tq2Route::StreamV2 || r == Tq2Route::StreamV4 || r == Tq2Route::StreamV5;
}
// Largest m a route takes.
std::int64_t max_m(Tq2Route r) {
  return r == Tq2Route::StreamV4 || r == Tq2Route::StreamV5 ? 8 : streaming(r) ? 16 : 1 << 30;
}
// tq2_stream_v4 and v5 are built for sm_90a alone: on other GPUs their forced routes are refused
// (tested in StreamV4RefusedOffHopper) and the sweeps leave them out.
bool runs_here(const Context& ctx, Tq2Route r) {
  return (r != Tq2Route::StreamV4 && r != Tq2Route::StreamV5) || (ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0);
}
}  // namespace

TEST(Tq2Gpu, SeedParitySweepEveryKernel) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  for (Tq2Route r : {Tq2Route::StreamV2, Tq2Route::StreamV4, Tq2Route::StreamV5,
                     Tq2Route::Tiled, Tq2Route::DequantLt, Tq2Route::Auto})
    for (std::int64_t n : {8, 40, 3072})
      for (std::int64_t k : {128, 256, 3072})
        for (std::int64_t m : {1, 7, 8, 9, 32, 33, 100, 1536}) {
          if (m > max_m(r) || !runs_here(ctx, r)) continue;  // the streaming kernels take m <= 16 (v3: 2, v4: 8)
          Tq2Case c;
          c.m = m, c.n = n, c.k = k, c.route = r;
          Tq2Outcome o = run_tq2_case(ctx, cache, c);
          EXPECT_LT(o.max_abs_err, 1e-3) << c.describe() << " [" << o.receipt.kernel << "]";
          EXPECT_TRUE(o.any_nonzero) << c.describe();
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        }
}

TEST(Tq2Gpu, SeedAntiCapOfEightThroughHostApi) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  expect_seed_anti_cap_of_eight(ctx);
}

TEST(Tq2Gpu, RandomSweepDtypesPrecisionsStrides) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 1;
  for (Tq2Route r : {Tq2Route::StreamV2, Tq2Route::StreamV4, Tq2Route::StreamV5, Tq2Route::Tiled,
                     Tq2Route::DequantLt})
    for (DType in : {DType::F32, DType::F16, DType::BF16})
      for (DType out : {DType::F32, in})
        for (Precision p : {Precision::Exact, Precision::Fast}) {
          if (in != DType::F32 && p == Precision::Fast) continue;
          for (std::int64_t m : {1, 5, 17, 130})
            for (std::int64_t n : {8, 333})
              for (std::int64_t k : {128, 384})
                for (std::int64_t pad : {0, 3}) {
                  if (m > max_m(r) || !runs_here(ctx, r)) continue;
                  Tq2Case c;
                  c.m = m, c.n = n, c.k = k, c.route = r, c.precision = p, c.in_dtype = in, c.out_dtype = out;
                  c.pad = pad, c.seed_input = false, c.seed = ++seed;
                  Tq2Outcome o = run_tq2_case(ctx, cache, c);
                  EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
                  EXPECT_TRUE(o.padding_untouched) << c.describe();
                  EXPECT_EQ(o.receipt.route, tq2_route_name(r));
                }
        }
}

// v2 paths the sweeps above do not reach: several shared-memory chunks of K (many columns,
// long K), 2/4/8 row tiles per block (wide N), inputs over a 2^+-20 range (per-group power-of-two
// scaling) and an all-zero scale group.
TEST(Tq2Gpu, StreamV2ChunksRowTilesWideRange) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  struct NK { std::int64_t n, k; int rows; };
  std::uint64_t seed = 500;
  for (Tq2Route r : {Tq2Route::StreamV2})
  for (NK nk : {NK{77, 6144, 16}, NK{6400, 256, 32}, NK{12800, 256, 64}, NK{25400, 128, 128}})
    for (std::int64_t m : {1, 2, 3, 5, 9, 16})
      for (Precision p : {Precision::Exact, Precision::Fast})
        for (int wide : {0, 20}) {
          if (m > max_m(r)) continue;
          Tq2Case c;
          c.m = m, c.n = nk.n, c.k = nk.k, c.route = r, c.precision = p;
          c.seed_input = false, c.seed = ++seed, c.wide_exp = wide, c.zero_group = wide > 0, c.pad = m % 2;
          Tq2Outcome o = run_tq2_case(ctx, cache, c);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
          EXPECT_TRUE(o.padding_untouched) << c.describe();
          const std::string rows = "_r" + std::to_string(nk.rows);
          const std::string& kn = o.receipt.kernel;
          const std::string tail = m >= 3 && r == Tq2Route::StreamV2 ? rows + "_staged" : rows;
          EXPECT_EQ(kn.substr(kn.size() - std::min(kn.size(), tail.size())), tail) << kn;
          EXPECT_EQ(o.receipt.kernels_launched, m >= 3 && r == Tq2Route::StreamV2 ? 2 : 1) << kn;
        }
}

TEST(Tq2Gpu, DeterministicAcrossRuns) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  for (Tq2Route r : {Tq2Route::StreamV2, Tq2Route::StreamV4, Tq2Route::StreamV5, Tq2Route::Tiled,
                     Tq2Route::DequantLt}) {
    if (!runs_here(ctx, r)) continue;
    Tq2Case c;
    c.m = streaming(r) ? 4 : 200, c.n = 3072, c.k = 3072, c.route = r;
    Tq2Outcome a = run_tq2_case(ctx, cache, c), b = run_tq2_case(ctx, cache, c);
    EXPECT_TRUE(a.cmp.ok()) << a.cmp.summary();
    EXPECT_EQ(a.out_bytes, b.out_bytes) << tq2_route_name(r) << " is not bitwise deterministic";
  }
}

TEST(Tq2Gpu, RefusalsLaunchNothing) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  Context cpu = Context::cpu();
  TernaryWeightCache cpu_cache(cpu);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(64, 256, 5);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 64, 256);
  WeightHandle host_w = cpu_cache.get_or_upload(1, b.data(), bytes_of(b), 64, 256);
  HostTensor in = host_tensor(DType::F32, {4, 256}), out = host_tensor(DType::F32, {4, 64});
  for (int i = 0; i < 4 * 256; ++i) static_cast<float*>(in.view.data)[i] = 0.5f;
  std::vector<unsigned char> poison_bytes(out.bytes.size(), 0xFF);
  out.bytes = poison_bytes;
  out.view.data = out.bytes.data();
  DeviceTensor din = to_device(in), dout = to_device(out);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  EXPECT_THROW(gemm_tq2(ctx, host_w, din.view, dout.view), Error);  // weight on the CPU
  EXPECT_THROW(gemm_tq2(ctx, w, in.view, dout.view), Error);        // host input on a CUDA context
  View wrong_k = din.view;
  wrong_k.shape = {2, 512};
  wrong_k.strides = {512, 1};
  EXPECT_THROW(gemm_tq2(ctx, w, wrong_k, dout.view), Error);
  rec.before_launch = [](const std::string& k) { fail(ErrorCode::Cuda, "injected: ", k); };
  for (Tq2Route r : {Tq2Route::StreamV2, Tq2Route::StreamV4, Tq2Route::StreamV5,
                     Tq2Route::Tiled, Tq2Route::DequantLt}) {
    if (!runs_here(ctx, r)) continue;
    Tq2Options o;
    o.force_route = r;
    EXPECT_THROW(gemm_tq2(ctx, w, din.view, dout.view, o), Error) << tq2_route_name(r);
  }
  std::vector<float> hin(4 * 256, 0.5f), hout(4 * 64, NAN);
  EXPECT_THROW(gemm_tq2(ctx, w, hin.data(), hout.data(), 4, 64, 256), Error);
  ctx.synchronize();
  EXPECT_TRUE(rec.launched.empty());
  std::vector<unsigned char> back(out.bytes.size());
  copy_to_host(back.data(), dout.buffer.data(), back.size());
  EXPECT_EQ(back, poison_bytes);
  for (float x : hout) EXPECT_TRUE(std::isnan(x));
}

// DequantLt paths the sweeps above do not reach: several weight chunks (forced 128 / 384 rows,
// a short last chunk, and the automatic single chunk), a caller workspace of exactly
// tq2_workspace_bytes (then the context allocates nothing), inputs over 2^+-20 (past f16's range
// before the power-of-two scaling) with an all-zero scale group; the kernel count of the plan.
TEST(Tq2Gpu, DequantLtChunksWorkspaceWideRange) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 900;
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (DType out : {DType::F32, in})
      for (Precision p : {Precision::Exact, Precision::Fast}) {
        if (in != DType::F32 && p == Precision::Fast) continue;
        for (std::int64_t chunk : {128, 384, 0})
          for (int wide : {0, 20}) {
            if (in == DType::F16 && wide > 0) continue;  // f16 cannot hold 2^20 inputs at all
            Tq2Case c;
            c.m = 70, c.n = 1000, c.k = 384, c.route = Tq2Route::DequantLt, c.precision = p;
            c.in_dtype = in, c.out_dtype = out, c.pad = 1, c.seed_input = false, c.seed = ++seed;
            c.chunk_rows = chunk, c.caller_workspace = chunk != 384, c.wide_exp = wide, c.zero_group = wide > 0;
            const std::uint64_t allocs = BufferPool::alloc_count();
            Tq2Outcome o = run_tq2_case(ctx, cache, c);
            EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
            EXPECT_TRUE(o.padding_untouched) << c.describe();
            const cuda_ternary::Tq2LtPlan plan =
                cuda_ternary::tq2_lt_plan(c.m, c.n, c.k, in, out, p == Precision::Exact, chunk);
            EXPECT_EQ(o.receipt.kernels_launched, plan.kernels) << c.describe();
            EXPECT_EQ(plan.chunks, chunk == 128 ? 8 : chunk == 384 ? 3 : 1);
            if (c.caller_workspace) EXPECT_EQ(BufferPool::alloc_count(), allocs) << c.describe();
          }
      }
}

// Zero input: the scale exponent falls back to 0 and the output is exactly zero (no NaN from an
// unread, poisoned output); and the launch order of one Exact call.
TEST(Tq2Gpu, DequantLtZeroInputAndLaunchOrder) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(64, 256, 5);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 64, 256);
  for (Precision p : {Precision::Exact, Precision::Fast}) {
    Tq2Options o;
    o.force_route = Tq2Route::DequantLt, o.precision = p;
    std::vector<float> zeros(4 * 256, 0.0f), out(4 * 64, NAN);
    gemm_tq2(ctx, w, zeros.data(), out.data(), 4, 64, 256, o);
    for (float x : out) EXPECT_EQ(x, 0.0f);
  }
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  Tq2Options o;
  o.force_route = Tq2Route::DequantLt;
  std::vector<float> in(4 * 256, 0.25f), out(4 * 64, NAN);
  Receipt r = gemm_tq2(ctx, w, in.data(), out.data(), 4, 64, 256, o);
  ctx.set_launch_recorder(nullptr);
  const std::vector<std::string> want = {"tq2_rowscale_f32_f16x2", "tq2_dequant_f16", "cublaslt_f16_nt_f32",
                                         "cublaslt_f16_nt_f32", "tq2_lt_scale_rows_f32"};
  EXPECT_EQ(rec.launched, want);
  EXPECT_EQ(r.kernels_launched, 5);
  EXPECT_EQ(r.kernel, "tq2_rowscale_f32_f16x2+tq2_dequant_f16+cublaslt_f16_nt_f32+tq2_lt_scale_rows_f32");
}

// The caller-workspace rule of the routes that take one (Tq2Options::workspace), for x [4, 256]
// and W [64, 256]: a workspace one byte short or off 256-byte alignment is refused, naming the
// route and what it needs the bytes for, before anything is launched or written; exactly the
// bytes tq2_workspace_bytes asks for runs `kernels` kernels, writes the output and makes the
// context allocate nothing.
namespace {
void expect_workspace_rule(Tq2Route route, const std::string& needs, int kernels) {
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(64, 256, 6);
  WeightHandle w = cache.get_or_upload(2, b.data(), bytes_of(b), 64, 256);
  HostTensor in = host_tensor(DType::F32, {4, 256}), out = host_tensor(DType::F32, {4, 64});
  for (int i = 0; i < 4 * 256; ++i) static_cast<float*>(in.view.data)[i] = 0.25f + 0.001f * static_cast<float>(i % 97);
  std::vector<unsigned char> poison_bytes(out.bytes.size(), 0xFF);
  out.bytes = poison_bytes;
  out.view.data = out.bytes.data();
  DeviceTensor din = to_device(in), dout = to_device(out);
  Tq2Options o;
  o.force_route = route;
  const std::size_t need = tq2_workspace_bytes(4, 64, 256, DType::F32, DType::F32, o);
  ASSERT_GT(need, 0u);
  DeviceBuffer ws(need + 256);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  const std::string name = tq2_route_name(route);
  o.workspace = ws.data(), o.workspace_bytes = need - 1;
  expect_error([&] { gemm_tq2(ctx, w, din.view, dout.view, o); }, ErrorCode::InvalidArgument,
               "gemm_tq2: workspace of " + std::to_string(need - 1) + " bytes is smaller than the " +
                   std::to_string(need) + " bytes route " + name + " needs for " + needs);
  o.workspace = static_cast<unsigned char*>(ws.data()) + 16, o.workspace_bytes = need;
  expect_error([&] { gemm_tq2(ctx, w, din.view, dout.view, o); }, ErrorCode::InvalidArgument,
               "is not 256-byte aligned (route " + name + ")");
  ctx.synchronize();
  EXPECT_TRUE(rec.launched.empty());
  std::vector<unsigned char> back(out.bytes.size());
  copy_to_host(back.data(), dout.buffer.data(), back.size());
  EXPECT_EQ(back, poison_bytes);
  const std::uint64_t allocs = BufferPool::alloc_count();
  o.workspace = ws.data();
  EXPECT_EQ(gemm_tq2(ctx, w, din.view, dout.view, o).kernels_launched, kernels);
  EXPECT_EQ(BufferPool::alloc_count(), allocs);
  ctx.synchronize();
  copy_to_host(back.data(), dout.buffer.data(), back.size());
  EXPECT_NE(back, poison_bytes);
  ctx.set_launch_recorder(nullptr);
}
}  // namespace

TEST(Tq2Gpu, DequantLtRefusesSmallOrMisalignedWorkspace) {
  LLMM_REQUIRE_CUDA();
  expect_workspace_rule(Tq2Route::DequantLt, "m 4, n 64, k 256 (f32 -> f32)", 5);
}

// Staged tq2_stream_v2 (m >= 3) keeps the same rule.
TEST(Tq2Gpu, StreamV2StagedRefusesSmallOrMisalignedWorkspace) {
  LLMM_REQUIRE_CUDA();
  expect_workspace_rule(Tq2Route::StreamV2, "m 4, k 256", 2);
}

TEST(Tq2Gpu, WarmedPoolAllocatesNothing) {
  LLMM_REQUIRE_CUDA();
  // The seed's proof: warm the pool at the largest shape, then many smaller shapes allocate 0.
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> big = seed_tq2_blocks(3072, 3072, 0x9E3779B9u), small = seed_tq2_blocks(64, 256, 7);
  WeightHandle wb = cache.get_or_upload(7701400, big.data(), bytes_of(big), 3072, 3072);
  WeightHandle ws = cache.get_or_upload(7701500, small.data(), bytes_of(small), 64, 256);
  std::vector<float> in = seed_tq2_input(1536, 3072), out(1536u * 3072u, 0.0f);
  std::uint64_t before_warm = BufferPool::alloc_count();
  gemm_tq2(ctx, wb, in.data(), out.data(), 1536, 3072, 3072);
  EXPECT_GT(BufferPool::alloc_count(), before_warm);  // the first call did fill the pool
  bool nonzero = false;
  for (float x : out) nonzero = nonzero || std::fabs(x) > 1e-6f;
  EXPECT_TRUE(nonzero);
  std::uint64_t before = BufferPool::alloc_count();
  for (std::int64_t m : {1, 8, 9, 32, 100, 256, 512, 7, 64, 128, 512, 1}) {
    std::vector<float> si = seed_tq2_input(m, 256), so(static_cast<std::size_t>(m * 64), 0.0f);
    gemm_tq2(ctx, ws, si.data(), so.data(), m, 64, 256);
    bool nz = false;
    for (float x : so) nz = nz || std::fabs(x) > 1e-6f;
    EXPECT_TRUE(nz) << m;
  }
  EXPECT_EQ(BufferPool::alloc_count() - before, 0u);
}

TEST(Tq2Gpu, CacheUploadsOncePerKeyAcrossThreads) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(256, 512, 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 10; ++rep) {
        cache.get_or_upload(42, b.data(), bytes_of(b), 256, 512);
        cache.get_or_upload(100 + static_cast<std::uint64_t>(t), b.data(), bytes_of(b), 256, 512);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.upload_count(), 9u);
  EXPECT_EQ(cache.bytes_held(), 9u * (256u * 512 / 4 + 256u * 4 * 2));
}

// NaN/Inf in the activation propagate as IEEE arithmetic makes them on every route: before,
// the int8 digits (then of the retired v3) turned a NaN into a finite output. The split and scaled paths mark
// such groups and recompute those outputs in IEEE f32.
TEST(Tq2Gpu, NonFiniteInputsPropagateOnEveryRoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 500;
  struct R { Tq2Route route; std::int64_t m; };
  for (R r : {R{Tq2Route::StreamV4, 1}, R{Tq2Route::StreamV4, 2},
              R{Tq2Route::StreamV4, 7}, R{Tq2Route::StreamV5, 1}, R{Tq2Route::StreamV5, 2}, R{Tq2Route::StreamV5, 7},
              R{Tq2Route::StreamV2, 1}, R{Tq2Route::StreamV2, 9},
              R{Tq2Route::Tiled, 40}, R{Tq2Route::DequantLt, 40},
              R{Tq2Route::Auto, 16}})
    for (DType in : {DType::F32, DType::F16, DType::BF16})
      for (Precision p : {Precision::Exact, Precision::Fast}) {
        if (!runs_here(ctx, r.route)) continue;
        Tq2Case c;
        c.m = r.m, c.n = 72, c.k = 384, c.route = r.route, c.precision = p, c.in_dtype = in, c.out_dtype = DType::F32;
        c.seed_input = false, c.nonfinite_every = r.m == 1 ? 1 : 3, c.seed = ++seed;
        Tq2Outcome o = run_tq2_case(ctx, cache, c);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
      }
}

namespace {
// The streaming engine's case c (StreamV4 or StreamV5) with its image staged and, where the route
// takes it (`in_block_ok`), converted in each block: each against float64 with poisoned padding,
// the staged one in two launches, the in-block one in one (kernel name ending in
// `tail` + "_inblock"), and both bitwise the same.
void expect_both_images(Context& ctx, TernaryWeightCache& cache, Tq2Case c, bool in_block_ok, const std::string& tail) {
  std::vector<unsigned char> staged_out;
  for (Tq2StreamImage image : {Tq2StreamImage::Staged, Tq2StreamImage::InBlock}) {
    if (image == Tq2StreamImage::InBlock && !in_block_ok) continue;
    c.stream_image = image;
    const Tq2Outcome o = run_tq2_case(ctx, cache, c);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
    EXPECT_TRUE(o.padding_untouched) << c.describe();
    const bool in_block = image == Tq2StreamImage::InBlock;
    EXPECT_EQ(o.receipt.kernels_launched, in_block ? 1 : 2) << c.describe();  // the staging kernel first when staged
    const std::string want = tail + (in_block ? "_inblock" : "");
    const std::string& kn = o.receipt.kernel;
    EXPECT_EQ(kn.substr(kn.size() - std::min(kn.size(), want.size())), want) << kn;
    EXPECT_EQ(kn.find("_inblock") != std::string::npos, in_block) << kn;
    if (!in_block) staged_out = o.out_bytes;
    else EXPECT_EQ(o.out_bytes, staged_out) << c.describe() << ": the in-block image changed the result";
  }
}
}  // namespace

// tq2_stream_v4's own edges: bands past the persistent grid (several bands per block, so the
// ring wraps across bands and the reduction buffers alternate), K not a multiple of a stage's
// 8 groups (a short last stage), scale rows that start anywhere in a 16-byte unit (k / 128 not a
// multiple of 8), n not a multiple of 16, wide input ranges and an all-zero group, 16-bit
// inputs and outputs. Every output checked against float64 with poisoned padding.
TEST(Tq2Gpu, StreamV4BandsStagesAndScaleAlignment) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!runs_here(ctx, Tq2Route::StreamV4)) GTEST_SKIP() << "tq2_stream_v4 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct NK { std::int64_t n, k; };
  std::uint64_t seed = 900;
  for (NK nk : {NK{8453, 384}, NK{9001, 1152}, NK{40, 2560}, NK{2600, 6912}, NK{17, 128}, NK{4229, 1024}})
    for (std::int64_t m : {1, 2, 3, 6, 8})
      for (DType in : {DType::F32, DType::F16, DType::BF16}) {
        if (m > 2 && (nk.k > 2560 || in == DType::F16)) continue;  // fits, and keeps the test short
        Tq2Case c;
        c.m = m, c.n = nk.n, c.k = nk.k, c.route = Tq2Route::StreamV4, c.in_dtype = in;
        c.out_dtype = m % 2 == 1 ? DType::F32 : in;
        c.seed_input = false, c.seed = ++seed, c.pad = 1 + m, c.wide_exp = in == DType::F32 ? 20 : 6;
        c.zero_group = nk.k >= 256;
        expect_both_images(ctx, cache, c, m <= 4, "");  // m > 4 in the block: refused (below)
      }
  Tq2Case r;
  r.m = 5, r.n = 64, r.k = 256, r.route = Tq2Route::StreamV4, r.stream_image = Tq2StreamImage::InBlock;
  expect_error([&] { run_tq2_case(ctx, cache, r); }, ErrorCode::Unsupported, "stream_image in_block is built for m <= 4");
}

// tq2_stream_v5's own edges: one part and several (partials summed by the last part to arrive,
// through counters the staging kernel zeroes on every call), a part whose last stage is short
// (k / 128 not a multiple of 4), a last super-band with warps past n (n not a multiple of 128 nor
// of 16), more items than blocks, wide input ranges and an all-zero group, 16-bit inputs and
// outputs; every output against float64 with poisoned padding, and the parts the plan names.
// With K whole, the image both staged and converted in each block (one launch): bitwise the same.
TEST(Tq2Gpu, StreamV5PartsBandsAndStages) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!runs_here(ctx, Tq2Route::StreamV5)) GTEST_SKIP() << "tq2_stream_v5 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct NK { std::int64_t n, k; };
  std::uint64_t seed = 1900;
  for (NK nk : {NK{8453, 384}, NK{9001, 1152}, NK{40, 2560}, NK{2600, 6912}, NK{17, 128}, NK{4229, 1024}, NK{27648, 3072}})
    for (std::int64_t m : {1, 2, 3, 6, 8})
      for (DType in : {DType::F32, DType::F16, DType::BF16}) {
        if (m > 2 && (nk.k > 2560 || in == DType::F16)) continue;  // fits, and keeps the test short
        const int parts = cuda_ternary::tq2_stream_v5_parts(nk.n, nk.k).parts;
        Tq2Case c;
        c.m = m, c.n = nk.n, c.k = nk.k, c.route = Tq2Route::StreamV5, c.in_dtype = in;
        c.out_dtype = m % 2 == 1 ? DType::F32 : in;
        c.seed_input = false, c.seed = ++seed, c.pad = 1 + m, c.wide_exp = in == DType::F32 ? 20 : 6;
        c.zero_group = nk.k >= 256;
        // In the block: K whole and m <= 4 only (the others are refused, below).
        expect_both_images(ctx, cache, c, parts == 1 && m <= 4, "_p" + std::to_string(parts));
      }
  // A forced in-block image where K is in parts is refused before anything runs.
  Tq2Case r;
  r.m = 1, r.n = 3072, r.k = 3072, r.route = Tq2Route::StreamV5, r.stream_image = Tq2StreamImage::InBlock;
  expect_error([&] { run_tq2_case(ctx, cache, r); }, ErrorCode::Unsupported, "stream_image in_block needs K whole");
}

// Every v5 config holds the blocks per SM it plans for (the occupancy API on the kernel it picks,
// with its shared memory): m = 1..16, the three input types with f32 and their own outputs,
// whole, in-block and sliced images, short and long K. Registers past 112 at two 288-thread
// blocks would halve the resident blocks with nothing else noticing (it happened to the NT 4
// kernel at 116 in a session 16 draft).
TEST(Tq2Gpu, StreamV5ConfigBlocksFit) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!runs_here(ctx, Tq2Route::StreamV5)) GTEST_SKIP() << "tq2_stream_v5 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  alignas(16) static unsigned char dummy[16];  // never read: only the configs' kernels are queried
  struct NK { std::int64_t n, k; };
  int checked = 0, two = 0;
  for (NK nk : {NK{27648, 3072}, NK{3072, 3072}, NK{2560, 6912}, NK{8192, 28672}, NK{1536, 2048}, NK{40, 768}})
    for (std::int64_t m = 1; m <= 16; ++m)
      for (DType in : {DType::F32, DType::F16, DType::BF16})
        for (DType out : {DType::F32, in})
          for (Tq2StreamImage image : {Tq2StreamImage::Auto, Tq2StreamImage::InBlock}) {
            cuda_ternary::Tq2Args a;
            a.codes = dummy, a.scales = reinterpret_cast<const std::uint16_t*>(dummy);
            a.scales_t = reinterpret_cast<const std::uint16_t*>(dummy), a.scales_t_ld = (nk.n + 7) / 8 * 8;
            a.m = m, a.n = nk.n, a.k = nk.k, a.in = dummy, a.in_dtype = in, a.in_ld = nk.k, a.out = dummy, a.out_dtype = out,
            a.out_ld = nk.n, a.stream_image = image;
            const auto c = cuda_ternary::tq2_stream_v5_config(a, ctx.arch().sm_count);
            if (!c) continue;
            const int fit = cuda_ternary::tq2_stream_v5_resident_blocks(a);
            EXPECT_GE(fit, c->blocks_per_sm) << cuda_ternary::tq2_stream_v5_kernel_name(a) << " m " << m << " n " << nk.n << " k "
                                             << nk.k << ": " << fit << " blocks fit an SM";
            ++checked, two += c->blocks_per_sm == 2;
          }
  EXPECT_GT(checked, 300);
  EXPECT_GT(two, 50);  // the two-block configs are the ones at risk
}

// One forced-v5 case whose image must be sliced: float64 reference, poisoned padding, the
// staging kernel then the ring; the receipt names the parts and, at m = 9..16, the wide kernel's
// tiles and one block per SM. parts 0: not checked against a figure.
struct V5SlicedCase { std::int64_t m, n, k; DType in, out; int nonfinite, parts; };
static void check_v5_sliced_case(Context& ctx, TernaryWeightCache& cache, const V5SlicedCase& sh, std::uint64_t seed) {
  const auto ip = cuda_ternary::tq2_stream_v5_image_plan(sh.m, sh.n, sh.k);
  ASSERT_TRUE(ip.sliced) << "m " << sh.m << " n " << sh.n << " k " << sh.k << ": the shape no longer tests the sliced image";
  const int parts = cuda_ternary::tq2_stream_v5_parts_for(sh.m, sh.n, sh.k).parts;
  if (sh.parts > 0) EXPECT_EQ(parts, sh.parts) << "m " << sh.m << " n " << sh.n << " k " << sh.k;
  Tq2Case c;
  c.m = sh.m, c.n = sh.n, c.k = sh.k, c.route = Tq2Route::StreamV5, c.in_dtype = sh.in, c.out_dtype = sh.out;
  c.seed_input = false, c.seed = seed, c.pad = 3, c.wide_exp = sh.in == DType::F32 ? 12 : 4, c.zero_group = true;
  c.nonfinite_every = sh.nonfinite;
  const Tq2Outcome o = run_tq2_case(ctx, cache, c);
  EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
  EXPECT_TRUE(o.padding_untouched) << c.describe();
  EXPECT_TRUE(o.any_nonzero) << c.describe();
  EXPECT_NE(o.receipt.kernel.find("_p" + std::to_string(parts) + "_sliced"), std::string::npos) << o.receipt.kernel;
  if (sh.m > cuda_ternary::kTq2V5NarrowMaxM) {
    EXPECT_NE(o.receipt.kernel.find(sh.m <= 12 ? "_n48_" : "_n64_"), std::string::npos) << o.receipt.kernel;
    EXPECT_NE(o.receipt.kernel.find("_b1_"), std::string::npos) << o.receipt.kernel;
  }
  EXPECT_EQ(o.receipt.kernels_launched, 2) << c.describe();  // the staging kernel, then the ring
}

static void check_v5_sliced_cases(std::initializer_list<V5SlicedCase> cases, std::uint64_t seed) {
  Context ctx = Context::cuda(0);
  if (!runs_here(ctx, Tq2Route::StreamV5)) GTEST_SKIP() << "tq2_stream_v5 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  for (const V5SlicedCase& sh : cases) check_v5_sliced_case(ctx, cache, sh, ++seed);
}

// Long K at m = 1..4 where v5's whole activation image does not fit: one part's slice at a time,
// items part-major, a block reloading its slice when its item's part changes (grid < items in
// the first two shapes, so some blocks do). Against float64 with poisoned padding, non-finite
// inputs on one shape, and the receipt names the sliced kernel.
TEST(Tq2Gpu, StreamV5SlicedImageLongK) {
  LLMM_REQUIRE_CUDA();
  check_v5_sliced_cases({{4, 7680, 20480, DType::F32, DType::F32, 0, 0},
                         {1, 3000, 131072, DType::BF16, DType::F32, 0, 0},
                         {3, 1000, 40960, DType::F16, DType::F16, 0, 0},
                         {2, 2000, 30720, DType::F32, DType::F32, 2, 0},
                         {4, 300, 24576, DType::BF16, DType::BF16, 0, 0}},
                        4100);
}

// Long K at m = 6..8 where neither the whole image nor narrow's slice fits (Llama-70B up and down
// at m = 6..8 went to v2 before): the fewest parts whose slice fits at m = 8 (K in one part
// becomes 2; Llama-70B down's 4 become 6). Full-size rows (212 super-bands), so this is not in
// the sanitizer subsets.
TEST(Tq2Gpu, StreamV5SlicedFallbackParts) {
  LLMM_REQUIRE_CUDA();
  check_v5_sliced_cases({{7, 27136, 6912, DType::F32, DType::F32, 0, 2},
                         {8, 6784, 28672, DType::BF16, DType::F32, 3, 6},
                         {6, 27136, 8192, DType::F16, DType::F16, 0, 2}},
                        4200);
}

// m = 9..16 on v5's wide kernels (6 or 8 n8 tiles, the image always a part's slice, one block per
// SM): K in one part (a slice of 2 groups), in 2 parts of 12 groups (the DiT shape), in many
// parts (2001 x 8192: 256 items on 132 blocks, so blocks reload their slice); non-tile n, every
// input dtype, non-finite inputs, poisoned padding. Small enough for racecheck but the DiT shape
// (StreamV5WideDitShape).
TEST(Tq2Gpu, StreamV5Wide) {
  LLMM_REQUIRE_CUDA();
  ASSERT_EQ(cuda_ternary::tq2_stream_v5_parts_for(16, 2001, 8192).parts * 16, 256);
  check_v5_sliced_cases({{9, 1000, 3072, DType::F32, DType::F32, 0, 6},
                         {13, 300, 256, DType::F16, DType::F16, 0, 1},
                         {12, 600, 20480, DType::F32, DType::F32, 2, 40},
                         {16, 2001, 8192, DType::BF16, DType::BF16, 0, 16},
                         {10, 77, 640, DType::F16, DType::F32, 3, 2}},
                        5100);
}

TEST(Tq2Gpu, StreamV5WideDitShape) {
  LLMM_REQUIRE_CUDA();
  check_v5_sliced_cases({{16, 27648, 3072, DType::BF16, DType::F32, 0, 2}, {11, 27648, 3072, DType::F32, DType::F32, 2, 2}}, 5200);
}

TEST(Tq2Gpu, StreamV4RefusedOffHopperAndPastItsLimits) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  const ArchInfo& arch = ctx.arch();
  if (arch.cc_major == 9 && arch.cc_minor == 0) {
    EXPECT_EQ(plan_tq2(2, 64, 256, DType::F32, arch, Tq2Route::StreamV4), Tq2Route::StreamV4);
    EXPECT_EQ(plan_tq2(8, 64, 256, DType::F32, arch, Tq2Route::StreamV4), Tq2Route::StreamV4);
    expect_error([&] { plan_tq2(9, 64, 256, DType::F32, arch, Tq2Route::StreamV4); }, ErrorCode::Unsupported,
                 "tq2_stream_v4 cannot run (m: 9, n: 64, k: 256, f32): the sm_90 streaming engine's int8 decoder takes m <= 8");
    expect_error([&] { plan_tq2(2, 64, 128 * 8192, DType::F32, arch, Tq2Route::StreamV4); }, ErrorCode::Unsupported,
                 "does not fit in shared memory");
    for (std::int64_t m : {8, 9, 16}) EXPECT_EQ(plan_tq2(m, 64, 256, DType::F32, arch, Tq2Route::StreamV5), Tq2Route::StreamV5) << m;
    expect_error([&] { plan_tq2(17, 64, 256, DType::F32, arch, Tq2Route::StreamV5); }, ErrorCode::Unsupported,
                 "tq2_stream_v5 cannot run (m: 17, n: 64, k: 256, f32): tq2_stream_v5's int8 decoder takes m <= 16");
    // v5 takes long K one part's slice at a time; Llama-70B down's 4 narrow parts of 56 groups fit
    // up to m = 6, at m = 7..8 it takes more parts whose slice fits (tq2_stream_v5_parts_for), and
    // the wide parts start at m = 9.
    for (std::int64_t m : {2, 5, 16})
      EXPECT_EQ(plan_tq2(m, 64, 128 * 8192, DType::F32, arch, Tq2Route::StreamV5), Tq2Route::StreamV5) << m;
    for (std::int64_t m : {6, 7, 8})
      EXPECT_EQ(plan_tq2(m, 8192, 28672, DType::F32, arch, Tq2Route::StreamV5), Tq2Route::StreamV5) << m;
  } else {
    expect_error([&] { plan_tq2(1, 64, 256, DType::F32, arch, Tq2Route::StreamV4); }, ErrorCode::Unsupported,
                 "the sm_90 streaming engine is built for sm_90a only");
    expect_error([&] { plan_tq2(1, 64, 256, DType::F32, arch, Tq2Route::StreamV5); }, ErrorCode::Unsupported,
                 "the sm_90 streaming engine is built for sm_90a only");
  }
}
