// moe_ffn on the GPU against the float64 reference of the test's own loops: decode and prefill
// m (direct and grouped routes, the fused and staged engines), f16 / bf16 / f32 x, every
// activation, id and routing-weight dtype, out-of-range ids, NaN staying in its token, token
// passes (m > kMoeFfnPassTokens), bitwise determinism, graph capture and replay.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "core/moe/moe_args.hpp"
#include "core/moe/moe_ffn_launch.hpp"
#include "core/moe/moe_kernels.hpp"
#include "cuda/moe/launch.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#include "llmm/moe_ffn.hpp"
#include "llmm/ternary.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/moe_ffn_case.hpp"
#include "support/random.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
struct OnDevice {
  DeviceTensor x, wgu, wd, ids, tw, out;
  explicit OnDevice(const MoeFfnBuffers& b)
      : x(to_device(b.x)), wgu(to_device(b.w_gate_up)), wd(to_device(b.w_down)), ids(to_device(b.ids)),
        tw(to_device(b.topk_weights)), out(to_device(b.out)) {}
  Receipt run(Context& ctx, const MoeFfnOptions& o = {}) {
    return moe_ffn(ctx, x.view, wgu.view, wd.view, ids.view, tw.view, out.view, o);
  }
};

// A case's operands and options on the device, its biases included.
struct CaseOnDevice {
  MoeFfnBuffers b;
  OnDevice d;
  std::optional<DeviceTensor> bgu, bd;
  MoeFfnOptions o;
  explicit CaseOnDevice(const MoeFfnCase& c) : b(make_moe_ffn(c)), d(b), o(moe_ffn_options(c)) {
    if (c.bias_gate_up) bgu.emplace(to_device(b.bias_gate_up)), o.bias_gate_up = bgu->view;
    if (c.bias_down) bd.emplace(to_device(b.bias_down)), o.bias_down = bd->view;
  }
};

// Error bound over the magnitude (sum |w| |W_down| |a|): the intermediates rounded to x's dtype
// (gate and up, the activation, the down rows: ~3.5 units), f32 sums; plus the output's rounding.
double rel_bound(DType x) {
  return x == DType::BF16 ? 4 * std::ldexp(1.0, -8) : x == DType::F16 ? 4 * std::ldexp(1.0, -11) : std::ldexp(1.0, -13);
}
double out_unit(DType x) { return x == DType::BF16 ? std::ldexp(1.0, -8) : x == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -23); }

std::string check_case(Context& ctx, const MoeFfnCase& c, Receipt* receipt = nullptr, std::vector<unsigned char>* bytes = nullptr) {
  MoeFfnBuffers b = make_moe_ffn(c);
  OnDevice d(b);
  MoeFfnOptions o;
  o.activation = c.activation;
  const Receipt r = d.run(ctx, o);
  ctx.synchronize();
  to_host(d.out, b.out);
  if (receipt) *receipt = r;
  if (bytes) *bytes = b.out.bytes;
  return compare_moe_ffn(b, b.out, rel_bound(c.x_dtype), out_unit(c.x_dtype));
}
}  // namespace

TEST(MoeFfnGpu, DecodeAndPrefillEveryDtypeAndActivation) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 100;
  struct S { std::int64_t m, hidden, inter, top_k, experts; };
  const S shapes[] = {{1, 256, 96, 4, 16}, {3, 128, 64, 2, 8}, {16, 264, 136, 8, 32}, {17, 128, 40, 2, 6},
                      {100, 192, 72, 4, 16}, {700, 128, 64, 8, 64}};
  for (const S& s : shapes)
    for (DType x : {DType::BF16, DType::F16, DType::F32})
      for (MoeActivation act : {MoeActivation::Silu, MoeActivation::GeluTanh, MoeActivation::GeluErf}) {
        if (act != MoeActivation::Silu && x == DType::F16 && s.m > 20) continue;  // keep the sweep short
        MoeFfnCase c;
        c.m = s.m, c.hidden = s.hidden, c.inter = s.inter, c.top_k = s.top_k, c.experts = s.experts;
        c.x_dtype = x, c.w_dtype = x, c.activation = act, c.seed = ++seed;
        c.ids_dtype = seed % 3 == 0 ? DType::U32 : seed % 3 == 1 ? DType::I32 : DType::I64;
        c.w_route_dtype = seed % 2 ? DType::F32 : x;
        c.out_of_range_every = 7;
        Receipt r;
        EXPECT_EQ(check_case(ctx, c, &r), "") << c.describe() << " [" << r.kernel << "]";
        // The composition's kernels, or at decode (the direct route) the fused epilogues.
        const bool fused = r.kernel.find("_slotsum") != std::string::npos;
        EXPECT_NE(r.kernel.find(fused ? "_act_" : "moe_ffn_gated_"), std::string::npos) << r.kernel;
        if (!fused) EXPECT_NE(r.kernel.find("moe_ffn_combine_"), std::string::npos) << r.kernel;
      }
  // 16-bit weights with an f32 x.
  MoeFfnCase c;
  c.m = 24, c.hidden = 128, c.inter = 64, c.top_k = 2, c.experts = 8, c.x_dtype = DType::F32, c.w_dtype = DType::BF16;
  EXPECT_EQ(check_case(ctx, c), "") << c.describe();
}

