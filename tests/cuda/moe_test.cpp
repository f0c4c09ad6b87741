// matmul_id on the GPU against the float64 reference: the seed shape in every dtype/layout/route,
// random sweeps (sizes not tile multiples, padded expert strides and input rows, [m, top_k, k]
// inputs, top_k 1/2/8, 1..256 experts, uniform/skewed/Zipf routing, repeats on both routes,
// u32/i32/i64 ids, out-of-range ids), empty and zero sizes, determinism, CUDA-graph capture and
// replay with changing ids, and the injected second-kernel failure.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/engine/tiled_sm90_shape.hpp"
#include "llmm/error.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/moe_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
// The grouped route is one kernel when the engine sorts the rows itself (Auto up to
// kTiledMoeFusedMaxRows routed rows), else the map's kernels and the GEMM.
void expect_good(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch) {
  MoeOutcome o = run_moe_case(ctx, c, scratch);
  EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
  EXPECT_EQ(o.receipt.route, matmul_id_route_name(c.p.route));
  const std::uint64_t routed = std::uint64_t{c.p.m} * c.p.top_k;
  const bool fused = o.receipt.kernel.find("_fused") != std::string::npos;
  if (fused) EXPECT_LE(routed, static_cast<std::uint64_t>(engine::kTiledMoeFusedMaxRows)) << c.describe();
  EXPECT_EQ(o.receipt.kernels_launched, c.p.route == MatmulIdRoute::Direct || fused ? 1 : 1 + map_kernels(routed));
}
bool hopper_engine(const Context& ctx) { return ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0; }
MatmulIdParams params(std::uint32_t m, std::uint32_t n, std::uint32_t k, std::uint32_t top_k, std::uint32_t e,
                      MatmulIdRoute route) {
  MatmulIdParams p;
  p.m = m, p.n = n, p.k = k, p.top_k = top_k, p.n_experts = e, p.route = route;
  return p;
}
}  // namespace

TEST(MoeGpu, SeedShapeEveryDtypeLayoutRoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 4, 9);
  for (DType w : {DType::F32, DType::F16, DType::BF16})
    for (DType in : {DType::F32, w})
      for (DType out : {DType::F32, in})
        for (auto layout : {MatmulIdInputLayout::SharedPerToken, MatmulIdInputLayout::Slotted})
          for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
            for (Precision prec : {Precision::Exact, Precision::Fast}) {
              MoeCase c;
              c.p = params(9, 7, 35, 2, 4, route);
              c.p.input_layout = layout, c.p.input_dtype = in, c.p.output_dtype = out;
              c.w_dtype = w, c.precision = prec, c.out_of_range_every = 5;
              expect_good(ctx, c, &scratch);
            }
}

TEST(MoeGpu, RandomSweeps) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 256, 2048);
  struct S { std::uint32_t m, n, k, top_k, e; };
  std::uint64_t seed = 1;
  for (S s : {S{1, 100, 64, 8, 64}, S{2, 257, 300, 2, 4}, S{7, 33, 35, 1, 1}, S{33, 64, 128, 8, 256},
              S{300, 100, 264, 2, 4}, S{2048, 65, 72, 8, 64}, S{130, 257, 96, 8, 256}})
    for (DType w : {DType::BF16, DType::F32})
      for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
        for (Routing routing : {Routing::Uniform, Routing::Skewed, Routing::Zipf}) {
          MoeCase c;
          c.p = params(s.m, s.n, s.k, s.top_k, s.e, route);
          c.p.input_dtype = w == DType::F32 ? DType::F32 : (seed % 2 ? DType::F32 : w);
          c.w_dtype = w, c.expert_pad = (seed % 3) * 8 + (w == DType::F32 ? 1 : 0);
          c.routing = routing, c.out_of_range_every = seed % 4 == 0 ? 11 : 0;
          c.p.input_layout = seed % 5 == 0 ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
          c.seed = ++seed;
          expect_good(ctx, c, &scratch);
        }
  // Repeated ids (declared or not), id dtypes, padded strides and 3-D inputs on both routes.
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
    for (DType w : {DType::F16, DType::F32})
      for (DType ids : {DType::U32, DType::I32, DType::I64}) {
        MoeCase c;
        c.p = params(40, 70, 128, 8, 16, route);
        c.p.id_multiplicity = seed % 2 ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
        c.p.input_layout = seed % 3 == 0 ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
        c.input_rank3 = seed % 4 == 0;
        c.w_dtype = w, c.routing = Routing::Repeats, c.ids_dtype = ids, c.out_of_range_every = 7;
        c.expert_pad = 8, c.input_pad = w == DType::F32 ? 4 : 8, c.shape_form = seed % 2 == 0, c.seed = ++seed;
        expect_good(ctx, c, &scratch);
      }
}

