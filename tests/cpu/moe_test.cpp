// matmul_id on the CPU: the capability's exact extents and every refusal, call validation (with
// nothing launched and nothing written), the injected second-kernel failure, the CPU route.
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/moe.hpp"
#include "support/expect_error.hpp"
#include "llmm/reference.hpp"
#include "support/moe_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
MatmulIdParams seed_params(MatmulIdRoute route = MatmulIdRoute::Direct) {
  MatmulIdParams p;
  p.m = 9, p.n = 7, p.k = 35, p.top_k = 2, p.n_experts = 4;
  p.expert_stride_bytes = 7 * 35 * 4;
  p.route = route;
  return p;
}
}  // namespace

TEST(MatmulIdCapability, SeedShapeExactExtents) {
  MatmulIdCapability c = matmul_id_capability(DType::F32, seed_params());
  EXPECT_EQ(c.schema_version, kMatmulIdSchemaVersion);
  EXPECT_EQ(c.route, MatmulIdRoute::Direct);
  EXPECT_EQ(c.required_weight_bytes, 4u * 7 * 35 * 4);
  EXPECT_EQ(c.required_input_bytes, 9u * 35 * 4);
  EXPECT_EQ(c.required_ids_bytes, 18u * 4);
  EXPECT_EQ(c.required_output_bytes, 18u * 7 * 4);
  EXPECT_FALSE(c.scratch.has_value());
  MatmulIdParams p = seed_params(MatmulIdRoute::GroupedPrefill);
  p.input_layout = MatmulIdInputLayout::Slotted;
  p.expert_stride_bytes = 7 * 35 * 2 + 64;  // f16 weights with padding between experts
  p.input_dtype = DType::BF16, p.output_dtype = DType::BF16;
  c = matmul_id_capability(DType::F16, p);
  EXPECT_EQ(c.required_weight_bytes, 3u * (7 * 35 * 2 + 64) + 7 * 35 * 2);
  EXPECT_EQ(c.required_input_bytes, 18u * 35 * 2);
  EXPECT_EQ(c.required_output_bytes, 18u * 7 * 2);
  ASSERT_TRUE(c.scratch.has_value());
  EXPECT_EQ(c.scratch->expert_counts_bytes, 16u);
  EXPECT_EQ(c.scratch->routed_rows_bytes, 18u * 4);  // every routed row once (a counting sort)
  // Padded input rows, i64 ids: the extents follow the strides and the id size.
  p = seed_params();
  p.input_token_stride = 40, p.ids_dtype = DType::I64;
  c = matmul_id_capability(DType::F32, p);
  EXPECT_EQ(c.required_input_bytes, (8u * 40 + 35) * 4);
  EXPECT_EQ(c.required_ids_bytes, 18u * 8);
  p.input_layout = MatmulIdInputLayout::Slotted, p.input_token_stride = 100, p.input_slot_stride = 36;
  c = matmul_id_capability(DType::F32, p);
  EXPECT_EQ(c.required_input_bytes, (8u * 100 + 36 + 35) * 4);
}

TEST(MatmulIdCapability, Refusals) {
  auto refused = [](MatmulIdParams p, DType w, const std::string& part) {
    expect_error([&] { matmul_id_capability(w, p); }, ErrorCode::InvalidArgument, part);
  };
  MatmulIdParams p = seed_params();
  p.k = 0;
  refused(p, DType::F32, "m, n, k, top_k and n_experts must be nonzero");
  p = seed_params(), p.top_k = 5;
  refused(p, DType::F32, "matmul_id: distinct top_k 5 exceeds n_experts 4");
  p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
  EXPECT_NO_THROW(matmul_id_capability(DType::F32, p));  // repeats may exceed the expert count
  p = seed_params(), p.n = 1, p.k = 7, p.expert_stride_bytes = 12;
  refused(p, DType::F32, "matmul_id: expert stride 12 is smaller than one 28-byte matrix");
  p = seed_params(), p.expert_stride_bytes = 7 * 35 * 2 + 3;
  refused(p, DType::F16, "expert stride 493 is not aligned to f16");
  p = seed_params(), p.n = 0xFFFFFFFFu, p.k = 0xFFFFFFFFu, p.expert_stride_bytes = ~0ull;
  refused(p, DType::F32, "overflows 64 bits");
  p = seed_params(), p.n_experts = 8, p.expert_stride_bytes = 1ull << 62;
  refused(p, DType::F32, "matmul_id expert weight offset");
  p = seed_params(), p.m = 1u << 30, p.top_k = 8, p.n_experts = 8;
  refused(p, DType::F32, "routed rows exceed the u32 range");
  p = seed_params(MatmulIdRoute::GroupedPrefill), p.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
  EXPECT_NO_THROW(matmul_id_capability(DType::F32, p));  // the grouped route takes any ids now
  p = seed_params(), p.ids_dtype = DType::F32;
  refused(p, DType::F32, "expert ids must be u32, i32 or i64, got f32");
  p = seed_params(), p.input_slot_stride = 35;
  refused(p, DType::F32, "a SharedPerToken input has no slot stride (35 given)");
  p = seed_params(), p.m = 3, p.input_token_stride = 1ull << 62;
  refused(p, DType::F32, "matmul_id input byte extent");
  p = seed_params(MatmulIdRoute::GroupedPrefill), p.n_experts = 1025;
  refused(p, DType::F32, "grouped prefill supports at most 1024 experts, got 1025");
  refused(seed_params(), DType::U8, "weights must be f32, f16, bf16 or f8e4m3 (with scales), got u8");
  p = seed_params(), p.output_dtype = DType::F16;
  refused(p, DType::F32, "output must be f32 or the input's dtype (f32), got f16");
}

