// tq2_dequant_lt's pure plan (no GPU): chunking rule, workspace layout and size, kernels per
// call, names, tq2_workspace_bytes, and gemm_tq2's refusal of bad workspace options.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"
#include "support/expect_error.hpp"
#include "support/random.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::cuda_ternary;

TEST(Tq2LtPlan, DitProjExactByHand) {
  // 1536 x 27648 x 3072: 4 waves of 128 x 256 tiles need >= 11264 rows a chunk -> 2 chunks of 13824.
  Tq2LtPlan p = tq2_lt_plan(1536, 27648, 3072, DType::F32, DType::F32, true);
  EXPECT_EQ(p.parts, 2);
  EXPECT_TRUE(p.scaled);
  EXPECT_FALSE(p.via_temp);  // f32 out: the GEMMs write the output, scaled in place after
  EXPECT_EQ(p.gemm_out, DType::F32);
  EXPECT_EQ(p.gemms, 2);
  EXPECT_EQ(p.chunk_rows, 13824);
  EXPECT_EQ(p.chunks, 2);
  EXPECT_EQ(p.last_rows, 13824);
  EXPECT_EQ(p.alpha_off, 0u);
  EXPECT_EQ(p.parts_off, 6144u);               // 1536 row scales
  EXPECT_EQ(p.part_bytes, 1536u * 3072 * 2);
  EXPECT_EQ(p.weight_off, 6144u + 2u * 1536 * 3072 * 2);
  EXPECT_EQ(p.bytes, p.weight_off + 13824u * 3072 * 2);  // ~104 MB
  EXPECT_EQ(p.kernels, 1 + 2 * 4);  // rowscale, then per chunk dequant, 2 GEMMs, scale_rows
  EXPECT_EQ(p.rowscale_kernel, "tq2_rowscale_f32_f16x2");
  EXPECT_EQ(p.dequant_kernel, "tq2_dequant_f16");
  EXPECT_EQ(p.scale_kernel, "tq2_lt_scale_rows_f32");

  Tq2LtPlan fast = tq2_lt_plan(1536, 27648, 3072, DType::F32, DType::F32, false);
  EXPECT_EQ(fast.parts, 1);
  EXPECT_EQ(fast.gemms, 1);
  EXPECT_EQ(fast.kernels, 1 + 2 * 3);
  EXPECT_EQ(fast.rowscale_kernel, "tq2_rowscale_f32_f16");
  EXPECT_EQ(fast.bytes, 6144u + 1536u * 3072 * 2 + 13824u * 3072 * 2);
}

TEST(Tq2LtPlan, DtypePaths) {
  // bf16 -> bf16: f16 GEMM into an f32 temp, then the per-row scaled rounding; forced 200 -> 256 rows.
  Tq2LtPlan b = tq2_lt_plan(100, 1000, 384, DType::BF16, DType::BF16, true, 200);
  EXPECT_EQ(b.parts, 1);
  EXPECT_TRUE(b.via_temp);
  EXPECT_EQ(b.gemm_out, DType::F32);
  EXPECT_EQ(b.chunk_rows, 256);
  EXPECT_EQ(b.chunks, 4);
  EXPECT_EQ(b.last_rows, 232);
  EXPECT_EQ(b.temp_ld, 256);
  EXPECT_EQ(b.parts_off, 512u);  // 100 row scales, 256-aligned
  EXPECT_EQ(b.weight_off, 512u + 76800);
  EXPECT_EQ(b.temp_off, 512u + 76800 + 256u * 384 * 2);
  EXPECT_EQ(b.bytes, b.temp_off + 100u * 256 * 4);
  EXPECT_EQ(b.kernels, 1 + 4 * 3);
  EXPECT_EQ(b.rowscale_kernel, "tq2_rowscale_bf16_f16");
  EXPECT_EQ(b.scale_kernel, "tq2_lt_scale_rows_bf16");

  Tq2LtPlan bf = tq2_lt_plan(100, 1000, 384, DType::BF16, DType::F32, false);
  EXPECT_FALSE(bf.via_temp);
  EXPECT_EQ(bf.scale_kernel, "tq2_lt_scale_rows_f32");  // in place in the output
  EXPECT_EQ(bf.parts, 1);  // Exact or not: a bf16 input is exact in f16 once scaled

  // f16: read straight from the input, no scaling kernels; workspace = one weight chunk.
  Tq2LtPlan h = tq2_lt_plan(64, 3072, 3072, DType::F16, DType::F16, true);
  EXPECT_EQ(h.parts, 0);
  EXPECT_FALSE(h.scaled);
  EXPECT_EQ(h.gemm_out, DType::F16);
  EXPECT_EQ(h.chunks, 1);
  EXPECT_EQ(h.kernels, 2);
  EXPECT_EQ(h.bytes, 3072u * 3072 * 2);
  EXPECT_EQ(h.rowscale_kernel, "");
  EXPECT_EQ(h.scale_kernel, "");
  EXPECT_EQ(tq2_lt_plan(64, 3072, 3072, DType::F16, DType::F32, true).gemm_out, DType::F32);
}

