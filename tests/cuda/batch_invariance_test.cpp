// Batch invariance on the GPU: within one route, an output row must be bitwise the same whatever
// m is and whatever the other rows hold (what vLLM/SGLang users need for reproducible serving).
// Each route runs one fixed row among random others at several m; the routes that claim it
// (docs/performance.md, "Batch invariance") must hold it; the others are measured and printed.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/ternary/tq2_kernels.hpp"
#include "llmm/matmul.hpp"
#include "llmm/moe.hpp"
#include "llmm/ternary.hpp"
#include "support/gpu.hpp"
#include "support/moe_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

// Runs `row_of(m)` (the fixed row's output bytes at batch size m) for every m; true when all
// are bitwise equal. Prints the outcome.
bool invariant(const std::string& what, const std::vector<std::int64_t>& ms,
               const std::function<std::vector<unsigned char>(std::int64_t m)>& row_of) {
  const std::vector<unsigned char> first = row_of(ms[0]);
  bool same = true;
  for (std::size_t i = 1; i < ms.size(); ++i) same = same && row_of(ms[i]) == first;
  std::printf("batch invariance: %-44s %s\n", what.c_str(), same ? "holds" : "does NOT hold");
  return same;
}

// The fixed row's bytes of [rows, cols] output at `row`.
std::vector<unsigned char> row_bytes(const HostTensor& out, std::int64_t row, std::int64_t ld, std::int64_t cols) {
  const std::size_t es = dtype_size(out.view.dtype);
  const auto* p = out.bytes.data() + static_cast<std::size_t>(row * ld) * es;
  return std::vector<unsigned char>(p, p + static_cast<std::size_t>(cols) * es);
}

// matmul x . w^T (w on the device, [n, k]) at batch size m with the fixed row x0 [1, k] at row
// (m - 1) / 2 among random rows (seed + m), on `route`: that row's output bytes; the kernel in
// *kernel.
std::vector<unsigned char> dense_fixed_row(Context& ctx, const DeviceTensor& w, const HostTensor& x0, std::int64_t m,
                                           std::int64_t n, std::uint64_t seed, DenseRoute route, std::string* kernel = nullptr) {
  const DType t = x0.view.dtype;
  const std::int64_t k = x0.view.dim(1);
  HostTensor a = host_tensor(t, {m, k}), c = host_tensor(t, {m, n});
  fill_random(a.view, seed + static_cast<std::uint64_t>(m));
  const std::int64_t at = (m - 1) / 2;
  std::memcpy(a.bytes.data() + static_cast<std::size_t>(at * k) * dtype_size(t), x0.bytes.data(), x0.bytes.size());
  DeviceTensor da = to_device(a), dc = to_device(c);
  MatmulOptions o;
  o.transpose_b = true, o.force_route = route;
  const Receipt r = matmul(ctx, da.view, w.view, dc.view, o);
  if (kernel) *kernel = r.kernel;
  ctx.synchronize();
  to_host(dc, c);
  return row_bytes(c, at, n, n);
}

// gemm_tq2 at batch size m with the fixed row x0 [1, k] at row (m - 1) / 2 among random rows
// (seed + m): that row's f32 output bytes; the call's receipt in *receipt.
std::vector<unsigned char> tq2_fixed_row(Context& ctx, const WeightHandle& wh, const HostTensor& x0, std::int64_t m,
                                         std::int64_t n, std::int64_t k, std::uint64_t seed, const Tq2Options& o,
                                         Receipt* receipt = nullptr) {
  const DType t = x0.view.dtype;
  HostTensor a = host_tensor(t, {m, k}), c = host_tensor(DType::F32, {m, n});
  fill_random(a.view, seed + static_cast<std::uint64_t>(m));
  const std::int64_t at = (m - 1) / 2;
  std::memcpy(a.bytes.data() + static_cast<std::size_t>(at * k) * dtype_size(t), x0.bytes.data(), x0.bytes.size());
  DeviceTensor da = to_device(a), dc = to_device(c);
  const Receipt r = gemm_tq2(ctx, wh, da.view, dc.view, o);
  if (receipt) *receipt = r;
  ctx.synchronize();
  to_host(dc, c);
  return row_bytes(c, at, n, n);
}


