// skinny_mma over expert stacks (matmul_id's grouped route, grouped kernel SkinnyMma, by name) on
// the GPU against the float64 reference: decode shapes m 1..32 (up to 256 routed rows), n and k
// off the tiles, 1..256 experts, every routing (repeats within a token: an expert with more rows
// than a tile's vectors gets several groups), out-of-range ids, u32/i32/i64 ids, both layouts and
// slot-major inputs, padded experts and rows, f32 and 16-bit outputs, Inf/NaN; every
// configuration (vectors a tile, rows a tile, cluster, grid) launched directly; refusals before
// anything runs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/moe/matmul_id_checks.hpp"
#include "core/moe/moe_skinny.hpp"
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

MatmulIdParams grouped(std::uint32_t m, std::uint32_t n, std::uint32_t k, std::uint32_t top_k, std::uint32_t e) {
  MatmulIdParams p;
  p.m = m, p.n = n, p.k = k, p.top_k = top_k, p.n_experts = e, p.route = MatmulIdRoute::GroupedPrefill;
  return p;
}

bool takes_skinny(const Context& ctx) { return ctx.arch().cc_major >= 8; }

}  // namespace

TEST(MoeSkinnyGpu, SkinnyMmaExperts) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!takes_skinny(ctx)) GTEST_SKIP() << "skinny_mma needs sm_80 or later";
  MatmulIdScratch scratch(ctx, 256, 32, 8);
  struct S { std::uint32_t m, n, k, top_k, e; Routing routing; int oor = 0; int nonfinite = 0; };
  std::vector<std::uint32_t> hot(16, 0);
  for (int i = 0; i < 8; ++i) hot[2 * i + 1] = 16;  // 8 of 16 experts with 16 rows each: full groups of 16
  const S cases[] = {{1, 100, 64, 8, 64, Routing::Uniform},
                     {2, 257, 264, 2, 4, Routing::Skewed, 3},
                     {7, 33, 40, 1, 1, Routing::Uniform},
                     {8, 70, 136, 4, 16, Routing::Repeats, 5},  // experts with more than 8 rows
                     {9, 65, 520, 8, 32, Routing::Zipf},
                     {16, 200, 2056, 8, 16, Routing::Uniform, 13, 6},  // 65 chunks: clusters on sm_90
                     {16, 130, 1024, 8, 16, Routing::Counts},          // hot: every token on the same 8 experts
                     {32, 96, 4096, 8, 256, Routing::Uniform, 9},      // 256 routed rows: the most it takes
                     {30, 48, 72, 8, 4, Routing::Repeats}};            // 240 rows on 4 experts: many groups each
  std::uint64_t seed = 7100;
  for (const S& s : cases)
    for (DType w : {DType::BF16, DType::F16})
      for (DType out : {DType::F32, w}) {
        MoeCase c;
        c.p = grouped(s.m, s.n, s.k, s.top_k, s.e);
        c.p.input_dtype = w, c.p.output_dtype = out;
        if (s.routing == Routing::Repeats || s.routing == Routing::Counts) c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
        c.w_dtype = w, c.grouped_kernel = MatmulIdGroupedKernel::SkinnyMma;
        c.routing = s.routing, c.out_of_range_every = s.oor, c.nonfinite_every = s.nonfinite;
        if (s.routing == Routing::Counts) c.expert_counts = hot;
        const DType id_types[] = {DType::U32, DType::I32, DType::I64};
        c.ids_dtype = id_types[seed % 3];
        c.expert_pad = (seed % 3) * 8, c.input_pad = (seed % 2) * 8;  // 16-byte rows stay aligned
        c.p.input_layout = seed % 3 == 1 ? MatmulIdInputLayout::Slotted : MatmulIdInputLayout::SharedPerToken;
        c.slot_major = seed % 4 == 2 && c.p.input_layout == MatmulIdInputLayout::Slotted && s.top_k > 1;
        c.seed = ++seed;
        MoeOutcome o = run_moe_case(ctx, c, &scratch);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_EQ(o.receipt.kernels_launched, 1) << c.describe();
        EXPECT_EQ(o.receipt.kernel.rfind("skinny_mma_moe_", 0), 0u) << c.describe() << ": " << o.receipt.kernel;
        if (s.nonfinite) EXPECT_GT(o.cmp.nonfinite, 0) << c.describe();
        if (s.oor) EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
        // Deterministic: the same bytes again (the output poisoned anew).
        MoeOutcome again = run_moe_case(ctx, c, &scratch);
        EXPECT_EQ(again.out_bytes, o.out_bytes) << c.describe() << ": two calls differ";
      }
}