// The case: 4 tokens, ids [[1, 1]] x 4 on the grouped route while declared distinct
// (before the map became a counting sort: scaled error 0.39, rows left unwritten).
TEST(MoeGpu, GroupedRepeatedIdsDeclaredDistinct) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 4, 4, 2);
  MoeCase c;
  c.p = params(4, 64, 96, 2, 4, MatmulIdRoute::GroupedPrefill);
  c.w_dtype = DType::F32;
  MoeBuffers b = make_moe_buffers(c);
  for (int r = 0; r < 8; ++r) static_cast<std::uint32_t*>(b.ids.view.data)[r] = 1;
  DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
  matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, b.p);
  ctx.synchronize();
  to_host(dout, b.out);
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::F32, b.in.view.data, b.ids.view.data, b.p);
  cpu::MatmulF64 dense{1, ref.rows, ref.n, 96, ref.value, ref.abs_sum};
  EXPECT_TRUE(matches_reference(View::contiguous(b.out.view.data, DType::F32, {1, 8, 64}), dense,
                                Tolerance{1e-30, 1.0, std::ldexp(1.0, -15) + 96 * std::ldexp(1.0, -24), 0}));
  std::vector<std::uint32_t> counts(4);
  copy_to_host(counts.data(), scratch.counts(), 16);
  EXPECT_EQ(counts, (std::vector<std::uint32_t>{0, 8, 0, 0}));
}

// m, top_k or n of 0: nothing launched or written; k == 0 and no experts: zeros.
TEST(MoeGpu, EmptyAndZeroSizes) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 4, 4);
  DeviceBuffer w(4 * 3 * 5 * 4), x(4 * 5 * 4), ids(8 * 4), out(4 * 2 * 3 * 4);
  std::vector<std::uint32_t> hid = {0, 1, 2, 3, 1, 0, 3, 2};
  copy_to_device(ids.data(), hid.data(), 32);
  const std::vector<float> nan(24, NAN);
  auto dv = [](const DeviceBuffer& b, DType t, std::initializer_list<std::int64_t> shape) {
    return View::contiguous(b.data(), t, shape, DeviceKind::CUDA);
  };
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    copy_to_device(out.data(), nan.data(), 96);
    auto call = [&](View wv, View xv, View idv, View ov) {
      return matmul_id(ctx, wv, xv, idv, ov, &scratch, MatmulIdInputLayout::SharedPerToken,
                       MatmulIdMultiplicity::DistinctPerToken, route);
    };
    EXPECT_EQ(call(dv(w, DType::F32, {4, 3, 5}), dv(x, DType::F32, {0, 5}), dv(ids, DType::U32, {0, 2}),
                   dv(out, DType::F32, {0, 2, 3})).kernels_launched, 0);
    EXPECT_EQ(call(dv(w, DType::F32, {4, 0, 5}), dv(x, DType::F32, {4, 5}), dv(ids, DType::U32, {4, 2}),
                   dv(out, DType::F32, {4, 2, 0})).kernels_launched, 0);
    ctx.synchronize();
    std::vector<float> back(24);
    copy_to_host(back.data(), out.data(), 96);
    for (float v : back) ASSERT_TRUE(std::isnan(v));
    call(dv(w, DType::F32, {4, 3, 0}), dv(x, DType::F32, {4, 0}), dv(ids, DType::U32, {4, 2}), dv(out, DType::F32, {4, 2, 3}));
    ctx.synchronize();
    copy_to_host(back.data(), out.data(), 96);
    for (float v : back) ASSERT_EQ(v, 0.0f) << "k == 0";
    copy_to_device(out.data(), nan.data(), 96);
    call(dv(w, DType::F32, {0, 3, 5}), dv(x, DType::F32, {4, 5}), dv(ids, DType::U32, {4, 2}), dv(out, DType::F32, {4, 2, 3}));
    ctx.synchronize();
    copy_to_host(back.data(), out.data(), 96);
    for (float v : back) ASSERT_EQ(v, 0.0f) << "no experts";
  }
}

TEST(MoeGpu, DeterministicAcrossRuns) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 64, 512);
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    MoeCase c;
    c.p = params(512, 384, 512, 8, 64, route);
    c.w_dtype = DType::BF16, c.routing = Routing::Zipf;
    MoeOutcome a = run_moe_case(ctx, c, &scratch), b = run_moe_case(ctx, c, &scratch);
    EXPECT_TRUE(a.cmp.ok()) << a.cmp.summary();
    EXPECT_EQ(a.out_bytes, b.out_bytes) << matmul_id_route_name(route) << " is not bitwise deterministic";
  }
}

