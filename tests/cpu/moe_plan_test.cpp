// matmul_id's CUDA plan (pure, no GPU): the kernels each route launches, in order, on an H200
// and elsewhere, the staged and gathering engine, the forced kernels and every refusal.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/engine/tiled_sm90_shape.hpp"
#include "core/moe/moe_kernels.hpp"
#include "core/moe/moe_plan.hpp"
#include "llmm/error.hpp"
#include "support/expect_error.hpp"

namespace llmm::cuda_moe {
namespace {

using test::expect_error;

const void* addr(std::uintptr_t v) { return reinterpret_cast<const void*>(v); }

ArchInfo h200() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA, a.cc_major = 9, a.cc_minor = 0, a.sm_count = 132;
  return a;
}

// m tokens x top_k 8 over 64 experts of [n, k], 16-byte aligned, the grouped scratch set.
MoeArgs grouped(DType w, DType in, DType out, std::int64_t m, std::int64_t n, std::int64_t k) {
  MoeArgs a;
  a.m = m, a.n = n, a.k = k, a.top_k = 8, a.n_experts = 64;
  a.w_dtype = w, a.w = addr(0x100000), a.expert_stride = n * k;
  a.in_dtype = in, a.in = addr(0x20000000), a.in_token_stride = k;
  a.ids = addr(0x30000000);
  a.out_dtype = out, a.out = const_cast<void*>(addr(0x40000000));
  a.counts = static_cast<std::uint32_t*>(const_cast<void*>(addr(0x50000000)));
  a.rows = static_cast<std::uint32_t*>(const_cast<void*>(addr(0x50001000)));
  a.row_capacity = m * 8;
  return a;
}

TEST(MoePlan, DirectIsOneKernel) {
  const MoeArgs g = grouped(DType::BF16, DType::BF16, DType::BF16, 4, 768, 2048);
  const MoePlan p = plan_matmul_id_cuda(g, MatmulIdRoute::Direct, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_EQ(p.kernels, std::vector<std::string>{moe_direct_kernel_name(g)});
  EXPECT_FALSE(p.engine);
}

TEST(MoePlan, GroupedOnTheHopperEngineStagedOrGathering) {
  MoeArgs g = grouped(DType::BF16, DType::BF16, DType::F32, 4096, 768, 2048);
  MoePlan p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine);
  EXPECT_FALSE(p.staged);  // no staging room in the scratch: the engine gathers the rows
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "tiled_sm90_moe_bf16_bf16_f32_bn256x64"}));
  EXPECT_EQ(p.launch.grid, 132);
  g.staged = const_cast<void*>(addr(0x60000000)), g.staged_bytes = 4096 * 8 * 2048 * 2;
  p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.staged);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "moe_stage_rows_bf16", "tiled_sm90_moe_bf16_bf16_f32_bn256x64_staged"}));
  g.staged_bytes -= 1;  // one byte short of every routed row: gathered
  EXPECT_FALSE(plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).staged);
}

// moe_ffn's sorted pipeline: gate_up (out_sorted) maps and stages as usual and names its engine
// _sorted, never the fused engine even at m <= 16; the down GEMM (presorted) is the staged engine
// alone. Either without the engine, by name, or without staging room is a router bug.
TEST(MoePlan, SortedPipelineKernels) {
  MoeArgs g = grouped(DType::BF16, DType::BF16, DType::BF16, 4096, 768, 2048);
  g.staged = const_cast<void*>(addr(0x60000000)), g.staged_bytes = 4096 * 8 * 2048 * 2;
  g.out_sorted = true;
  MoePlan p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine && p.staged && !p.fused);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "moe_stage_rows_bf16",
                                                 "tiled_sm90_moe_bf16_bf16_bf16_bn256x64_staged_sorted"}));
  EXPECT_EQ(moe_map_zero_blocks(g), 0);  // no row of an out-of-range id in a sorted output
  MoeArgs few = g;
  few.m = 8, few.row_capacity = 64;
  EXPECT_FALSE(plan_matmul_id_cuda(few, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  few.out_sorted = false;
  EXPECT_TRUE(plan_matmul_id_cuda(few, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);

  MoeArgs down = g;
  down.out_sorted = false, down.presorted = true;
  p = plan_matmul_id_cuda(down, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine && p.staged && !p.fused);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"tiled_sm90_moe_bf16_bf16_bf16_bn256x64_staged"}));

  for (MoeArgs* a : {&g, &down}) {
    expect_error([&] { plan_matmul_id_cuda(*a, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::MmaSync); },
                 ErrorCode::Internal, "need the Hopper engine under Auto");
    ArchInfo a100 = h200();
    a100.cc_major = 8;
    expect_error([&] { plan_matmul_id_cuda(*a, MatmulIdRoute::GroupedPrefill, a100, MatmulIdGroupedKernel::Auto); },
                 ErrorCode::Internal, "need the Hopper engine under Auto");
    MoeArgs short_room = *a;
    short_room.staged_bytes -= 1;
    expect_error([&] { plan_matmul_id_cuda(short_room, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto); },
                 ErrorCode::Internal, "staging room");
  }
}