// Every configuration the launcher takes, launched directly on two calls: right against float64,
// and for one (vectors, rows, cluster) the same bytes on any grid (the split of the tiles over
// clusters changes, no sum's order does).
TEST(MoeSkinnyGpu, SkinnyMmaEveryConfig) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!takes_skinny(ctx)) GTEST_SKIP() << "skinny_mma needs sm_80 or later";
  const bool clusters = ctx.arch().cc_major >= 9;
  struct S { std::uint32_t m, n, k, top_k, e; Routing routing; int oor; };
  std::uint64_t seed = 7300;
  for (S s : {S{16, 200, 2056, 8, 16, Routing::Uniform, 7}, S{5, 333, 1032, 4, 8, Routing::Repeats, 0}})
    for (DType w : {DType::BF16, DType::F16}) {
      MoeCase c;
      c.p = grouped(s.m, s.n, s.k, s.top_k, s.e);
      c.p.input_dtype = w, c.p.output_dtype = w;
      if (s.routing == Routing::Repeats) c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
      c.w_dtype = w, c.routing = s.routing, c.out_of_range_every = s.oor, c.expert_pad = 8, c.seed = ++seed;
      MoeBuffers b = make_moe_buffers(c);
      DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids);
      cuda_moe::MoeArgs g;
      g.m = s.m, g.n = s.n, g.k = s.k, g.top_k = s.top_k, g.n_experts = s.e;
      g.w_dtype = w, g.w = dw.view.data, g.expert_stride = static_cast<std::int64_t>(b.p.expert_stride_bytes / 2);
      const detail::MatmulIdInputStrides st = detail::matmul_id_input_strides(b.p);
      g.in_dtype = w, g.in = din.view.data;
      g.in_token_stride = static_cast<std::int64_t>(st.token), g.in_slot_stride = static_cast<std::int64_t>(st.slot);
      g.ids = dids.view.data, g.out_dtype = w;
      ASSERT_EQ(cuda_moe::skinny_mma_moe_refusal(g, ctx.arch()), "");
      cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, w, b.in.view.data, b.ids.view.data, b.p);
      cpu::MatmulF64 as_dense{1, ref.rows, ref.n, b.p.k, ref.value, ref.abs_sum};
      const Tolerance tol{1e-30, 1.0, static_cast<double>(s.k) * std::ldexp(1.0, -24), unit_roundoff(w), false};
      const cuda_dense::SkinnyMmaConfig planned = cuda_moe::skinny_mma_moe_config(g, ctx.arch().cc_major, ctx.arch().sm_count);
      int runs = 0;
      for (int nt : {1, 2})
        for (int rt : {1, 2})
          for (int cl : {1, 2, 4}) {
            if (cl > 1 && !clusters) continue;
            std::vector<unsigned char> first;
            for (int grid : {1, 3, 0}) {  // clusters: one, three, two blocks a SM
              cuda_dense::SkinnyMmaConfig cfg;
              cfg.n_tiles = nt, cfg.row_tiles = rt, cfg.cluster = cl;
              cfg.blocks = grid > 0 ? grid * cl : (2 * ctx.arch().sm_count) / cl * cl;
              HostTensor out = host_tensor(w, {s.m, s.top_k, s.n});
              poison(out.view);
              DeviceTensor dout = to_device(out);
              g.out = dout.view.data;
              cuda_moe::launch_skinny_mma_moe(g, cfg, ctx.stream());
              ctx.synchronize();
              to_host(dout, out);
              const std::string what = c.describe() + " " + cuda_moe::skinny_mma_moe_kernel_name(g, cfg) + " blocks " +
                                       std::to_string(cfg.blocks);
              EXPECT_TRUE(matches_reference(View::contiguous(out.view.data, w, {1, ref.rows, ref.n}), as_dense, tol)) << what;
              if (first.empty()) first = out.bytes;
              else EXPECT_EQ(out.bytes, first) << what << ": the grid changed a result";
              ++runs;
            }
          }
      EXPECT_EQ(runs, clusters ? 36 : 12);
      EXPECT_GE(planned.blocks, planned.cluster);
    }
}

