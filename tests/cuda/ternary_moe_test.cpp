// Ternary experts (matmul_id_tq2) on the GPU: the reference kernel tq2_moe_naive over every input
// dtype, layout and id dtype; the decode route tq2_moe_stream_sm90 (the streaming engine over
// routed rows: every dtype and layout, parts, non-finite inputs, batch invariance, capture);
// the Hopper route tq2_moe_grouped_sm90 (moe_map, staged f16 rows,
// the engine's TQ2 decoder over the expert stack) over shapes off every tile multiple, skewed and
// repeated routings, out-of-range ids, one to 128 experts; both against cpu::matmul_id_f64 on the
// dequantized stack with poisoned outputs. Also: the router's choices and fallbacks, bitwise
// determinism, CUDA-graph capture replayed with new ids, and refusals before anything is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "cuda/ternary/tq2_moe_stream.hpp"
#include "llmm/ternary_moe.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"
#include "support/tq2_moe_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
bool hopper(const Context& ctx) { return ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0; }

Tq2MoeCase make_case(std::uint32_t m, std::uint32_t top_k, std::uint32_t n, std::uint32_t k, std::uint32_t experts,
                     DType in, DType out, std::uint64_t seed) {
  Tq2MoeCase c;
  MoeCase& b = c.base;
  b.p.m = m, b.p.top_k = top_k, b.p.n = n, b.p.k = k, b.p.n_experts = experts;
  b.p.input_dtype = in, b.p.output_dtype = out;
  b.seed = seed;
  return c;
}
}  // namespace

TEST(Tq2ExpertsGpu, NaiveEveryDtypeLayoutAndIdType) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 500;
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (DType ids : {DType::U32, DType::I32, DType::I64})
      for (int layout = 0; layout < 3; ++layout) {
        Tq2MoeCase c = make_case(9, 3, 70, 256, 6, in, layout == 1 ? in : DType::F32, ++seed);
        c.route = Tq2MoeRoute::Naive;
        c.base.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
        c.base.input_rank3 = layout == 2;
        c.base.input_pad = layout;
        c.base.ids_dtype = ids;
        c.base.routing = ids == DType::I32 ? Routing::Repeats : Routing::Skewed;
        c.base.out_of_range_every = 5;
        const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, nullptr);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
        EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
        EXPECT_EQ(o.receipt.route, "tq2_moe_naive");
      }
}

TEST(Tq2ExpertsGpu, GroupedSm90SweepAgainstFloat64) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_grouped_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct S { std::uint32_t m, top_k, n, k, experts; Routing routing; int oor; };
  // One expert, non-multiples of the 128-row box and of the 64/256-token tiles, many experts with
  // few rows each (narrow tiles), one hot expert (wide tiles), out-of-range ids, expert stacks
  // whose rows cross box boundaries (n 204, 136; n 204 and, below, 300 are not multiples of 8:
  // each expert's transposed scales are padded so that their TMA boxes start 16-byte aligned).
  const S shapes[] = {{1, 1, 8, 128, 1, Routing::Uniform, 0},      {5, 2, 204, 640, 3, Routing::Uniform, 3},
                      {70, 8, 384, 256, 16, Routing::Zipf, 7},     {300, 4, 136, 512, 64, Routing::Skewed, 11},
                      {64, 8, 256, 512, 128, Routing::Uniform, 0}, {600, 2, 96, 384, 4, Routing::Repeats, 5}};
  std::uint64_t seed = 700;
  for (const S& s : shapes)
    for (DType in : {DType::F16, DType::BF16})  // bf16: each routed row staged as f16 times its own 2^-e
    for (DType out : {DType::F32, in})
      for (int layout = 0; layout < 2; ++layout) {
        Tq2MoeCase c = make_case(s.m, s.top_k, s.n, s.k, s.experts, in, out, ++seed);
        c.route = s.m <= 64 ? Tq2MoeRoute::GroupedSm90 : Tq2MoeRoute::Auto;  // Auto streams m <= 64
        c.base.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
        c.base.input_pad = 8 * layout;  // TMA-readable rows: strides stay multiples of 8
        c.base.ids_dtype = layout == 0 ? DType::U32 : DType::I64;
        c.base.routing = s.routing, c.base.out_of_range_every = s.oor;
        MatmulIdScratch scratch(ctx, s.experts, s.m, s.top_k, 2 * s.k);
        const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, &scratch);
        EXPECT_EQ(o.receipt.route, "tq2_moe_grouped_sm90") << c.describe();
        // map (600 x 2 rows: count and sort), stage (bf16: scaled), engine
        EXPECT_EQ(o.receipt.kernels_launched, 2 + map_kernels(std::uint64_t{s.m} * s.top_k)) << c.describe();
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
      }
}