namespace {
// Buffers of the seed shape on the CPU; out and the scratch are poisoned / sentinel-filled.
struct SeedBufs {
  std::vector<float> w = std::vector<float>(4 * 7 * 35, 0.5f), in = std::vector<float>(9 * 35, 0.25f),
                     out = std::vector<float>(18 * 7, NAN);
  std::vector<std::uint32_t> ids = std::vector<std::uint32_t>(18);
  SeedBufs() {
    for (std::uint32_t i = 0; i < 18; ++i) ids[i] = (i % 2) ? 1 : 2;
  }
  View wv() { return View::contiguous(w.data(), DType::F32, {4, 7, 35}); }
  View iv() { return View::contiguous(in.data(), DType::F32, {9, 35}); }
  View idv() { return View::contiguous(ids.data(), DType::U32, {9, 2}); }
  View ov() { return View::contiguous(out.data(), DType::F32, {9, 2, 7}); }
};

// A CPU context with a launch recorder, the seed's buffers (output NaN) and a scratch whose counts
// hold a sentinel: what a refused call or a plan must leave as it found.
struct Watched {
  Context ctx = Context::cpu();
  LaunchRecorder rec;
  SeedBufs b;
  MatmulIdScratch scratch{ctx, 4, 9};
  Watched() {
    ctx.set_launch_recorder(&rec);
    std::fill(scratch.counts(), scratch.counts() + 4, 0xABCDu);
  }
  void expect_untouched(const std::string& what) {
    EXPECT_TRUE(rec.launched.empty()) << what;
    for (float x : b.out) ASSERT_TRUE(std::isnan(x)) << "output written by " << what;
    for (int e = 0; e < 4; ++e) EXPECT_EQ(scratch.counts()[e], 0xABCDu) << "scratch written by " << what;
  }
};

void expect_call_refused(const std::function<void(Context&, SeedBufs&, MatmulIdScratch&)>& call, ErrorCode code,
                         const std::string& part) {
  Watched w;
  expect_error([&] { call(w.ctx, w.b, w.scratch); }, code, part);
  w.expect_untouched("a refused call: " + part);
}
}  // namespace

