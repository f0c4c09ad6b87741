// moe_ffn on the CPU backend: the float64 reference against the test's own loops over every
// activation, dtype and id dtype with out-of-range ids; NaN stays in its token; empty and zero
// sizes; every refusal names the values, launches nothing and writes nothing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/moe_ffn.hpp"
#include "llmm/ternary.hpp"
#include "support/expect_error.hpp"
#include "support/moe_ffn_case.hpp"
#include "support/random.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
Receipt run(Context& ctx, MoeFfnBuffers& b, const MoeFfnOptions& o = {}) {
  return moe_ffn(ctx, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
}
// Only the output's final rounding separates the reference backend from the test's loops.
double out_unit(DType t) { return t == DType::F32 ? std::ldexp(1.0, -23) : t == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7); }
}  // namespace

TEST(MoeFfnCpu, ReferenceEveryActivationDtypeAndIdDtype) {
  Context ctx = Context::cpu(2);
  std::uint64_t seed = 10;
  int checked = 0;
  for (MoeActivation act : {MoeActivation::Silu, MoeActivation::GeluTanh, MoeActivation::GeluErf})
    for (DType x : {DType::F32, DType::F16, DType::BF16})
      for (DType ids : {DType::U32, DType::I32, DType::I64}) {
        MoeFfnCase c;
        c.activation = act, c.x_dtype = x, c.w_dtype = x, c.ids_dtype = ids, c.seed = ++seed;
        c.w_route_dtype = seed % 3 == 0 ? DType::BF16 : DType::F32;
        c.out_of_range_every = 3, c.top_k = 3, c.m = 4 + static_cast<std::int64_t>(seed % 3);
        MoeFfnBuffers b = make_moe_ffn(c);
        MoeFfnOptions o;
        o.activation = act;
        const Receipt r = run(ctx, b, o);
        EXPECT_EQ(r.kernel, "cpu_moe_ffn_reference");
        EXPECT_EQ(compare_moe_ffn(b, b.out, 1e-12, out_unit(x)), "") << c.describe();
        ++checked;
      }
  EXPECT_EQ(checked, 27);
  // 16-bit weights with an f32 x.
  MoeFfnCase c;
  c.x_dtype = DType::F32, c.w_dtype = DType::BF16, c.out_of_range_every = 4;
  MoeFfnBuffers b = make_moe_ffn(c);
  run(ctx, b);
  EXPECT_EQ(compare_moe_ffn(b, b.out, 1e-12, out_unit(DType::F32)), "") << c.describe();
}

// The activations beyond SwiGLU / GeGLU, the gate-less form, gpt-oss's interleaved rows and the
// expert biases: the reference backend against the test's own loops, every bias dtype.
TEST(MoeFfnCpu, ActivationsLayoutsAndBiases) {
  Context ctx = Context::cpu(2);
  std::uint64_t seed = 300;
  int checked = 0;
  struct V { MoeActivation act; bool gated; MoeGateLayout layout; };
  const V variants[] = {{MoeActivation::Relu2, true, MoeGateLayout::Halves},
                        {MoeActivation::Relu2, false, MoeGateLayout::Halves},
                        {MoeActivation::Silu, false, MoeGateLayout::Halves},
                        {MoeActivation::GeluTanh, false, MoeGateLayout::Halves},
                        {MoeActivation::GeluErf, false, MoeGateLayout::Halves},
                        {MoeActivation::SwigluOai, true, MoeGateLayout::Interleaved},
                        {MoeActivation::SwigluOai, true, MoeGateLayout::Halves},
                        {MoeActivation::Silu, true, MoeGateLayout::Interleaved}};
  for (const V& v : variants)
    for (int biases = 0; biases < 4; ++biases) {
      MoeFfnCase c;
      c.activation = v.act, c.gated = v.gated, c.layout = v.layout, c.seed = ++seed;
      c.limit = 0.4f, c.alpha = 1.5f;  // small enough that the clamps act on O(1) values
      c.bias_gate_up = biases & 1, c.bias_down = biases & 2;
      c.bias_dtype = seed % 3 == 0 ? DType::BF16 : seed % 3 == 1 ? DType::F16 : DType::F32;
      c.out_of_range_every = 3, c.top_k = 3;
      c.nan_token = seed % 4 == 0 ? 1 : -1;  // NaN through every activation
      MoeFfnBuffers b = make_moe_ffn(c);
      MoeFfnOptions o = moe_ffn_options(c);
      if (c.bias_gate_up) o.bias_gate_up = b.bias_gate_up.view;
      if (c.bias_down) o.bias_down = b.bias_down.view;
      run(ctx, b, o);
      EXPECT_EQ(compare_moe_ffn(b, b.out, 1e-12, out_unit(DType::F32)), "") << c.describe();
      ++checked;
    }
  EXPECT_EQ(checked, 32);
  // The clamps acted: swigluoai with a huge limit differs from the small one.
  MoeFfnCase c;
  c.activation = MoeActivation::SwigluOai, c.limit = 0.4f;
  MoeFfnBuffers small = make_moe_ffn(c);
  c.limit = 1e6f;
  MoeFfnBuffers large = make_moe_ffn(c);
  EXPECT_NE(small.ref, large.ref);
}

