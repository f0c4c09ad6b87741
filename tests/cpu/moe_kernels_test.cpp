// Pure host facts of the MoE (expert-ID) CUDA kernels: dtype contract, kernel names, the map
// kernel's expert limit, 16-byte load eligibility, the grouped math choice and grid bounds.
// No GPU needed: pointers are plain values here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "core/moe/moe_kernels.hpp"

namespace llmm::cuda_moe {
namespace {

const void* addr(std::uintptr_t v) { return reinterpret_cast<const void*>(v); }

// m tokens, top_k slots, n x k experts, contiguous, 16-byte aligned, SharedPerToken input.
MoeArgs moe(DType w, DType in, DType out, std::int64_t m, std::int64_t n, std::int64_t k,
            std::int64_t top_k = 8, std::int64_t experts = 64) {
  MoeArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.top_k = top_k;
  a.n_experts = experts;
  a.w_dtype = w;
  a.w = addr(0x100000);
  a.expert_stride = n * k;
  a.in_dtype = in;
  a.in = addr(0x20000000);
  a.in_token_stride = k;
  a.in_slot_stride = 0;
  a.ids = static_cast<const std::uint32_t*>(addr(0x30000000));
  a.out_dtype = out;
  a.out = const_cast<void*>(addr(0x40000000));
  a.row_capacity = m;
  return a;
}

TEST(MoeKernels, DtypeContract) {
  for (DType w : {DType::F32, DType::F16, DType::BF16}) {
    EXPECT_TRUE(moe_dtypes_supported(w, DType::F32, DType::F32));
    EXPECT_TRUE(moe_dtypes_supported(w, w, w));
    EXPECT_TRUE(moe_dtypes_supported(w, w, DType::F32));
  }
  EXPECT_FALSE(moe_dtypes_supported(DType::F16, DType::BF16, DType::F32));  // input != weight, not f32
  EXPECT_FALSE(moe_dtypes_supported(DType::F32, DType::F16, DType::F32));
  EXPECT_FALSE(moe_dtypes_supported(DType::BF16, DType::F32, DType::BF16));  // out not f32 / input
  EXPECT_FALSE(moe_dtypes_supported(DType::F16, DType::F16, DType::BF16));
  EXPECT_FALSE(moe_dtypes_supported(DType::U8, DType::F32, DType::F32));
  EXPECT_FALSE(moe_dtypes_supported(DType::F32, DType::U32, DType::F32));
}

TEST(MoeKernels, MapLimit) {
  EXPECT_EQ(moe_map_max_experts(), 1024);
  EXPECT_EQ(moe_map_max_experts(), kMoeMapMaxExperts);
  EXPECT_LE(kMoeMapMaxExperts, kMoeMapThreads);
}

// The sorting grid: one block up to 1024 routed rows or without block_counts room; else chunks of
// ~1024 rows, capped at 256 blocks and at block_count_words / n_experts; never an empty chunk.
TEST(MoeKernels, MapGrid) {
  std::uint32_t room[1];  // never dereferenced: only the pointer's presence matters
  auto grid = [&](std::int64_t m, std::int64_t top_k, std::int64_t experts, std::int64_t words = kMoeMapBlockCountWords) {
    MoeArgs a = moe(DType::BF16, DType::BF16, DType::BF16, m, 64, 64, top_k, experts);
    a.block_counts = words > 0 ? room : nullptr, a.block_count_words = words;
    return moe_map_grid(a);
  };
  auto names = [&](std::int64_t m, std::int64_t top_k, std::int64_t experts, std::int64_t words = kMoeMapBlockCountWords) {
    MoeArgs a = moe(DType::BF16, DType::BF16, DType::BF16, m, 64, 64, top_k, experts);
    a.block_counts = words > 0 ? room : nullptr, a.block_count_words = words;
    return moe_map_kernel_names(a);
  };
  EXPECT_EQ(grid(0, 8, 64).blocks, 0);
  EXPECT_EQ(grid(1, 1, 64).blocks, 1);
  EXPECT_EQ(grid(1, 1, 64).chunk, 1);
  EXPECT_EQ(grid(128, 8, 64).blocks, 1);  // 1024 rows: one block
  EXPECT_EQ(grid(128, 8, 64).chunk, 1024);
  EXPECT_EQ(grid(129, 8, 64).blocks, 2);  // 1032 rows: two chunks of 516
  EXPECT_EQ(grid(129, 8, 64).chunk, 516);
  EXPECT_EQ(grid(129, 8, 64, 0).blocks, 1);  // no room: one block sorts everything
  EXPECT_EQ(grid(129, 8, 64, 0).chunk, 1032);
  EXPECT_EQ(grid(4096, 8, 128).blocks, 32);  // Qwen3 m = 4096: 32768 rows
  EXPECT_EQ(grid(4096, 8, 128).chunk, 1024);
  EXPECT_EQ(grid(4097, 8, 1024).blocks, 32);  // 32768 / 1024 experts: 32 chunks at most
  EXPECT_EQ(grid(4097, 8, 1024).chunk, 1025);
  EXPECT_EQ(grid(40000, 8, 16).blocks, 256);  // capped: chunks of 1250
  EXPECT_EQ(grid(40000, 8, 16).chunk, 1250);
  EXPECT_EQ(grid(1000, 8, 64, 64).blocks, 1);  // room for one histogram only
  EXPECT_EQ(grid(1000, 8, 64, 192).blocks, 3);
  for (std::int64_t m : {129, 1000, 4097, 9000, 40000, 123457})
    for (std::int64_t e : {1, 16, 128, 1000, 1024}) {
      const MoeMapGrid g = grid(m, 8, e);
      EXPECT_GE(g.blocks * g.chunk, m * 8) << m << " " << e;
      EXPECT_LT((g.blocks - 1) * g.chunk, m * 8) << m << " " << e;  // the last chunk is not empty
      EXPECT_LE(g.blocks * e, kMoeMapBlockCountWords) << m << " " << e;
      EXPECT_LE(g.blocks, kMoeMapMaxSortBlocks);
    }
  EXPECT_EQ(names(128, 8, 64), (std::vector<std::string>{"moe_map_sort"}));
  EXPECT_EQ(names(129, 8, 64), (std::vector<std::string>{"moe_map_count", "moe_map_sort"}));
  EXPECT_EQ(names(129, 8, 64, 0), (std::vector<std::string>{"moe_map_sort"}));
}

TEST(MoeKernels, MapZeroBlocks) {
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 1, 64, 64, 8)), 1);    // 8 rows
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 4, 64, 64, 8)), 1);    // 32 rows
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 5, 64, 64, 8)), 2);    // 40 rows
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 1 << 20, 64, 64, 8)), kMoeMapMaxZeroBlocks);
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 0, 64, 64, 8)), 0);
  EXPECT_EQ(moe_map_zero_blocks(moe(DType::F32, DType::F32, DType::F32, 4, 0, 64, 8)), 0);
}