TEST(MoeGpu, GraphCaptureAndReplayWithChangingIds) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 16, 64);
  MoeCase c;
  c.p = params(64, 96, 128, 2, 16, MatmulIdRoute::GroupedPrefill);
  c.w_dtype = DType::BF16, c.ids_dtype = DType::I64, c.out_of_range_every = 9;
  MoeBuffers b = make_moe_buffers(c);
  HostTensor &w = b.w, &in = b.in, &out = b.out, &ids = b.ids;
  c.p = b.p;
  DeviceTensor dw = to_device(w), din = to_device(in), dids = to_device(ids), dout = to_device(out);
  auto set_ids = [&](std::uint64_t seed) {
    c.seed = seed;
    store_ids(c, make_ids(c), ids);
    copy_to_device(dids.buffer.data(), ids.bytes.data(), ids.bytes.size());
    return ids.bytes;
  };
  set_ids(1);
  matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, c.p);  // warm (outside capture)
  ctx.synchronize();
  cudaStream_t s = ctx.stream();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Receipt r = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, c.p);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(r.kernels_launched, 2);
  for (std::uint64_t seed : {11, 12, 13}) {
    std::vector<unsigned char> v = set_ids(seed);
    copy_to_device(dout.buffer.data(), out.bytes.data(), out.bytes.size());  // re-poison
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    HostTensor got = host_tensor(DType::F32, {64 * 2 * 96});
    copy_to_host(got.bytes.data(), dout.buffer.data(), got.bytes.size());
    cpu::MatmulIdF64 ref = cpu::matmul_id_f64(w.view.data, DType::BF16, in.view.data, v.data(), c.p);
    cpu::MatmulF64 dense{1, ref.rows, ref.n, 128, ref.value, ref.abs_sum};
    View g3 = View::contiguous(got.view.data, DType::F32, {1, ref.rows, ref.n});
    EXPECT_TRUE(matches_reference(g3, dense, Tolerance{1e-30, 1.0, std::ldexp(1.0, -15) + 128 * std::ldexp(1.0, -24), 0}))
        << "replay with ids seed " << seed;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(MoeGpu, InjectedSecondKernelFailureLaunchesNothing) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 4, 9);
  MatmulIdParams p = params(9, 7, 35, 2, 4, MatmulIdRoute::GroupedPrefill);
  p.expert_stride_bytes = 7 * 35 * 4;
  HostTensor w = host_tensor(DType::F32, {4, 7, 35}), in = host_tensor(DType::F32, {9, 35}),
             out = host_tensor(DType::F32, {9, 2, 7}), ids = host_tensor(DType::U32, {9, 2});
  fill_random(w.view, 1);
  fill_random(in.view, 2);
  poison(out.view);
  for (int i = 0; i < 18; ++i) static_cast<std::uint32_t*>(ids.view.data)[i] = static_cast<std::uint32_t>(i % 4);
  DeviceTensor dw = to_device(w), din = to_device(in), dids = to_device(ids), dout = to_device(out);
  std::vector<std::uint32_t> sentinel(4 + 18, 0xABCDu);
  copy_to_device(scratch.counts(), sentinel.data(), sentinel.size() * 4);
  LaunchRecorder rec;
  int seen = 0;
  rec.before_launch = [&](const std::string& k) {
    if (++seen == 2) fail(ErrorCode::Cuda, "injected failure resolving ", k);
  };
  ctx.set_launch_recorder(&rec);
  EXPECT_THROW(matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, p), Error);
  ctx.synchronize();
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE(rec.launched.empty());
  std::vector<unsigned char> back(out.bytes.size());
  copy_to_host(back.data(), dout.buffer.data(), back.size());
  EXPECT_EQ(back, out.bytes);
  std::vector<std::uint32_t> sc(sentinel.size());
  copy_to_host(sc.data(), scratch.counts(), sc.size() * 4);
  EXPECT_EQ(sc, sentinel);
  rec.before_launch = nullptr;
  Receipt r = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, p);  // and it works once allowed
  EXPECT_EQ(r.kernels_launched, 2);
  EXPECT_EQ(rec.launched.size(), 2u);
}

// NaN/Inf in inputs and weights propagate as IEEE arithmetic makes them on both routes and every
// grouped math (the 2xTF32 / 3xTF32 splits recompute such outputs in IEEE f32).
TEST(MoeGpu, NonFiniteInputsPropagateOnEveryRouteAndMath) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 16, 64, 4);
  std::uint64_t seed = 300;
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
    for (DType w : {DType::F32, DType::F16, DType::BF16})
      for (DType in : {DType::F32, w})
        for (Precision prec : {Precision::Exact, Precision::Fast}) {
          MoeCase c;
          c.p = params(40, 70, 136, 4, 16, route);
          c.p.input_dtype = in, c.p.output_dtype = in;
          c.w_dtype = w, c.precision = prec, c.nonfinite_every = 6, c.out_of_range_every = 13, c.seed = ++seed;
          MoeOutcome o = run_moe_case(ctx, c, &scratch);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
          EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
        }
}