TEST(MatmulIdCall, RefusalsLaunchNothingWriteNothing) {
  using C = Context;
  using S = MatmulIdScratch;
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // weights' k 34 against the params' 35
    matmul_id(c, View::contiguous(b.w.data(), DType::F32, {4, 7, 34}), b.iv(), b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: input must be [m, k] (layout shared) with m 9, top_k 2 (from ids) and k 34 (from weights), got f32[9, 35]");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), View::contiguous(b.in.data(), DType::F16, {9, 35}), b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: params.input_dtype is f32 but the views give f16");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), View::contiguous(b.ids.data(), DType::F32, {9, 2}), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: expert ids must be u32, i32 or i64, got f32");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), b.idv(), View::contiguous(b.out.data(), DType::F32, {9, 2, 6}), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: output must be [m, top_k, n] = [9, 2, 7]");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), b.idv(), View::contiguous(b.w.data() + 100, DType::F32, {9, 2, 7}), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: output must not overlap weights");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), b.idv(), View::contiguous(b.in.data() + 150, DType::F32, {9, 2, 7}), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: output must not overlap input");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    // ids and output inside one arena, so the output can only overlap the ids (not whatever the
    // heap placed after b.ids).
    std::vector<float> arena(200, NAN);
    std::memcpy(arena.data(), b.ids.data(), 18 * 4);
    View ids = View::contiguous(arena.data(), DType::U32, {9, 2});
    matmul_id(c, b.wv(), b.iv(), ids, View::contiguous(arena.data() + 10, DType::F32, {9, 2, 7}), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: output must not overlap expert ids");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    MatmulIdScratch small(c, 4, 8);
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &small, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::InvalidArgument, "matmul_id: scratch capacity experts/tokens=4/8 is smaller than 4/9");
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // 9 tokens x top_k 2 = 18 routed rows, room for 9
    MatmulIdScratch narrow(c, 4, 9, 1);
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &narrow, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::InvalidArgument, "scratch holds 9 routed rows (max_tokens 9 x max_top_k 1), the call routes 9 x 2 = 18");
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // each expert's rows strided: not a row-major matrix
    matmul_id(c, View::strided(b.w.data(), DType::F32, {4, 7, 35}, {490, 70, 1}), b.iv(), b.idv(), b.ov(), nullptr,
              seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: weights must have strides [expert stride, k, 1]");
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // a padded expert stride the params do not say
    matmul_id(c, View::strided(b.w.data(), DType::F32, {4, 7, 35}, {240, 35, 1}), b.iv(), b.idv(), b.ov(), nullptr,
              seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: params.expert_stride_bytes is 980 but the views give 960");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    View dev = b.iv();
    dev.device = DeviceKind::CUDA;
    matmul_id(c, b.wv(), dev, b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: input is on");
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // the params' top_k against the ids' shape
    MatmulIdParams p = seed_params();
    p.top_k = 1;
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, p);
  }, ErrorCode::InvalidArgument, "matmul_id: params.top_k is 1 but the views give 2");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    MatmulIdParams p = seed_params();
    p.top_k = 5;
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, p);
  }, ErrorCode::InvalidArgument, "params.top_k is 5 but the views give 2");
  expect_call_refused([](C& c, SeedBufs& b, S&) {  // slotted rows given as shared
    matmul_id(c, b.wv(), View::contiguous(b.in.data(), DType::F32, {18, 17}), b.idv(), b.ov(), nullptr,
              MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::DistinctPerToken, MatmulIdRoute::Direct);
  }, ErrorCode::InvalidArgument, "got f32[18, 17]");
  // A grouped GEMM asked for by name on a CPU context (which would run the reference instead), in
  // the call and in its plan; the direct route ignores the option.
  for (MatmulIdGroupedKernel k : {MatmulIdGroupedKernel::MmaSync, MatmulIdGroupedKernel::TiledSm90,
                                  MatmulIdGroupedKernel::TiledSm90Fused}) {
    const std::string why = std::string("matmul_id: grouped kernel ") + matmul_id_grouped_kernel_name(k) +
                            " runs on CUDA devices only (a CPU context runs the reference";
    MatmulIdOptions opts;
    opts.grouped_kernel = k;
    expect_call_refused([&](C& c, SeedBufs& b, S& s) {
      matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &s, seed_params(MatmulIdRoute::GroupedPrefill), opts);
    }, ErrorCode::Unsupported, why);
    expect_call_refused([&](C& c, SeedBufs& b, S& s) {
      plan_matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &s, seed_params(MatmulIdRoute::GroupedPrefill), opts);
    }, ErrorCode::Unsupported, why);
    Watched w;
    const Receipt r = matmul_id(w.ctx, w.b.wv(), w.b.iv(), w.b.idv(), w.b.ov(), &w.scratch, seed_params(), opts);
    EXPECT_EQ(r.route, std::string("direct")) << matmul_id_grouped_kernel_name(k);
    for (float x : w.b.out) ASSERT_FALSE(std::isnan(x)) << "the direct route with grouped_kernel " << matmul_id_grouped_kernel_name(k);
  }
  // The seed's test: the grouped route's second kernel cannot be launched -> nothing ran at all.
  expect_call_refused([](C& c, SeedBufs& b, S& s) {
    c.launch_recorder()->before_launch = [](const std::string& k) {
      if (k == "cpu_matmul_id_reference") fail(ErrorCode::Cuda, "injected failure resolving ", k);
    };
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &s, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::Cuda, "injected failure resolving cpu_matmul_id_reference");
  expect_error([] { MatmulIdScratch(Context::cpu(), 0, 4); }, ErrorCode::InvalidArgument, "capacities must be nonzero");
}