TEST(MoeKernels, DirectNamesAndVectorLoads) {
  MoeArgs a = moe(DType::BF16, DType::F32, DType::F32, 1, 1536, 2048);
  EXPECT_TRUE(moe_direct_vec16(a));
  EXPECT_EQ(moe_direct_kernel_name(a), "moe_direct_bf16_f32_f32_v16");
  EXPECT_EQ(moe_direct_kernel_name(moe(DType::F16, DType::F16, DType::F16, 2, 64, 64)), "moe_direct_f16_f16_f16_v16");
  EXPECT_EQ(moe_direct_kernel_name(moe(DType::F32, DType::F32, DType::F32, 2, 64, 64)), "moe_direct_f32_f32_f32_v16");

  // k * 2 bytes not a multiple of 16: weight rows are not 16-byte aligned.
  MoeArgs odd_k = moe(DType::BF16, DType::BF16, DType::BF16, 2, 64, 60);
  EXPECT_FALSE(moe_direct_vec16(odd_k));
  EXPECT_EQ(moe_direct_kernel_name(odd_k), "moe_direct_bf16_bf16_bf16_scalar");
  // f32 weights: k = 4 suffices.
  EXPECT_TRUE(moe_direct_vec16(moe(DType::F32, DType::F32, DType::F32, 2, 64, 4)));

  MoeArgs b = a;
  b.w = addr(0x100008);  // misaligned weight base
  EXPECT_FALSE(moe_direct_vec16(b));
  b = a;
  b.expert_stride = a.n * a.k + 4;  // 8 bytes: expert e > 0 misaligned
  EXPECT_FALSE(moe_direct_vec16(b));
  b.expert_stride = a.n * a.k + 8;  // 16 bytes of padding: fine
  EXPECT_TRUE(moe_direct_vec16(b));
  b = a;
  b.in = addr(0x20000004);  // misaligned input base
  EXPECT_FALSE(moe_direct_vec16(b));
  b = a;
  b.in_token_stride = a.top_k * a.k;  // Slotted input
  b.in_slot_stride = a.k;
  EXPECT_TRUE(moe_direct_vec16(b));
  b.in_slot_stride = a.k + 1;  // 4-byte slot stride offset
  EXPECT_FALSE(moe_direct_vec16(b));
}