// Every boundary of the engine's tile classes (one expert each: narrow 64, mid 128, a mid and a
// narrow, wide 256 after wide tiles, an expert without rows) on the TQ2 decoder's RS wgmmas.
TEST(Tq2ExpertsGpu, GroupedSm90TileClassBoundaries) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_grouped_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  const std::vector<std::uint32_t> counts = {1, 64, 65, 128, 129, 160, 161, 0, 256, 257, 385, 417};
  std::uint32_t m = 0;
  for (std::uint32_t v : counts) m += v;
  const auto e = static_cast<std::uint32_t>(counts.size());
  std::uint64_t seed = 7100;
  for (DType in : {DType::F16, DType::BF16})
    for (DType out : {DType::F32, in}) {
      Tq2MoeCase c = make_case(m, 1, 200, 256, e, in, out, ++seed);
      c.route = Tq2MoeRoute::GroupedSm90;
      c.base.routing = Routing::Counts, c.base.expert_counts = counts;
      MatmulIdScratch scratch(ctx, e, m, 1, 2 * 256);
      const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, &scratch);
      EXPECT_EQ(o.receipt.route, "tq2_moe_grouped_sm90") << c.describe();
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
    }
}

// Each routed row of a bf16 input is staged with its own power of two: token rows of 2^20, 1 and
// 2^-20 in turn each keep their precision on the grouped route, every layout and output dtype.
// With one scale for the whole input (sessions 8-12) the 2^-20 rows fell below f16's range
// (2^-20 x 2^-6 < 2^-25) and came out as zeros.
TEST(Tq2ExpertsGpu, GroupedRowsOfVeryDifferentMagnitudeEachKeepTheirPrecision) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_grouped_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  MatmulIdScratch scratch(ctx, 8, 96, 4, 2 * 512);
  std::uint64_t seed = 1300;
  for (int layout = 0; layout < 3; ++layout)
    for (DType out : {DType::F32, DType::BF16}) {
      Tq2MoeCase c = make_case(96, 4, 136, 512, 8, DType::BF16, out, ++seed);
      c.route = Tq2MoeRoute::GroupedSm90, c.row_exponents = {20, 0, -20};
      c.base.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
      c.base.input_rank3 = layout == 2;  // [m, top_k, k] with uneven token rows
      c.base.out_of_range_every = 7;
      const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, &scratch);
      EXPECT_EQ(o.receipt.route, "tq2_moe_grouped_sm90") << c.describe();
      EXPECT_EQ(o.receipt.kernel.find("tq2_rowscale_stage_bf16_f16"), o.receipt.kernel.find('+') + 1) << o.receipt.kernel;
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    }
}