// plan_matmul_id: the kernels the call then launches (as the launch recorder sees them), nothing
// launched or written by the plan itself, and the call's refusals thrown by the plan.
TEST(MatmulIdPlan, CpuPlanIsWhatTheCallLaunches) {
  Watched w;
  Context& ctx = w.ctx;
  LaunchRecorder& rec = w.rec;
  SeedBufs& b = w.b;
  MatmulIdScratch& scratch = w.scratch;
  for (MatmulIdRoute route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    const MatmulIdParams p = seed_params(route);
    const MatmulIdPlan plan = plan_matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), &scratch, p);
    w.expect_untouched(std::string("a plan of ") + matmul_id_route_name(route));  // (the direct call writes no counts)
    EXPECT_EQ(plan.route, route);
    EXPECT_FALSE(plan.engine);
    EXPECT_FALSE(plan.staged);
    const Receipt r = matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), &scratch, p);
    EXPECT_EQ(rec.launched, plan.kernels) << matmul_id_route_name(route);
    EXPECT_EQ(r.kernels_launched, static_cast<int>(plan.kernels.size()));
    EXPECT_EQ(r.route, matmul_id_route_name(plan.route));
    rec.launched.clear();
    std::fill(b.out.begin(), b.out.end(), NAN);
  }
  // No scratch: the context's own serves the call; the plan says so and allocates nothing.
  const MatmulIdPlan pooled = plan_matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, seed_params(MatmulIdRoute::GroupedPrefill));
  std::fill(scratch.counts(), scratch.counts() + 4, 0xABCDu);  // the grouped call above wrote them
  w.expect_untouched("a plan without a scratch");
  EXPECT_TRUE(pooled.pooled);
  EXPECT_EQ(pooled.kernels, (std::vector<std::string>{"cpu_matmul_id_map", "cpu_matmul_id_reference"}));
  EXPECT_FALSE(plan_matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), &scratch, seed_params(MatmulIdRoute::GroupedPrefill)).pooled);
  MatmulIdScratch small(ctx, 4, 8);
  expect_error([&] { plan_matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), &small, seed_params(MatmulIdRoute::GroupedPrefill)); },
               ErrorCode::InvalidArgument, "matmul_id: scratch capacity experts/tokens=4/8 is smaller than 4/9");
  MatmulIdParams wrong = seed_params();
  wrong.top_k = 1;
  expect_error([&] { plan_matmul_id(ctx, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, wrong); }, ErrorCode::InvalidArgument,
               "matmul_id: params.top_k is 1 but the views give 2");
  View gpu_input = b.iv();
  gpu_input.device = DeviceKind::CUDA;
  expect_error([&] { plan_matmul_id(ctx, b.wv(), gpu_input, b.idv(), b.ov(), nullptr, seed_params()); },
               ErrorCode::InvalidArgument, "matmul_id: input is on");
  // No output element: no kernel. k == 0: the zero rows, on the direct route whatever was asked.
  MatmulIdParams none = seed_params();
  none.m = 0;
  const MatmulIdPlan empty = plan_matmul_id(ctx, b.wv(), View::contiguous(b.in.data(), DType::F32, {0, 35}),
                                            View::contiguous(b.ids.data(), DType::U32, {0, 2}),
                                            View::contiguous(b.out.data(), DType::F32, {0, 2, 7}), nullptr, none);
  EXPECT_TRUE(empty.kernels.empty());
  MatmulIdParams zero_k = seed_params(MatmulIdRoute::GroupedPrefill);
  zero_k.k = 0, zero_k.expert_stride_bytes = 0;
  const MatmulIdPlan zeros = plan_matmul_id(ctx, View::contiguous(b.w.data(), DType::F32, {4, 7, 0}),
                                            View::contiguous(b.in.data(), DType::F32, {9, 0}), b.idv(), b.ov(), &scratch,
                                            zero_k);
  EXPECT_EQ(zeros.route, MatmulIdRoute::Direct);
  EXPECT_EQ(zeros.kernels, std::vector<std::string>{"cpu_matmul_id_reference"});
}

// A grouped call given no scratch uses the context's own, grown when a call needs more and
// reused by smaller ones; every result as the float64 reference's.
TEST(MatmulIdCpu, GroupedWithoutScratchUsesTheContextsOwn) {
  Context ctx = Context::cpu(2);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  std::vector<const void*> counts_at;  // where each call's map wrote its counts
  for (std::uint32_t m : {3u, 9u, 40u, 9u}) {
    MoeCase c;
    c.p = seed_params(MatmulIdRoute::GroupedPrefill);
    c.p.m = m, c.p.top_k = 3;
    c.w_dtype = DType::BF16, c.out_of_range_every = 5, c.seed = m, c.shape_form = m == 40;
    rec.records.clear();
    const MoeOutcome o = run_moe_case(ctx, c, nullptr);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
    ASSERT_EQ(o.receipt.kernels_launched, 2) << c.describe();
    ASSERT_EQ(rec.records.size(), 2u);
    ASSERT_EQ(rec.records[0].kernel, "cpu_matmul_id_map");
    EXPECT_EQ(rec.records[0].ranges.writes.at(1).bytes, m * 3u * 4) << "the routed-row lists of " << c.describe();
    counts_at.push_back(rec.records[0].ranges.writes.at(0).begin);
  }
  EXPECT_EQ(counts_at[0], counts_at[1]) << "m 9 fits the scratch m 3 grew (tokens to a power of two, >= 16)";
  EXPECT_EQ(counts_at[2], counts_at[3]) << "m 9 after m 40: the grown scratch is reused";
}