TEST(MoeFfnCpu, NanStaysInItsToken) {
  Context ctx = Context::cpu(2);
  MoeFfnCase c;
  c.m = 6, c.nan_token = 2, c.seed = 5;
  MoeFfnBuffers b = make_moe_ffn(c);
  run(ctx, b);
  EXPECT_EQ(compare_moe_ffn(b, b.out, 1e-12, out_unit(DType::F32)), "");
  int nans = 0;
  for (std::int64_t i = 0; i < c.m * c.hidden; ++i) {
    const bool nan = std::isnan(b.out.get(i));
    nans += nan;
    if (i / c.hidden != 2) EXPECT_FALSE(nan) << i;
  }
  EXPECT_EQ(nans, c.hidden);
}

TEST(MoeFfnCpu, EmptyAndZeroSizes) {
  Context ctx = Context::cpu(1);
  MoeFfnCase c;
  c.m = 0;
  MoeFfnBuffers b = make_moe_ffn(c);
  EXPECT_EQ(run(ctx, b).kernels_launched, 0);
  c = MoeFfnCase{};
  c.top_k = 0;  // no expert: zeros
  b = make_moe_ffn(c);
  run(ctx, b);
  for (std::int64_t i = 0; i < c.m * c.hidden; ++i) ASSERT_EQ(b.out.get(i), 0.0) << i;
  c = MoeFfnCase{};
  c.inter = 0;  // empty experts: zeros
  b = make_moe_ffn(c);
  run(ctx, b);
  for (std::int64_t i = 0; i < c.m * c.hidden; ++i) ASSERT_EQ(b.out.get(i), 0.0) << i;
}

namespace {
// A refused call: the error names the problem, nothing is launched, out stays NaN.
void expect_refused(const std::function<void(Context&, MoeFfnBuffers&)>& call, const std::string& part,
                    ErrorCode code = ErrorCode::InvalidArgument) {
  Context ctx = Context::cpu(1);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  MoeFfnBuffers b = make_moe_ffn(MoeFfnCase{});
  expect_error([&] { call(ctx, b); }, code, part);
  EXPECT_TRUE(rec.launched.empty()) << part;
  for (std::int64_t i = 0; i < b.out.view.dim(0) * b.out.view.dim(1); ++i) ASSERT_TRUE(std::isnan(b.out.get(i))) << part;
}
using B = MoeFfnBuffers;
}  // namespace

