// matmul's tiled_sm90_streamk route on the GPU (the Hopper engine with its CTAs splitting the
// k-blocks of all 256-wide tiles evenly): against the float64 reference on shapes whose tiles are
// cut between CTAs (and one where none is), batches and broadcast, poisoned and padded outputs,
// non-finite inputs, bitwise reproducibility, and graph replays (each launch must leave its tile
// counters at zero for the next).
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#include "support/dense_case.hpp"
#include "support/gpu.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

bool hopper(const Context& ctx) { return ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0; }

// Whether the stream-K launch of [batch, m, n, k] cuts some tile between two CTAs (the kernel's
// rule: whole tiles for the first tiles / grid - 1 waves, the rest's k-blocks split evenly).
bool cuts_a_tile(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, int sms) {
  const engine::TiledSm90Launch l = engine::tiled_sm90_dense_streamk_launch(batch, m, n, sms);
  const std::int64_t kb = (k + 63) / 64, first = (l.tiles / l.grid - 1) * l.grid, all = (l.tiles - first) * kb;
  for (std::int64_t b = 1; b < l.grid; ++b)
    if (all * b / l.grid % kb != 0) return true;
  return false;
}

}  // namespace

TEST(DenseStreamKGpu, MatchesTheReference) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  const int sms = ctx.arch().sm_count;
  struct S { std::int64_t batch, m, n, k, pad; bool a_bcast, b_bcast; };
  std::uint64_t seed = 7100;
  int cut = 0, whole = 0;
  for (DType t : {DType::BF16, DType::F16})
    for (S s : {S{1, 300, 8500, 200, 0, false, false},    // 2 x 67 tiles, 4 k-blocks: cuts every ~4
                S{1, 257, 8450, 520, 8, false, false},    // 9 k-blocks (the last partial), row padding
                S{1, 2100, 2000, 72, 0, false, false},    // 9 x 16 tiles, 2 k-blocks
                S{3, 100, 6000, 264, 0, false, true},     // batches of one broadcast weight
                S{2, 200, 8448, 136, 8, true, false},     // a broadcast input
                S{1, 1100, 8500, 72, 0, false, false}}) { // 5 x 67 = 335 tiles: a wave of whole tiles first
      if (engine::tiled_sm90_dense_streamk_launch(s.batch, s.m, s.n, sms).tiles < sms) continue;  // a smaller device
      DenseCase c{t, s.batch, s.m, s.n, s.k, false, true, s.pad, s.a_bcast, s.b_bcast};
      c.route = DenseRoute::TiledSm90StreamK;
      c.seed = ++seed;
      DenseOutcome o = run_dense_case(ctx, c);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
      EXPECT_TRUE(o.padding_untouched) << c.describe() << ": wrote outside the output";
      EXPECT_EQ(o.receipt.route, "tiled_sm90_streamk") << c.describe();
      EXPECT_EQ(o.receipt.kernel, engine::tiled_sm90_dense_streamk_kernel_name(t)) << c.describe();
      (cuts_a_tile(s.batch, s.m, s.n, s.k, sms) ? cut : whole) += 1;
    }
  EXPECT_GT(cut, 0) << "no case cut a tile between two CTAs: the parts' sum was not tested";
  // Exactly as many tiles as SMs, each CTA one whole tile: nothing to join.
  if (!cuts_a_tile(1, 1000, 4200, 136, sms) && engine::tiled_sm90_dense_streamk_launch(1, 1000, 4200, sms).tiles >= sms) {
    DenseCase c{DType::BF16, 1, 1000, 4200, 136, false, true};
    c.route = DenseRoute::TiledSm90StreamK;
    DenseOutcome o = run_dense_case(ctx, c);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
  }
}

TEST(DenseStreamKGpu, NonFiniteInputsPropagate) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  for (DType t : {DType::BF16, DType::F16}) {
    DenseCase c{t, 1, 300, 8500, 264, false, true};
    c.route = DenseRoute::TiledSm90StreamK, c.nonfinite_every = 5, c.seed = 7200 + static_cast<int>(t);
    DenseOutcome o = run_dense_case(ctx, c);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
  }
}

// Run to run the same bits (the cuts depend only on the shape and the grid; a cut tile's two
// parts are summed in one add, whichever CTA finishes second); and the same bits when replayed
// from a CUDA graph, three times (each launch leaves the tile counters at zero).
TEST(DenseStreamKGpu, ReproducibleAndReplayable) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  const std::int64_t m = 300, n = 8500, k = 1000;
  ASSERT_TRUE(cuts_a_tile(1, m, n, k, ctx.arch().sm_count));
  HostTensor a = host_tensor(DType::BF16, {m, k}), b = host_tensor(DType::BF16, {n, k}), c = host_tensor(DType::BF16, {m, n});
  fill_random(a.view, 31), fill_random(b.view, 32);
  DeviceTensor da = to_device(a), db = to_device(b), dc = to_device(c);
  MatmulOptions o;
  o.transpose_b = true, o.force_route = DenseRoute::TiledSm90StreamK;
  auto result = [&] {
    std::vector<unsigned char> v(c.bytes.size());
    copy_to_host(v.data(), dc.buffer.data(), v.size());
    return v;
  };
  matmul(ctx, da.view, db.view, dc.view, o);  // outside capture: allocates the workspace
  ctx.synchronize();
  const std::vector<unsigned char> first = result();
  for (int i = 0; i < 3; ++i) {
    matmul(ctx, da.view, db.view, dc.view, o);
    ctx.synchronize();
    EXPECT_EQ(result(), first) << "run " << i + 2 << " differs";
  }
  cudaStream_t s = static_cast<cudaStream_t>(ctx.stream());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Receipt r = matmul(ctx, da.view, db.view, dc.view, o);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(r.kernels_launched, 1);
  for (int i = 0; i < 3; ++i) {
    copy_to_device(dc.buffer.data(), c.bytes.data(), c.bytes.size());  // poison again
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(result(), first) << "graph replay " << i + 1 << " differs";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A first call inside graph capture cannot allocate the workspace: refused with a clear error,
// nothing captured. (A fresh context: its workspace does not exist yet.)
TEST(DenseStreamKGpu, FirstCallInsideCaptureIsRefused) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  HostTensor a = host_tensor(DType::F16, {300, 200}), b = host_tensor(DType::F16, {8500, 200}),
             c = host_tensor(DType::F16, {300, 8500});
  fill_random(a.view, 41), fill_random(b.view, 42);
  DeviceTensor da = to_device(a), db = to_device(b), dc = to_device(c);
  MatmulOptions o;
  o.transpose_b = true, o.force_route = DenseRoute::TiledSm90StreamK;
  cudaStream_t s = static_cast<cudaStream_t>(ctx.stream());
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  std::string what;
  try {
    matmul(ctx, da.view, db.view, dc.view, o);
  } catch (const Error& e) {
    what = e.what();
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  std::size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  cudaGraphDestroy(graph);
  EXPECT_NE(what.find("outside CUDA-graph capture"), std::string::npos) << what;
  EXPECT_EQ(nodes, 0u) << "the refused call captured work";
}