TEST(Tq2LtPlan, AutomaticChunkRows) {
  EXPECT_EQ(tq2_lt_auto_chunk_rows(1536, 27648, 3072), 13824);
  EXPECT_EQ(tq2_lt_auto_chunk_rows(4096, 14336, 4096), 4864);  // 3 chunks, 24 MB-class
  EXPECT_EQ(tq2_lt_auto_chunk_rows(17, 27648, 3072), 13824);   // capped at 128 MiB: 2 chunks
  EXPECT_EQ(tq2_lt_auto_chunk_rows(1536, 3072, 3072), 3072);
  EXPECT_EQ(tq2_lt_auto_chunk_rows(1536, 8, 128), 8);
  EXPECT_EQ(tq2_lt_auto_chunk_rows(65536, 65536, 8192), 1792);  // large m: the L2 rule (1536), evened out
}

TEST(Tq2LtPlan, LayoutInvariantsRandom) {
  test::Rng rng(42);
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t m = rng.uniform_int(1, 5000), n = rng.uniform_int(1, 40000), k = 128 * rng.uniform_int(1, 64);
    const DType in = std::vector<DType>{DType::F32, DType::F16, DType::BF16}[static_cast<std::size_t>(rng.uniform_int(0, 2))];
    const DType out = rng.uniform_int(0, 1) ? DType::F32 : in;
    const bool exact = rng.uniform_int(0, 1) == 1;
    const std::int64_t force = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(1, 3000) : 0;
    const Tq2LtPlan p = tq2_lt_plan(m, n, k, in, out, exact, force);
    SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << " " << dtype_name(in) << "->" << dtype_name(out)
                                    << " exact " << exact << " force " << force);
    if (force > 0) EXPECT_EQ(p.chunk_rows, std::min<std::int64_t>(n, (force + 127) / 128 * 128));
    EXPECT_GE(p.chunk_rows * p.chunks, n);
    EXPECT_LT((p.chunks - 1) * p.chunk_rows, n);
    EXPECT_GE(p.last_rows, 1);
    EXPECT_LE(p.last_rows, p.chunk_rows);
    if (p.chunks > 1) EXPECT_EQ(p.chunk_rows % 128, 0);  // chunk offsets keep 256-byte alignment
    if (force == 0) EXPECT_LE(static_cast<std::size_t>(p.chunk_rows) * 2 * static_cast<std::size_t>(k),
                              std::max<std::size_t>(kTq2LtMaxChunkBytes, 256u * 2 * static_cast<std::size_t>(k)));
    for (std::size_t off : {p.alpha_off, p.parts_off, p.part_bytes, p.weight_off, p.temp_off, p.bytes})
      EXPECT_EQ(off % kTq2LtAlign, 0u);
    if (p.scaled) EXPECT_GE(p.parts_off, p.alpha_off + static_cast<std::size_t>(m) * 4);
    EXPECT_GE(p.weight_off, p.parts_off + static_cast<std::size_t>(p.parts) * p.part_bytes);
    EXPECT_GE(p.temp_off, p.weight_off + static_cast<std::size_t>(p.chunk_rows * k * 2));
    EXPECT_GE(p.bytes, p.temp_off + (p.via_temp ? static_cast<std::size_t>(m * p.temp_ld * 4) : 0u));
    EXPECT_EQ(p.kernels, (p.scaled ? 1 : 0) + static_cast<int>(p.chunks) * (1 + p.gemms + (p.scaled ? 1 : 0)));
    EXPECT_EQ(p.via_temp, p.scaled && out != DType::F32);
    EXPECT_EQ(p.parts, in == DType::F32 ? (exact ? 2 : 1) : in == DType::BF16 ? 1 : 0);
  }
}