TEST(MoeFfnCpu, RefusalsNameTheValuesAndWriteNothing) {
  expect_refused([](Context& c, B& b) {
    View x = b.x.view;
    x.shape[1] = 39;
    moe_ffn(c, x, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view);
  }, "moe_ffn: x is f32[5, 39]");
  expect_refused([](Context& c, B& b) {
    View w = b.w_gate_up.view;
    w.shape[1] = 47;
    moe_ffn(c, b.x.view, w, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view);
  }, "moe_ffn: w_gate_up must be [n_experts, 2 * inter, hidden] with a gate (halves gate and up rows), got f32[4, 47, 40]");
  expect_refused([](Context& c, B& b) {
    View w = b.w_down.view;
    w.shape[2] = 23;
    moe_ffn(c, b.x.view, b.w_gate_up.view, w, b.ids.view, b.topk_weights.view, b.out.view);
  }, "moe_ffn: w_down must be [n_experts, hidden, inter] = [4, 40, 24]");
  expect_refused([](Context& c, B& b) {
    View ids = b.ids.view;
    ids.shape[0] = 4;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, ids, b.topk_weights.view, b.out.view);
  }, "moe_ffn: ids must be [m, top_k] with m 5 (x's rows)");
  expect_refused([](Context& c, B& b) {
    View ids = b.ids.view;
    ids.dtype = DType::F32;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, ids, b.topk_weights.view, b.out.view);
  }, "moe_ffn: ids must be u32, i32 or i64, got f32");
  expect_refused([](Context& c, B& b) {
    View tw = b.topk_weights.view;
    tw.shape[1] = 1;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, tw, b.out.view);
  }, "moe_ffn: topk_weights must be [m, top_k] = [5, 2] like ids");
  expect_refused([](Context& c, B& b) {
    View tw = b.topk_weights.view;
    tw.dtype = DType::I32;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, tw, b.out.view);
  }, "moe_ffn: topk_weights must be f32, f16 or bf16, got i32");
  expect_refused([](Context& c, B& b) {
    View w = b.w_down.view;
    w.dtype = DType::F16;
    moe_ffn(c, b.x.view, b.w_gate_up.view, w, b.ids.view, b.topk_weights.view, b.out.view);
  }, "moe_ffn: w_gate_up (f32) and w_down (f16) must have one dtype");
  expect_refused([](Context& c, B& b) {
    View x = b.x.view, out = b.out.view;
    x.dtype = DType::BF16, out.dtype = DType::BF16;
    moe_ffn(c, x, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, out);
  }, "moe_ffn: the weights must be of x's dtype (bf16), or f16 / bf16 with an f32 x; got f32");
  expect_refused([](Context& c, B& b) {
    View out = b.out.view;
    out.dtype = DType::F16;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, out);
  }, "moe_ffn: out must be f32[5, 40] (x's dtype and shape), got f16[5, 40]");
  expect_refused([](Context& c, B& b) {
    View out = View::contiguous(b.x.view.data, DType::F32, {5, 40});
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, out);
  }, "moe_ffn: out must not overlap x");
  expect_refused([](Context& c, B& b) {
    View w = View::strided(b.w_gate_up.view.data, DType::F32, {4, 48, 20}, {48 * 40, 40, 2});
    View x = View::strided(b.x.view.data, DType::F32, {5, 20}, {40, 1});
    View out = View::contiguous(b.out.view.data, DType::F32, {5, 20});
    View wd = View::strided(b.w_down.view.data, DType::F32, {4, 20, 24}, {40 * 24, 24, 1});
    moe_ffn(c, x, w, wd, b.ids.view, b.topk_weights.view, out);
  }, "moe_ffn: weights must have strides [expert stride, k, 1]");
  expect_refused([](Context& c, B& b) {
    View x = b.x.view;
    x.device = DeviceKind::CUDA;
    moe_ffn(c, x, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view);
  }, "moe_ffn: x is on");
  expect_refused([](Context& c, B& b) {
    c.launch_recorder()->before_launch = [](const std::string& k) { fail(ErrorCode::Cuda, "injected failure resolving ", k); };
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view);
  }, "injected failure resolving cpu_moe_ffn_reference", ErrorCode::Cuda);
}

