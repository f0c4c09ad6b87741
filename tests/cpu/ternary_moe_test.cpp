// Ternary experts on the CPU backend: the expert-stack upload (layout, refusals, gemm_tq2's
// refusal of a stack), matmul_id_tq2's float64 route against cpu::matmul_id_f64 on the
// dequantized stack over layouts, id dtypes, routings, out-of-range ids and dtypes, each refusal
// before anything is written, and the pure routing rule.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <vector>

#include <gtest/gtest.h>

#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "llmm/ternary_moe.hpp"
#include "support/expect_error.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"
#include "support/tq2_moe_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
std::size_t bytes_of(const std::vector<BlockTQ2_128>& b) { return b.size() * sizeof(BlockTQ2_128); }

ArchInfo h200() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA, a.cc_major = 9, a.cc_minor = 0, a.sm_count = 132;
  return a;
}

MatmulIdParams params(std::uint32_t m, std::uint32_t top_k, std::uint32_t n, std::uint32_t k, std::uint32_t experts,
                      DType in = DType::F16, DType out = DType::F32) {
  MatmulIdParams p;
  p.m = m, p.top_k = top_k, p.n = n, p.k = k, p.n_experts = experts, p.input_dtype = in, p.output_dtype = out;
  return p;
}
}  // namespace

TEST(Tq2Experts, UploadLaysOutTheStackAndRefuses) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  const std::vector<BlockTQ2_128> b = seed_tq2_blocks(3 * 13, 256, 9);  // 3 experts of [13, 256]
  const WeightHandle h = cache.get_or_upload_experts(5, b.data(), bytes_of(b), 3, 13, 256);
  EXPECT_EQ(h->experts(), 3);
  EXPECT_EQ(h->n(), 13);
  EXPECT_EQ(h->rows(), 39);
  EXPECT_EQ(h->bytes(), 39u * 64 + 39u * 2 * 2);
  // Expert 2, row 4, block 1: stack row 30.
  EXPECT_EQ(std::memcmp(h->codes() + 30 * 64 + 32, b[30 * 2 + 1].qs, 32), 0);
  EXPECT_EQ(h->scales()[30 * 2 + 1], b[30 * 2 + 1].d);
  ASSERT_EQ(h->scales_t_ld(), 48);  // 3 experts of 13 rows, each padded to 16 columns
  for (int r = 0; r < 39; ++r)
    for (int blk = 0; blk < 2; ++blk) EXPECT_EQ(h->scales_t()[blk * 48 + (r / 13) * 16 + r % 13], b[r * 2 + blk].d) << r;
  for (int e = 0; e < 3; ++e)
    for (int j = 13; j < 16; ++j) EXPECT_EQ(h->scales_t()[48 + e * 16 + j], 0) << e << " " << j;
  EXPECT_EQ(cache.get_or_upload_experts(5, b.data(), bytes_of(b), 3, 13, 256).get(), h.get());
  expect_error([&] { cache.get_or_upload_experts(5, b.data(), bytes_of(b), 1, 39, 256); }, ErrorCode::InvalidArgument,
               "key 5 holds 3 experts of [13, 256], asked for [39, 256]");
  expect_error([&] { cache.get_or_upload_experts(6, b.data(), bytes_of(b), 4, 13, 256); }, ErrorCode::InvalidArgument,
               "key 6: 2652 bytes given, 4 experts of [13, 256] TQ2_0_g128 is 3536 (n_experts * n * k/128 * 34)");
  expect_error([&] { cache.get_or_upload_experts(6, b.data(), bytes_of(b), 0, 13, 256); }, ErrorCode::InvalidArgument,
               "n_experts 0 must be >= 1");
  expect_error([&] { cache.get_or_upload_experts(6, b.data(), bytes_of(b), 3, 13, 200); }, ErrorCode::InvalidArgument,
               "k 200 is not a multiple of 128");
  // gemm_tq2 takes one weight, not a stack.
  HostTensor in = host_tensor(DType::F32, {2, 256}), out = host_tensor(DType::F32, {2, 13});
  expect_error([&] { gemm_tq2(ctx, h, in.view, out.view); }, ErrorCode::InvalidArgument,
               "weight 5 is a stack of 3 experts of [13, 256]: use matmul_id_tq2");
}