// matmul_id at batch size m with c0's token 0 (fixed: its input row and ids, the experts) at
// token (m - 1) / 2 among zipf-routed random tokens (seed + m): that token's output rows' bytes.
std::vector<unsigned char> moe_fixed_token_rows(Context& ctx, MatmulIdScratch& scratch, const MoeCase& c0,
                                                const MoeBuffers& fixed, std::int64_t m, std::uint64_t seed) {
  MoeCase c = c0;
  c.p.m = static_cast<std::uint32_t>(m), c.seed = seed + static_cast<std::uint64_t>(m), c.routing = Routing::Zipf;
  MoeBuffers b = make_moe_buffers(c);
  std::memcpy(b.w.bytes.data(), fixed.w.bytes.data(), fixed.w.bytes.size());  // same experts
  const std::int64_t at = (m - 1) / 2, top_k = c.p.top_k, row = top_k * c.p.n;
  const std::size_t in_row = static_cast<std::size_t>(c.p.k) * dtype_size(c.p.input_dtype);
  const std::size_t id_row = static_cast<std::size_t>(top_k) * dtype_size(c.ids_dtype);
  std::memcpy(b.in.bytes.data() + static_cast<std::size_t>(at) * in_row, fixed.in.bytes.data(), in_row);
  std::memcpy(b.ids.bytes.data() + static_cast<std::size_t>(at) * id_row, fixed.ids.bytes.data(), id_row);
  DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
  matmul_id(ctx, dw.view, din.view, dids.view, dout.view, &scratch, b.p);
  ctx.synchronize();
  to_host(dout, b.out);
  return row_bytes(b.out, at, row, row);
}

}  // namespace

TEST(BatchInvarianceGpu, Dense) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  const std::int64_t n = 264, k = 520;
  struct R { DenseRoute route; std::vector<std::int64_t> ms; bool claimed; };
  for (DType t : {DType::F32, DType::BF16})
    for (const R& r : {R{DenseRoute::GemvWide, {1, 2, 5, 8}, true},
                       R{DenseRoute::GemvWide, {2, 5, 9, 16}, false},
                       R{DenseRoute::CublasLt, {1, 5, 70, 300}, false}, R{DenseRoute::TiledSm90, {1, 5, 70, 300, 2100}, true}}) {
      if (r.route == DenseRoute::TiledSm90 && !(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) continue;
      HostTensor b = host_tensor(t, {n, k}), x0 = host_tensor(t, {1, k});
      fill_random(b.view, 11), fill_random(x0.view, 12);
      DeviceTensor db = to_device(b);
      auto row_of = [&](std::int64_t m) { return dense_fixed_row(ctx, db, x0, m, n, 100, r.route); };
      const std::string what = std::string("matmul ") + route_name(r.route) + " " + std::string(dtype_name(t));
      const bool holds = invariant(what, r.ms, row_of);
      if (r.claimed) EXPECT_TRUE(holds) << what << " claims batch invariance";
    }
}

// The engine's dense 16-bit instance across its tiles: at n 3072 the plan takes 64 (m 1), tall
// 96 (m 1024), tall 144 (m 1536), 192 (m 2048) and 256 (m 4096) wide tiles; a row's K order is
// the wgmmas' whatever their N and however many a consumer issues, so its bits must not change
// with the width or the tile's rows either.
TEST(BatchInvarianceGpu, DenseEngineAcrossTileWidths) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  if (!(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) GTEST_SKIP() << "the Hopper tiled engine runs on sm_90 only";
  const std::int64_t n = 3072, k = 520;
  for (DType t : {DType::BF16, DType::F16}) {
    HostTensor b = host_tensor(t, {n, k}), x0 = host_tensor(t, {1, k});
    fill_random(b.view, 21), fill_random(x0.view, 22);
    DeviceTensor db = to_device(b);
    std::vector<std::string> kernels;
    auto row_of = [&](std::int64_t m) {
      std::string kernel;
      std::vector<unsigned char> row = dense_fixed_row(ctx, db, x0, m, n, 200, DenseRoute::TiledSm90, &kernel);
      kernels.push_back(kernel);
      return row;
    };
    const std::string what = std::string("matmul tiled_sm90 widths ") + std::string(dtype_name(t));
    EXPECT_TRUE(invariant(what, {1, 1024, 1536, 2048, 4096}, row_of)) << what;
    std::vector<std::string> distinct = kernels;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const std::string& kn : distinct) std::printf("  %s\n", kn.c_str());
    EXPECT_GE(distinct.size(), 4u) << what << ": the plan's widths changed; pick m that exercise several";
    EXPECT_TRUE(std::any_of(distinct.begin(), distinct.end(), [](const std::string& kn) { return kn.find("_bm256_") != std::string::npos; }))
        << what << ": no tall tile among the plan's picks";
    EXPECT_TRUE(std::any_of(distinct.begin(), distinct.end(), [](const std::string& kn) { return kn.find("_bm256_") == std::string::npos; }))
        << what << ": no 128-row tile among the plan's picks";
  }
}