// Auto, the default route, runs what suggest_matmul_id_route says for the call on the context's
// device, with or without a scratch.
TEST(MatmulIdCpu, AutoRunsTheSuggestedRoute) {
  EXPECT_EQ(MatmulIdParams{}.route, MatmulIdRoute::Auto);
  EXPECT_STREQ(matmul_id_route_name(MatmulIdRoute::Auto), "auto");
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 4, 64, 2);
  int grouped = 0, direct = 0;
  for (std::uint32_t m : {1u, 3u, 8u, 9u, 64u})
    for (MatmulIdScratch* s : {static_cast<MatmulIdScratch*>(nullptr), &scratch}) {
      MoeCase c;
      c.p = seed_params(MatmulIdRoute::Auto);
      c.p.m = m;
      c.w_dtype = DType::F16, c.out_of_range_every = 6, c.seed = m;
      const MoeOutcome o = run_moe_case(ctx, c, s);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
      const MatmulIdRoute want = suggest_matmul_id_route(c.p, ctx.arch());
      EXPECT_EQ(o.receipt.route, std::string(matmul_id_route_name(want))) << c.describe();
      (want == MatmulIdRoute::Direct ? direct : grouped) += 1;
    }
  EXPECT_GT(grouped, 0);  // both routes reached: the check above is not vacuous
  EXPECT_GT(direct, 0);
  // The capability of an Auto call reports no scratch (a call without one uses the context's).
  EXPECT_FALSE(matmul_id_capability(DType::F32, seed_params(MatmulIdRoute::Auto)).scratch.has_value());
  MatmulIdParams many = seed_params(MatmulIdRoute::Auto);
  many.n_experts = 2000, many.expert_stride_bytes = 7 * 35 * 4;
  EXPECT_NO_THROW(matmul_id_capability(DType::F32, many));  // Auto takes direct beyond the grouped limit
  EXPECT_EQ(suggest_matmul_id_route(many, ctx.arch()), MatmulIdRoute::Direct);
}

// Staging room is a CUDA-only extra: a CPU scratch ignores it (the reference never stages).
TEST(MatmulIdScratchHost, StagingRoomIsIgnoredOnTheCpu) {
  MatmulIdScratch s(Context::cpu(), 4, 9, 2, 4096 * 2);
  EXPECT_EQ(s.staged(), nullptr);
  EXPECT_EQ(s.staged_bytes(), 0u);
  EXPECT_EQ(s.staged_row_bytes(), 0u);
  EXPECT_EQ(s.row_capacity(), 18u);
}

// A host scratch that cannot be had is an llmm::Error, not std::bad_alloc (excluded from the
// ASan build, which aborts on allocations above 2^40 bytes instead of failing them).
TEST(MatmulIdScratchHost, HugeRequestIsOutOfMemory) {
  expect_error([] { MatmulIdScratch(Context::cpu(), 4, 1u << 31, 1u << 15); }, ErrorCode::OutOfMemory,  // 2^48 bytes
               "MatmulIdScratch: cannot allocate");
}

// The shape mismatches that computed garbage before the views were checked by shape (each was
// accepted with "enough bytes"): now refused by the shape form, naming the sizes.
TEST(MatmulIdCall, ShapeMismatchesAreRefused) {
  Context ctx = Context::cpu();
  std::vector<float> w(8 * 64 * 128, 0.5f), x(4 * 64, 0.25f), out(4 * 1 * 64, NAN);
  std::vector<std::uint32_t> ids(4, 1);
  auto call = [&](View wv, View xv, View idv, View ov) {
    matmul_id(ctx, wv, xv, idv, ov, nullptr, MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::DistinctPerToken,
              MatmulIdRoute::Direct);
  };
  auto refused = [&](View wv, View xv, View idv, View ov, const std::string& part) {
    std::fill(out.begin(), out.end(), NAN);
    expect_error([&] { call(wv, xv, idv, ov); }, ErrorCode::InvalidArgument, part);
    for (float v : out) ASSERT_TRUE(std::isnan(v)) << part;
  };
  // weights [8, 64, 128] (k 128) with x [4, 64]
  refused(View::contiguous(w.data(), DType::F32, {8, 64, 128}), View::contiguous(x.data(), DType::F32, {4, 64}),
          View::contiguous(ids.data(), DType::U32, {4, 1}), View::contiguous(out.data(), DType::F32, {4, 1, 64}),
          "input must be [m, k] (layout shared) with m 4, top_k 1 (from ids) and k 128 (from weights), got f32[4, 64]");
  // weights [2, 3, 8] with x [1, 4], ids [[1]]
  refused(View::contiguous(w.data(), DType::F32, {2, 3, 8}), View::contiguous(x.data(), DType::F32, {1, 4}),
          View::contiguous(ids.data(), DType::U32, {1, 1}), View::contiguous(out.data(), DType::F32, {1, 1, 3}),
          "and k 8 (from weights), got f32[1, 4]");
  // out [3, 2, 2] for weights [4, 2, 3], x [3, 3], ids [3, 1]
  refused(View::contiguous(w.data(), DType::F32, {4, 2, 3}), View::contiguous(x.data(), DType::F32, {3, 3}),
          View::contiguous(ids.data(), DType::U32, {3, 1}), View::contiguous(out.data(), DType::F32, {3, 2, 2}),
          "output must be [m, top_k, n] = [3, 1, 2]");
  // out with fewer tokens than ids; out's n smaller than the weights'
  refused(View::contiguous(w.data(), DType::F32, {4, 2, 3}), View::contiguous(x.data(), DType::F32, {4, 3}),
          View::contiguous(ids.data(), DType::U32, {4, 1}), View::contiguous(out.data(), DType::F32, {3, 1, 2}),
          "output must be [m, top_k, n] = [4, 1, 2]");
  refused(View::contiguous(w.data(), DType::F32, {4, 2, 3}), View::contiguous(x.data(), DType::F32, {4, 3}),
          View::contiguous(ids.data(), DType::U32, {4, 1}), View::contiguous(out.data(), DType::F32, {4, 1, 1}),
          "output must be [m, top_k, n] = [4, 1, 2]");
  // n = 2^32 + 1: refused by the range check, never narrowed to 1 (views of a fake address:
  // nothing is read or written before the refusal).
  void* fake = reinterpret_cast<void*>(std::uintptr_t{1} << 40);
  const std::int64_t big = (std::int64_t{1} << 32) + 1;
  expect_error([&] {
    call(View::contiguous(fake, DType::F32, {1, big, 1}), View::contiguous(x.data(), DType::F32, {1, 1}),
         View::contiguous(ids.data(), DType::U32, {1, 1}), View::contiguous(fake, DType::F32, {1, 1, big}));
  }, ErrorCode::InvalidArgument, "matmul_id: n 4294967297 is outside 0..4294967295");
  // Ranks: a byte buffer is not a weight stack.
  refused(View::contiguous(w.data(), DType::F32, {2 * 3 * 8}), View::contiguous(x.data(), DType::F32, {1, 8}),
          View::contiguous(ids.data(), DType::U32, {1, 1}), View::contiguous(out.data(), DType::F32, {1, 1, 3}),
          "weights must be [n_experts, n, k], got f32[48]");
}

