// Dense suite: llmm::matmul (whatever route the router picks, and our tiled engine forced) against
// cuBLASLt on the same buffers, for decode (skinny) and prefill (large) shapes.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llmm/matmul.hpp"
#include "llmm/reference.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "core/engine/tiled_sm90_plan.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "cuda/engine/launch.hpp"
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#endif

namespace llmm::bench {

// Without a GPU: llmm::matmul on the CPU backend (the float64 reference) for small decode and
// prefill shapes, each checked against matmul_f64. No baseline: it is the reference.
static void run_dense_cpu(BenchEnv& env) {
  struct C { const char* name; std::int64_t m, n, k; DType t; };
  std::vector<C> cases = {{"decode_m1", 1, 4096, 1024, DType::BF16}, {"decode_m8", 8, 4096, 1024, DType::BF16},
                          {"decode_m4_f32", 4, 2048, 1024, DType::F32}, {"prefill", 128, 512, 256, DType::F16}};
  for (const C& c : cases) {
    std::size_t es = dtype_size(c.t);
    std::vector<unsigned char> a(static_cast<std::size_t>(c.m * c.k) * es), w(static_cast<std::size_t>(c.n * c.k) * es),
        out(static_cast<std::size_t>(c.m * c.n) * es);
    std::uint64_t h = 12345;
    auto fill = [&](std::vector<unsigned char>& v, std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        store_from_double(v.data(), c.t, i, ((h >> 33) & 1 ? -1.0 : 1.0) * (0.25 + static_cast<double>(h >> 40) * 0x1.0p-24));
      }
    };
    fill(a, c.m * c.k);
    fill(w, c.n * c.k);
    View av = View::contiguous(a.data(), c.t, {c.m, c.k}), wv = View::contiguous(w.data(), c.t, {c.n, c.k}),
         ov = View::contiguous(out.data(), c.t, {c.m, c.n});
    MatmulOptions o;
    o.transpose_b = true;
    auto t0 = std::chrono::steady_clock::now();
    Receipt r = matmul(env.ctx, av, wv, ov, o);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    cpu::MatmulF64 ref = cpu::matmul_f64({View::contiguous(a.data(), c.t, {1, c.m, c.k}),
                                          View::contiguous(w.data(), c.t, {1, c.n, c.k}), false, true});
    double mx = 0, mr = 0;
    for (std::size_t i = 0; i < ref.value.size(); ++i) {
      double e = std::abs(load_as_double(out.data(), c.t, static_cast<std::int64_t>(i)) - ref.value[i]);
      mx = std::max(mx, e);
      mr = std::max(mr, e / ref.abs_sum[i]);
    }
    Row row;
    row.suite = "dense", row.name = c.name, row.route = r.route, row.kernel = r.kernel;
    row.dtype = std::string(dtype_name(c.t)), row.m = c.m, row.n = c.n, row.k = c.k;
    row.us = row.us_min = row.us_max = us;
    row.flops = 2.0 * c.m * c.n * c.k;
    row.bytes = static_cast<double>(c.m * c.k + c.n * c.k + c.m * c.n) * es;
    row.max_abs_err = mx, row.max_rel_err = mr, row.err_note = "full";
    row.device = env.device_label;
    env.out.add(row);
  }
}