TEST(Tq2Experts, CpuRouteMatchesFloat64OverLayoutsIdsAndDtypes) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::uint64_t seed = 100;
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (DType ids : {DType::U32, DType::I32, DType::I64})
      for (int layout = 0; layout < 3; ++layout) {
        Tq2MoeCase c;
        MoeCase& b = c.base;
        b.p.m = 7, b.p.top_k = 3, b.p.n = 19, b.p.k = 384, b.p.n_experts = 5;
        b.p.input_dtype = in, b.p.output_dtype = layout == 1 ? in : DType::F32;
        b.p.input_layout = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
        b.input_rank3 = layout == 2;
        b.input_pad = layout;
        b.ids_dtype = ids;
        b.routing = ids == DType::I32 ? Routing::Repeats : Routing::Uniform;
        b.out_of_range_every = 4;
        b.seed = ++seed;
        const Tq2MoeOutcome o = run_tq2_moe_case(ctx, cache, c, nullptr);
        EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
        EXPECT_GT(o.zero_rows_checked, 0) << c.describe();
        EXPECT_EQ(o.receipt.route, "cpu");
        EXPECT_EQ(o.receipt.kernel, "cpu_matmul_id_tq2_reference");
      }
}

TEST(Tq2Experts, RefusalsWriteNothing) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  const std::vector<BlockTQ2_128> b = seed_tq2_blocks(4 * 8, 128, 3);
  const WeightHandle h = cache.get_or_upload_experts(1, b.data(), bytes_of(b), 4, 8, 128);
  HostTensor in = host_tensor(DType::F32, {3, 128}), ids = host_tensor(DType::U32, {3, 2}),
             out = host_tensor(DType::F32, {3, 2, 8});
  std::memset(ids.bytes.data(), 0, ids.bytes.size());
  std::memset(out.bytes.data(), 0x7f, out.bytes.size());
  const std::vector<unsigned char> before = out.bytes;
  expect_error([&] { matmul_id_tq2(ctx, nullptr, in.view, ids.view, out.view, nullptr); }, ErrorCode::InvalidArgument,
               "matmul_id_tq2: null weight handle");
  HostTensor in_k = host_tensor(DType::F32, {3, 256});
  expect_error([&] { matmul_id_tq2(ctx, h, in_k.view, ids.view, out.view, nullptr); }, ErrorCode::InvalidArgument,
               "matmul_id_tq2: input must be [m, k] (layout shared) with m 3, top_k 2 (from ids) and k 128");
  HostTensor out_n = host_tensor(DType::F32, {3, 2, 9});
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids.view, out_n.view, nullptr); }, ErrorCode::InvalidArgument,
               "matmul_id_tq2: output must be [m, top_k, n] = [3, 2, 8]");
  HostTensor ids_f = host_tensor(DType::F32, {3, 2});
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids_f.view, out.view, nullptr); }, ErrorCode::InvalidArgument,
               "expert ids must be u32, i32 or i64");
  HostTensor out_bf = host_tensor(DType::BF16, {3, 2, 8});
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids.view, out_bf.view, nullptr); }, ErrorCode::InvalidArgument,
               "bf16");
  const View alias = View::contiguous(in.view.data, DType::F32, {3, 2, 8});
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids.view, alias, nullptr); }, ErrorCode::InvalidArgument,
               "output must not overlap input");
  Tq2MoeOptions o;
  o.force_route = Tq2MoeRoute::Naive;
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids.view, out.view, nullptr, MatmulIdInputLayout::SharedPerToken, o); },
               ErrorCode::Unsupported, "route tq2_moe_naive cannot run");
  o.force_route = Tq2MoeRoute::GroupedSm90;
  expect_error([&] { matmul_id_tq2(ctx, h, in.view, ids.view, out.view, nullptr, MatmulIdInputLayout::SharedPerToken, o); },
               ErrorCode::Unsupported, "needs a CUDA context");
  EXPECT_EQ(out.bytes, before) << "a refused call wrote its output";
  // m = 0: an empty call.
  HostTensor in0 = host_tensor(DType::F32, {0, 128}), ids0 = host_tensor(DType::U32, {0, 2}),
             out0 = host_tensor(DType::F32, {0, 2, 8});
  EXPECT_EQ(matmul_id_tq2(ctx, h, in0.view, ids0.view, out0.view, nullptr).route, "none");
}