TEST(MatmulIdCpu, SeedShapeEveryDtypeLayoutRoute) {
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 4, 9);
  for (DType w : {DType::F32, DType::F16, DType::BF16})
    for (DType in : {DType::F32, w})
      for (auto layout : {MatmulIdInputLayout::SharedPerToken, MatmulIdInputLayout::Slotted})
        for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
          MoeCase c;
          c.p = seed_params(route);
          c.p.input_layout = layout, c.p.input_dtype = in, c.p.output_dtype = in;
          c.w_dtype = w, c.expert_pad = 5, c.out_of_range_every = 7;
          MoeOutcome o = run_moe_case(ctx, c, &scratch);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
          EXPECT_GT(o.zero_rows_checked, 0);
          EXPECT_EQ(o.receipt.kernels_launched, route == MatmulIdRoute::Direct ? 1 : 2);
        }
  // The grouped map lists each expert's rows in token order, the experts one after another.
  MoeCase c;
  c.p = seed_params(MatmulIdRoute::GroupedPrefill);
  c.w_dtype = DType::F32, c.out_of_range_every = 4;
  run_moe_case(ctx, c, &scratch);
  std::vector<std::int64_t> ids = make_ids(c);
  std::uint32_t at = 0;
  for (std::uint32_t e = 0; e < 4; ++e) {
    std::vector<std::uint32_t> want;
    for (std::uint32_t r = 0; r < ids.size(); ++r)
      if (ids[r] == e) want.push_back(r);
    ASSERT_EQ(scratch.counts()[e], want.size()) << e;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(scratch.rows()[at + i], want[i]);
    at += static_cast<std::uint32_t>(want.size());
  }
}

// Strides, id dtypes and repeats on both routes, in both call forms.
TEST(MatmulIdCpu, PaddedStridesIdDtypesRepeatsBothRoutes) {
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 5, 6, 4);
  std::uint64_t seed = 1;
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
    for (DType ids : {DType::U32, DType::I32, DType::I64})
      for (int layout = 0; layout < 4; ++layout)  // shared, slotted, [m, top_k, k], slot by slot
        for (Routing routing : {Routing::Uniform, Routing::Repeats}) {
          MoeCase c;
          c.p = seed_params(route);
          c.p.m = 6, c.p.n = 9, c.p.k = 19, c.p.top_k = 4, c.p.n_experts = 5;
          c.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
          c.input_rank3 = layout == 2, c.slot_major = layout == 3;
          c.p.id_multiplicity = routing == Routing::Repeats ? MatmulIdMultiplicity::MayRepeat : MatmulIdMultiplicity::DistinctPerToken;
          c.w_dtype = DType::BF16, c.expert_pad = 13, c.input_pad = 3, c.ids_dtype = ids;
          c.routing = routing, c.out_of_range_every = 5, c.shape_form = seed % 2 == 0, c.seed = ++seed;
          MoeOutcome o = run_moe_case(ctx, c, &scratch);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
          EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
        }
}

