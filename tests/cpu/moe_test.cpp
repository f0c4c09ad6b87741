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
  EXPECT_EQ(c.scratch->routed_rows_bytes, 4u * 9 * 4);
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
  refused(p, DType::F32, "grouped prefill requires distinct expert ids per token");
  p = seed_params(MatmulIdRoute::GroupedPrefill), p.n_experts = 1025;
  refused(p, DType::F32, "grouped prefill supports at most 1024 experts, got 1025");
  refused(seed_params(), DType::U8, "weights must be f32, f16 or bf16, got u8");
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

void expect_call_refused(const std::function<void(Context&, SeedBufs&, MatmulIdScratch&)>& call, ErrorCode code,
                         const std::string& part) {
  Context ctx = Context::cpu();
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  SeedBufs b;
  MatmulIdScratch scratch(ctx, 4, 9);
  std::fill(scratch.counts(), scratch.counts() + 4, 0xABCDu);
  expect_error([&] { call(ctx, b, scratch); }, code, part);
  EXPECT_TRUE(rec.launched.empty()) << part;
  for (float x : b.out) ASSERT_TRUE(std::isnan(x)) << "output written by a refused call: " << part;
  for (int e = 0; e < 4; ++e) EXPECT_EQ(scratch.counts()[e], 0xABCDu) << "scratch written by a refused call: " << part;
}
}  // namespace

TEST(MatmulIdCall, RefusalsLaunchNothingWriteNothing) {
  using C = Context;
  using S = MatmulIdScratch;
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, View::contiguous(b.w.data(), DType::F32, {4, 7, 34}), b.iv(), b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: weights requires 3920 logical bytes, got 3808");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), View::contiguous(b.in.data(), DType::F16, {9, 35}), b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: input must be f32, got f16");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), View::contiguous(b.ids.data(), DType::F32, {9, 2}), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: expert ids must be u32, got f32");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, b.wv(), b.iv(), b.idv(), View::contiguous(b.out.data(), DType::F32, {9, 2, 6}), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: output requires 504 logical bytes, got 432");
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
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::InvalidArgument, "matmul_id: grouped prefill requires caller-owned scratch");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    MatmulIdScratch small(c, 4, 8);
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &small, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::InvalidArgument, "matmul_id: scratch capacity experts/tokens=4/8 is smaller than 4/9");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    matmul_id(c, View::strided(b.w.data(), DType::F32, {4, 7, 35}, {490, 70, 1}), b.iv(), b.idv(), b.ov(), nullptr,
              seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: weights must be contiguous");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    View dev = b.iv();
    dev.device = DeviceKind::CUDA;
    matmul_id(c, b.wv(), dev, b.idv(), b.ov(), nullptr, seed_params());
  }, ErrorCode::InvalidArgument, "matmul_id: input is on");
  expect_call_refused([](C& c, SeedBufs& b, S&) {
    MatmulIdParams p = seed_params();
    p.top_k = 5;
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), nullptr, p);
  }, ErrorCode::InvalidArgument, "distinct top_k 5 exceeds n_experts 4");
  // The seed's test: the grouped route's second kernel cannot be launched -> nothing ran at all.
  expect_call_refused([](C& c, SeedBufs& b, S& s) {
    c.launch_recorder()->before_launch = [](const std::string& k) {
      if (k == "cpu_matmul_id_reference") fail(ErrorCode::Cuda, "injected failure resolving ", k);
    };
    matmul_id(c, b.wv(), b.iv(), b.idv(), b.ov(), &s, seed_params(MatmulIdRoute::GroupedPrefill));
  }, ErrorCode::Cuda, "injected failure resolving cpu_matmul_id_reference");
  expect_error([] { MatmulIdScratch(Context::cpu(), 0, 4); }, ErrorCode::InvalidArgument, "capacities must be nonzero");
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
  // The grouped map lists each expert's rows in token order.
  MoeCase c;
  c.p = seed_params(MatmulIdRoute::GroupedPrefill);
  c.w_dtype = DType::F32;
  run_moe_case(ctx, c, &scratch);
  std::vector<std::uint32_t> ids = make_ids(c);
  for (std::uint32_t e = 0; e < 4; ++e) {
    std::vector<std::uint32_t> want;
    for (std::uint32_t r = 0; r < ids.size(); ++r)
      if (ids[r] == e) want.push_back(r);
    ASSERT_EQ(scratch.counts()[e], want.size()) << e;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(scratch.rows()[e * 9 + i], want[i]);
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
  EXPECT_EQ(suggest_matmul_id_route(rep, h200), MatmulIdRoute::Direct);  // grouped needs distinct ids
  rep.id_multiplicity = MatmulIdMultiplicity::DistinctPerToken, rep.n_experts = 2048;
  EXPECT_EQ(suggest_matmul_id_route(rep, h200), MatmulIdRoute::Direct);  // beyond the grouped limit
}