TEST(Tq2Experts, RoutingRule) {
  const ArchInfo a = h200();
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a, true, true), Tq2MoeRoute::GroupedSm90);
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a, false, true), Tq2MoeRoute::Naive);   // input not TMA-readable
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a, true, false), Tq2MoeRoute::Naive);   // no staging room
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128, DType::BF16, DType::BF16), a, true, true),
            Tq2MoeRoute::GroupedSm90);  // copied to f16 first
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128, DType::F32), a, true, true), Tq2MoeRoute::Naive);
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 2048), a, true, true), Tq2MoeRoute::Naive);    // > 1024 experts
  EXPECT_EQ(plan_matmul_id_tq2(params(4, 1, 1 << 20, 128, 1024), a, true, true), Tq2MoeRoute::Naive);  // 2^30 rows
  ArchInfo a100 = a;
  a100.cc_major = 8;
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a100, true, true), Tq2MoeRoute::Naive);
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), ArchInfo{}, true, true), Tq2MoeRoute::Cpu);
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 768, 2048, 128, DType::F32), a, true, true, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "needs an f16 or bf16 input");
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 768, 2048, 128, DType::BF16, DType::F16), a, true, true, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "needs an f32 or input-dtype output");
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a, false, true, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "an f16 one TMA can read");
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a, true, false, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "staged_row_bytes");
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 768, 2048, 128), a100, true, true, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "sm_90a only");
  EXPECT_EQ(plan_matmul_id_tq2(params(128, 8, 768, 2048, 128, DType::BF16), a, false, false, Tq2MoeRoute::Naive),
            Tq2MoeRoute::Naive);
  // The plan is public and pure: any u32 sizes (found by fuzz_plan: n = 0 divided by zero, and
  // m * top_k overflowed a signed product).
  expect_error([&] { plan_matmul_id_tq2(params(128, 8, 0, 2048, 128), a, true, true, Tq2MoeRoute::GroupedSm90); },
               ErrorCode::Unsupported, "needs n >= 1");
  EXPECT_EQ(plan_matmul_id_tq2(params(0xffffffffu, 0xffffffffu, 768, 2048, 128), a, true, true), Tq2MoeRoute::Naive);
  EXPECT_EQ(plan_matmul_id_tq2(params(64, 8, 0xffffffffu, 2048, 1), a, true, true), Tq2MoeRoute::Naive);
  EXPECT_STREQ(tq2_moe_route_name(Tq2MoeRoute::GroupedSm90), "tq2_moe_grouped_sm90");
}