// Auto takes the engine only where it can: an f32 input, a caller's scratch without staging room
// or an f16 row stride TMA cannot read go to the reference kernel; no scratch takes the engine on
// the context's own; a bf16 slotted input with uneven rows takes the engine (its rows are staged
// one by one); results correct on each.
TEST(Tq2ExpertsGpu, RouterFallsBackToTheReferenceKernel) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  MatmulIdScratch staged(ctx, 8, 80, 4, 2 * 256), plain(ctx, 8, 80, 4);
  struct R { DType in; MatmulIdScratch* scratch; std::int64_t pad; const char* route; };
  const char* engine = hopper(ctx) ? "tq2_moe_grouped_sm90" : "tq2_moe_naive";
  std::uint64_t seed = 900;
  for (R r : {R{DType::F16, &staged, 0, engine}, R{DType::BF16, &staged, 3, engine}, R{DType::F32, &staged, 0, "tq2_moe_naive"},
              R{DType::F16, nullptr, 0, engine}, R{DType::BF16, nullptr, 3, engine}, R{DType::F16, &plain, 0, "tq2_moe_naive"},
              R{DType::F16, &staged, 3, "tq2_moe_naive"}, R{DType::BF16, &staged, -1, engine}}) {
    Tq2MoeCase c = make_case(80, 4, 136, 256, 8, r.in, DType::F32, ++seed);  // m > 64: past the streaming route
    c.base.input_pad = r.pad < 0 ? 0 : r.pad, c.base.out_of_range_every = 6;
    if (r.pad < 0) c.base.input_rank3 = true;  // [m, top_k, k] with 3 extra elements a token: uneven rows
    const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, r.scratch);
    EXPECT_EQ(o.receipt.route, r.route) << c.describe();
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
  }
}

TEST(Tq2ExpertsGpu, GroupedSm90DeterministicAndRefusals) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_grouped_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  MatmulIdScratch scratch(ctx, 32, 200, 8, 2 * 512);
  Tq2MoeCase c = make_case(200, 8, 300, 512, 32, DType::F16, DType::F16, 41);
  c.route = Tq2MoeRoute::GroupedSm90, c.base.routing = Routing::Zipf, c.base.out_of_range_every = 13;
  const Tq2MoeOutcome a = run_tq2_moe_case(ctx, cache, c, &scratch), b = run_tq2_moe_case(ctx, cache, c, &scratch);
  EXPECT_TRUE(a.cmp.ok()) << a.cmp.summary();
  EXPECT_EQ(a.out_bytes, b.out_bytes) << "tq2_moe_grouped_sm90 is not bitwise deterministic";
  // Forced, it refuses what it cannot take, before writing anything.
  const std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(4 * 64, 256, 2);
  const WeightHandle h = cache.get_or_upload_experts(77, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), 4, 64, 256);
  HostTensor in = host_tensor(DType::F32, {8, 256}), ids = host_tensor(DType::U32, {8, 2}),
             out = host_tensor(DType::F32, {8, 2, 64});
  std::memset(ids.bytes.data(), 0, ids.bytes.size());
  std::memset(out.bytes.data(), 0x7f, out.bytes.size());
  DeviceTensor din = to_device(in), dids = to_device(ids), dout = to_device(out);
  Tq2MoeOptions o;
  o.force_route = Tq2MoeRoute::GroupedSm90;
  expect_error([&] { matmul_id_tq2(ctx, h, din.view, dids.view, dout.view, &scratch, MatmulIdInputLayout::SharedPerToken, o); },
               ErrorCode::Unsupported, "needs an f16 or bf16 input");
  HostTensor in16 = host_tensor(DType::F16, {8, 256});
  DeviceTensor din16 = to_device(in16);
  // A caller's scratch without staging room is refused (no scratch at all takes the context's own).
  MatmulIdScratch plain(ctx, 4, 8, 2);
  expect_error([&] { matmul_id_tq2(ctx, h, din16.view, dids.view, dout.view, &plain, MatmulIdInputLayout::SharedPerToken, o); },
               ErrorCode::Unsupported, "staged_row_bytes");
  ctx.synchronize();
  HostTensor back = out;
  to_host(dout, back);
  EXPECT_EQ(back.bytes, out.bytes) << "a refused call wrote its output";
}

