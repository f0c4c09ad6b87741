// Ternary experts (matmul_id_tq2) against the same layer with f16 experts (matmul_id on the
// dequantized stack, which is exactly f16): Qwen3-30B-A3B-like MoE FFN shapes (128 experts, top
// 8), uniform routing, decode and prefill m. The f16 side runs the route matmul_id's suggestion
// picks (direct for decode, the Hopper grouped engine staged for prefill); the ternary side its
// Auto route, and up to m = 512 an A/B row (*_vs_grouped / *_vs_stream) against the other
// ternary route forced. Weights rotate past L2 (copies of each stack). The error column is the largest difference between the two outputs relative to
// the largest output (both f32, the same exact products summed in different orders).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "llmm/moe.hpp"
#include "llmm/ternary_moe.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#endif

namespace llmm::bench {

#ifdef LLMM_HAS_CUDA
namespace {

struct Shape {
  const char* name;
  std::uint32_t experts, top_k, n, k;
};

std::uint64_t lcg(std::uint64_t& h) {
  h = h * 6364136223846793005ull + 1442695040888963407ull;
  return h >> 33;
}

}  // namespace

void run_tq2_experts(BenchEnv& env) {
  StreamHandle s = env.ctx.stream();
  TernaryWeightCache cache(env.ctx);
  const Shape shapes[] = {{"qwen3_30b_gate_up", 128, 8, 1536, 2048}, {"qwen3_30b_down", 128, 8, 2048, 768}};
  const std::uint32_t ms[] = {1, 4, 16, 64, 128, 256, 512, 4096};
  std::uint64_t key = 1;
  for (const Shape& sh : shapes) {
    const std::int64_t rows = static_cast<std::int64_t>(sh.experts) * sh.n, bpr = sh.k / 128;
    // Random ternary blocks and the same weights as f16 (exact: (code - 1) * scale).
    std::vector<BlockTQ2_128> blocks(static_cast<std::size_t>(rows * bpr));
    std::vector<std::uint16_t> wf16(static_cast<std::size_t>(rows) * sh.k);
    std::uint64_t h = 99;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t b = 0; b < bpr; ++b) {
        BlockTQ2_128& blk = blocks[static_cast<std::size_t>(r * bpr + b)];
        blk.d = f32_to_f16_bits(0.02f + 0.08f * static_cast<float>(lcg(h) % 1000) / 1000.0f);
        for (int q = 0; q < 32; ++q) {
          std::uint8_t v = 0;
          for (int j = 0; j < 4; ++j) {
            const int code = static_cast<int>(lcg(h) % 3);
            v = static_cast<std::uint8_t>(v | (code << (2 * j)));
            const std::uint16_t w = code == 1 ? 0 : code == 0 ? static_cast<std::uint16_t>(blk.d | 0x8000u) : blk.d;
            wf16[static_cast<std::size_t>(r * sh.k + b * 128 + 4 * q + j)] = w;
          }
          blk.qs[q] = v;
        }
      }
    // Rotation (as the MoE suite): the smallest active set (top_k experts, m = 1) of either side
    // must not stay in L2 between calls, so call i reads copy i % copies of its stack (the same
    // weights: each side's copies are identical).
    const double l2 = static_cast<double>(env.ctx.arch().l2_bytes);
    const double tbytes = static_cast<double>(sh.n) * (sh.k / 4 + sh.k / 64), fbytes = 2.0 * sh.n * sh.k;
    const auto copies_of = [&](double expert_bytes) {
      const double min_active = sh.top_k * expert_bytes;
      const int c = min_active >= 3.0 * l2 ? 1 : rotation_copies(min_active, l2);
      return std::max(1, std::min<int>(c, static_cast<int>((16ull << 30) / (expert_bytes * sh.experts))));
    };
    const int tcopies = copies_of(tbytes), fcopies = copies_of(fbytes);
    std::vector<WeightHandle> tws;
    for (int c = 0; c < tcopies; ++c)
      tws.push_back(
          cache.get_or_upload_experts(key++, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), sh.experts, sh.n, sh.k));
    std::vector<DeviceBuffer> dws;
    for (int c = 0; c < fcopies; ++c) {
      dws.emplace_back(wf16.size() * 2);
      copy_to_device(dws.back().data(), wf16.data(), wf16.size() * 2);
    }
    const std::uint32_t max_m = ms[std::size(ms) - 1];
    MatmulIdScratch scratch(env.ctx, sh.experts, max_m, sh.top_k, 2ull * sh.k);
    DeviceBuffer in(static_cast<std::size_t>(max_m) * sh.k * 2), ids_d(static_cast<std::size_t>(max_m) * sh.top_k * 4),
        out_t(static_cast<std::size_t>(max_m) * sh.top_k * sh.n * 4), out_d(static_cast<std::size_t>(max_m) * sh.top_k * sh.n * 4);
    fill_random_device(in.data(), DType::F16, static_cast<std::int64_t>(max_m) * sh.k, 7, 0.25, s);
    // bf16 activations (the common case in engines) take the grouped route through the per-row
    // scaled f16 copy (tq2_rowscale_stage): timed against the f16 input on the same weights.
    DeviceBuffer in_bf(static_cast<std::size_t>(max_m) * sh.k * 2);
    fill_random_device(in_bf.data(), DType::BF16, static_cast<std::int64_t>(max_m) * sh.k, 7, 0.25, s);
    for (std::uint32_t m : ms) {
      const std::string name = std::string("tq2_experts_") + sh.name + "_m" + std::to_string(m);
      if (env.skip(name)) continue;
      if (env.decode_only && m > 16) continue;
      if (env.prefill_only && m <= 16) continue;
      // Uniform routing: top_k distinct experts a token.
      std::vector<std::uint32_t> ids(static_cast<std::size_t>(m) * sh.top_k);
      std::uint64_t g = 1234 + m;
      std::vector<std::uint32_t> active(sh.experts, 0);
      for (std::uint32_t t = 0; t < m; ++t)
        for (std::uint32_t j = 0; j < sh.top_k; ++j) {
          std::uint32_t e;
          bool dup;
          do {
            e = static_cast<std::uint32_t>(lcg(g) % sh.experts);
            dup = false;
            for (std::uint32_t i = 0; i < j; ++i) dup = dup || ids[t * sh.top_k + i] == e;
          } while (dup);
          ids[t * sh.top_k + j] = e;
          active[e] = 1;
        }
      copy_to_device(ids_d.data(), ids.data(), ids.size() * 4);
      const View iv = View::contiguous(in.data(), DType::F16, {m, sh.k}, DeviceKind::CUDA);
      const View idv = View::contiguous(ids_d.data(), DType::U32, {m, sh.top_k}, DeviceKind::CUDA);
      const View otv = View::contiguous(out_t.data(), DType::F32, {m, sh.top_k, sh.n}, DeviceKind::CUDA);
      const View odv = View::contiguous(out_d.data(), DType::F32, {m, sh.top_k, sh.n}, DeviceKind::CUDA);
      auto wv = [&](int i) {
        return View::contiguous(dws[static_cast<std::size_t>(i % fcopies)].data(), DType::F16, {sh.experts, sh.n, sh.k},
                                DeviceKind::CUDA);
      };
      const WeightHandle* const tw = tws.data();
      MatmulIdParams p = matmul_id_params(wv(0), iv, idv, odv);
      p.route = suggest_matmul_id_route(p, env.ctx.arch());
      Receipt rt, rd;
      auto tern = [&](int i) { rt = matmul_id_tq2(env.ctx, tw[i % tcopies], iv, idv, otv, &scratch); };
      auto dense = [&](int i) { rd = matmul_id(env.ctx, wv(i), iv, idv, odv, &scratch, p); };
      tern(0);
      dense(0);
      env.ctx.synchronize();
      const std::size_t outs = static_cast<std::size_t>(m) * sh.top_k * sh.n;
      std::vector<float> a(outs), b(outs);
      copy_to_host(a.data(), out_t.data(), outs * 4);
      copy_to_host(b.data(), out_d.data(), outs * 4);
      double max_diff = 0, max_ref = 0;
      for (std::size_t i = 0; i < outs; ++i) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
        max_ref = std::max(max_ref, static_cast<double>(std::fabs(b[i])));
      }
      auto [tt, td] = time_pair(s, tern, dense);
      std::uint32_t n_active = 0;
      for (std::uint32_t v : active) n_active += v;
      Row row;
      row.suite = "ternary", row.name = name, row.route = rt.route, row.kernel = rt.kernel;
      row.dtype = "f16", row.precision = "exact", row.m = m, row.n = sh.n, row.k = sh.k;
      row.us = tt.median_us, row.us_min = tt.min_us, row.us_max = tt.max_us;
      row.flops = 2.0 * m * sh.top_k * sh.n * sh.k;
      row.bytes = static_cast<double>(n_active) * sh.n * (sh.k / 4 + sh.k / 64);  // active experts' packed bytes
      row.baseline = std::string("matmul_id_f16_") + rd.route, row.baseline_us = td.median_us;
      row.max_abs_err = max_diff, row.max_rel_err = max_ref > 0 ? max_diff / max_ref : 0;
      row.err_note = "max |ternary - f16 experts| over all outputs, relative to the largest";
      row.device = env.device_label;
      env.out.add(row);
      if (m >= 128) {
        const View bv = View::contiguous(in_bf.data(), DType::BF16, {m, sh.k}, DeviceKind::CUDA);
        Receipt rb;
        auto bf = [&](int i) { rb = matmul_id_tq2(env.ctx, tw[i % tcopies], bv, idv, otv, &scratch); };
        bf(0);
        auto [tb, tf] = time_pair(s, bf, tern);
        Row br = row;
        br.name = name + "_bf16_in", br.dtype = "bf16", br.route = rb.route, br.kernel = rb.kernel;
        br.us = tb.median_us, br.us_min = tb.min_us, br.us_max = tb.max_us;
        br.baseline = "same_f16_in/" + rt.kernel, br.baseline_us = tf.median_us;
        br.max_abs_err = br.max_rel_err = -1, br.err_note = "timing only (the GPU tests check bf16 against float64)";
        env.out.add(br);
      }
      // A/B against the route Auto did not take, where both run (the decode gate's evidence):
      // us = Auto's route, baseline_us = the other one forced, in alternating rounds.
      if (m <= 512) {
        const bool streamed = rt.route == std::string(tq2_moe_route_name(Tq2MoeRoute::StreamSm90));
        Tq2MoeOptions o;
        o.force_route = streamed ? Tq2MoeRoute::GroupedSm90 : Tq2MoeRoute::StreamSm90;
        Receipt rf;
        auto forced = [&](int i) {
          rf = matmul_id_tq2(env.ctx, tw[i % tcopies], iv, idv, odv, &scratch, MatmulIdInputLayout::SharedPerToken, o);
        };
        forced(0);
        auto [ta, tf] = time_pair(s, tern, forced);
        Row ab = row;
        ab.name = name + (streamed ? "_vs_grouped" : "_vs_stream");
        ab.us = ta.median_us, ab.us_min = ta.min_us, ab.us_max = ta.max_us;
        ab.baseline = rf.route + "/" + rf.kernel, ab.baseline_us = tf.median_us;
        ab.max_abs_err = ab.max_rel_err = -1, ab.err_note = "";  // -1: not checked (a timing A/B)
        env.out.add(ab);
      }
    }
  }
}
#else
void run_tq2_experts(BenchEnv&) {}
#endif

}  // namespace llmm::bench