#ifdef LLMM_HAS_CUDA
namespace {

struct DenseBenchCase {
  std::string name;
  std::int64_t m, n, k;  // C[m, n] = A[m, k] . W[n, k]^T
  DType dtype;
  Precision precision;
  DenseRoute route;      // Auto: what users get
  int force_bn = 0;      // > 0: the Hopper engine launched directly at this tile width (calibration rows)
  int force_bm = engine::kTiledBM;  // and weight rows (kTiledTallBM: tall tiles)
};

void run_case(BenchEnv& env, const DenseBenchCase& c) {
  StreamHandle s = env.ctx.stream();
  std::size_t es = dtype_size(c.dtype);
  double wbytes = static_cast<double>(c.n * c.k) * es;
  double iobytes = static_cast<double>(c.m * c.k + c.m * c.n) * es;
  int copies = rotation_copies(wbytes + iobytes, static_cast<double>(env.ctx.arch().l2_bytes));
  std::vector<DeviceBuffer> w, a;
  for (int i = 0; i < copies; ++i) {
    w.emplace_back(static_cast<std::size_t>(c.n * c.k) * es);
    a.emplace_back(static_cast<std::size_t>(c.m * c.k) * es);
    fill_random_device(w.back().data(), c.dtype, c.n * c.k, 1000 + static_cast<std::uint64_t>(i), 1.0, s);
    fill_random_device(a.back().data(), c.dtype, c.m * c.k, 2000 + static_cast<std::uint64_t>(i), 0.25, s);
  }
  DeviceBuffer out(static_cast<std::size_t>(c.m * c.n) * es);
  auto views = [&](int i) {
    std::size_t j = static_cast<std::size_t>(i % copies);
    return std::array<View, 3>{View::contiguous(a[j].data(), c.dtype, {c.m, c.k}, DeviceKind::CUDA),
                               View::contiguous(w[j].data(), c.dtype, {c.n, c.k}, DeviceKind::CUDA),
                               View::contiguous(out.data(), c.dtype, {c.m, c.n}, DeviceKind::CUDA)};
  };
  MatmulOptions o;
  o.transpose_b = true;
  o.precision = c.precision;
  o.force_route = c.route;
  Receipt receipt;
  cuda_dense::DenseArgs g;
  g.dtype = c.dtype, g.m = c.m, g.n = c.n, g.k = c.k, g.a_ld = c.k, g.b_trans = true, g.b_ld = c.k, g.c_ld = c.n;
  g.exact = c.precision == Precision::Exact;
  g.a = a[0].data(), g.b = w[0].data(), g.c = out.data();
  // The call timed: llmm::matmul, or (force_bn) the engine's launcher at that width, as the
  // dispatcher would launch it had the plan picked the width.
  engine::TiledSm90Launch forced;
  if (c.force_bn > 0) {
    forced = engine::tiled_sm90_dense_launch_at(c.dtype, 1, c.m, c.n, env.ctx.arch().sm_count, c.force_bn, c.force_bm);
    receipt.route = "tiled_sm90", receipt.kernel = engine::tiled_sm90_dense_kernel_name(c.dtype, c.force_bn, c.force_bm);
  }
  auto call = [&](int i) {
    if (c.force_bn > 0) {
      cuda_dense::DenseArgs gi = g;
      std::size_t j = static_cast<std::size_t>(i % copies);
      gi.a = a[j].data(), gi.b = w[j].data();
      engine::launch_tiled_sm90_dense(gi, forced, s);
      return;
    }
    auto v = views(i);
    receipt = matmul(env.ctx, v[0], v[1], v[2], o);
  };
  call(0);
  SampledError err = sample_check(g, 128);

  // Baseline on the same buffers: cuBLASLt (SGEMM for f32 exact, TF32 for f32 fast).
  auto math = c.dtype == DType::F32 && c.precision == Precision::Fast ? cuda_dense::LtMath::Tf32 : cuda_dense::LtMath::Default;
  cuda_dense::CublasLtGemm lt(env.ctx.cublaslt_handle(), g, math, Context::kCublasLtWorkspaceBytes);
  void* ws = env.ctx.cublaslt_workspace();
  // llmm and the baseline in alternating rounds, so drift during the run hits both alike.
  auto [t, tb] = time_pair(
      s,
      call,
      [&](int i) {
        cuda_dense::DenseArgs gi = g;
        std::size_t j = static_cast<std::size_t>(i % copies);
        gi.a = a[j].data(), gi.b = w[j].data();
        lt.run(gi, ws, s);
      });

  Row row;
  row.suite = "dense", row.name = c.name, row.route = receipt.route, row.kernel = receipt.kernel;
  row.dtype = std::string(dtype_name(c.dtype));
  row.precision = c.dtype == DType::F32 ? (c.precision == Precision::Exact ? "exact" : "fast") : "-";
  row.m = c.m, row.n = c.n, row.k = c.k;
  row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
  row.flops = 2.0 * c.m * c.n * c.k;
  row.bytes = wbytes + iobytes;
  row.baseline = lt.description(), row.baseline_us = tb.median_us;
  row.max_abs_err = err.max_abs, row.max_rel_err = err.max_rel, row.err_note = std::to_string(err.samples) + " samples";
  row.device = env.device_label;
  env.out.add(row);
}

}  // namespace