// A forced skinny_mma that cannot take the call is refused (Unsupported, naming why) before any
// kernel runs or any output byte is written; Auto never takes it.
TEST(MoeSkinnyGpu, SkinnyMmaRefusalsAndAuto) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 16, 64, 8);
  LaunchRecorder rec;
  struct Bad { DType w, in; std::uint32_t m, k; const char* why; };
  for (Bad b : {Bad{DType::F32, DType::F32, 4, 128, "f16 or bf16 weights"},
                Bad{DType::BF16, DType::F32, 4, 128, "input of the weights' dtype"},
                Bad{DType::BF16, DType::BF16, 4, 36, "k a multiple of 8"},
                Bad{DType::F16, DType::F16, 33, 128, "at most 256 routed rows"}}) {
    MoeCase c;
    c.p = grouped(b.m, 64, b.k, 8, 16);
    c.p.input_dtype = b.in, c.p.output_dtype = b.in;
    c.w_dtype = b.w, c.grouped_kernel = MatmulIdGroupedKernel::SkinnyMma;
    MoeBuffers buf = make_moe_buffers(c);
    DeviceTensor dw = to_device(buf.w), din = to_device(buf.in), dids = to_device(buf.ids), dout = to_device(buf.out);
    MatmulIdOptions o;
    o.grouped_kernel = MatmulIdGroupedKernel::SkinnyMma;
    ctx.set_launch_recorder(&rec);
    try {
      matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, buf.p, o);
      ADD_FAILURE() << "forced skinny_mma accepted " << c.describe();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.why), std::string::npos) << e.what();
    }
    ctx.set_launch_recorder(nullptr);
    EXPECT_TRUE(rec.launched.empty()) << c.describe();
    HostTensor after = host_tensor(buf.p.output_dtype, {b.m, 8, 64});
    to_host(dout, after);
    EXPECT_EQ(after.bytes, buf.out.bytes) << c.describe() << ": output written by a refused call";
  }
  MoeCase c;
  c.p = grouped(16, 96, 128, 8, 16);
  c.p.input_dtype = DType::BF16, c.p.output_dtype = DType::BF16, c.w_dtype = DType::BF16;
  MoeOutcome o = run_moe_case(ctx, c, &scratch);
  EXPECT_TRUE(o.cmp.ok()) << o.cmp.summary();
  EXPECT_EQ(o.receipt.kernel.find("skinny_mma"), std::string::npos) << "Auto took skinny_mma: " << o.receipt.kernel;
}

// Captured in a CUDA graph and replayed with other ids (out-of-range ones among them): each
// replay sorts the new ids in every block (no host sync, nothing planned from the ids).
TEST(MoeSkinnyGpu, GraphReplayWithChangingIds) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!takes_skinny(ctx)) GTEST_SKIP() << "skinny_mma needs sm_80 or later";
  MatmulIdScratch scratch(ctx, 16, 16, 8);
  MoeCase c;
  c.p = grouped(16, 96, 256, 8, 16);
  c.p.input_dtype = DType::BF16, c.p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
  c.w_dtype = DType::BF16, c.ids_dtype = DType::I64, c.out_of_range_every = 9, c.routing = Routing::Repeats;
  MoeBuffers b = make_moe_buffers(c);
  c.p = b.p;
  DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
  auto set_ids = [&](std::uint64_t seed) {
    c.seed = seed;
    store_ids(c, make_ids(c), b.ids);
    copy_to_device(dids.buffer.data(), b.ids.bytes.data(), b.ids.bytes.size());
    return b.ids.bytes;
  };
  MatmulIdOptions o;
  o.grouped_kernel = MatmulIdGroupedKernel::SkinnyMma;
  set_ids(1);
  matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, c.p, o);  // warm (outside capture)
  ctx.synchronize();
  cudaStream_t s = ctx.stream();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Receipt r = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, c.p, o);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(r.kernels_launched, 1);
  for (std::uint64_t seed : {11, 12, 13}) {
    std::vector<unsigned char> v = set_ids(seed);
    copy_to_device(dout.buffer.data(), b.out.bytes.data(), b.out.bytes.size());  // re-poison
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    HostTensor got = host_tensor(DType::F32, {16 * 8 * 96});
    copy_to_host(got.bytes.data(), dout.buffer.data(), got.bytes.size());
    cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::BF16, b.in.view.data, v.data(), c.p);
    cpu::MatmulF64 dense{1, ref.rows, ref.n, 256, ref.value, ref.abs_sum};
    View g3 = View::contiguous(got.view.data, DType::F32, {1, ref.rows, ref.n});
    EXPECT_TRUE(matches_reference(g3, dense, Tolerance{1e-30, 1.0, 256 * std::ldexp(1.0, -24), 0}))
        << "replay with ids seed " << seed;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