// The grouped route's map is a stable counting sort for any ids: counts per expert and each
// expert's rows in increasing routed-row order, the experts one after another; checked against
// the host, with repeats and out-of-range i64 ids.
namespace {
struct MapShape { std::uint32_t m, top_k, e; };
void expect_stable_map(Context& ctx, MapShape s, Routing routing, std::uint64_t seed) {
  MoeCase c;
  c.p.m = s.m, c.p.n = 8, c.p.k = 8, c.p.top_k = s.top_k, c.p.n_experts = s.e, c.p.route = MatmulIdRoute::GroupedPrefill;
  c.w_dtype = DType::F32, c.ids_dtype = DType::I64, c.routing = routing, c.out_of_range_every = 7, c.seed = seed;
  MatmulIdScratch scratch(ctx, s.e, s.m, s.top_k);
  MoeOutcome o = run_moe_case(ctx, c, &scratch);
  EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
  EXPECT_EQ(o.receipt.kernel.rfind(map_kernels(std::uint64_t{s.m} * s.top_k) == 2 ? "moe_map_count+moe_map_sort+" : "moe_map_sort+", 0), 0u)
      << o.receipt.kernel;
  const std::vector<std::int64_t> ids = make_ids(c);
  std::vector<std::uint32_t> counts(s.e), rows(ids.size());
  copy_to_host(counts.data(), scratch.counts(), counts.size() * 4);
  copy_to_host(rows.data(), scratch.rows(), rows.size() * 4);
  std::vector<std::uint32_t> want_counts(s.e, 0);
  std::vector<std::vector<std::uint32_t>> per_expert(s.e);
  for (std::size_t r = 0; r < ids.size(); ++r)
    if (ids[r] >= 0 && ids[r] < s.e) ++want_counts[ids[r]], per_expert[ids[r]].push_back(static_cast<std::uint32_t>(r));
  std::vector<std::uint32_t> want_rows;
  for (const auto& v : per_expert) want_rows.insert(want_rows.end(), v.begin(), v.end());
  EXPECT_EQ(counts, want_counts) << c.describe();
  rows.resize(want_rows.size());
  EXPECT_EQ(rows, want_rows) << c.describe();
}
}  // namespace

// One sorting block (up to 1024 routed rows, up to the 1024-expert limit: 128 KiB of shared
// memory) and several: 1200 rows in two chunks; 32776 at 1024 experts in 32 chunks of 1025 (the
// block_counts room); 72000 in 71 chunks; 320000 in 256 chunks of 1250 (the cap).
TEST(MoeGpu, MapIsAStableCountingSort) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 900;
  for (MapShape s : {MapShape{1, 1, 1}, MapShape{31, 1, 8}, MapShape{33, 2, 1000}, MapShape{128, 8, 64}, MapShape{600, 2, 3},
                     MapShape{4097, 8, 1024}, MapShape{9000, 8, 64}, MapShape{40000, 8, 16}})
    for (Routing routing : {Routing::Zipf, Routing::Repeats, Routing::Skewed}) expect_stable_map(ctx, s, routing, ++seed);
}

// The same on two multi-chunk shapes only (1200 rows in 2 chunks, 16800 in 17): small enough for
// the sanitizers' subsets.
TEST(MoeGpu, MapSpansSortingBlocks) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 950;
  for (MapShape s : {MapShape{600, 2, 3}, MapShape{2100, 8, 128}})
    for (Routing routing : {Routing::Uniform, Routing::Repeats}) expect_stable_map(ctx, s, routing, ++seed);
}

// plan_matmul_id names exactly the kernels the call launches (the launch recorder's list, the
// receipt's kernel string), on both routes, one and several sorting blocks, the engine gathering
// and staged, and mma.sync forced.
TEST(MoeGpu, PlanIsWhatTheCallLaunches) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  LaunchRecorder rec;
  struct S { std::uint32_t m, k; MatmulIdRoute route; MatmulIdGroupedKernel kernel; bool stage; };
  using K = MatmulIdGroupedKernel;
  const S cases[] = {{16, 256, MatmulIdRoute::Direct, K::Auto, false},
                     {16, 256, MatmulIdRoute::GroupedPrefill, K::Auto, true},  // m <= 16: fused
                     {16, 256, MatmulIdRoute::GroupedPrefill, K::TiledSm90, true},
                     {64, 256, MatmulIdRoute::GroupedPrefill, K::Auto, true},
                     {64, 256, MatmulIdRoute::GroupedPrefill, K::TiledSm90Fused, false},
                     {300, 256, MatmulIdRoute::GroupedPrefill, K::Auto, true},  // 2400: the map first
                     {300, 256, MatmulIdRoute::GroupedPrefill, K::Auto, false},
                     {300, 256, MatmulIdRoute::GroupedPrefill, K::MmaSync, true}};
  for (const S& s : cases) {
    MoeCase c;
    c.p = params(s.m, 96, s.k, 8, 32, s.route);
    c.p.input_dtype = DType::BF16, c.p.output_dtype = DType::BF16;
    c.w_dtype = DType::BF16, c.grouped_kernel = s.kernel, c.seed = s.m + s.k;
    MoeBuffers b = make_moe_buffers(c);
    DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
    MatmulIdScratch scratch(ctx, 32, s.m, 8, s.stage ? 2 * std::uint64_t{s.k} : 0);
    MatmulIdOptions opts;
    opts.grouped_kernel = s.kernel;
    ctx.set_launch_recorder(&rec);
    rec.launched.clear();
    const MatmulIdPlan plan = plan_matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, b.p, opts);
    EXPECT_TRUE(rec.launched.empty());
    const Receipt r = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, b.p, opts);
    ctx.synchronize();
    ctx.set_launch_recorder(nullptr);
    std::string joined;
    for (const std::string& k : plan.kernels) joined += (joined.empty() ? "" : "+") + k;
    EXPECT_EQ(rec.launched, plan.kernels) << c.describe();
    EXPECT_EQ(r.kernel, joined) << c.describe();
    EXPECT_EQ(r.kernels_launched, static_cast<int>(plan.kernels.size())) << c.describe();
    EXPECT_EQ(r.route, matmul_id_route_name(plan.route)) << c.describe();
    const bool grouped = s.route == MatmulIdRoute::GroupedPrefill;
    const bool fused = grouped && ((s.kernel == K::Auto && s.m <= 16) || s.kernel == K::TiledSm90Fused);
    EXPECT_EQ(plan.engine, grouped && s.kernel != K::MmaSync && hopper_engine(ctx)) << c.describe();
    EXPECT_EQ(plan.fused, plan.engine && fused) << c.describe();
    EXPECT_EQ(plan.staged, plan.engine && !fused && s.stage) << c.describe();
    if (plan.fused) EXPECT_EQ(plan.kernels.size(), 1u) << c.describe();
  }
}