// The case: 4 tokens, ids [[1, 1]] x 4 on the grouped route while the caller declared
// them distinct: every routed row is computed (the map is a counting sort now).
TEST(MatmulIdCpu, GroupedRepeatedIdsDeclaredDistinct) {
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 4, 4, 2);
  MoeCase c;
  c.p = seed_params(MatmulIdRoute::GroupedPrefill);
  c.p.m = 4, c.p.n = 8, c.p.k = 16, c.p.top_k = 2, c.p.n_experts = 4;
  c.w_dtype = DType::F32, c.routing = Routing::Skewed;  // every token on experts 3, 2
  MoeBuffers b = make_moe_buffers(c);
  for (int r = 0; r < 8; ++r) static_cast<std::uint32_t*>(b.ids.view.data)[r] = 1;
  Receipt rec = matmul_id(ctx, b.w.view, b.in.view, b.ids.view, b.out.view, &scratch, b.p);
  EXPECT_EQ(rec.kernels_launched, 2);
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::F32, b.in.view.data, b.ids.view.data, b.p);
  cpu::MatmulF64 dense{1, ref.rows, ref.n, 16, ref.value, ref.abs_sum};
  EXPECT_TRUE(matches_reference(View::contiguous(b.out.view.data, DType::F32, {1, 8, 8}), dense,
                                Tolerance{1e-30, 1.0, 16 * std::ldexp(1.0, -24), 0}));
  EXPECT_EQ(scratch.counts()[1], 8u);
}

// Empty calls write nothing; k == 0 and no experts give zeros; on every route.
TEST(MatmulIdCpu, EmptyAndZeroSizes) {
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 4, 4);
  std::vector<float> w(4 * 3 * 5, 1.0f), x(4 * 5, 1.0f), out(4 * 2 * 3, NAN);
  std::vector<std::uint32_t> ids = {0, 1, 2, 3, 1, 0, 3, 2};
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    auto call = [&](View wv, View xv, View idv, View ov) {
      return matmul_id(ctx, wv, xv, idv, ov, &scratch, MatmulIdInputLayout::SharedPerToken,
                       MatmulIdMultiplicity::DistinctPerToken, route);
    };
    // m == 0, top_k == 0, n == 0: nothing to write, nothing launched.
    rec.launched.clear();
    Receipt r = call(View::contiguous(w.data(), DType::F32, {4, 3, 5}), View::contiguous(x.data(), DType::F32, {0, 5}),
                     View::contiguous(ids.data(), DType::U32, {0, 2}), View::contiguous(out.data(), DType::F32, {0, 2, 3}));
    EXPECT_EQ(r.kernels_launched, 0);
    r = call(View::contiguous(w.data(), DType::F32, {4, 3, 5}), View::contiguous(x.data(), DType::F32, {4, 5}),
             View::contiguous(ids.data(), DType::U32, {4, 0}), View::contiguous(out.data(), DType::F32, {4, 0, 3}));
    EXPECT_EQ(r.kernels_launched, 0);
    r = call(View::contiguous(w.data(), DType::F32, {4, 0, 5}), View::contiguous(x.data(), DType::F32, {4, 5}),
             View::contiguous(ids.data(), DType::U32, {4, 2}), View::contiguous(out.data(), DType::F32, {4, 2, 0}));
    EXPECT_EQ(r.kernels_launched, 0);
    EXPECT_TRUE(rec.launched.empty());
    for (float v : out) ASSERT_TRUE(std::isnan(v));
    // k == 0: empty sums; no experts: every id out of range. Both are zeros.
    r = call(View::contiguous(w.data(), DType::F32, {4, 3, 0}), View::contiguous(x.data(), DType::F32, {4, 0}),
             View::contiguous(ids.data(), DType::U32, {4, 2}), View::contiguous(out.data(), DType::F32, {4, 2, 3}));
    EXPECT_EQ(r.kernels_launched, 1);
    for (float v : out) ASSERT_EQ(v, 0.0f);
    std::fill(out.begin(), out.end(), NAN);
    r = call(View::contiguous(w.data(), DType::F32, {0, 3, 5}), View::contiguous(x.data(), DType::F32, {4, 5}),
             View::contiguous(ids.data(), DType::U32, {4, 2}), View::contiguous(out.data(), DType::F32, {4, 2, 3}));
    for (float v : out) ASSERT_EQ(v, 0.0f);
    std::fill(out.begin(), out.end(), NAN);
  }
}

TEST(MatmulIdSuggest, CrossoverMatchesTheMeasuredPoints) {
  ArchInfo h200;
  h200.kind = DeviceKind::CUDA, h200.cc_major = 9, h200.sm_count = 132;
  auto route = [&](std::uint32_t m, std::uint32_t top_k, std::uint32_t e) {
    MatmulIdParams p;
    p.m = m, p.n = 1024, p.k = 1024, p.top_k = top_k, p.n_experts = e;
    return suggest_matmul_id_route(p, h200);
  };
  // Measured (run 5): direct faster at these points ...
  EXPECT_EQ(route(16, 8, 128), MatmulIdRoute::Direct);   // Qwen3: 153 vs 294 us
  EXPECT_EQ(route(4, 2, 8), MatmulIdRoute::Direct);      // Mixtral: 197 vs 430 us
  EXPECT_EQ(route(16, 2, 8), MatmulIdRoute::Direct);     // Mixtral: 488 vs 535 us
  EXPECT_EQ(route(64, 8, 256), MatmulIdRoute::Direct);   // DeepSeek-like: 4316 vs 7001 us
  EXPECT_EQ(route(1, 8, 128), MatmulIdRoute::Direct);    // decode
  // ... grouped faster here.
  EXPECT_EQ(route(64, 2, 8), MatmulIdRoute::GroupedPrefill);     // Mixtral: 545 vs 1687 us
  EXPECT_EQ(route(256, 8, 128), MatmulIdRoute::GroupedPrefill);  // prefill
  EXPECT_EQ(route(4096, 8, 256), MatmulIdRoute::GroupedPrefill);
  MatmulIdParams rep;
  rep.m = 4096, rep.top_k = 8, rep.n_experts = 8, rep.id_multiplicity = MatmulIdMultiplicity::MayRepeat;
  EXPECT_EQ(suggest_matmul_id_route(rep, h200), MatmulIdRoute::GroupedPrefill);  // repeats are fine there now
  rep.id_multiplicity = MatmulIdMultiplicity::DistinctPerToken, rep.n_experts = 2048;
  EXPECT_EQ(suggest_matmul_id_route(rep, h200), MatmulIdRoute::Direct);  // beyond the grouped limit
}