namespace {
// Auto's route under CUDA-graph capture (no host sync inside), replayed with new ids: m = 96 takes
// the grouped route, m = 6 the streaming one.
void graph_replay_with_changing_ids(Context& ctx, std::uint32_t m, const char* route) {
  TernaryWeightCache cache(ctx);
  const std::uint32_t top_k = 4, n = 136, k = 384, experts = 16;
  MatmulIdScratch scratch(ctx, experts, m, top_k, 2 * k);
  MoeCase c;
  c.p.m = m, c.p.top_k = top_k, c.p.n = n, c.p.k = k, c.p.n_experts = experts;
  c.p.input_dtype = DType::F16, c.p.output_dtype = DType::F32;
  c.w_dtype = DType::F32, c.ids_dtype = DType::I64, c.out_of_range_every = 7;
  MoeBuffers b = make_moe_buffers(c);
  const std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(experts * n, k, 17);
  const std::vector<float> wf = tq2_dequantize(blocks.data(), blocks.size() * sizeof(BlockTQ2_128), experts * n, k);
  std::memcpy(b.w.bytes.data(), wf.data(), wf.size() * 4);
  const WeightHandle h = cache.get_or_upload_experts(3, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), experts, n, k);
  DeviceTensor din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
  auto set_ids = [&](std::uint64_t s) {
    c.seed = s;
    store_ids(c, make_ids(c), b.ids);
    copy_to_device(dids.buffer.data(), b.ids.bytes.data(), b.ids.bytes.size());
    return b.ids.bytes;
  };
  set_ids(1);
  matmul_id_tq2(ctx, h, din.view, dids.view, dout.view, &scratch);  // warm (outside capture)
  ctx.synchronize();
  cudaStream_t s = ctx.stream();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Receipt r = matmul_id_tq2(ctx, h, din.view, dids.view, dout.view, &scratch);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(r.route, route);
  for (std::uint64_t seed : {11, 12, 13}) {
    const std::vector<unsigned char> ids = set_ids(seed);
    copy_to_device(dout.buffer.data(), b.out.bytes.data(), b.out.bytes.size());  // re-poison
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    HostTensor got = host_tensor(DType::F32, {static_cast<std::int64_t>(m) * top_k * n});
    copy_to_host(got.bytes.data(), dout.buffer.data(), got.bytes.size());
    const cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::F32, b.in.view.data, ids.data(), b.p);
    const cpu::MatmulF64 dense{1, ref.rows, ref.n, k, ref.value, ref.abs_sum};
    EXPECT_TRUE(matches_reference(View::contiguous(got.view.data, DType::F32, {1, ref.rows, ref.n}), dense,
                                  Tolerance{1e-30, 1.0, (k + 1) * std::ldexp(1.0, -24), 0}))
        << route << ": replay with ids seed " << seed;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
}  // namespace

TEST(Tq2ExpertsGpu, GroupedSm90GraphReplayWithChangingIds) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_grouped_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  graph_replay_with_changing_ids(ctx, 96, "tq2_moe_grouped_sm90");
}

TEST(Tq2ExpertsGpu, StreamSm90GraphReplayWithChangingIds) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_stream_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  graph_replay_with_changing_ids(ctx, 6, "tq2_moe_stream_sm90");
}