TEST(Tq2LtPlan, WorkspaceQueryAndRefusals) {
  Tq2Options o;
  const std::size_t lt = tq2_lt_plan(1536, 27648, 3072, DType::F32, DType::F32, true).bytes;
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32), lt);  // Auto: DequantLt's
  o.force_route = Tq2Route::DequantLt;
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32, o), lt);
  o.dequant_chunk_rows = 4096;
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32, o),
            tq2_lt_plan(1536, 27648, 3072, DType::F32, DType::F32, true, 4096).bytes);
  o.precision = Precision::Fast;
  EXPECT_LT(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32, o),
            tq2_lt_plan(1536, 27648, 3072, DType::F32, DType::F32, true, 4096).bytes);
  o = {};
  o.force_route = Tq2Route::Tiled;
  EXPECT_EQ(tq2_workspace_bytes(1536, 27648, 3072, DType::F32, DType::F32, o), 0u);
  EXPECT_EQ(tq2_workspace_bytes(0, 27648, 3072, DType::F32, DType::F32), 0u);
  test::expect_error([] { tq2_workspace_bytes(4, 8, 100, DType::F32, DType::F32); }, ErrorCode::InvalidArgument,
                     "k a positive multiple of 128");
  test::expect_error([] { tq2_workspace_bytes(4, 8, 128, DType::F32, DType::F16); }, ErrorCode::Unsupported,
                     "tq2_workspace_bytes: f32 -> f16");
  test::expect_error([] { tq2_workspace_bytes(std::int64_t{1} << 62, 8, 128, DType::F32, DType::F32); },
                     ErrorCode::InvalidArgument, "each at most 2^40");
  test::expect_error([] { tq2_workspace_bytes(std::int64_t{1} << 39, 8, std::int64_t{1} << 39, DType::F32, DType::F32); },
                     ErrorCode::InvalidArgument, "overflows");
  test::expect_error([] { tq2_lt_plan(4, 8, 128, DType::F32, DType::F32, true, -1); }, ErrorCode::InvalidArgument,
                     "chunk rows -1 is negative");
}

TEST(Tq2LtPlan, GemmTq2RefusesBadWorkspaceOptions) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = test::seed_tq2_blocks(8, 128, 3);
  WeightHandle w = cache.get_or_upload(1, b.data(), b.size() * sizeof(BlockTQ2_128), 8, 128);
  std::vector<float> in(4 * 128, 1.0f), out(32, NAN);
  View vin = View::contiguous(in.data(), DType::F32, {4, 128}), vout = View::contiguous(out.data(), DType::F32, {4, 8});
  Tq2Options o;
  o.dequant_chunk_rows = -1;
  test::expect_error([&] { gemm_tq2(ctx, w, vin, vout, o); }, ErrorCode::InvalidArgument,
                     "gemm_tq2: dequant_chunk_rows -1 is negative");
  o = {};
  o.workspace_bytes = 1024;
  test::expect_error([&] { gemm_tq2(ctx, w, vin, vout, o); }, ErrorCode::InvalidArgument,
                     "gemm_tq2: workspace_bytes 1024 given with a null workspace");
  for (float x : out) EXPECT_TRUE(std::isnan(x));
}