// No scratch: the context's own serves the grouped route (and Auto, the default), sized by the
// plan: staged where the engine stages, grown by a larger call, the same bytes as with a
// caller's scratch; the plan (pooled) is what the call launches.
TEST(MoeGpu, ContextScratchServesCallsWithoutOne) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  LaunchRecorder rec;
  struct S { std::uint32_t m, k; DType in; MatmulIdRoute route; };
  const S cases[] = {{4, 256, DType::BF16, MatmulIdRoute::GroupedPrefill},   // fused engine
                     {64, 264, DType::BF16, MatmulIdRoute::GroupedPrefill},  // map + staged engine
                     {300, 256, DType::F16, MatmulIdRoute::Auto},
                     {40, 256, DType::F32, MatmulIdRoute::GroupedPrefill},   // mma.sync: no staging
                     {2100, 128, DType::BF16, MatmulIdRoute::Auto},          // grows the scratch
                     {64, 264, DType::BF16, MatmulIdRoute::Auto}};
  for (const S& s : cases) {
    MoeCase c;
    c.p = params(s.m, 96, s.k, 8, 32, s.route);
    c.p.input_dtype = s.in, c.p.output_dtype = s.in;
    c.w_dtype = s.in == DType::F32 ? DType::BF16 : s.in, c.out_of_range_every = 7, c.seed = 77 + s.m;
    MoeBuffers b = make_moe_buffers(c);
    DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
    ctx.set_launch_recorder(&rec);
    rec.launched.clear();
    const MatmulIdPlan plan = plan_matmul_id(ctx, dw.view, din.view, dids.view, dout.view, nullptr, b.p);
    EXPECT_TRUE(rec.launched.empty());
    const Receipt r = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, nullptr, b.p);
    ctx.synchronize();
    ctx.set_launch_recorder(nullptr);
    EXPECT_EQ(rec.launched, plan.kernels) << c.describe();
    EXPECT_EQ(r.route, matmul_id_route_name(plan.route)) << c.describe();
    const bool grouped = plan.route == MatmulIdRoute::GroupedPrefill;
    EXPECT_EQ(plan.pooled, grouped) << c.describe();
    if (s.route == MatmulIdRoute::Auto)
      EXPECT_EQ(plan.route, suggest_matmul_id_route(b.p, ctx.arch())) << c.describe();
    if (plan.engine && !plan.fused) EXPECT_TRUE(plan.staged) << c.describe() << ": the context's scratch stages";
    // The same call with a caller's scratch (staging room for every row): the same bytes.
    MoeOutcome pooled = run_moe_case(ctx, c, nullptr);
    EXPECT_TRUE(pooled.cmp.ok()) << c.describe() << " [" << pooled.receipt.kernel << "]: " << pooled.cmp.summary();
    MatmulIdScratch own(ctx, 32, s.m, 8, std::uint64_t{s.k} * dtype_size(s.in));
    MoeOutcome given = run_moe_case(ctx, c, &own);
    EXPECT_EQ(pooled.receipt.kernel, given.receipt.kernel) << c.describe();
    EXPECT_EQ(pooled.out_bytes, given.out_bytes) << c.describe();
  }
  // During CUDA-graph capture the context's scratch cannot be made or grown: refused before
  // anything is enqueued (the capture stays valid); once made, a call captures and replays.
  Context cap = Context::cuda(0);
  MoeCase c;
  c.p = params(64, 96, 128, 2, 16, MatmulIdRoute::GroupedPrefill);
  c.p.input_dtype = DType::BF16, c.w_dtype = DType::BF16, c.out_of_range_every = 9;
  MoeBuffers b = make_moe_buffers(c);
  DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
  cudaStream_t s = cap.stream();
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  expect_error([&] { matmul_id(cap, dw.view, din.view, dids.view, dout.view, nullptr, b.p); }, ErrorCode::InvalidArgument,
               "during CUDA-graph capture, where memory cannot be allocated");
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  matmul_id(cap, dw.view, din.view, dids.view, dout.view, nullptr, b.p);  // makes the scratch
  cap.synchronize();
  std::vector<unsigned char> eager(b.out.bytes.size()), replayed(b.out.bytes.size());
  copy_to_host(eager.data(), dout.buffer.data(), eager.size());
  copy_to_device(dout.buffer.data(), b.out.bytes.data(), b.out.bytes.size());  // poisoned again
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  matmul_id(cap, dw.view, din.view, dids.view, dout.view, nullptr, b.p);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  copy_to_host(replayed.data(), dout.buffer.data(), replayed.size());
  EXPECT_EQ(eager, replayed);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The Hopper tiled engine under the grouped route, forced: wide (256) and narrow (64) tiles, alone
