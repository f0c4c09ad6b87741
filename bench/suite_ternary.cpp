// Ternary suite: gemm_tq2 against what a user runs today without ternary kernels: cuBLAS on the
// dequantized weight (SGEMM f32, TF32, bf16 dense), for DiT prefill and LLM decode shapes; and the
// host-I/O API with and without the grow-only pool (the seed's nopool/pool ratio).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "llmm/ternary.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "core/engine/tiled_sm90_plan.hpp"
#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#endif

namespace llmm::bench {
namespace {

// Random ternary blocks (codes uniform in {0, 1, 2}, scales 0.02..0.1), deterministic.
std::vector<BlockTQ2_128> random_blocks(std::int64_t n, std::int64_t k, std::uint64_t seed) {
  std::vector<BlockTQ2_128> b(static_cast<std::size_t>(n * (k / 128)));
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ull + 7;
  for (auto& blk : b) {
    for (auto& q : blk.qs) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      std::uint8_t v = 0;
      for (int j = 0; j < 4; ++j) v = static_cast<std::uint8_t>(v | (((h >> (33 + 4 * j)) % 3) << (2 * j)));
      q = v;
    }
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    blk.d = f32_to_f16_bits(0.02f + 0.08f * static_cast<float>(h >> 40) * 0x1.0p-24f);
  }
  return b;
}

void run_cpu(BenchEnv& env) {
  TernaryWeightCache cache(env.ctx);
  struct C { const char* name; std::int64_t m, n, k; };
  for (C c : {C{"decode_m1", 1, 3072, 3072}, C{"decode_m16", 16, 3072, 3072}, C{"prefill_m128", 128, 1024, 1024}}) {
    auto blocks = random_blocks(c.n, c.k, 1);
    WeightHandle w = cache.get_or_upload(static_cast<std::uint64_t>(c.n * 7 + c.k), blocks.data(),
                                         blocks.size() * sizeof(BlockTQ2_128), c.n, c.k);
    std::vector<float> in(static_cast<std::size_t>(c.m * c.k), 0.5f), out(static_cast<std::size_t>(c.m * c.n));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f + 1e-3f;
    auto t0 = std::chrono::steady_clock::now();
    Receipt r = gemm_tq2(env.ctx, w, in.data(), out.data(), c.m, c.n, c.k);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    Row row;
    row.suite = "ternary", row.name = c.name, row.route = r.route, row.kernel = r.kernel, row.dtype = "f32";
    row.precision = "exact", row.m = c.m, row.n = c.n, row.k = c.k;
    row.us = row.us_min = row.us_max = us;
    row.flops = 2.0 * c.m * c.n * c.k;
    row.bytes = static_cast<double>(w->bytes()) + 4.0 * (c.m * c.k + c.m * c.n);
    row.device = env.device_label;
    env.out.add(row);
  }
}

#ifdef LLMM_HAS_CUDA
struct Prepared {
  std::vector<WeightHandle> w;            // rotated copies (distinct keys)
  std::vector<DeviceBuffer> wf32, wbf16;  // dequantized copies for the baselines
  std::vector<float> host_w;              // dequantized, for error checks
};

// Prefill with bf16 activations and bf16 output (what a DiT or LLM prefill runs): llmm's Auto
// route, the Hopper tiled engine and tq2_dequant_lt, each against cuBLAS bf16 dense on the
// dequantized weight (bf16 out), with the max error of 128 sampled outputs against float64.
void run_bf16_prefill(BenchEnv& env, const char* shape, std::int64_t m, std::int64_t n, std::int64_t k, const Prepared& p,
                      int copies, double packed, const void* in_bf16, void* lt_ws) {
  StreamHandle s = env.ctx.stream();
  DeviceBuffer out(static_cast<std::size_t>(m * n) * 2), out_base(static_cast<std::size_t>(m * n) * 2);
  std::vector<std::uint16_t> hin(static_cast<std::size_t>(m * k)), hout(static_cast<std::size_t>(m * n));
  copy_to_host(hin.data(), in_bf16, hin.size() * 2);
  cuda_dense::DenseArgs g;
  g.dtype = DType::BF16, g.m = m, g.n = n, g.k = k, g.a_ld = k, g.b_trans = true, g.b_ld = k, g.c_ld = n;
  g.a = in_bf16, g.b = p.wbf16[0].data(), g.c = out_base.data();
  cuda_dense::CublasLtGemm lt(env.ctx.cublaslt_handle(), g, cuda_dense::LtMath::Default, Context::kCublasLtWorkspaceBytes);
  const bool hopper = env.ctx.arch().cc_major == 9 && env.ctx.arch().cc_minor == 0;
  struct R { Tq2Route route; const char* suffix; };
  for (R r : {R{Tq2Route::Auto, "_bf16"}, R{Tq2Route::TiledSm90, "_bf16_tiled_sm90"},
              R{Tq2Route::TiledSm90SplitK, "_bf16_tiled_sm90_splitk"}, R{Tq2Route::DequantLt, "_bf16_dequant_lt"}}) {
    if ((r.route == Tq2Route::TiledSm90 || r.route == Tq2Route::TiledSm90SplitK) && !hopper) continue;
    // K in parts only where the weight leaves parts > 1 (few feature tiles).
    if (r.route == Tq2Route::TiledSm90SplitK && engine::tiled_sm90_tq2_split_parts(n, k) < 2) continue;
    Tq2Options o;
    o.force_route = r.route;
    Receipt receipt;
    auto call = [&](int i) {
      const WeightHandle& w = p.w[static_cast<std::size_t>(i % copies)];
      receipt = gemm_tq2(env.ctx, w, View::contiguous(const_cast<void*>(in_bf16), DType::BF16, {m, k}, DeviceKind::CUDA),
                         View::contiguous(out.data(), DType::BF16, {m, n}, DeviceKind::CUDA), o);
    };
    call(0);
    env.ctx.synchronize();
    copy_to_host(hout.data(), out.data(), hout.size() * 2);
    double max_abs = 0, max_ref = 0;
    for (int smp = 0; smp < 128; ++smp) {
      const std::int64_t i = (smp * 7919) % m, j = (smp * 104729) % n;
      double want = 0;
      for (std::int64_t l = 0; l < k; ++l)
        want += static_cast<double>(bf16_bits_to_f32(hin[static_cast<std::size_t>(i * k + l)])) *
                p.host_w[static_cast<std::size_t>(j * k + l)];
      max_abs = std::max(max_abs, std::abs(bf16_bits_to_f32(hout[static_cast<std::size_t>(i * n + j)]) - want));
      max_ref = std::max(max_ref, std::abs(want));
    }
    auto [t, tb] = time_pair(s, call, [&](int i) {
      cuda_dense::DenseArgs gi = g;
      gi.b = p.wbf16[static_cast<std::size_t>(i) % p.wbf16.size()].data();
      lt.run(gi, lt_ws, s);
    });
    Row row;
    row.suite = "ternary", row.name = std::string(shape) + "_m" + std::to_string(m) + r.suffix, row.route = receipt.route;
    row.kernel = receipt.kernel, row.dtype = "bf16", row.precision = "fast";
    row.m = m, row.n = n, row.k = k;
    row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
    row.flops = 2.0 * m * n * k;
    row.bytes = packed + 2.0 * static_cast<double>(m * k + m * n);
    row.baseline = "cublas_bf16_dense", row.baseline_us = tb.median_us;
    row.max_abs_err = max_abs, row.max_rel_err = max_ref > 0 ? max_abs / max_ref : 0;
    row.err_note = "128 samples vs float64, relative to the largest";
    row.device = env.device_label;
    env.out.add(row);
  }
}

void run_gpu(BenchEnv& env) {
  StreamHandle s = env.ctx.stream();
  const double l2 = static_cast<double>(env.ctx.arch().l2_bytes);
  TernaryWeightCache cache(env.ctx);
  DeviceBuffer ws(Context::kCublasLtWorkspaceBytes);
  std::uint64_t key = 1;

  struct Shape { const char* name; std::int64_t n, k; };
  std::vector<Shape> shapes = {{"dit_proj", 27648, 3072}, {"dit_out", 3072, 3072}, {"llama8b_up", 14336, 4096},
                               {"llama8b_down", 4096, 14336}};
  // Held-out decode shapes (issue #13): BitNet-b1.58-2B-like (hidden 2560, FFN 6912, gate and up
  // fused; q, k, v fused) and Llama-3-70B-like (hidden 8192, FFN 28672).
  // The unfused BitNet-2B projections too, as examples/ternary_layer.py calls them (q and o
  // 2560 x 2560, k and v 640 x 2560, gate and up 6912 x 2560): small calls, fixed-cost bound.
  for (Shape x : {Shape{"bitnet2b_gate_up", 13824, 2560}, Shape{"bitnet2b_down", 2560, 6912}, Shape{"bitnet2b_qkv", 3840, 2560},
                  Shape{"llama70b_up", 28672, 8192}, Shape{"llama70b_down", 8192, 28672}, Shape{"bitnet2b_q", 2560, 2560},
                  Shape{"bitnet2b_kv", 640, 2560}, Shape{"bitnet2b_gate", 6912, 2560}})
    shapes.push_back(x);
  if (env.quick) shapes = {{"dit_proj", 27648, 3072}, {"dit_out", 3072, 3072}};
  for (const Shape& sh : shapes) {
    if (env.skip(sh.name) && env.filter.find(sh.name) == std::string::npos) continue;  // no case of it is asked for
    const bool prefill_shape = sh.k == 3072;  // the seed's DiT shapes
    auto blocks = random_blocks(sh.n, sh.k, 11);
    const double packed = static_cast<double>(sh.n * sh.k / 4 + sh.n * (sh.k / 128) * 2);
    const int copies = rotation_copies(packed, l2);
    Prepared p;
    for (int i = 0; i < copies; ++i)
      p.w.push_back(cache.get_or_upload(key++, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), sh.n, sh.k));
    p.host_w = tq2_dequantize(blocks.data(), blocks.size() * sizeof(BlockTQ2_128), sh.n, sh.k);
    std::vector<std::uint16_t> wb(p.host_w.size());
    for (std::size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16_bits(p.host_w[i]);  // rounded: an f16 scale has 11 bits
    const int dcopies = rotation_copies(static_cast<double>(sh.n * sh.k) * 2, l2);
    for (int i = 0; i < dcopies; ++i) {
      p.wf32.emplace_back(p.host_w.size() * 4);
      copy_to_device(p.wf32.back().data(), p.host_w.data(), p.host_w.size() * 4);
      p.wbf16.emplace_back(wb.size() * 2);
      copy_to_device(p.wbf16.back().data(), wb.data(), wb.size() * 2);
    }

    // The held-out shapes' prefill: bf16 rows only (the engine against tq2_dequant_lt and cuBLAS
    // bf16 dense): what the router's tq2_tiled_sm90 gate is calibrated on.
    if (!prefill_shape && !env.decode_only && !env.quick)
      for (std::int64_t m : {128, 512, 2048}) {
        if (env.skip(std::string(sh.name) + "_m" + std::to_string(m))) continue;
        DeviceBuffer in_bf16(static_cast<std::size_t>(m * sh.k) * 2);
        fill_random_device(in_bf16.data(), DType::BF16, m * sh.k, 78, 0.25, s);
        run_bf16_prefill(env, sh.name, m, sh.n, sh.k, p, copies, packed, in_bf16.data(), ws.data());
      }
    std::vector<std::int64_t> ms = {1, 2, 4, 8, 16};
    if (prefill_shape) {
      if (!env.quick) ms.push_back(128);  // mid m: where the router's tq2_tiled / tq2_dequant_lt gate sits
      ms.push_back(1536);
    }
    for (std::int64_t m : ms) {
      if (env.prefill_only && !prefill_shape) break;
      if (env.decode_only && m > 16) continue;
      if (env.prefill_only && m <= 16) continue;
      // --filter may name one A/B row (NAME_mM_vs_...): its case runs, and only that row is timed.
      const std::string case_name = std::string(sh.name) + "_m" + std::to_string(m);
      if (env.skip(case_name) && env.filter.rfind(case_name + "_", 0) != 0) continue;
      std::vector<Precision> precs = {Precision::Exact};
      if (m > 16) precs.push_back(Precision::Fast);
      DeviceBuffer in(static_cast<std::size_t>(m * sh.k) * 4), out(static_cast<std::size_t>(m * sh.n) * 4),
          in_bf16(static_cast<std::size_t>(m * sh.k) * 2), out_base(static_cast<std::size_t>(m * sh.n) * 4);
      fill_random_device(in.data(), DType::F32, m * sh.k, 77, 0.25, s);
      fill_random_device(in_bf16.data(), DType::BF16, m * sh.k, 78, 0.25, s);
      for (Precision prec : precs) {
        Tq2Options o;
        o.precision = prec;
        Receipt receipt;
        auto llmm_call = [&](int i) {
          const WeightHandle& w = p.w[static_cast<std::size_t>(i % copies)];
          receipt = gemm_tq2(env.ctx, w, View::contiguous(in.data(), DType::F32, {m, sh.k}, DeviceKind::CUDA),
                             View::contiguous(out.data(), DType::F32, {m, sh.n}, DeviceKind::CUDA), o);
        };
        // Error of llmm's output against float64 on 128 sampled outputs (dequantized weight).
        llmm_call(0);
        env.ctx.synchronize();
        std::vector<float> hin(static_cast<std::size_t>(m * sh.k)), hout(static_cast<std::size_t>(m * sh.n));
        copy_to_host(hin.data(), in.data(), hin.size() * 4);
        copy_to_host(hout.data(), out.data(), hout.size() * 4);
        double max_abs = 0;
        for (int smp = 0; smp < 128; ++smp) {
          std::int64_t i = (smp * 7919) % m, j = (smp * 104729) % sh.n;
          double want = 0;
          for (std::int64_t l = 0; l < sh.k; ++l)
            want += static_cast<double>(hin[static_cast<std::size_t>(i * sh.k + l)]) * p.host_w[static_cast<std::size_t>(j * sh.k + l)];
          max_abs = std::max(max_abs, std::abs(hout[static_cast<std::size_t>(i * sh.n + j)] - want));
        }
        // Baselines: m <= 16 against bf16 dense (what decode runs today); prefill against SGEMM,
        // TF32 and bf16 dense on the dequantized weight.
        struct Base { const char* name; DType t; cuda_dense::LtMath math; };
        std::vector<Base> bases;
        if (m <= 16) bases = {{"cublas_bf16_dense", DType::BF16, cuda_dense::LtMath::Default}};
        else if (prec == Precision::Exact)
          bases = {{"cublas_sgemm_f32", DType::F32, cuda_dense::LtMath::Default}, {"cublas_tf32", DType::F32, cuda_dense::LtMath::Tf32}};
        else bases = {{"cublas_bf16_dense", DType::BF16, cuda_dense::LtMath::Default}};
        for (const Base& b : bases) {
          if (env.skip(case_name)) break;  // --filter names an A/B row of this case, not this row
          cuda_dense::DenseArgs g;
          g.dtype = b.t, g.m = m, g.n = sh.n, g.k = sh.k, g.a_ld = sh.k, g.b_trans = true, g.b_ld = sh.k, g.c_ld = sh.n;
          g.exact = b.math == cuda_dense::LtMath::Default;
          g.a = b.t == DType::F32 ? in.data() : in_bf16.data();
          g.c = out_base.data();
          auto& wcopies = b.t == DType::F32 ? p.wf32 : p.wbf16;
          g.b = wcopies[0].data();
          cuda_dense::CublasLtGemm lt(env.ctx.cublaslt_handle(), g, b.math, Context::kCublasLtWorkspaceBytes);
          auto [t, tb] = time_pair(s, llmm_call, [&](int i) {
            cuda_dense::DenseArgs gi = g;
            gi.b = wcopies[static_cast<std::size_t>(i) % wcopies.size()].data();
            lt.run(gi, ws.data(), s);
          });
          Row row;
          row.suite = "ternary", row.name = std::string(sh.name) + "_m" + std::to_string(m), row.route = receipt.route;
          row.kernel = receipt.kernel, row.dtype = "f32", row.precision = prec == Precision::Exact ? "exact" : "fast";
          row.m = m, row.n = sh.n, row.k = sh.k;
          row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
          row.flops = 2.0 * m * sh.n * sh.k;
          row.bytes = packed + 4.0 * static_cast<double>(m * sh.k + m * sh.n);
          row.baseline = b.name, row.baseline_us = tb.median_us;
          row.max_abs_err = max_abs, row.err_note = "128 samples vs float64";
          row.device = env.device_label;
          env.out.add(row);
        }
        // One A/B row: this call (Auto's receipt) against the same call with options o1, timed
        // in alternation; the row's baseline is o1's kernel.
        auto ab_row = [&](const Tq2Options& o1, const std::string& suffix, const char* precision) {
          if (env.skip(case_name + suffix)) return;
          Receipt r1;
          auto [t, tb] = time_pair(s, llmm_call, [&](int i) {
            const WeightHandle& w = p.w[static_cast<std::size_t>(i % copies)];
            r1 = gemm_tq2(env.ctx, w, View::contiguous(in.data(), DType::F32, {m, sh.k}, DeviceKind::CUDA),
                          View::contiguous(out_base.data(), DType::F32, {m, sh.n}, DeviceKind::CUDA), o1);
          });
          Row row;
          row.suite = "ternary", row.route = receipt.route;
          row.name = std::string(sh.name) + "_m" + std::to_string(m) + suffix;
          row.kernel = receipt.kernel, row.dtype = "f32", row.precision = precision;
          row.m = m, row.n = sh.n, row.k = sh.k;
          row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
          row.flops = 2.0 * m * sh.n * sh.k;
          row.bytes = packed + 4.0 * static_cast<double>(m * sh.k + m * sh.n);
          row.baseline = r1.kernel, row.baseline_us = tb.median_us;
          row.device = env.device_label;
          env.out.add(row);
        };
        // A/B against the other decode versions: v4 at m <= 8, v2 and v5 at m <= 16
        // (whichever Auto did not take; v4 and v5 on sm_90 where the activation fits).
        for (Tq2Route other : {Tq2Route::StreamV2, Tq2Route::StreamV4, Tq2Route::StreamV5}) {
          const bool engine = other == Tq2Route::StreamV4 || other == Tq2Route::StreamV5;
          const std::int64_t top = other == Tq2Route::StreamV4 ? 8 : 16;
          if (m > top) continue;
          if (receipt.route == tq2_route_name(other)) continue;
          if (engine) {  // sm_90 only, and where the activation fits
            try {
              plan_tq2(m, sh.n, sh.k, DType::F32, env.ctx.arch(), other);
            } catch (const Error&) {
              continue;
            }
          }
          Tq2Options o1 = o;
          o1.force_route = other;
          const char* vs = other == Tq2Route::StreamV2 ? "_vs_v2" : other == Tq2Route::StreamV4 ? "_vs_v4" : "_vs_v5";
          ab_row(o1, vs, "exact");
        }
        // A/B: v5's image made the other way (K whole only): staged by a first kernel, or
        // converted by each block (tq2_stream_in_block's rule; calibration for issue 13).
        if (receipt.route == tq2_route_name(Tq2Route::StreamV5) && m <= cuda_ternary::kTq2StreamInBlockMaxM &&
            cuda_ternary::tq2_stream_v5_parts(sh.n, sh.k).parts == 1) {
          const bool in_block = receipt.kernel.find("_inblock") != std::string::npos;
          Tq2Options o1 = o;
          o1.force_route = Tq2Route::StreamV5;
          o1.stream_image = in_block ? Tq2StreamImage::Staged : Tq2StreamImage::InBlock;
          ab_row(o1, in_block ? "_vs_v5_staged" : "_vs_v5_inblock", prec == Precision::Exact ? "exact" : "fast");
        }
        if (m > 16 && prec == Precision::Fast) run_bf16_prefill(env, sh.name, m, sh.n, sh.k, p, copies, packed, in_bf16.data(), ws.data());
        if (m > 16 && receipt.route == tq2_route_name(Tq2Route::DequantLt)) {
          // A/B: the tq2_tiled kernel the route replaced, and the route with 24 MiB (L2-sized)
          // weight chunks instead of the automatic rule's (calibrates the chunk rule).
          Tq2Options tiled = o, l2chunk = o;
          tiled.force_route = Tq2Route::Tiled;
          l2chunk.force_route = Tq2Route::DequantLt;
          l2chunk.dequant_chunk_rows = static_cast<std::int64_t>(cuda_ternary::kTq2LtL2ChunkBytes) / (2 * sh.k);
          struct Ab { const char* suffix; Tq2Options opts; };
          for (const Ab& ab : {Ab{"_vs_tiled", tiled}, Ab{"_vs_lt_l2chunk", l2chunk}}) {
            const std::int64_t rows = std::min(sh.n, (ab.opts.dequant_chunk_rows + 127) / 128 * 128);
            if (ab.opts.dequant_chunk_rows > 0 && rows == cuda_ternary::tq2_lt_auto_chunk_rows(m, sh.n, sh.k)) continue;
            Receipt r1;
            auto other_call = [&](int i) {
              const WeightHandle& w = p.w[static_cast<std::size_t>(i % copies)];
              r1 = gemm_tq2(env.ctx, w, View::contiguous(in.data(), DType::F32, {m, sh.k}, DeviceKind::CUDA),
                            View::contiguous(out_base.data(), DType::F32, {m, sh.n}, DeviceKind::CUDA), ab.opts);
            };
            other_call(0);  // plans and workspace exist before the graph capture
            env.ctx.synchronize();
            auto [t, tb] = time_pair(s, llmm_call, other_call);
            Row row;
            row.suite = "ternary", row.route = receipt.route, row.name = std::string(sh.name) + "_m" + std::to_string(m) + ab.suffix;
            row.kernel = receipt.kernel, row.dtype = "f32", row.precision = prec == Precision::Exact ? "exact" : "fast";
            row.m = m, row.n = sh.n, row.k = sh.k;
            row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
            row.flops = 2.0 * m * sh.n * sh.k;
            row.bytes = packed + 4.0 * static_cast<double>(m * sh.k + m * sh.n);
            row.baseline = ab.opts.force_route == Tq2Route::Tiled
                               ? r1.kernel
                               : "tq2_dequant_lt_chunk" + std::to_string(ab.opts.dequant_chunk_rows);
            row.baseline_us = tb.median_us;
            row.device = env.device_label;
            env.out.add(row);
          }
        }
      }
    }
    if (std::string(sh.name) == "dit_proj" && !env.prefill_only && env.filter.empty()) {  // host-I/O API: pool vs fresh buffers per call
      const std::int64_t m = env.quick ? 256 : 1536;
      std::vector<float> hin(static_cast<std::size_t>(m * sh.k), 0.01f), hout(static_cast<std::size_t>(m * sh.n));
      auto time_host = [&](bool pool) {
        gemm_tq2(env.ctx, p.w[0], hin.data(), hout.data(), m, sh.n, sh.k, {}, pool);  // warm
        std::vector<double> us;
        for (int r = 0; r < 7; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          gemm_tq2(env.ctx, p.w[0], hin.data(), hout.data(), m, sh.n, sh.k, {}, pool);
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(us.begin(), us.end());
        return us[us.size() / 2];
      };
      double pool_us = time_host(true), nopool_us = time_host(false);
      Row row;
      row.suite = "ternary", row.name = "host_api_pool_vs_nopool", row.route = "host_io", row.kernel = "pool";
      row.dtype = "f32", row.precision = "exact", row.m = m, row.n = sh.n, row.k = sh.k;
      row.us = row.us_min = row.us_max = pool_us;
      row.flops = 2.0 * m * sh.n * sh.k;
      row.bytes = packed + 4.0 * static_cast<double>(m * sh.k + m * sh.n);
      row.baseline = "fresh_buffers", row.baseline_us = nopool_us;
      row.device = env.device_label;
      env.out.add(row);
    }
  }
}
#endif

}  // namespace

void run_ternary(BenchEnv& env) {
#ifdef LLMM_HAS_CUDA
  if (env.ctx.is_cuda()) {
    run_gpu(env);
    if (!env.quick) run_tq2_experts(env);
    return;
  }
#endif
  run_cpu(env);
}

}  // namespace llmm::bench