TEST(BatchInvarianceGpu, MatmulId) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MatmulIdScratch scratch(ctx, 16, 600, 4);
  // f16: f16 input, the Hopper engine on sm_90: sorting its rows itself at m 1 and 3 (Auto:
  // m <= 16), after moe_map from m 40.
  for (DType w : {DType::F32, DType::BF16, DType::F16})
    for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
      const std::vector<std::int64_t> ms = route == MatmulIdRoute::Direct ? std::vector<std::int64_t>{1, 3, 40}
                                                                          : std::vector<std::int64_t>{1, 3, 40, 300, 600};
      MoeCase c0;  // token 0 of this case is the fixed token: its input row and ids
      c0.p.m = 1, c0.p.n = 96, c0.p.k = 264, c0.p.top_k = 4, c0.p.n_experts = 16, c0.p.route = route;
      c0.w_dtype = w, c0.seed = 5;
      if (w == DType::F16) c0.p.input_dtype = c0.p.output_dtype = DType::F16;
      MoeBuffers fixed = make_moe_buffers(c0);
      auto row_of = [&](std::int64_t m) { return moe_fixed_token_rows(ctx, scratch, c0, fixed, m, 50); };
      const std::string what = std::string("matmul_id ") + matmul_id_route_name(route) + " w " + std::string(dtype_name(w));
      EXPECT_TRUE(invariant(what, ms, row_of)) << what << " claims batch invariance";
    }
}

namespace {

// One fixed row through forced v5 on an n x k weight at each m of `ms`, f32 and bf16 input:
// bitwise the same row every time; `kernel_ok(m, kernel)` checks which kernel each m ran.
template <class KernelOk>
void expect_v5_row_invariant(const char* what, std::int64_t n, std::int64_t k, std::uint64_t seed,
                             const std::vector<std::int64_t>& ms, KernelOk kernel_ok) {
  Context ctx = Context::cuda(0);
  if (!ctx.arch().is_hopper()) GTEST_SKIP() << "tq2_stream_v5 is built for sm_90a";
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(n, k, seed);
  WeightHandle wh = cache.get_or_upload(1, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k);
  for (DType t : {DType::F32, DType::BF16}) {
    HostTensor x0 = host_tensor(t, {1, k});
    fill_random(x0.view, seed + 6);
    auto row_of = [&](std::int64_t m) {
      Tq2Options o;
      o.force_route = Tq2Route::StreamV5;
      Receipt r;
      std::vector<unsigned char> row = tq2_fixed_row(ctx, wh, x0, m, n, k, 300, o, &r);
      EXPECT_TRUE(kernel_ok(m, r.kernel)) << "m " << m << ": " << r.kernel;
      return row;
    };
    const std::string label = std::string("gemm_tq2 tq2_stream_v5 ") + what + " " + std::string(dtype_name(t));
    EXPECT_TRUE(invariant(label, ms, row_of)) << label;
  }
}

}  // namespace