// and mixed in one expert (counts from 1 to ~1000 per expert), n and k tails (n % 128, n % 4 != 0: scalar stores), padded
// experts and input rows, both layouts, every routing with out-of-range ids,
// f32 and 16-bit outputs, rows gathered in the GEMM or staged in expert order first (a scratch
// with room for them); the mma.sync kernel runs each case too.
TEST(MoeGpu, TiledSm90Sweep) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper_engine(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  MatmulIdScratch plain(ctx, 256, 4096, 8), staging(ctx, 256, 4096, 8, 520 * 2);
  struct S { std::uint32_t m, n, k, top_k, e; };
  std::uint64_t seed = 2000;
  const Routing routings[] = {Routing::Uniform, Routing::Skewed, Routing::Zipf, Routing::Repeats};
  const DType id_types[] = {DType::U32, DType::I32, DType::I64};
  for (S s : {S{1, 100, 64, 8, 64}, S{7, 33, 40, 1, 1}, S{33, 130, 128, 8, 256}, S{300, 257, 264, 2, 4},
              S{2048, 65, 72, 8, 64}, S{1024, 384, 520, 2, 8}, S{2048, 136, 256, 2, 8}, S{4096, 128, 64, 8, 128}})
    for (DType w : {DType::BF16, DType::F16})
      for (DType out : {DType::F32, w})
        for (int variant = 0; variant < 4; ++variant) {  // engine gathering, staged, mma.sync, engine sorting itself
          if (variant == 3 && std::uint64_t{s.m} * s.top_k > static_cast<std::uint64_t>(engine::kTiledMoeFusedMaxRows)) continue;
          const auto kernel = variant < 2    ? MatmulIdGroupedKernel::TiledSm90
                              : variant == 2 ? MatmulIdGroupedKernel::MmaSync
                                             : MatmulIdGroupedKernel::TiledSm90Fused;
          MatmulIdScratch& scratch = variant == 1 ? staging : plain;
          MoeCase c;
          c.p = params(s.m, s.n, s.k, s.top_k, s.e, MatmulIdRoute::GroupedPrefill);
          c.p.input_dtype = w, c.p.output_dtype = out;
          c.w_dtype = w, c.grouped_kernel = kernel;
          c.routing = routings[seed % 4], c.ids_dtype = id_types[seed % 3];
          if (c.routing == Routing::Repeats) c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
          c.out_of_range_every = seed % 3 == 0 ? 0 : 5 + static_cast<int>(seed % 7);
          c.expert_pad = (seed % 3) * 8, c.input_pad = (seed % 2) * 8;
          c.p.input_layout = seed % 4 == 1 ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
          c.seed = ++seed;
          MoeOutcome o = run_moe_case(ctx, c, &scratch);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
          const bool engine = o.receipt.kernel.find("tiled_sm90_moe_") != std::string::npos;
          EXPECT_EQ(engine, kernel != MatmulIdGroupedKernel::MmaSync) << c.describe() << ": " << o.receipt.kernel;
          const bool staged = o.receipt.kernel.find("moe_stage_rows_") != std::string::npos &&
                              o.receipt.kernel.find("_staged") != std::string::npos;
          EXPECT_EQ(staged, variant == 1) << c.describe() << ": " << o.receipt.kernel;
          if (variant == 3) {
            EXPECT_EQ(o.receipt.kernel.find("_fused"), o.receipt.kernel.size() - 6) << c.describe() << ": " << o.receipt.kernel;
            EXPECT_EQ(o.receipt.kernels_launched, 1) << c.describe();
          } else {
            EXPECT_EQ(o.receipt.kernels_launched, (variant == 1 ? 2 : 1) + map_kernels(std::uint64_t{s.m} * s.top_k))
                << c.describe();
          }
        }
}