// relu2, the gate-less forms, gpt-oss's clamped SwiGLU on interleaved and halved rows, and the
// expert biases: decode (direct) and prefill (grouped) m, every x dtype, out-of-range ids.
TEST(MoeFfnGpu, ActivationsLayoutsAndBiases) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 500;
  struct V { MoeActivation act; bool gated; MoeGateLayout layout; };
  const V variants[] = {{MoeActivation::Relu2, true, MoeGateLayout::Halves},
                        {MoeActivation::Relu2, false, MoeGateLayout::Halves},
                        {MoeActivation::Silu, false, MoeGateLayout::Halves},
                        {MoeActivation::GeluErf, false, MoeGateLayout::Halves},
                        {MoeActivation::SwigluOai, true, MoeGateLayout::Interleaved},
                        {MoeActivation::SwigluOai, true, MoeGateLayout::Halves},
                        {MoeActivation::Silu, true, MoeGateLayout::Interleaved}};
  for (const V& v : variants)
    for (std::int64_t m : {2, 5, 200})
      for (DType x : {DType::BF16, DType::F16, DType::F32}) {
        MoeFfnCase c;
        c.m = m, c.hidden = 128, c.inter = m == 5 ? 36 : 64, c.top_k = 4, c.experts = 16;  // inter 36: scalar loads
        c.x_dtype = x, c.w_dtype = x, c.activation = v.act, c.gated = v.gated, c.layout = v.layout, c.seed = ++seed;
        c.limit = 0.4f, c.alpha = 1.5f;
        c.bias_gate_up = seed % 2 == 0, c.bias_down = seed % 3 != 0;
        c.bias_dtype = seed % 3 == 0 ? DType::BF16 : seed % 3 == 1 ? DType::F16 : DType::F32;
        c.ids_dtype = seed % 2 ? DType::I64 : DType::I32;
        c.out_of_range_every = 5;
        c.nan_token = seed % 4 == 0 ? 1 : -1;  // NaN through every activation
        CaseOnDevice cd(c);
        MoeFfnBuffers& b = cd.b;
        const Receipt r = cd.d.run(ctx, cd.o);
        ctx.synchronize();
        to_host(cd.d.out, b.out);
        // A bias may cancel most of a gate value rounded to x's dtype: twice the plain bound.
        EXPECT_EQ(compare_moe_ffn(b, b.out, 2 * rel_bound(x), out_unit(x)), "") << c.describe() << " [" << r.kernel << "]";
      }
}