// bf16 input on sm_90 (the grouped route runs the Hopper engine; at m <= 16 the engine sorts the
// routed rows itself): the H200 points of 2026-12-06, us (direct vs grouped, llmm-bench --suite
// moe --decode), and run 9's above m 16.
TEST(MatmulIdSuggest, HopperEngineCrossover) {
  ArchInfo h200;
  h200.kind = DeviceKind::CUDA, h200.cc_major = 9, h200.cc_minor = 0, h200.sm_count = 132;
  auto route = [&](std::uint32_t m, std::uint32_t top_k, std::uint32_t e, DType in = DType::BF16) {
    MatmulIdParams p;
    p.m = m, p.n = 1024, p.k = 1024, p.top_k = top_k, p.n_experts = e, p.input_dtype = in, p.output_dtype = in;
    return suggest_matmul_id_route(p, h200);
  };
  EXPECT_EQ(route(16, 8, 128), MatmulIdRoute::GroupedPrefill);  // Qwen3 gate_up uniform: 149.3 vs 136.2
  EXPECT_EQ(route(16, 8, 256), MatmulIdRoute::GroupedPrefill);  // DeepSeek uniform: 1369.7 vs 1356.3
  EXPECT_EQ(route(8, 2, 8), MatmulIdRoute::GroupedPrefill);     // Mixtral uniform: 292.7 vs 232.2
  EXPECT_EQ(route(8, 8, 256), MatmulIdRoute::GroupedPrefill);   // DeepSeek hot: 418.6 vs 120.5 (uniform 768.0 vs 842.0)
  EXPECT_EQ(route(4, 8, 128), MatmulIdRoute::GroupedPrefill);   // Qwen3 down hot: 21.8 vs 11.7 (uniform 28.7 vs 33.0)
  EXPECT_EQ(route(4, 2, 8), MatmulIdRoute::GroupedPrefill);     // Mixtral Zipf: 136.4 vs 97.7
  EXPECT_EQ(route(64, 8, 128), MatmulIdRoute::GroupedPrefill);  // Qwen3 gate_up: 443.7 vs 205.9 (run 9)
  EXPECT_EQ(route(64, 8, 256), MatmulIdRoute::GroupedPrefill);  // DeepSeek: 4244.7 vs 3073.8 (run 9)
  // m <= 2 (the engine not measured there: direct), f32 input and other GPUs: the run-5 rule.
  EXPECT_EQ(route(2, 8, 128), MatmulIdRoute::Direct);
  EXPECT_EQ(route(1, 8, 256), MatmulIdRoute::Direct);
  EXPECT_EQ(route(2, 2, 8), MatmulIdRoute::Direct);
  EXPECT_EQ(route(64, 8, 256, DType::F32), MatmulIdRoute::Direct);
  MatmulIdParams many;  // beyond the grouped route's expert limit, even on the engine
  many.m = 64, many.n = 1024, many.k = 1024, many.top_k = 8, many.n_experts = kMatmulIdGroupedMaxExperts + 1;
  many.input_dtype = DType::BF16;
  EXPECT_EQ(suggest_matmul_id_route(many, h200), MatmulIdRoute::Direct);
  ArchInfo a100 = h200;
  a100.cc_major = 8;
  MatmulIdParams p;
  p.m = 64, p.n = 1024, p.k = 1024, p.top_k = 8, p.n_experts = 256, p.input_dtype = DType::BF16;
  EXPECT_EQ(suggest_matmul_id_route(p, a100), MatmulIdRoute::Direct);
}

TEST(MatmulIdCpu, NonFiniteInputsPropagate) {
  Context ctx = Context::cpu(2);
  MatmulIdScratch scratch(ctx, 4, 9);
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    MoeCase c;
    c.p = seed_params(route);
    c.w_dtype = DType::BF16, c.nonfinite_every = 4;
    MoeOutcome o = run_moe_case(ctx, c, &scratch);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    EXPECT_GT(o.cmp.nonfinite, 0);
  }
}