// The decode route: Auto takes it on sm_90 for m <= 64 tokens (any float input, no scratch),
// the grouped route above; forced, it refuses what it cannot take.
TEST(Tq2Experts, StreamRoutingRule) {
  const ArchInfo a = h200();
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (std::uint32_t m : {1u, 5u, 16u, 64u})
      EXPECT_EQ(plan_matmul_id_tq2(params(m, 8, 1536, 2048, 128, in), a, false, false), Tq2MoeRoute::StreamSm90)
          << dtype_name(in) << " m " << m;
  EXPECT_EQ(plan_matmul_id_tq2(params(65, 8, 1536, 2048, 128), a, true, true), Tq2MoeRoute::GroupedSm90);
  EXPECT_EQ(plan_matmul_id_tq2(params(65, 8, 1536, 2048, 128, DType::F32), a, true, true), Tq2MoeRoute::Naive);
  EXPECT_EQ(plan_matmul_id_tq2(params(16, 8, 1536, 2048, 128, DType::F16, DType::BF16), a, true, true), Tq2MoeRoute::Naive);
  EXPECT_EQ(plan_matmul_id_tq2(params(1, 8, 1536, 1 << 16, 128), a, true, true), Tq2MoeRoute::GroupedSm90);  // rows too wide
  EXPECT_EQ(plan_matmul_id_tq2(params(512, 8, 1536, 2048, 128), a, true, true, Tq2MoeRoute::StreamSm90),
            Tq2MoeRoute::StreamSm90);  // forced past Auto's gate: it takes any m up to 65536 routed rows
  ArchInfo a100 = a;
  a100.cc_major = 8;
  EXPECT_EQ(plan_matmul_id_tq2(params(1, 8, 1536, 2048, 128), a100, true, true), Tq2MoeRoute::Naive);
  const auto refused = [&](MatmulIdParams p, const ArchInfo& arch, const char* why) {
    expect_error([&] { plan_matmul_id_tq2(p, arch, true, true, Tq2MoeRoute::StreamSm90); }, ErrorCode::Unsupported, why);
  };
  refused(params(1, 8, 1536, 2048, 128), a100, "sm_90a only");
  refused(params(1, 8, 1536, 2048, 128, DType::F16, DType::BF16), a, "needs an f32 or input-dtype output");
  refused(params(1, 8, 1536, 2000, 128), a, "multiple of 128");
  refused(params(1, 8, 0, 2048, 128), a, "needs n >= 1");
  refused(params(1, 8, 16, 2048, 0), a, "at least one expert");
  refused(params(8193, 8, 1536, 2048, 128), a, "at most 65536 routed rows");
  refused(params(4, 1, 1 << 20, 128, 1024), a, "2^30 - 128");
  refused(params(1, 8, 1536, 1 << 16, 128), a, "do not fit in shared memory");
  EXPECT_STREQ(tq2_moe_route_name(Tq2MoeRoute::StreamSm90), "tq2_moe_stream_sm90");
}