// The streaming decode route against float64: every input dtype (f32 too: exact int8 digits),
// both output dtypes, shared / slotted / [m, top_k, k] inputs with padded rows (odd pads: the
// staging kernel's element loads), u32 / i32 / i64 ids with out-of-range ones, uniform, Zipf,
// skewed and repeated routings; K whole and in parts (n 204 x k 640 makes 2 parts), rows past n
// inside a 128-row box, one expert to 128, m to 16 and, forced, m = 40 with k 4096; the image
// converted in the blocks, staged with K whole and staged with K in parts.
TEST(Tq2ExpertsGpu, StreamSm90SweepAgainstFloat64) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_stream_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  struct S { std::uint32_t m, top_k, n, k, experts; Routing routing; int oor; };
  const S shapes[] = {{1, 1, 8, 128, 1, Routing::Uniform, 0},     {2, 8, 384, 1024, 16, Routing::Uniform, 0},
                      {5, 2, 204, 640, 3, Routing::Repeats, 3},   {16, 8, 300, 768, 64, Routing::Zipf, 7},
                      {3, 4, 136, 512, 16, Routing::Skewed, 5},   {40, 4, 136, 4096, 8, Routing::Uniform, 6},
                      {1, 8, 1536, 2048, 8, Routing::Uniform, 0}};  // K whole, staged (one item a block)
  std::uint64_t seed = 1300;
  int in_block = 0, staged = 0, staged_whole = 0;
  for (const S& s : shapes)
    for (DType in : {DType::F32, DType::F16, DType::BF16})
      for (DType out : {DType::F32, in})
        for (int layout = 0; layout < 3; ++layout) {
          if (out == DType::F32 && in == DType::F32 && layout == 1) continue;  // the same case twice
          Tq2MoeCase c = make_case(s.m, s.top_k, s.n, s.k, s.experts, in, out, ++seed);
          c.route = Tq2MoeRoute::StreamSm90;
          c.base.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
          c.base.input_rank3 = layout == 2;
          c.base.input_pad = layout == 1 ? 8 : layout == 2 ? 1 : 0;
          c.base.ids_dtype = layout == 0 ? DType::U32 : layout == 1 ? DType::I64 : DType::I32;
          c.base.routing = s.routing, c.base.out_of_range_every = s.oor;
          const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, nullptr);
          EXPECT_EQ(o.receipt.route, "tq2_moe_stream_sm90") << c.describe();
          // K whole: one kernel (the blocks convert their rows); K in parts: staging + stream.
          const auto cfg = cuda_ternary::tq2_moe_stream_config(s.m, s.top_k, s.n, s.k, s.experts, layout != 0,
                                                               ctx.arch().sm_count);
          ASSERT_TRUE(cfg.has_value()) << c.describe();
          EXPECT_EQ(o.receipt.kernels_launched, cfg->stage_in_block ? 1 : 2) << c.describe();
          EXPECT_EQ(o.receipt.kernel.find("_inblock") != std::string::npos, cfg->stage_in_block) << o.receipt.kernel;
          ++(cfg->stage_in_block ? in_block : staged);
          if (!cfg->stage_in_block && cfg->parts.parts == 1) ++staged_whole;
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << " [" << o.receipt.kernel << "]: " << o.cmp.summary();
          if (s.oor) EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
        }
  EXPECT_GT(in_block, 0) << "no case converted its rows in the blocks";
  EXPECT_GT(staged, staged_whole) << "no case staged its rows with K in parts";
  EXPECT_GT(staged_whole, 0) << "no case staged its rows with K whole";
}

// NaN and +-Inf in the input reach the outputs as IEEE arithmetic makes them (the int8 digits
// cannot carry them: a marked group makes the output recomputed in f32), in parts and whole.
// Every experts' decode config holds the blocks per SM it plans for (the occupancy API on the
// kernel it picks): m = 1..16, top_k 1 and 8, the Qwen3-30B and small shapes, both layouts, the
// three input types. (Session 16: gate_up m = 1 planned two blocks a SM at 98 registers, of which
// one fit; at 96 both fit and it ran 19% slower: plans must say what runs.)
TEST(Tq2ExpertsGpu, StreamSm90ConfigBlocksFit) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!ctx.arch().is_hopper()) GTEST_SKIP() << "tq2_moe_stream_sm90 is built for sm_90a";
  struct S { std::int64_t n, k, experts; };
  int checked = 0;
  for (S s : {S{1536, 2048, 128}, S{2048, 768, 128}, S{200, 384, 6}})
    for (std::int64_t m = 1; m <= 16; ++m)
      for (std::int64_t top_k : {1, 8})
        for (bool slotted : {false, true})
          for (DType in : {DType::F32, DType::F16, DType::BF16}) {
            const auto c = cuda_ternary::tq2_moe_stream_config(m, top_k, s.n, s.k, s.experts, slotted, ctx.arch().sm_count);
            if (!c) continue;
            const int fit = cuda_ternary::tq2_moe_stream_resident_blocks(*c, in, DType::F32);
            EXPECT_GE(fit, c->blocks_per_sm) << cuda_ternary::tq2_moe_stream_kernel_name(*c, in, DType::F32) << " m " << m
                                             << " top_k " << top_k << " n " << s.n << " k " << s.k;
            ++checked;
          }
  EXPECT_GT(checked, 200);
}

