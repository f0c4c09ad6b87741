// llmm::matmul on the CPU backend: the seed's exact cases, layouts, and every refusal (with its
// message, no kernel launched, and the output untouched).
#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#include "support/dense_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

using namespace llmm;
using namespace llmm::test;

TEST(DenseCpu, SeedOnesAndRamp) {
  Context ctx = Context::cpu(2);
  std::vector<float> a(10 * 32 * 16, 1.0f), b(10 * 16 * 32, 1.0f), c(10 * 32 * 32, NAN);
  Receipt r = matmul(ctx, View::contiguous(a.data(), DType::F32, {10, 32, 16}),
                     View::contiguous(b.data(), DType::F32, {10, 16, 32}), View::contiguous(c.data(), DType::F32, {10, 32, 32}));
  EXPECT_EQ(r.route, "cpu");
  EXPECT_EQ(r.kernels_launched, 1);
  for (float x : c) ASSERT_EQ(x, 16.0f);

  std::vector<float> ra(12), rb(24), rc(16, NAN);
  for (int i = 0; i < 12; ++i) ra[static_cast<std::size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 24; ++i) rb[static_cast<std::size_t>(i)] = static_cast<float>(i);
  matmul(ctx, View::contiguous(ra.data(), DType::F32, {2, 2, 3}), View::contiguous(rb.data(), DType::F32, {2, 3, 4}),
         View::contiguous(rc.data(), DType::F32, {2, 2, 4}));
  EXPECT_EQ(rc, (std::vector<float>{20, 23, 26, 29, 56, 68, 80, 92, 344, 365, 386, 407, 488, 518, 548, 578}));
}

TEST(DenseCpu, SeedMatVecAndMatMulCases) {
  Context ctx = Context::cpu(2);
  struct S { std::int64_t b, m, k, n; bool tb; };
  for (S s : {S{1, 4, 4, 1, false}, S{10, 1, 4, 4, false}, S{5, 1, 15, 7, true}, S{1, 3, 5, 4, false}, S{1, 2, 5, 10, true},
              S{1, 4, 4, 4, true}, S{1, 4, 4, 200, true}}) {
    DenseCase c{DType::F32, s.b, s.m, s.n, s.k, false, s.tb};
    DenseOutcome o = run_dense_case(ctx, c);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    EXPECT_TRUE(o.padding_untouched) << c.describe();
  }
}

TEST(DenseCpu, LayoutsBatchesAndBroadcast) {
  Context ctx = Context::cpu(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int bc = 0; bc < 3; ++bc) {
          DenseCase c{t, 3, 7, 33, 17, ta == 1, tb == 1, 5, bc == 1, bc == 2};
          c.seed = static_cast<std::uint64_t>(ta * 7 + tb * 3 + bc);
          DenseOutcome o = run_dense_case(ctx, c);
          EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
          EXPECT_TRUE(o.padding_untouched) << c.describe();
        }
}