void run_dense(BenchEnv& env) {
  if (!env.ctx.is_cuda()) {
    run_dense_cpu(env);
    return;
  }
  std::vector<DenseBenchCase> cases;
  struct W { const char* name; std::int64_t n, k; };
  std::vector<W> weights = {{"llama8b_up", 14336, 4096}, {"llama8b_down", 4096, 14336}, {"llama3_lmhead", 128256, 4096},
                            {"dit_proj", 27648, 3072}, {"dit_out", 3072, 3072}, {"bitnet2b_q", 2560, 2560},
                            {"bitnet2b_gate", 6912, 2560}, {"bitnet2b_down", 2560, 6912}};
  std::vector<std::int64_t> ms = {1, 2, 4, 8, 16};
  std::vector<DType> dts = {DType::F16, DType::BF16, DType::F32};
  if (env.quick) weights = {{"llama8b_up", 14336, 4096}, {"dit_out", 3072, 3072}}, ms = {1, 8, 16};
  if (env.prefill_only) weights.clear();
  for (const W& w : weights)
    for (DType t : dts)
      for (std::int64_t m : ms)
        cases.push_back({w.name + std::string("_m") + std::to_string(m), m, w.n, w.k, t, Precision::Exact, DenseRoute::Auto});
  const bool hopper = env.ctx.arch().cc_major == 9 && env.ctx.arch().cc_minor == 0;
  // gemv_wide forced at every decode token count and dtype (m 1 since session 26): the router's
  // gate between it and cuBLASLt comes from these rows.
  if (!env.quick)
    for (const W& w : weights)
      for (DType t : dts)
        for (std::int64_t m : ms)
          cases.push_back({w.name + std::string("_m") + std::to_string(m) + "_gemv_wide", m, w.n, w.k, t, Precision::Exact,
                           DenseRoute::GemvWide});
  // The tiled engine at decode token counts (bf16), forced: where its weight stream stands
  // against cuBLASLt's skinny kernels (issue 13's dense 16-bit target).
  if (hopper && !env.quick)
    for (const W& w : weights)
      for (std::int64_t m : ms)
        cases.push_back({w.name + std::string("_m") + std::to_string(m) + "_tiled_sm90", m, w.n, w.k, DType::BF16,
                         Precision::Exact, DenseRoute::TiledSm90});
  struct L { const char* name; std::int64_t m, n, k; };
  std::vector<L> large = {{"dit_proj", 1536, 27648, 3072}, {"dit_out", 1536, 3072, 3072}, {"tract_lmhead", 25, 32000, 1280},
                          {"llama_ffn_prefill", 4096, 14336, 4096}};
  if (env.quick) large = {{"dit_out", 1536, 3072, 3072}, {"tract_lmhead", 25, 32000, 1280}};
  for (const L& l : large) {
    for (DType t : {DType::F16, DType::BF16}) {
      cases.push_back({l.name, l.m, l.n, l.k, t, Precision::Exact, DenseRoute::Auto});
      if (hopper)
        cases.push_back({std::string(l.name) + "_tiled_sm90", l.m, l.n, l.k, t, Precision::Exact, DenseRoute::TiledSm90});
    }
    cases.push_back({l.name, l.m, l.n, l.k, DType::F32, Precision::Exact, DenseRoute::Auto});
    cases.push_back({l.name, l.m, l.n, l.k, DType::F32, Precision::Fast, DenseRoute::Auto});
    if (hopper)  // f32 Exact on the engine (3xTF32) against SGEMM
      cases.push_back({std::string(l.name) + "_tiled_sm90", l.m, l.n, l.k, DType::F32, Precision::Exact, DenseRoute::TiledSm90});
  }
  // The engine's 16-bit tile widths beyond 64/128/256 (kTiledDenseWidths): DiT-sized token
  // counts on a 3072-wide and a 6144-wide weight, where the plan takes 224, 192 or 144 to fill
  // whole waves; cuBLASLt in the same run is the baseline.
  if (hopper && !env.quick)
    for (const L& l : std::vector<L>{{"dit_m1024", 1024, 3072, 3072}, {"dit_m2048", 2048, 3072, 3072},
                                     {"qkv6144_m1536", 1536, 6144, 4096}, {"dit_m3072", 3072, 3072, 3072}})
      cases.push_back({std::string(l.name) + "_tiled_sm90", l.m, l.n, l.k, DType::BF16, Precision::Exact, DenseRoute::TiledSm90});
  // The width rule's calibration: the engine at every 16-bit tile width on shapes of 1.1 to 10
  // waves, and one at a quarter of the K (a tile's fixed cost against its per-stage cost)
  // (`_bn<w>` rows; the plan's pick is the `_tiled_sm90` row of the same shape).
  if (hopper && !env.quick)
    for (const L& l : std::vector<L>{{"dit_out", 1536, 3072, 3072}, {"dit_out_k768", 1536, 3072, 768},
                                     {"dit_m2048", 2048, 3072, 3072}, {"dit_proj", 1536, 27648, 3072},
                                     {"dit_m1024", 1024, 3072, 3072}, {"qkv6144_m1536", 1536, 6144, 4096},
                                     {"dit_m3072", 3072, 3072, 3072}, {"tract_lmhead", 25, 32000, 1280}}) {
      for (int bn : engine::kTiledDenseWidths)
        cases.push_back({std::string(l.name) + "_tiled_sm90_bn" + std::to_string(bn), l.m, l.n, l.k, DType::BF16, Precision::Exact,
                         DenseRoute::TiledSm90, bn});
      for (int bn : engine::kTiledTallWidths)  // tall tiles (256 weight rows)
        cases.push_back({std::string(l.name) + "_tiled_sm90_bm256_bn" + std::to_string(bn), l.m, l.n, l.k, DType::BF16,
                         Precision::Exact, DenseRoute::TiledSm90, bn, engine::kTiledTallBM});
    }
  // Where the engine's f32 Exact starts to beat SGEMM (the router's gate): token counts above
  // gemv_wide's 16 on a wide and a square weight, forced, SGEMM as the baseline in the same run.
  if (hopper && !env.quick)
    for (const W& w : std::vector<W>{{"llama8b_up", 14336, 4096}, {"dit_out", 3072, 3072}})
      for (std::int64_t m : {17, 32, 64, 128, 256, 512})
        cases.push_back({std::string("f32x3_") + w.name + "_m" + std::to_string(m) + "_tiled_sm90", m, w.n, w.k, DType::F32,
                         Precision::Exact, DenseRoute::TiledSm90});
  for (const auto& c : cases) {
    if (env.skip(c.name)) continue;
    try {
      run_case(env, c);
    } catch (const Error& e) {
      std::printf("dense: case %s %s failed: %s\n", c.name.c_str(), std::string(dtype_name(c.dtype)).c_str(), e.what());
    }
  }
}
#else
void run_dense(BenchEnv& env) { run_dense_cpu(env); }
#endif

}  // namespace llmm::bench