// The slot sum folded into the down GEMM's direct kernel (MoeDirectEpi::SlotSum) against the
// plain kernel's f32 rows then moe_ffn's combine kernel: the same bits, with biases,
// out-of-range ids and a NaN routing weight.
TEST(MoeFfnGpu, FusedSlotSumIsTheCombineBitForBit) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  const std::int64_t m = 3, hidden = 200, inter = 96, experts = 8;
  for (std::int64_t top_k : {6, 2, 3, 1})  // one column pair a block, or a warp a (pair, slot)
  for (DType t : {DType::BF16, DType::F32})
    for (bool bias : {false, true}) {
      HostTensor w = host_tensor(t, {experts, hidden, inter}), a = host_tensor(t, {m * top_k, inter});
      HostTensor ids = host_tensor(DType::I32, {m, top_k}), tw = host_tensor(DType::BF16, {m, top_k});
      HostTensor b = host_tensor(DType::F16, {experts, hidden});
      fill_random(w.view, 1, 0.1), fill_random(a.view, 2), fill_random(tw.view, 3), fill_random(b.view, 4);
      for (std::int64_t r = 0; r < m * top_k; ++r)
        store_from_double(ids.view.data, DType::I32, r, r % 5 == 4 ? -1 : static_cast<double>((r * 3) % experts));
      store_from_double(tw.view.data, DType::BF16, top_k + top_k / 2, NAN);  // token 1: NaN
      DeviceTensor dw = to_device(w), da = to_device(a), dids = to_device(ids), dtw = to_device(tw), db = to_device(b);
      DeviceBuffer y(static_cast<std::size_t>(m * top_k * hidden) * 4);
      HostTensor out1 = host_tensor(t, {m, hidden}), out2 = host_tensor(t, {m, hidden});
      poison(out1.view), poison(out2.view);
      DeviceTensor d1 = to_device(out1), d2 = to_device(out2);
      cuda_moe::MoeArgs g;
      g.m = m, g.n = hidden, g.k = inter, g.top_k = top_k, g.n_experts = experts;
      g.w_dtype = t, g.w = dw.view.data, g.expert_stride = hidden * inter;
      g.in_dtype = t, g.in = da.view.data, g.in_token_stride = top_k * inter, g.in_slot_stride = inter;
      g.ids = dids.view.data, g.ids64 = false, g.out_dtype = DType::F32, g.out = y.data();
      ASSERT_TRUE(cuda_moe::moe_direct_vec16(g));
      cuda_moe::launch_moe_direct(g, ctx.stream());
      cuda_moe::MoeCombineArgs c;
      c.w_dtype = DType::BF16, c.out_dtype = t, c.y = static_cast<const float*>(y.data()), c.w = dtw.view.data;
      c.out = d1.view.data, c.m = m, c.top_k = top_k, c.hidden = hidden;
      c.ids = dids.view.data, c.ids_dtype = DType::I32, c.experts = experts;
      if (bias) c.bias = db.view.data, c.bias_dtype = DType::F16;
      cuda_moe::launch_moe_ffn_combine(c, ctx.stream());
      g.fusion.epi = cuda_moe::MoeDirectEpi::SlotSum, g.fusion.tw = dtw.view.data, g.fusion.tw_dtype = DType::BF16;
      if (bias) g.fusion.bias = db.view.data, g.fusion.bias_dtype = DType::F16;
      g.out_dtype = t, g.out = d2.view.data;
      cuda_moe::launch_moe_direct(g, ctx.stream());
      ctx.synchronize();
      to_host(d1, out1), to_host(d2, out2);
      EXPECT_EQ(out1.bytes, out2.bytes) << dtype_name(t) << " bias " << bias << " top_k " << top_k;
      int nans = 0;
      for (std::int64_t i = 0; i < m * hidden; ++i) nans += std::isnan(out2.get(i));
      EXPECT_EQ(nans, hidden) << "the NaN routing weight reaches its token's row, and only it";
    }
}

// moe_ffn at decode m (the direct route): the fused epilogues (two kernels) against the
// composition (four) and the float64 reference, every activation form and bias; the fused call is
// bitwise repeatable.
TEST(MoeFfnGpu, FusedDecodeMatchesTheCompositionAndTheReference) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  std::uint64_t seed = 900;
  struct V { MoeActivation act; bool gated; MoeGateLayout layout; };
  for (const V& v : {V{MoeActivation::Silu, true, MoeGateLayout::Halves}, V{MoeActivation::GeluTanh, true, MoeGateLayout::Halves},
                     V{MoeActivation::SwigluOai, true, MoeGateLayout::Interleaved}, V{MoeActivation::Relu2, false, MoeGateLayout::Halves}})
    for (std::int64_t m : {1, 2})
      for (DType x : {DType::BF16, DType::F16, DType::F32}) {
        MoeFfnCase c;
        c.m = m, c.hidden = 256, c.inter = 96, c.top_k = 8, c.experts = 32, c.x_dtype = x, c.w_dtype = x;
        c.activation = v.act, c.gated = v.gated, c.layout = v.layout, c.limit = 0.4f, c.seed = ++seed;
        c.bias_gate_up = seed % 2 == 0, c.bias_down = seed % 3 == 0, c.out_of_range_every = 5;
        MoeFfnBuffers b = make_moe_ffn(c);
        OnDevice d(b);
        std::optional<DeviceTensor> bgu, bd;
        MoeFfnOptions o = moe_ffn_options(c);
        o.route = MatmulIdRoute::Direct, o.fuse_decode = true;
        if (c.bias_gate_up) bgu.emplace(to_device(b.bias_gate_up)), o.bias_gate_up = bgu->view;
        if (c.bias_down) bd.emplace(to_device(b.bias_down)), o.bias_down = bd->view;
        std::vector<unsigned char> fused[2];
        Receipt r;
        for (int rep = 0; rep < 2; ++rep) {
          r = d.run(ctx, o);
          ctx.synchronize();
          to_host(d.out, b.out);
          fused[rep] = b.out.bytes;
        }
        EXPECT_EQ(fused[0], fused[1]) << c.describe();
        EXPECT_EQ(r.kernels_launched, 2) << r.kernel;
        EXPECT_NE(r.kernel.find("_act_"), std::string::npos) << r.kernel;
        EXPECT_NE(r.kernel.find("_slotsum"), std::string::npos) << r.kernel;
        EXPECT_EQ(compare_moe_ffn(b, b.out, 2 * rel_bound(x), out_unit(x)), "") << c.describe() << " [" << r.kernel << "]";
        o.fuse_decode = false;
        const Receipt u = d.run(ctx, o);
        ctx.synchronize();
        to_host(d.out, b.out);
        EXPECT_EQ(u.kernels_launched, 4) << u.kernel;
        EXPECT_EQ(compare_moe_ffn(b, b.out, 2 * rel_bound(x), out_unit(x)), "") << c.describe() << " [" << u.kernel << "]";
      }
}

