// matmul_id on the GPU against the float64 reference: the seed shape in every dtype/layout/route,
// random sweeps (sizes not tile multiples, padded expert strides, top_k 1/2/8, 1..256 experts,
// uniform/skewed/Zipf routing, repeats on Direct, out-of-range ids), determinism, CUDA-graph
// capture and replay with changing ids, and the injected second-kernel failure.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"
#include "support/gpu.hpp"
#include "support/moe_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
void expect_good(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch) {
  MoeOutcome o = run_moe_case(ctx, c, scratch);
  EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
  EXPECT_EQ(o.receipt.route, matmul_id_route_name(c.p.route));
  EXPECT_EQ(o.receipt.kernels_launched, c.p.route == MatmulIdRoute::Direct ? 1 : 2);
}
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
  for (DType w : {DType::F16, DType::F32}) {  // repeated ids are the Direct route's
    MoeCase c;
    c.p = params(40, 70, 128, 8, 16, MatmulIdRoute::Direct);
    c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
    c.w_dtype = w, c.routing = Routing::Repeats, c.seed = ++seed;
    expect_good(ctx, c, &scratch);
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
  c.p.expert_stride_bytes = 96ull * 128 * 2;
  c.w_dtype = DType::BF16;
  MatmulIdCapability cap = matmul_id_capability(DType::BF16, c.p);
  HostTensor w = host_tensor(DType::BF16, {static_cast<std::int64_t>(cap.required_weight_bytes / 2)});
  HostTensor in = host_tensor(DType::F32, {64 * 128}), out = host_tensor(DType::F32, {64 * 2 * 96});
  fill_random(w.view, 1);
  fill_random(in.view, 2, 0.5);
  poison(out.view);
  HostTensor ids = host_tensor(DType::U32, {128});
  DeviceTensor dw = to_device(w), din = to_device(in), dids = to_device(ids), dout = to_device(out);
  auto set_ids = [&](std::uint64_t seed) {
    c.seed = seed;
    std::vector<std::uint32_t> v = make_ids(c);
    copy_to_device(dids.buffer.data(), v.data(), v.size() * 4);
    return v;
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
    std::vector<std::uint32_t> v = set_ids(seed);
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
  HostTensor w = host_tensor(DType::F32, {4 * 7 * 35}), in = host_tensor(DType::F32, {9 * 35}),
             out = host_tensor(DType::F32, {18 * 7}), ids = host_tensor(DType::U32, {18});
  fill_random(w.view, 1);
  fill_random(in.view, 2);
  poison(out.view);
  for (int i = 0; i < 18; ++i) static_cast<std::uint32_t*>(ids.view.data)[i] = static_cast<std::uint32_t>(i % 4);
  DeviceTensor dw = to_device(w), din = to_device(in), dids = to_device(ids), dout = to_device(out);
  std::vector<std::uint32_t> sentinel(4 + 4 * 9, 0xABCDu);
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