TEST(MoeFfnCpu, ActivationAndBiasRefusals) {
  expect_refused([](Context& c, B& b) {
    MoeFfnOptions o;
    o.activation = MoeActivation::SwigluOai, o.gated = false;
    View w = b.w_gate_up.view;
    w.shape[1] = 24;
    moe_ffn(c, b.x.view, w, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: activation swigluoai is gated only (gated is false)");
  expect_refused([](Context& c, B& b) {
    MoeFfnOptions o;
    o.gated = false, o.gate_layout = MoeGateLayout::Interleaved;
    View w = b.w_gate_up.view;
    w.shape[1] = 24;
    moe_ffn(c, b.x.view, w, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: gate layout interleaved needs a gated activation (gated is false)");
  expect_refused([](Context& c, B& b) {
    MoeFfnOptions o;
    o.gated = false;  // w_gate_up's 48 rows are then inter = 48, against w_down's 24
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: w_down must be [n_experts, hidden, inter] = [4, 40, 48]");
  for (float limit : {0.0f, -1.0f, NAN, INFINITY})
    expect_refused([limit](Context& c, B& b) {
      MoeFfnOptions o;
      o.activation = MoeActivation::SwigluOai, o.swiglu_limit = limit;
      moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
    }, "moe_ffn: swigluoai needs a finite alpha and a finite limit > 0");
  expect_refused([](Context& c, B& b) {
    MoeFfnOptions o;
    o.activation = MoeActivation::SwigluOai, o.swiglu_alpha = NAN;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: swigluoai needs a finite alpha and a finite limit > 0, got alpha nan");
  HostTensor bias = host_tensor(DType::F32, {4, 48});
  HostTensor bias_i32 = host_tensor(DType::I32, {4, 48});
  fill_random(bias.view, 3);
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    o.bias_gate_up = View::contiguous(bias.view.data, DType::F32, {4, 47});
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: bias_gate_up must be a contiguous f32 / f16 / bf16 [4, 48] (n_experts, rows of w_gate_up), got f32[4, 47]");
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    o.bias_down = View::contiguous(bias.view.data, DType::F32, {4, 48});
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: bias_down must be a contiguous f32 / f16 / bf16 [4, 40] (n_experts, hidden), got f32[4, 48]");
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    o.bias_gate_up = bias_i32.view;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: bias_gate_up must be a contiguous f32 / f16 / bf16 [4, 48]");
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    o.bias_down = View::strided(bias.view.data, DType::F32, {4, 40}, {48, 1});
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: bias_down must be a contiguous f32 / f16 / bf16 [4, 40]");
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    View v = bias.view;
    v.device = DeviceKind::CUDA;
    o.bias_gate_up = v;
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: bias_gate_up is on");
  expect_refused([&](Context& c, B& b) {
    MoeFfnOptions o;
    o.bias_down = View::contiguous(b.out.view.data, DType::F32, {4, 40});
    moe_ffn(c, b.x.view, b.w_gate_up.view, b.w_down.view, b.ids.view, b.topk_weights.view, b.out.view, o);
  }, "moe_ffn: out must not overlap bias_down");
}

// Ternary expert stacks: the reference on the decoded TQ2 weights is the dense reference on the
// same (dequantized) values, bit for bit; their shape and route refusals.
TEST(MoeFfnCpu, TernaryExpertsEqualTheDenseReferenceOfTheirValues) {
  Context ctx = Context::cpu(2);
  TernaryWeightCache cache(ctx);
  const std::int64_t e = 3, hidden = 256, inter = 128;
  MoeFfnCase c;
  c.m = 4, c.hidden = hidden, c.inter = inter, c.top_k = 2, c.experts = e, c.out_of_range_every = 5, c.seed = 21;
  MoeFfnBuffers b = make_moe_ffn(c);  // f32 weights, quantized below
  auto ternary = [&](const HostTensor& w, std::int64_t rows, std::int64_t k, std::uint64_t key, HostTensor& dense) {
    const std::vector<BlockTQ2_128> aos = tq2_quantize(static_cast<const float*>(w.view.data), e * rows, k, Tq2ScaleRule::AbsMax);
    const std::vector<float> values = tq2_dequantize(aos.data(), aos.size() * kTq2BlockBytes, e * rows, k);
    std::memcpy(dense.view.data, values.data(), values.size() * 4);
    return cache.get_or_upload_experts(key, aos.data(), aos.size() * kTq2BlockBytes, e, rows, k);
  };
  HostTensor gu_dense = host_tensor(DType::F32, {e, 2 * inter, hidden}), dn_dense = host_tensor(DType::F32, {e, hidden, inter});
  const WeightHandle gu = ternary(b.w_gate_up, 2 * inter, hidden, 1, gu_dense);
  const WeightHandle dn = ternary(b.w_down, hidden, inter, 2, dn_dense);
  HostTensor want = host_tensor(DType::F32, {c.m, hidden});
  moe_ffn(ctx, b.x.view, gu_dense.view, dn_dense.view, b.ids.view, b.topk_weights.view, want.view);
  const Receipt r = moe_ffn(ctx, b.x.view, gu, dn, b.ids.view, b.topk_weights.view, b.out.view);
  EXPECT_EQ(r.kernel, "cpu_moe_ffn_reference");
  EXPECT_EQ(b.out.bytes, want.bytes);
  double biggest = 0;
  for (std::int64_t i = 0; i < c.m * hidden; ++i) biggest = std::max(biggest, std::fabs(want.get(i)));
  EXPECT_GT(biggest, 0.0);  // not a vacuous comparison of zeros

  poison(b.out.view);
  expect_error([&] { moe_ffn(ctx, b.x.view, gu, gu, b.ids.view, b.topk_weights.view, b.out.view); },
               ErrorCode::InvalidArgument, "moe_ffn: ternary w_down must be [n_experts, hidden, inter] = [3, 256, 128]");
  MoeFfnOptions direct;
  direct.route = MatmulIdRoute::Direct;
  expect_error([&] { moe_ffn(ctx, b.x.view, gu, dn, b.ids.view, b.topk_weights.view, b.out.view, direct); },
               ErrorCode::InvalidArgument, "moe_ffn: ternary experts take route auto");
  expect_error([&] { moe_ffn(ctx, b.x.view, WeightHandle{}, dn, b.ids.view, b.topk_weights.view, b.out.view); },
               ErrorCode::InvalidArgument, "moe_ffn: w_gate_up is a null ternary weight");
  for (std::int64_t i = 0; i < c.m * hidden; ++i) ASSERT_TRUE(std::isnan(b.out.get(i))) << "a refused call wrote out";
}