// Batch invariance within a route (issue 48): one fixed token (its x row, ids and routing
// weights) among random others gives bitwise the same output row at every m, on the direct route
// and on the grouped one (its fused engine at small m, map + staged engine above), the two
// GEMMs' own invariance (BatchInvarianceGpu.MatmulId) carried through the per-row activation and
// the per-token slot sum.
TEST(MoeFfnGpu, BatchInvariantWithinARoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MoeFfnCase c0;
  c0.m = 1, c0.hidden = 128, c0.inter = 64, c0.top_k = 4, c0.experts = 16, c0.x_dtype = DType::BF16;
  c0.w_dtype = DType::BF16, c0.seed = 77;
  const MoeFfnBuffers fixed = make_moe_ffn(c0);
  for (MatmulIdRoute route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
    std::vector<unsigned char> first;
    for (std::int64_t m : {1, 3, 40, 300}) {
      MoeFfnCase c = c0;
      c.m = m, c.seed = 1000 + static_cast<std::uint64_t>(m);
      MoeFfnBuffers b = make_moe_ffn(c);
      b.w_gate_up = fixed.w_gate_up, b.w_down = fixed.w_down;  // the same experts at every m
      const std::int64_t p = m / 2;                            // where the fixed token sits
      auto put_row = [](HostTensor& dst, const HostTensor& src, std::int64_t row, std::int64_t cols) {
        const std::size_t es = dtype_size(dst.view.dtype);
        std::copy_n(src.bytes.begin(), cols * es, dst.bytes.begin() + static_cast<std::ptrdiff_t>(row * cols * es));
      };
      put_row(b.x, fixed.x, p, c.hidden);
      put_row(b.ids, fixed.ids, p, c.top_k);
      put_row(b.topk_weights, fixed.topk_weights, p, c.top_k);
      OnDevice d(b);
      MoeFfnOptions o;
      o.route = route;
      const Receipt r = d.run(ctx, o);
      ctx.synchronize();
      to_host(d.out, b.out);
      const std::size_t row_bytes = static_cast<std::size_t>(c.hidden) * dtype_size(c.x_dtype);
      std::vector<unsigned char> row(b.out.bytes.begin() + static_cast<std::ptrdiff_t>(p * row_bytes),
                                     b.out.bytes.begin() + static_cast<std::ptrdiff_t>((p + 1) * row_bytes));
      if (first.empty()) first = row;
      EXPECT_EQ(row, first) << matmul_id_route_name(route) << " m " << m << " [" << r.kernel << "]";
    }
  }
}

TEST(MoeFfnGpu, NanStaysInItsTokenAndRunsAreBitwiseEqual) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  for (std::int64_t m : {4, 300}) {
    MoeFfnCase c;
    c.m = m, c.hidden = 128, c.inter = 64, c.top_k = 4, c.experts = 8, c.x_dtype = DType::BF16, c.w_dtype = DType::BF16;
    c.nan_token = 2, c.seed = 7 + static_cast<std::uint64_t>(m);
    std::vector<unsigned char> first, second;
    EXPECT_EQ(check_case(ctx, c, nullptr, &first), "") << c.describe();
    EXPECT_EQ(check_case(ctx, c, nullptr, &second), "") << c.describe();
    EXPECT_EQ(first, second) << c.describe() << ": two runs differ";
  }
}