// Every boundary of the engine's tile classes, one expert each (ExpertRows::split): a rest of
// 1..64 rows in one narrow tile, 65..128 in one mid (128) tile, 129..160 in a mid and a narrow
// tile, more in a wide one, after any number of wide (256) tiles; an expert without rows. The
// mid tiles' rows come by the gather or as two narrow TMA boxes (staged); n and k off the tiles.
TEST(MoeGpu, TiledSm90TileClassBoundaries) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper_engine(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  const std::vector<std::uint32_t> counts = {1,   63,  64,  65,  127, 128, 129, 160, 161, 0,
                                             255, 256, 257, 320, 321, 384, 385, 416, 417, 513};
  std::uint32_t m = 0;
  for (std::uint32_t v : counts) m += v;
  const auto e = static_cast<std::uint32_t>(counts.size());
  MatmulIdScratch plain(ctx, e, m, 1), staging(ctx, e, m, 1, 136 * 2);
  std::uint64_t seed = 4100;
  for (DType w : {DType::BF16, DType::F16})
    for (DType out : {DType::F32, w})
      for (int variant = 0; variant < 2; ++variant) {  // gathered, staged
        MoeCase c;
        c.p = params(m, 200, 136, 1, e, MatmulIdRoute::GroupedPrefill);
        c.p.input_dtype = w, c.p.output_dtype = out;
        c.w_dtype = w, c.grouped_kernel = MatmulIdGroupedKernel::TiledSm90;
        c.routing = Routing::Counts, c.expert_counts = counts;
        c.expert_pad = 8 * variant, c.input_pad = 8;
        c.seed = ++seed;
        MoeOutcome o = run_moe_case(ctx, c, variant == 1 ? &staging : &plain);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_NE(o.receipt.kernel.find("tiled_sm90_moe_"), std::string::npos) << c.describe() << ": " << o.receipt.kernel;
        EXPECT_EQ(o.receipt.kernel.find("_staged") != std::string::npos, variant == 1) << c.describe() << ": " << o.receipt.kernel;
      }
}

// The staged engine hands its tiles out from the scratch's counter (LLMM_TILED_SCHED): with
// fewer tiles than SMs, many tiles, and every token on the same experts, each call is correct,
// bitwise equal to the call before it on the same scratch, and leaves the counter at zero for
// the next launch (a counter left nonzero would hand the next launch no tiles: poisoned rows).
TEST(MoeGpu, TiledSm90StagedCounterServesRepeatedCalls) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper_engine(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  MatmulIdScratch staging(ctx, 64, 2048, 8, 256 * 2);
  ASSERT_NE(staging.tile_counter(), nullptr);
  struct Shape {
    std::uint32_t m, n, k, top_k, e;
    Routing routing;
  };
  const Shape shapes[] = {{40, 200, 256, 2, 8, Routing::Uniform},
                          {2048, 384, 256, 8, 64, Routing::Uniform},
                          {1024, 264, 136, 2, 64, Routing::Skewed}};
  std::uint64_t seed = 5200;
  for (const Shape& sh : shapes)
    for (DType w : {DType::BF16, DType::F16}) {
      MoeCase c;
      c.p = params(sh.m, sh.n, sh.k, sh.top_k, sh.e, MatmulIdRoute::GroupedPrefill);
      c.p.input_dtype = w, c.p.output_dtype = w;
      c.w_dtype = w, c.grouped_kernel = MatmulIdGroupedKernel::TiledSm90;
      c.routing = sh.routing, c.seed = ++seed;
      auto counter = [&] {
        std::uint32_t v = 0xdeadbeefu;
        copy_to_host(&v, staging.tile_counter(), sizeof v);
        return v;
      };
      const MoeOutcome a = run_moe_case(ctx, c, &staging);
      EXPECT_TRUE(a.cmp.ok()) << c.describe() << " [" << a.receipt.kernel << "]: " << a.cmp.summary();
      EXPECT_NE(a.receipt.kernel.find("_staged"), std::string::npos) << c.describe() << ": " << a.receipt.kernel;
      EXPECT_EQ(counter(), 0u) << c.describe();
      const MoeOutcome b = run_moe_case(ctx, c, &staging);
      EXPECT_TRUE(b.out_bytes == a.out_bytes) << c.describe() << ": a second call differs";
      EXPECT_EQ(counter(), 0u) << c.describe();
    }
}