TEST(DenseCpu, ZeroSizes) {
  Context ctx = Context::cpu();
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, NAN);
  Receipt r = matmul(ctx, View::contiguous(a.data(), DType::F32, {0, 4}), View::contiguous(b.data(), DType::F32, {4, 3}),
                     View::contiguous(c.data(), DType::F32, {0, 3}));
  EXPECT_EQ(r.route, "none");
  EXPECT_EQ(r.kernels_launched, 0);
  // k == 0: the output is fully written with zeros.
  r = matmul(ctx, View::contiguous(a.data(), DType::F32, {2, 0}), View::contiguous(b.data(), DType::F32, {0, 3}),
             View::contiguous(c.data(), DType::F32, {2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[static_cast<std::size_t>(i)], 0.0f);
  EXPECT_TRUE(std::isnan(c[6]));
}

namespace {

struct Bufs {
  std::vector<float> a = std::vector<float>(4096, 1.0f), b = std::vector<float>(4096, 1.0f), c = std::vector<float>(4096, NAN);
  std::vector<std::uint16_t> h = std::vector<std::uint16_t>(4096, 0x3C00);
};

// Expects an llmm::Error with `code` whose message contains `part`, no kernel launched, and
// c (all of it) still NaN.
void expect_refused(const std::function<void(Context&, Bufs&)>& call, ErrorCode code, const std::string& part) {
  Context ctx = Context::cpu();
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  Bufs bufs;
  try {
    call(ctx, bufs);
    ADD_FAILURE() << "not refused; expected: " << part;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
  EXPECT_TRUE(rec.launched.empty());
  for (float x : bufs.c) ASSERT_TRUE(std::isnan(x)) << "output written by a refused call (" << part << ")";
}

View f32(float* p, std::initializer_list<std::int64_t> s) { return View::contiguous(p, DType::F32, s); }

}  // namespace

TEST(DenseCpu, Refusals) {
  using C = Context;
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, View::contiguous(b.h.data(), DType::F16, {4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4})); },
                 ErrorCode::Unsupported, "matmul: only homogeneous dtypes are supported. inputs: f16, f32. output: f32");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, View::contiguous(b.h.data(), DType::U8, {4, 4}), View::contiguous(b.h.data(), DType::U8, {4, 4}), View::contiguous(b.c.data(), DType::U8, {4, 4})); },
                 ErrorCode::Unsupported, "matmul: unsupported dtype u8");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.a.data(), {4, 5}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4})); },
                 ErrorCode::InvalidArgument, "inner dimensions differ");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.a.data(), {4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 5})); },
                 ErrorCode::InvalidArgument, "matmul: c must be [4, 4] per batch");
  expect_refused([](C& ctx, Bufs& b) {
    matmul(ctx, View::strided(b.a.data(), DType::F32, {3, 5}, {10, 2}), f32(b.b.data(), {5, 4}), f32(b.c.data(), {3, 4}));
  }, ErrorCode::InvalidArgument, "matmul: invalid left matmul argument a [m, k]: strides [10, 2] != [>= 5, 1], strides: [10, 2] dims: (m: 3, n: 4, k: 5)");
  expect_refused([](C& ctx, Bufs& b) {
    matmul(ctx, f32(b.a.data(), {3, 5}), View::strided(b.b.data(), DType::F32, {5, 4}, {3, 1}), f32(b.c.data(), {3, 4}));
  }, ErrorCode::InvalidArgument, "invalid right matmul argument b [k, n]: strides [3, 1] != [>= 4, 1]");
  expect_refused([](C& ctx, Bufs& b) {
    MatmulOptions o;
    o.transpose_b = true;
    matmul(ctx, f32(b.a.data(), {3, 5}), View::strided(b.b.data(), DType::F32, {4, 5}, {4, 1}), f32(b.c.data(), {3, 4}), o);
  }, ErrorCode::InvalidArgument, "invalid right matmul argument b [n, k]: strides [4, 1] != [>= 5, 1]");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.c.data() + 8, {4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4})); },
                 ErrorCode::InvalidArgument, "matmul: output c overlaps input a");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.a.data(), {4, 4}), f32(b.c.data(), {4, 4}), f32(b.c.data() + 15, {4, 4})); },
                 ErrorCode::InvalidArgument, "matmul: output c overlaps input b");
  expect_refused([](C& ctx, Bufs& b) {
    matmul(ctx, f32(b.a.data(), {2, 4, 4}), f32(b.b.data(), {4, 4}), View::strided(b.c.data(), DType::F32, {2, 4, 4}, {8, 4, 1}));
  }, ErrorCode::InvalidArgument, "matmul: c batch stride 8 is smaller than one [4, 4] matrix of row stride 4");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.a.data(), {2, 4, 4}), f32(b.b.data(), {3, 4, 4}), f32(b.c.data(), {3, 4, 4})); },
                 ErrorCode::InvalidArgument, "matmul: a has batch 2 but c has batch 3");
  expect_refused([](C& ctx, Bufs& b) {
    View dev = f32(b.a.data(), {4, 4});
    dev.device = DeviceKind::CUDA;
    matmul(ctx, dev, f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4}));
  }, ErrorCode::InvalidArgument, "matmul: a is on f32[4, 4] strides [4, 1] on cuda:0 but the context is cpu");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(b.a.data(), {1, 1, 4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4})); },
                 ErrorCode::InvalidArgument, "matmul: a must be rank 2 or 3");
  expect_refused([](C& ctx, Bufs& b) {
    View huge = View::strided(b.a.data(), DType::F32, {1, 3000000000ll}, {3000000000ll, 1});
    View hb = View::strided(b.b.data(), DType::F32, {3000000000ll, 1}, {1, 1});
    matmul(ctx, huge, hb, f32(b.c.data(), {1, 1}));
  }, ErrorCode::Unsupported, "matmul: dimension 3000000000 exceeds the supported 2^31 - 1");
  expect_refused([](C& ctx, Bufs& b) {
    View mis = View::contiguous(reinterpret_cast<char*>(b.a.data()) + 2, DType::F32, {4, 4});
    matmul(ctx, mis, f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4}));
  }, ErrorCode::InvalidArgument, "matmul: a pointer");
  expect_refused([](C& ctx, Bufs& b) {
    MatmulOptions o;
    o.force_route = DenseRoute::GemvWide;
    matmul(ctx, f32(b.a.data(), {4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4}), o);
  }, ErrorCode::Unsupported, "matmul: route gemv_wide cannot run");
  expect_refused([](C& ctx, Bufs& b) { matmul(ctx, f32(nullptr, {4, 4}), f32(b.b.data(), {4, 4}), f32(b.c.data(), {4, 4})); },
                 ErrorCode::InvalidArgument, "matmul: a has null data");
}