// At m <= 16 Auto runs the engine alone (it sorts the rows itself, the scratch's staging room
// unused); one token more takes the map first. Forced, the fused engine takes up to
// kTiledMoeFusedMaxRows routed rows, and TiledSm90 is always the map route.
TEST(MoePlan, FewTokensRunTheFusedEngineAlone) {
  const int limit = engine::kTiledMoeFusedMaxRows;
  ASSERT_EQ(limit % 8, 0);
  ASSERT_EQ(engine::kTiledMoeFusedAutoMaxTokens, 16);
  auto staged = [](MoeArgs a) {
    a.staged = const_cast<void*>(addr(0x60000000)), a.staged_bytes = a.m * 8 * 2048 * 2;
    return a;
  };
  const MoeArgs m16 = staged(grouped(DType::BF16, DType::BF16, DType::BF16, 16, 768, 2048));
  MoePlan p = plan_matmul_id_cuda(m16, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine && p.fused && p.launch.fused);
  EXPECT_FALSE(p.staged || p.launch.staged || p.launch.pdl);
  EXPECT_EQ(p.kernels, std::vector<std::string>{"tiled_sm90_moe_bf16_bf16_bf16_bn256x64_fused"});
  EXPECT_NE(p.reason.find("sorting the routed rows itself (one kernel: m <= 16)"), std::string::npos) << p.reason;
  EXPECT_EQ(p.launch.smem_bytes, engine::tiled_sm90_moe_launch(m16, 132).smem_bytes + 16 * 8 * 2);
  const MoeArgs m17 = staged(grouped(DType::BF16, DType::BF16, DType::BF16, 17, 768, 2048));
  p = plan_matmul_id_cuda(m17, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_FALSE(p.fused);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "moe_stage_rows_bf16", "tiled_sm90_moe_bf16_bf16_bf16_bn256x64_staged"}));
  // Forced fused at the limit.
  const MoeArgs g = staged(grouped(DType::BF16, DType::BF16, DType::BF16, limit / 8, 768, 2048));
  EXPECT_FALSE(plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused);
  EXPECT_TRUE(p.fused);
  EXPECT_EQ(p.kernels, std::vector<std::string>{"tiled_sm90_moe_bf16_bf16_bf16_bn256x64_fused"});
  EXPECT_NE(p.reason.find("asked for by name"), std::string::npos) << p.reason;
  // Its shared memory: the moe launch's plus the u16 list of every routed row.
  const engine::TiledSm90Launch mapped = engine::tiled_sm90_moe_launch(g, 132);
  EXPECT_EQ(p.launch.smem_bytes, mapped.smem_bytes + limit * 2);
  EXPECT_EQ(p.launch.grid, mapped.grid);
  EXPECT_EQ(p.launch.tiles, mapped.tiles);
  // Forced TiledSm90: the map first, at m 16 too.
  p = plan_matmul_id_cuda(m16, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90);
  EXPECT_FALSE(p.fused);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "moe_stage_rows_bf16", "tiled_sm90_moe_bf16_bf16_bf16_bn256x64_staged"}));
  // 1024 experts (the row map's most bytes) with the most rows still fit the block.
  MoeArgs wide = g;
  wide.n_experts = 1024;
  p = plan_matmul_id_cuda(wide, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused);
  EXPECT_TRUE(p.fused);
  EXPECT_LE(p.launch.smem_bytes + 256, engine::kTiledMaxSmem);
  // One token more (8 routed rows past the limit): forced fused refused.
  const MoeArgs more = staged(grouped(DType::BF16, DType::BF16, DType::BF16, limit / 8 + 1, 768, 2048));
  expect_error([&] { plan_matmul_id_cuda(more, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused); },
               ErrorCode::Unsupported, "grouped kernel tiled_sm90_fused cannot run (m 257, top_k 8): more than 2048 routed rows (m * top_k = 2056)");
  // An f32 output row of 2^30 columns is 2^31 16-bit words, more than the kernel's int zeroes: the
  // map route at m 16, forced fused refused; a 16-bit output of the same n fits.
  MoeArgs huge = staged(grouped(DType::BF16, DType::BF16, DType::F32, 16, std::int64_t{1} << 30, 64));
  EXPECT_FALSE(plan_matmul_id_cuda(huge, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  expect_error([&] { plan_matmul_id_cuda(huge, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused); },
               ErrorCode::Unsupported, "an output row of more than 2^31 - 1 16-bit words (n 1073741824, f32)");
  huge.out_dtype = DType::BF16;
  EXPECT_TRUE(plan_matmul_id_cuda(huge, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  // Its token rows come by TMA boxes of a map over the input: a used stride of 2^40 bytes is
  // refused (Auto takes the map route); the same stride on an axis of extent 1 is not used.
  MoeArgs far = m16;
  far.in_slot_stride = std::int64_t{1} << 39;
  EXPECT_FALSE(plan_matmul_id_cuda(far, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  expect_error([&] { plan_matmul_id_cuda(far, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused); },
               ErrorCode::Unsupported, "an input stride of 2^40 bytes or more (token 2048, slot 549755813888 elements)");
  far.in_slot_stride -= 8;
  EXPECT_TRUE(plan_matmul_id_cuda(far, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  far = m16, far.m = 1, far.staged_bytes = 8 * 2048 * 2, far.in_token_stride = std::int64_t{1} << 39;
  EXPECT_TRUE(plan_matmul_id_cuda(far, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
  // Where the engine cannot run, forced fused is refused with the engine's reason; Auto falls back.
  const MoeArgs f32_in = grouped(DType::BF16, DType::F32, DType::F32, 4, 768, 2048);
  expect_error([&] { plan_matmul_id_cuda(f32_in, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90Fused); },
               ErrorCode::Unsupported, "grouped kernel tiled_sm90_fused cannot run (m 4, n 768, k 2048, bf16 weights, f32 input)");
  EXPECT_FALSE(plan_matmul_id_cuda(f32_in, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).fused);
}

TEST(MoePlan, GroupedFallsBackToMmaSyncAndSaysWhy) {
  // f32 input: the engine takes 16-bit weights and input of one dtype only.
  const MoeArgs f = grouped(DType::BF16, DType::F32, DType::F32, 512, 768, 2048);
  MoePlan p = plan_matmul_id_cuda(f, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_FALSE(p.engine);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", moe_grouped_kernel_name(f)}));
  EXPECT_NE(p.reason.find("same dtype"), std::string::npos) << p.reason;
  // An A100 (sm_80): mma.sync.
  ArchInfo a100 = h200();
  a100.cc_major = 8;
  const MoeArgs b = grouped(DType::BF16, DType::BF16, DType::BF16, 512, 768, 2048);
  p = plan_matmul_id_cuda(b, MatmulIdRoute::GroupedPrefill, a100, MatmulIdGroupedKernel::Auto);
  EXPECT_FALSE(p.engine);
  EXPECT_NE(p.reason.find("sm_90a"), std::string::npos) << p.reason;
  // Forced by name.
  p = plan_matmul_id_cuda(b, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::MmaSync);
  EXPECT_FALSE(p.engine);
  EXPECT_EQ(p.kernels.back(), moe_grouped_kernel_name(b));
  EXPECT_TRUE(plan_matmul_id_cuda(b, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90).engine);
  // A misaligned input (the engine's TMA needs 16-byte rows): Auto falls back, forced is refused.
  MoeArgs odd = b;
  odd.in_token_stride = 2052;
  EXPECT_FALSE(plan_matmul_id_cuda(odd, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).engine);
  expect_error([&] { plan_matmul_id_cuda(odd, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90); },
               ErrorCode::Unsupported, "grouped kernel tiled_sm90 cannot run (m 512, n 768, k 2048, bf16 weights, bf16 input)");
}

// FP8 experts: the engine's FP8 instance over staged bf16 rows (never fused, never gathering);
// an f16 or f32 input, k not a multiple of 16 or no staging room fall back to moe_grouped, and
// the forced engine is refused saying why.
TEST(MoePlan, Fp8ExpertsOnTheStagedEngineOnly) {
  auto fp8 = [](DType in, std::int64_t m, std::int64_t k, bool staged) {
    MoeArgs g = grouped(DType::F8E4M3, in, DType::F32, m, 768, k);
    g.w_scales = static_cast<const float*>(addr(0x70000000)), g.w_scale_kind = 2, g.w_scale_expert_stride = 6 * ((k + 127) / 128);
    if (staged) g.staged = const_cast<void*>(addr(0x60000000)), g.staged_bytes = m * 8 * k * 2;
    return g;
  };
  MoePlan p = plan_matmul_id_cuda(fp8(DType::BF16, 4096, 2048, true), MatmulIdRoute::GroupedPrefill, h200(),
                                  MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine && p.staged && !p.fused);
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"moe_map_sort", "moe_stage_rows_bf16",
                                                 "tiled_sm90_moe_f8e4m3_bf16_f32_bn256x64_staged"}));
  EXPECT_EQ(p.launch.smem_bytes, engine::tiled_sm90_fp8_shape(256).fixed_smem_bytes() + engine::tiled_sm90_moe_extra_bytes(256, 64));
  // m 4 (the fused engine's range for 16-bit experts): still the staged one.
  p = plan_matmul_id_cuda(fp8(DType::BF16, 4, 2048, true), MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_TRUE(p.engine && p.staged && !p.fused);
  expect_error([&] { plan_matmul_id_cuda(fp8(DType::BF16, 4, 2048, true), MatmulIdRoute::GroupedPrefill, h200(),
                                         MatmulIdGroupedKernel::TiledSm90Fused); },
               ErrorCode::Unsupported, "FP8 weights run on staged rows only");
  // No staging room: moe_grouped under Auto, refused by name.
  const MoeArgs gathered = fp8(DType::BF16, 4096, 2048, false);
  p = plan_matmul_id_cuda(gathered, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
  EXPECT_FALSE(p.engine);
  EXPECT_EQ(p.kernels.back(), moe_grouped_kernel_name(gathered));
  EXPECT_NE(p.reason.find("staged rows only"), std::string::npos) << p.reason;
  expect_error([&] { plan_matmul_id_cuda(gathered, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90); },
               ErrorCode::Unsupported, "runs FP8 weights over staged rows only");
  // f16 and f32 inputs, k 2040: moe_grouped, and the forced engine says why.
  for (const auto& [in, k, why] : {std::tuple{DType::F16, std::int64_t{2048}, "needs a bf16 input with FP8 weights"},
                                   std::tuple{DType::F32, std::int64_t{2048}, "needs a bf16 input with FP8 weights"},
                                   std::tuple{DType::BF16, std::int64_t{2040}, "needs k a multiple of 16 with FP8 weights"}}) {
    const MoeArgs g = fp8(in, 4096, k, true);
    p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto);
    EXPECT_FALSE(p.engine) << dtype_name(in) << " k " << k;
    EXPECT_NE(p.reason.find(why), std::string::npos) << p.reason;
    expect_error([&] { plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::TiledSm90); },
                 ErrorCode::Unsupported, why);
  }
  // No scales: a router bug the engine refuses to take.
  MoeArgs bare = fp8(DType::BF16, 4096, 2048, true);
  bare.w_scales = nullptr;
  EXPECT_FALSE(plan_matmul_id_cuda(bare, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).engine);
}

TEST(MoePlan, Refusals) {
  const MoeArgs f16_bf16 = grouped(DType::F16, DType::BF16, DType::F32, 16, 64, 128);
  for (MatmulIdRoute r : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
    expect_error([&] { plan_matmul_id_cuda(f16_bf16, r, h200(), MatmulIdGroupedKernel::Auto); }, ErrorCode::Unsupported,
                 "take an input of f32 or the weights' dtype (f16), got bf16");
  MoeArgs many = grouped(DType::BF16, DType::BF16, DType::F32, 16, 64, 128);
  many.n_experts = moe_map_max_experts() + 1;
  expect_error([&] { plan_matmul_id_cuda(many, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto); },
               ErrorCode::InvalidArgument, "n_experts 1025 exceeds the map kernel's limit 1024");
  EXPECT_EQ(plan_matmul_id_cuda(many, MatmulIdRoute::Direct, h200(), MatmulIdGroupedKernel::Auto).kernels.size(), 1u);
}

}  // namespace
}  // namespace llmm::cuda_moe