// The config the launcher uses: every block's image rows within rows_cap (the device traps
// otherwise), shared memory within the per-block limit (half of it at two blocks per SM), parts
// independent of m (batch invariance), the workspace's pieces in order (none when the blocks
// convert their own rows).
TEST(Tq2Experts, StreamConfigBoundsEveryBlock) {
  using namespace cuda_ternary;
  struct S { std::int64_t m, top_k, n, k, experts; bool slotted; int sms; };
  const S cases[] = {{1, 8, 1536, 2048, 128, false, 132}, {1, 8, 2048, 768, 128, true, 132},
                     {16, 8, 1536, 2048, 128, false, 132}, {16, 8, 2048, 768, 128, true, 132},
                     {3, 2, 204, 640, 3, true, 132},       {1, 1, 8, 128, 1, false, 132},
                     {7, 4, 300, 4096, 16, true, 78},      {64, 8, 128, 1024, 64, false, 132},
                     {2, 1, 27648, 3072, 2, false, 132},   {5, 3, 1000, 16384, 9, true, 132}};
  int staged = 0;
  for (const S& s : cases) {
    const auto c = tq2_moe_stream_config(s.m, s.top_k, s.n, s.k, s.experts, s.slotted, s.sms);
    ASSERT_TRUE(c.has_value()) << "m " << s.m << " n " << s.n << " k " << s.k;
    const std::int64_t groups = s.k / 128;
    EXPECT_EQ(c->routed, s.m * s.top_k);
    EXPECT_EQ(c->bands, (s.n + 127) / 128);
    EXPECT_EQ(c->items, c->routed * c->bands * c->parts.parts);
    EXPECT_EQ(c->image_rows, s.slotted ? s.m * s.top_k : s.m);
    EXPECT_EQ(c->parts.part_groups % 4, 0);
    EXPECT_GE(static_cast<std::int64_t>(c->parts.parts) * c->parts.part_groups, groups);
    EXPECT_LT(static_cast<std::int64_t>(c->parts.parts - 1) * c->parts.part_groups, groups);
    EXPECT_EQ(c->row_bytes % 16, 0);
    EXPECT_EQ(c->row_bytes, groups * 64 + 5 * c->col_stride);
    EXPECT_LE(c->smem_bytes, c->blocks_per_sm == 2 ? 232448 / 2 - 1024 : 232448);
    EXPECT_EQ(c->smem_bytes, 1024 + c->image_smem + c->rows_cap * std::int64_t{c->row_bytes});
    EXPECT_LE(c->grid, std::int64_t{s.sms} * c->blocks_per_sm);
    EXPECT_EQ(c->overlap, c->grid <= s.sms);
    // Items for at most one block an SM: one block an SM (session 16: two that fit let the block
    // scheduler pair blocks while SMs idled). So two-block plans never take the overlap kernel.
    if (c->items <= s.sms) EXPECT_EQ(c->blocks_per_sm, 1) << "m " << s.m << " n " << s.n << " k " << s.k;
    if (c->blocks_per_sm == 2) EXPECT_FALSE(c->overlap);
    std::int64_t widest = 0, covered = 0;
    for (int b = 0; b < c->grid; ++b) {
      const Tq2MoeStreamRows r = tq2_moe_stream_block_rows(*c, s.top_k, s.slotted, b);
      EXPECT_GE(r.count, 1) << "block " << b << " has no items";
      EXPECT_LE(r.first + r.count, c->image_rows);
      widest = std::max(widest, r.count);
      covered += c->items * (b + 1) / c->grid - c->items * b / c->grid;
    }
    EXPECT_EQ(covered, c->items);
    EXPECT_LE(widest, c->rows_cap) << "m " << s.m << " n " << s.n << " k " << s.k;
    const auto other = tq2_moe_stream_config(s.m + 5, s.top_k, s.n, s.k, s.experts, s.slotted, s.sms);
    ASSERT_TRUE(other.has_value());
    EXPECT_EQ(other->parts, c->parts) << "parts must not depend on m";
    const std::int64_t per_block = (c->items + c->grid - 1) / c->grid;
    EXPECT_EQ(c->stage_in_block, c->parts.parts == 1 && (groups <= 8 || per_block >= 4));
    if (c->stage_in_block) {  // the blocks convert their rows: no staging kernel, no workspace
      EXPECT_EQ(c->workspace_bytes, 0u);
      EXPECT_NE(tq2_moe_stream_kernel_name(*c, DType::F16, DType::F16).find("_inblock"), std::string::npos);
      continue;
    }
    EXPECT_EQ(tq2_moe_stream_kernel_name(*c, DType::F16, DType::F16).find("_inblock"), std::string::npos);
    ++staged;  // the staged image, then (K in parts) the counters and the partials
    EXPECT_EQ(c->counters_off, static_cast<std::size_t>(c->image_rows * c->row_bytes));
    if (c->parts.parts > 1) {
      EXPECT_EQ(c->partials_off, c->counters_off + (c->routed * ((s.n + 15) / 16) * 4 + 15) / 16 * 16);
      EXPECT_EQ(c->workspace_bytes, c->partials_off + static_cast<std::size_t>(c->parts.parts * c->routed * s.n * 4));
    } else {
      EXPECT_EQ(c->workspace_bytes, c->counters_off);
    }
  }
  EXPECT_GE(staged, 2) << "the cases must cover both ways to the image";
  EXPECT_LE(staged, static_cast<int>(std::size(cases)) - 2);
  EXPECT_FALSE(tq2_moe_stream_config(1, 8, 1536, 1 << 16, 128, false, 132).has_value());  // one row overflows shared memory
  EXPECT_FALSE(tq2_moe_stream_config(8193, 8, 1536, 2048, 128, false, 132).has_value());
  EXPECT_FALSE(tq2_moe_stream_config(1, 8, 1536, 2000, 128, false, 132).has_value());
}