TEST(Tq2ExpertsGpu, StreamSm90NonFiniteInputs) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_stream_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 1500;
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (std::uint32_t k : {256u, 640u}) {
      Tq2MoeCase c = make_case(6, 4, 204, k, 8, in, DType::F32, ++seed);
      c.route = Tq2MoeRoute::StreamSm90;
      c.base.p.input_layout = MatmulIdInputLayout::Slotted;
      c.base.nonfinite_every = 3;
      c.base.out_of_range_every = 9;
      const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, nullptr);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    }
}

// Bitwise: the same call twice gives the same bytes, and a token's rows do not depend on m (the
// parts depend on n, k and top_k alone): the first 3 tokens of an m = 16 call equal an m = 3 call.
TEST(Tq2ExpertsGpu, StreamSm90DeterministicAndBatchInvariant) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!hopper(ctx)) GTEST_SKIP() << "tq2_moe_stream_sm90 is built for sm_90a; this GPU is sm_" << ctx.arch().cc();
  TernaryWeightCache cache(ctx);
  for (std::uint32_t k : {768u, 2048u}) {  // n 300, k 768: K in 2 parts; n 1536, k 2048: K whole
    const std::uint32_t n = k == 768 ? 300 : 1536;
    Tq2MoeCase big = make_case(16, 8, n, k, 32, DType::BF16, DType::F32, 77 + k);  // the seed keys the stack's upload
    big.route = Tq2MoeRoute::StreamSm90, big.base.routing = Routing::Zipf, big.base.out_of_range_every = 11;
    const Tq2MoeOutcome a = run_tq2_moe_case(ctx, cache, big, nullptr), b = run_tq2_moe_case(ctx, cache, big, nullptr);
    EXPECT_TRUE(a.cmp.ok()) << a.cmp.summary();
    EXPECT_EQ(a.out_bytes, b.out_bytes) << "tq2_moe_stream_sm90 is not bitwise deterministic (k " << k << ")";
    Tq2MoeCase small = big;
    small.base.p.m = 3;
    {  // the premise: the m = 3 case's input and ids are the m = 16 case's first 3 tokens
      MoeCase hb = big.base, hs = small.base;
      hb.w_dtype = hs.w_dtype = DType::F32;
      const MoeBuffers bb = make_moe_buffers(hb), bs = make_moe_buffers(hs);
      ASSERT_TRUE(std::equal(bs.in.bytes.begin(), bs.in.bytes.end(), bb.in.bytes.begin()));
      ASSERT_TRUE(std::equal(bs.ids.bytes.begin(), bs.ids.bytes.end(), bb.ids.bytes.begin()));
    }
    const Tq2MoeOutcome c = run_tq2_moe_case(ctx, cache, small, nullptr);
    ASSERT_EQ(c.out_bytes.size() * 16, a.out_bytes.size() * 3);
    EXPECT_TRUE(std::equal(c.out_bytes.begin(), c.out_bytes.end(), a.out_bytes.begin()))
        << "a token's rows depend on m (k " << k << ")";
  }
}