// The engine sorting the routed rows itself (TiledSm90Fused): every tile class boundary the
// counts above reach within kTiledMoeFusedMaxRows (1666 rows over 13 experts), out-of-range ids
// (zero rows written by the CTAs, spread over the grid); 1024 experts with the whole 2048 rows
// (the most shared memory); repeated ids on one expert; i64 ids; Inf/NaN in inputs and weights;
// inputs shared by the slots (a map axis of stride 0), slotted, and stored slot by slot (its
// token rows come by TMA boxes of a map whose axes follow the strides).
// Bitwise equal to the route after moe_map on the same call (both sum each output in one f32 order).
TEST(MoeGpu, TiledSm90FusedSortsRowsItself) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper_engine(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  const std::vector<std::uint32_t> counts = {1, 63, 64, 65, 127, 128, 129, 160, 161, 0, 255, 256, 257};
  std::uint32_t total = 0;
  for (std::uint32_t v : counts) total += v;
  ASSERT_LE(total, static_cast<std::uint32_t>(engine::kTiledMoeFusedMaxRows));
  struct S { std::uint32_t m, n, k, top_k, e; Routing routing; int oor; int nonfinite = 0; };
  const S cases[] = {{total, 200, 136, 1, static_cast<std::uint32_t>(counts.size()), Routing::Counts, 0},
                     {256, 130, 72, 8, 1024, Routing::Uniform, 9},  // 2048 rows, 1024 experts
                     {300, 96, 64, 4, 16, Routing::Repeats, 5},
                     {1, 40, 256, 8, 64, Routing::Zipf, 3},
                     {17, 257, 264, 2, 4, Routing::Skewed, 4},
                     {16, 70, 136, 4, 16, Routing::Uniform, 13, 6}};
  MatmulIdScratch scratch(ctx, 1024, 2048, 8, 520 * 2);
  std::uint64_t seed = 4300;
  for (const S& s : cases)
    for (DType w : {DType::BF16, DType::F16})
      for (DType out : {DType::F32, w}) {
        MoeCase c;
        c.p = params(s.m, s.n, s.k, s.top_k, s.e, MatmulIdRoute::GroupedPrefill);
        c.p.input_dtype = w, c.p.output_dtype = out;
        if (s.routing == Routing::Repeats) c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
        c.w_dtype = w, c.grouped_kernel = MatmulIdGroupedKernel::TiledSm90Fused;
        c.routing = s.routing, c.out_of_range_every = s.oor, c.nonfinite_every = s.nonfinite;
        if (s.routing == Routing::Counts) c.expert_counts = counts;
        c.ids_dtype = seed % 2 ? DType::I64 : DType::U32;
        c.expert_pad = (seed % 3) * 8, c.input_pad = 8;
        c.p.input_layout = seed % 3 == 1 ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
        c.slot_major = seed % 3 == 2 && s.top_k > 1;  // the row boxes' map with its axes swapped
        c.seed = ++seed;
        MoeOutcome o = run_moe_case(ctx, c, &scratch);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_EQ(o.receipt.kernels_launched, 1) << c.describe();
        EXPECT_NE(o.receipt.kernel.find("_fused"), std::string::npos) << c.describe() << ": " << o.receipt.kernel;
        MoeCase mapped = c;
        mapped.grouped_kernel = MatmulIdGroupedKernel::TiledSm90;
        MoeOutcome om = run_moe_case(ctx, mapped, &scratch);
        EXPECT_TRUE(om.cmp.ok()) << mapped.describe() << ": " << om.cmp.summary();
        EXPECT_EQ(o.out_bytes, om.out_bytes) << c.describe() << ": fused and mapped engines differ";
        if (s.nonfinite) EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
      }
}

// Auto takes the engine where it can on sm_90; a forced engine that cannot take the call is
// refused before anything is launched or written.
TEST(MoeGpu, TiledSm90RoutingAndRefusals) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper_engine(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  MatmulIdScratch scratch(ctx, 16, 64, 4);
  MoeCase c;
  c.p = params(64, 96, 128, 4, 16, MatmulIdRoute::GroupedPrefill);
  c.p.input_dtype = DType::BF16, c.p.output_dtype = DType::BF16, c.w_dtype = DType::BF16;
  MoeOutcome o = run_moe_case(ctx, c, &scratch);
  EXPECT_TRUE(o.cmp.ok()) << o.cmp.summary();
  EXPECT_NE(o.receipt.kernel.find("tiled_sm90_moe_bf16_bf16_bf16_bn256x64"), std::string::npos) << o.receipt.kernel;

  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  struct Bad { DType in; std::uint32_t k; const char* why; };
  for (Bad b : {Bad{DType::F32, 128, "input of the same dtype"}, Bad{DType::BF16, 36, "k a multiple of 8"}}) {
    MoeCase f = c;
    f.p.input_dtype = b.in, f.p.output_dtype = b.in, f.p.k = b.k;
    f.grouped_kernel = MatmulIdGroupedKernel::TiledSm90;
    try {
      run_moe_case(ctx, f, &scratch);
      ADD_FAILURE() << "forced tiled_sm90 accepted " << f.describe();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.why), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(rec.launched.empty());
}