// v5 at long K holds the whole activation image at m = 1..2 and one part's slice at m = 4
// (tq2_stream_v5_image_plan): the same conversion and the same part sums, so the fixed row must
// come out bitwise the same either way.
TEST(BatchInvarianceGpu, TernaryV5WholeAndSlicedImage) {
  LLMM_REQUIRE_CUDA();
  const std::int64_t n = 1000, k = 20480;
  ASSERT_FALSE(cuda_ternary::tq2_stream_v5_image_plan(2, n, k).sliced);
  ASSERT_TRUE(cuda_ternary::tq2_stream_v5_image_plan(4, n, k).sliced);
  expect_v5_row_invariant("whole/sliced", n, k, 17, {1, 2, 4}, [](std::int64_t m, const std::string& kernel) {
    return (kernel.find("_sliced") != std::string::npos) == (m == 4);
  });
}

// v5 at m = 9..16 (wide kernels: 6 or 8 n8 tiles, parts from n and k alone): the fixed row comes
// out bitwise the same at every m of that range (not across 8 | 9, where the parts may differ).
TEST(BatchInvarianceGpu, TernaryV5Wide) {
  LLMM_REQUIRE_CUDA();
  const std::int64_t n = 1000, k = 3072;
  ASSERT_EQ(cuda_ternary::tq2_stream_v5_parts_for(9, n, k), cuda_ternary::tq2_stream_v5_parts_for(16, n, k));
  expect_v5_row_invariant("wide", n, k, 19, {9, 12, 13, 16}, [](std::int64_t m, const std::string& kernel) {
    return kernel.find(m <= 12 ? "_n48_" : "_n64_") != std::string::npos;
  });
}

// Where the fallback parts hold (m = 7..8 on 6784 x 28672: 6 parts, narrow's 4 at m <= 6), the
// fixed row is bitwise the same at m = 7 and 8; across 6 | 7 it is not claimed.
TEST(BatchInvarianceGpu, TernaryV5FallbackParts) {
  LLMM_REQUIRE_CUDA();
  const std::int64_t n = 6784, k = 28672;
  ASSERT_EQ(cuda_ternary::tq2_stream_v5_parts_for(7, n, k).parts, 6);
  ASSERT_EQ(cuda_ternary::tq2_stream_v5_parts_for(6, n, k).parts, 4);
  expect_v5_row_invariant("fallback parts", n, k, 23, {7, 8}, [](std::int64_t, const std::string& kernel) {
    return kernel.find("_p6_sliced") != std::string::npos;
  });
}

TEST(BatchInvarianceGpu, Ternary) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  const std::int64_t n = 520, k = 2048;  // 2 K parts on the split route
  std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(n, k, 9);
  WeightHandle wh = cache.get_or_upload(1, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k);
  struct R { Tq2Route route; std::vector<std::int64_t> ms; bool claimed; };
  for (DType t : {DType::F32, DType::BF16})
    for (const R& r : {R{Tq2Route::Tiled, {1, 17, 100}, true},
                       R{Tq2Route::StreamV4, {1, 2, 5, 8}, true}, R{Tq2Route::StreamV5, {1, 2, 5, 8}, true},
                       R{Tq2Route::StreamV2, {1, 2, 3, 9, 16}, false}, R{Tq2Route::DequantLt, {1, 17, 100}, false},
                       R{Tq2Route::TiledSm90, {1, 17, 100, 300}, true},
                       R{Tq2Route::TiledSm90SplitK, {1, 17, 100, 300}, true}}) {
      const bool engine = r.route == Tq2Route::TiledSm90 || r.route == Tq2Route::TiledSm90SplitK;
      if ((r.route == Tq2Route::StreamV4 || r.route == Tq2Route::StreamV5 || engine) && !ctx.arch().is_hopper()) continue;  // built for sm_90a only
      HostTensor x0 = host_tensor(t, {1, k});
      fill_random(x0.view, 21);
      auto row_of = [&](std::int64_t m) {
        Tq2Options o;
        o.force_route = r.route;
        // The engine takes f32 in Fast only; its global power-of-two scale changes no product.
        if (engine) o.precision = Precision::Fast;
        return tq2_fixed_row(ctx, wh, x0, m, n, k, 200, o);
      };
      const std::string what = std::string("gemm_tq2 ") + tq2_route_name(r.route) + " " + std::string(dtype_name(t));
      const bool holds = invariant(what, r.ms, row_of);
      if (r.claimed) EXPECT_TRUE(holds) << what << " claims batch invariance";
    }
}