// The sorted pipeline (gate_up's rows in the map's expert order, the down GEMM over them without
// a second map or staging copy) against the routed-order composition (LLMM_MOE_FFN_SORTED=0):
// the same bits on every case, with biases, out-of-range ids, a NaN token, the interleaved
// layout, token passes; the receipt names the sorted engine where it ran.
TEST(MoeFfnGpu, SortedPipelineIsTheRoutedOrderBitForBit) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  struct S { std::int64_t m, hidden, inter, top_k, experts; };
  const S shapes[] = {{17, 128, 64, 2, 6}, {100, 192, 72, 4, 16}, {700, 128, 64, 8, 64}, {300, 264, 136, 8, 32},
                      {kMoeFfnPassTokens + 37, 64, 32, 2, 8}};
  std::uint64_t seed = 900;
  int sorted_runs = 0;
  for (const S& s : shapes)
    for (DType x : {DType::BF16, DType::F16}) {
      MoeFfnCase c;
      c.m = s.m, c.hidden = s.hidden, c.inter = s.inter, c.top_k = s.top_k, c.experts = s.experts;
      c.x_dtype = x, c.w_dtype = x, c.seed = ++seed;
      c.activation = seed % 3 == 0 ? MoeActivation::SwigluOai : seed % 3 == 1 ? MoeActivation::Silu : MoeActivation::GeluTanh;
      c.layout = seed % 2 ? MoeGateLayout::Interleaved : MoeGateLayout::Halves;
      c.limit = 0.4f, c.alpha = 1.5f;
      c.bias_gate_up = seed % 2 == 0, c.bias_down = seed % 3 != 0, c.bias_dtype = x;
      c.ids_dtype = seed % 2 ? DType::I64 : DType::I32;
      c.out_of_range_every = seed % 4 == 0 ? 0 : 5;
      c.nan_token = seed % 3 == 0 ? 3 : -1;
      CaseOnDevice cd(c);
      MoeFfnBuffers& b = cd.b;
      OnDevice& d = cd.d;
      const MoeFfnOptions& o = cd.o;
      std::vector<unsigned char> bytes[2];
      Receipt r[2];
      for (int sorted : {1, 0}) {
        if (sorted) unsetenv("LLMM_MOE_FFN_SORTED");
        else setenv("LLMM_MOE_FFN_SORTED", "0", 1);
        ASSERT_EQ(cudaMemset(d.out.view.data, 0xff, b.out.bytes.size()), cudaSuccess);  // NaN in f16 and bf16
        r[sorted] = d.run(ctx, o);
        ctx.synchronize();
        to_host(d.out, b.out);
        bytes[sorted] = b.out.bytes;
        EXPECT_EQ(compare_moe_ffn(b, b.out, 2 * rel_bound(x), out_unit(x)), "")
            << c.describe() << (sorted ? " sorted" : " routed order") << " [" << r[sorted].kernel << "]";
      }
      unsetenv("LLMM_MOE_FFN_SORTED");
      EXPECT_EQ(r[0].kernel.find("_sorted"), std::string::npos) << r[0].kernel;
      if (r[1].kernel.find("_staged_sorted") != std::string::npos) ++sorted_runs;
      EXPECT_EQ(bytes[1], bytes[0]) << c.describe() << ": the sorted pipeline's output differs [" << r[1].kernel << "] vs ["
                                    << r[0].kernel << "]";
    }
  EXPECT_GE(sorted_runs, 6);  // every case above the fused engine's m whose GEMMs stage (sm_90)
}

TEST(MoeFfnGpu, TokenPassesBeyondThePassSize) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MoeFfnCase c;
  c.m = kMoeFfnPassTokens + 37, c.hidden = 64, c.inter = 32, c.top_k = 2, c.experts = 8;
  c.x_dtype = DType::BF16, c.w_dtype = DType::BF16, c.out_of_range_every = 11, c.seed = 3;
  Receipt r;
  EXPECT_EQ(check_case(ctx, c, &r), "") << c.describe();
  EXPECT_GE(r.kernels_launched, 4);
}