TEST(MoeKernels, DirectTiles) {
  EXPECT_EQ(kMoeDirectColsPerBlock, 8);
  EXPECT_EQ(moe_direct_tiles(moe(DType::BF16, DType::F32, DType::F32, 1, 1536, 2048, 8)), 8 * 192);
  EXPECT_EQ(moe_direct_tiles(moe(DType::BF16, DType::F32, DType::F32, 3, 9, 2048, 2)), 6 * 2);
  EXPECT_EQ(moe_direct_tiles(moe(DType::BF16, DType::F32, DType::F32, 0, 9, 2048, 2)), 0);
  EXPECT_EQ(moe_direct_tiles(moe(DType::BF16, DType::F32, DType::F32, 3, 0, 2048, 2)), 0);
}

// moe_ffn's decode fusions of the direct kernel: their work items, names and the rows they take.
TEST(MoeKernels, DirectFusedEpilogues) {
  MoeArgs up = moe(DType::BF16, DType::BF16, DType::BF16, 1, 1536, 2048, 8);  // Qwen3-30B gate_up
  up.fusion.epi = MoeDirectEpi::Activate;
  EXPECT_EQ(moe_direct_tiles(up), 8 * 192);  // a warp per output feature: 768 features, 4 a block
  EXPECT_EQ(moe_direct_kernel_name(up), "moe_direct_bf16_bf16_bf16_v16_act_silu");
  EXPECT_TRUE(moe_direct_fusion_supported(up));
  up.fusion.gated = false, up.fusion.activation = MoeActivation::Relu2;
  EXPECT_EQ(moe_direct_tiles(up), 8 * 192);  // without a gate: two features a warp, 8 a block
  EXPECT_EQ(moe_direct_kernel_name(up), "moe_direct_bf16_bf16_bf16_v16_act_relu2_no_mul");
  up.fusion.gated = true, up.n = 1535;
  EXPECT_FALSE(moe_direct_fusion_supported(up));  // a gate needs an even row count
  MoeArgs down = moe(DType::BF16, DType::BF16, DType::BF16, 2, 2048, 768, 8);
  down.fusion.epi = MoeDirectEpi::SlotSum;
  EXPECT_EQ(moe_direct_tiles(down), 2 * 1024);  // a block per (column pair, token)
  down.top_k = 2;
  EXPECT_EQ(moe_direct_tiles(down), 2 * 512);  // top_k 2: two column pairs a block, a warp a (pair, slot)
  down.top_k = 1;
  EXPECT_EQ(moe_direct_tiles(down), 2 * 256);
  down.top_k = 3;
  EXPECT_EQ(moe_direct_tiles(down), 2 * 1024);
  down.top_k = 8;
  EXPECT_EQ(moe_direct_kernel_name(down), "moe_direct_bf16_bf16_bf16_v16_slotsum");
  EXPECT_FALSE(moe_direct_fusion_supported(down));  // no routing weights given
  down.fusion.tw = addr(0x50000000);
  EXPECT_TRUE(moe_direct_fusion_supported(down));
  down.top_k = kMoeDirectSlotSumMaxTopK + 1;
  EXPECT_FALSE(moe_direct_fusion_supported(down));
  down.top_k = 8;
  down.in = addr(0x20000004);  // rows not 16-byte aligned: the fused epilogues need 16-byte loads
  EXPECT_FALSE(moe_direct_fusion_supported(down));
}

TEST(MoeKernels, GroupedMathChoice) {
  auto math = [](DType w, DType in, bool exact) {
    MoeArgs a = moe(w, in, DType::F32, 64, 256, 256);
    a.exact = exact;
    return moe_grouped_config(a).math;
  };
  EXPECT_EQ(math(DType::F16, DType::F16, true), MoeGroupedMath::F16);
  EXPECT_EQ(math(DType::F16, DType::F16, false), MoeGroupedMath::F16);
  EXPECT_EQ(math(DType::BF16, DType::BF16, true), MoeGroupedMath::BF16);
  EXPECT_EQ(math(DType::BF16, DType::F32, true), MoeGroupedMath::TF32x2);
  EXPECT_EQ(math(DType::BF16, DType::F32, false), MoeGroupedMath::BF16);
  EXPECT_EQ(math(DType::F16, DType::F32, true), MoeGroupedMath::TF32x2);
  EXPECT_EQ(math(DType::F16, DType::F32, false), MoeGroupedMath::TF32);
  EXPECT_EQ(math(DType::F32, DType::F32, true), MoeGroupedMath::TF32x3);
  EXPECT_EQ(math(DType::F32, DType::F32, false), MoeGroupedMath::TF32);

  const MoeGroupedConfig c16 = moe_grouped_config(moe(DType::BF16, DType::BF16, DType::BF16, 64, 256, 256));
  EXPECT_EQ(c16.bm, 64);
  EXPECT_EQ(c16.bn, 128);
  EXPECT_EQ(c16.bk, 32);
  EXPECT_TRUE(c16.in_vec);
  EXPECT_TRUE(c16.w_vec);
  EXPECT_EQ(moe_grouped_config(moe(DType::F32, DType::F32, DType::F32, 64, 256, 256)).bk, 16);

  MoeArgs odd = moe(DType::F16, DType::F16, DType::F16, 64, 256, 250);  // k * 2 % 16 != 0
  const MoeGroupedConfig co = moe_grouped_config(odd);
  EXPECT_FALSE(co.w_vec);
  EXPECT_FALSE(co.in_vec);  // the token stride is k too
}