TEST(DenseCpu, InjectedLaunchFailureWritesNothing) {
  Context ctx = Context::cpu();
  LaunchRecorder rec;
  rec.before_launch = [](const std::string& k) { fail(ErrorCode::Cuda, "injected failure for ", k); };
  ctx.set_launch_recorder(&rec);
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, NAN);
  EXPECT_THROW(matmul(ctx, f32(a.data(), {4, 4}), f32(b.data(), {4, 4}), f32(c.data(), {4, 4})), Error);
  EXPECT_TRUE(rec.launched.empty());
  for (float x : c) EXPECT_TRUE(std::isnan(x));
}

// Empty operands with any strides (NumPy 2 gives empty arrays strides (0, 0)) are an empty call;
// k == 0 gives zeros. None of these is refused.
TEST(DenseCpu, EmptyAndZeroK) {
  Context ctx = Context::cpu(2);
  LaunchRecorder rec;
  ctx.set_launch_recorder(&rec);
  float dummy[8] = {0};
  std::vector<float> c(3 * 4, NAN);
  auto v = [&](float* p, std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> strides) {
    return View::strided(p, DType::F32, shape, strides);
  };
  // m == 0, n == 0, batch == 0: nothing written or launched.
  EXPECT_EQ(matmul(ctx, v(dummy, {0, 5}, {0, 0}), v(dummy, {5, 4}, {4, 1}), v(dummy, {0, 4}, {0, 0})).kernels_launched, 0);
  EXPECT_EQ(matmul(ctx, v(dummy, {3, 2}, {2, 1}), v(dummy, {2, 0}, {0, 0}), v(dummy, {3, 0}, {0, 0})).kernels_launched, 0);
  EXPECT_EQ(matmul(ctx, v(dummy, {0, 3, 2}, {0, 0, 0}), v(dummy, {0, 2, 4}, {0, 0, 0}), v(dummy, {0, 3, 4}, {0, 0, 0}))
                .kernels_launched,
            0);
  EXPECT_TRUE(rec.launched.empty());
  // k == 0: every output is an empty sum.
  Receipt r = matmul(ctx, v(dummy, {3, 0}, {0, 0}), v(dummy, {0, 4}, {0, 0}), View::contiguous(c.data(), DType::F32, {3, 4}));
  EXPECT_EQ(r.kernels_launched, 1);
  for (float x : c) ASSERT_EQ(x, 0.0f);
  std::fill(c.begin(), c.end(), NAN);
  MatmulOptions o;
  o.transpose_a = o.transpose_b = true;
  matmul(ctx, v(dummy, {0, 3}, {0, 0}), v(dummy, {4, 0}, {0, 0}), View::contiguous(c.data(), DType::F32, {3, 4}), o);
  for (float x : c) ASSERT_EQ(x, 0.0f);
}

TEST(DenseCpu, NonFiniteInputsPropagate) {
  Context ctx = Context::cpu(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    DenseCase c{t, 2, 9, 17, 40, false, true};
    c.nonfinite_every = 3;
    DenseOutcome o = run_dense_case(ctx, c);
    EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
    EXPECT_GT(o.cmp.nonfinite, 0);
  }
}