TEST(MoeFfnGpu, GraphCaptureAfterWarmUpAndRefusedBefore) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  MoeFfnCase c;
  c.m = 64, c.hidden = 128, c.inter = 64, c.top_k = 4, c.experts = 16, c.x_dtype = DType::BF16, c.w_dtype = DType::BF16;
  MoeFfnBuffers b = make_moe_ffn(c);
  OnDevice d(b);
  cudaStream_t s = ctx.stream();
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  expect_error([&] { d.run(ctx); }, ErrorCode::InvalidArgument, "during CUDA-graph capture, where memory cannot be allocated");
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);  // nothing was enqueued: the capture is still valid
  cudaGraphDestroy(graph);
  d.run(ctx);  // warm: the workspace and the scratch are made
  ctx.synchronize();
  std::vector<unsigned char> eager(b.out.bytes.size());
  copy_to_host(eager.data(), d.out.buffer.data(), eager.size());
  copy_to_device(d.out.buffer.data(), b.out.bytes.data(), b.out.bytes.size());  // poisoned again
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  d.run(ctx);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<unsigned char> replayed(eager.size());
  copy_to_host(replayed.data(), d.out.buffer.data(), replayed.size());
  EXPECT_EQ(eager, replayed);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  to_host(d.out, b.out);
  EXPECT_EQ(compare_moe_ffn(b, b.out, rel_bound(c.x_dtype), out_unit(c.x_dtype)), "");
}

// Ternary expert stacks through the same call: matmul_id_tq2's routes (streaming at m <= 64,
// the staged engine above) against the CPU reference of the same decoded weights.
TEST(MoeFfnGpu, TernaryExpertsMatchTheReference) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0), cpu = Context::cpu(4);
  TernaryWeightCache dev_cache(ctx), cpu_cache(cpu);
  const std::int64_t e = 8, hidden = 256, inter = 128;
  for (std::int64_t m : {1, 16, 100}) {
    MoeFfnCase c;
    c.m = m, c.hidden = hidden, c.inter = inter, c.top_k = 2, c.experts = e, c.out_of_range_every = 7;
    c.x_dtype = DType::BF16, c.seed = 40 + static_cast<std::uint64_t>(m);
    MoeFfnBuffers b = make_moe_ffn(c);  // f32 weights in b, quantized here
    HostTensor gu32 = host_tensor(DType::F32, {e, 2 * inter, hidden}), dn32 = host_tensor(DType::F32, {e, hidden, inter});
    fill_random(gu32.view, c.seed + 7, 0.05);
    fill_random(dn32.view, c.seed + 8, 0.05);
    const auto gu = tq2_quantize(static_cast<const float*>(gu32.view.data), e * 2 * inter, hidden, Tq2ScaleRule::AbsMean);
    const auto dn = tq2_quantize(static_cast<const float*>(dn32.view.data), e * hidden, inter, Tq2ScaleRule::AbsMean);
    const std::uint64_t key = 100 + static_cast<std::uint64_t>(m);
    const WeightHandle gu_d = dev_cache.get_or_upload_experts(key, gu.data(), gu.size() * kTq2BlockBytes, e, 2 * inter, hidden);
    const WeightHandle dn_d = dev_cache.get_or_upload_experts(key + 1000, dn.data(), dn.size() * kTq2BlockBytes, e, hidden, inter);
    const WeightHandle gu_h = cpu_cache.get_or_upload_experts(key, gu.data(), gu.size() * kTq2BlockBytes, e, 2 * inter, hidden);
    const WeightHandle dn_h = cpu_cache.get_or_upload_experts(key + 1000, dn.data(), dn.size() * kTq2BlockBytes, e, hidden, inter);
    HostTensor want = host_tensor(DType::BF16, {m, hidden});
    moe_ffn(cpu, b.x.view, gu_h, dn_h, b.ids.view, b.topk_weights.view, want.view);
    DeviceTensor x = to_device(b.x), ids = to_device(b.ids), tw = to_device(b.topk_weights), out = to_device(b.out);
    const Receipt r = moe_ffn(ctx, x.view, gu_d, dn_d, ids.view, tw.view, out.view);
    ctx.synchronize();
    to_host(out, b.out);
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < m * hidden; ++i) {
      worst = std::max(worst, std::fabs(b.out.get(i) - want.get(i)));
      scale = std::max(scale, std::fabs(want.get(i)));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 2e-2 * scale) << "m " << m << " [" << r.kernel << "]";
  }
}