TEST(MoeKernels, GroupedNames) {
  EXPECT_EQ(moe_grouped_kernel_name(moe(DType::BF16, DType::BF16, DType::BF16, 64, 256, 256)),
            "moe_grouped_bf16_bf16_bf16_bf16_64x128x32");
  EXPECT_EQ(moe_grouped_kernel_name(moe(DType::F16, DType::F16, DType::F32, 64, 256, 256)),
            "moe_grouped_f16_f16_f32_f16_64x128x32");
  MoeArgs a = moe(DType::BF16, DType::F32, DType::F32, 64, 256, 256);
  EXPECT_EQ(moe_grouped_kernel_name(a), "moe_grouped_bf16_f32_f32_2xtf32_64x128x16");
  a.exact = false;
  EXPECT_EQ(moe_grouped_kernel_name(a), "moe_grouped_bf16_f32_f32_bf16_64x128x32");
  EXPECT_EQ(moe_grouped_kernel_name(moe(DType::F32, DType::F32, DType::F32, 64, 256, 256)),
            "moe_grouped_f32_f32_f32_3xtf32_64x128x16");
  EXPECT_STREQ(moe_grouped_math_name(MoeGroupedMath::TF32), "tf32");
}

TEST(MoeKernels, GroupedGridBoundsEveryTile) {
  // 100 tokens x top_k 8 over 64 experts: 800 routed rows.
  const MoeArgs a = moe(DType::BF16, DType::BF16, DType::BF16, 100, 1000, 256, 8, 64);
  EXPECT_EQ(moe_grouped_row_slots(a), (800 + 63) / 64 + 64);
  EXPECT_EQ(moe_grouped_col_tiles(a), 8);  // ceil(1000 / 128)
  // Worst cases of sum_e ceil(count_e / 64) with counts <= m, sum <= m * top_k:
  // all experts with one row each, or the rows piled on top_k experts.
  const std::int64_t slots = moe_grouped_row_slots(a);
  EXPECT_GE(slots, 64);                   // 64 experts with 1..12 rows: at least one tile each
  EXPECT_GE(slots, 8 * ((100 + 63) / 64));  // 8 experts with 100 rows each: 2 tiles each
  // Random count vectors within the contract (count_e <= m, sum <= m * top_k): the tiles the
  // kernel needs never exceed the slots of the grid.
  std::uint64_t state = 12345;
  auto next = [&state](std::uint64_t mod) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % mod;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t m = 1 + static_cast<std::int64_t>(next(300)), top_k = 1 + static_cast<std::int64_t>(next(8));
    const std::int64_t experts = top_k + static_cast<std::int64_t>(next(200));
    const MoeArgs c = moe(DType::F16, DType::F16, DType::F16, m, 64, 64, top_k, experts);
    std::int64_t left = m * top_k, tiles = 0;
    for (std::int64_t e = 0; e < experts && left > 0; ++e) {
      const std::int64_t cnt = std::min<std::int64_t>({left, m, static_cast<std::int64_t>(next(static_cast<std::uint64_t>(m) + 1))});
      tiles += (cnt + kMoeGroupedBM - 1) / kMoeGroupedBM;
      left -= cnt;
    }
    EXPECT_LE(tiles, moe_grouped_row_slots(c)) << "m " << m << " top_k " << top_k << " experts " << experts;
  }
  // Fewer routed rows than experts: at most one tile per routed row.
  const MoeArgs b = moe(DType::BF16, DType::BF16, DType::BF16, 1, 64, 64, 4, 1024);
  EXPECT_EQ(moe_grouped_row_slots(b), 1 + 4);
  EXPECT_EQ(moe_grouped_row_slots(moe(DType::BF16, DType::BF16, DType::BF16, 0, 64, 64)), 0);
  EXPECT_EQ(moe_grouped_col_tiles(moe(DType::BF16, DType::BF16, DType::BF16, 4, 0, 64)), 0);
}

}  // namespace
}  // namespace llmm::cuda_moe
