// MoE suite: matmul_id (Direct for decode, GroupedPrefill for prefill; our time includes the map
// kernel) against a per-expert cuBLASLt loop over rows already permuted by expert (routing not
// counted for the baseline), bf16 weights and activations (plus a few f32 and f16 rows), with
// three routings per token count M:
//   uniform  each token's top_k distinct experts drawn uniformly;
//   hot      every token routed to the same top_k experts (the most skewed routing that distinct
//            ids allow: top_k experts get all M tokens each, the rest none);
//   zipf     expert popularity ~ 1 / rank^1.2 (ranks a seeded permutation of the experts, the same
//            for every M of a model); each token draws top_k distinct experts without replacement.
// Ids are deterministic (seeded by model, routing and M). The GB/s column is over the ACTIVE
// EXPERTS' WEIGHT BYTES only (active x N x K x dtype size; inputs and outputs not counted), the
// figure the decode target is stated in; batch = active experts. Weights rotate over copies of the
// whole expert stack when the smallest active set (top_k experts) is below 3x the L2, so decode
// reads device memory, not L2. The baseline is timed in the same alternating rounds as our routes.
//
// The torch._grouped_mm baseline (bench/torch_grouped_mm.py, run by scripts/gpu-check) times the
// SAME routing: when LLMM_MOE_ROUTING names a file, every bf16 case writes one JSON line there
// (case name, shape, weight copies and the per-expert row counts, which is all a grouped GEMM over
// pre-permuted rows depends on).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmm/moe.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "core/engine/tiled_sm90_plan.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "cuda/moe/launch.hpp"
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#endif

namespace llmm::bench {
namespace {

std::uint64_t lcg(std::uint64_t& h) {
  h = h * 6364136223846793005ull + 1442695040888963407ull;
  return h;
}

std::vector<std::uint32_t> uniform_ids(std::uint32_t m, std::uint32_t top_k, std::uint32_t e, std::uint64_t seed) {
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(m) * top_k), perm(e);
  std::uint64_t h = seed;
  for (std::uint32_t t = 0; t < m; ++t) {
    for (std::uint32_t i = 0; i < e; ++i) perm[i] = i;
    for (std::uint32_t s = 0; s < top_k; ++s) {
      lcg(h);
      std::uint32_t j = s + static_cast<std::uint32_t>((h >> 33) % (e - s));
      std::swap(perm[s], perm[j]);
      ids[static_cast<std::size_t>(t) * top_k + s] = perm[s];
    }
  }
  return ids;
}

#ifdef LLMM_HAS_CUDA
enum class Routing { Uniform, Hot, Zipf };
const char* routing_name(Routing r) { return r == Routing::Uniform ? "uniform" : r == Routing::Hot ? "hot" : "zipf"; }
constexpr double kZipfS = 1.2;

// Every token on the same top_k experts (a seeded choice), in a seeded order.
std::vector<std::uint32_t> hot_ids(std::uint32_t m, std::uint32_t top_k, std::uint32_t e, std::uint64_t seed) {
  std::vector<std::uint32_t> one = uniform_ids(1, top_k, e, seed), ids(static_cast<std::size_t>(m) * top_k);
  for (std::uint32_t t = 0; t < m; ++t) std::copy(one.begin(), one.end(), ids.begin() + static_cast<std::ptrdiff_t>(t) * top_k);
  return ids;
}

// Zipf(s) popularity over experts (rank order: a permutation seeded by rank_seed), top_k distinct
// draws per token without replacement (each draw proportional to the remaining weights).
std::vector<std::uint32_t> zipf_ids(std::uint32_t m, std::uint32_t top_k, std::uint32_t e, std::uint64_t rank_seed,
                                    std::uint64_t seed) {
  std::vector<std::uint32_t> rank_of = uniform_ids(1, e, e, rank_seed);  // a permutation of the experts
  std::vector<double> weight(e), avail(e);
  for (std::uint32_t r = 0; r < e; ++r) weight[rank_of[r]] = 1.0 / std::pow(static_cast<double>(r + 1), kZipfS);
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(m) * top_k);
  std::uint64_t h = seed;
  for (std::uint32_t t = 0; t < m; ++t) {
    avail = weight;
    double total = 0;
    for (double w : avail) total += w;
    for (std::uint32_t s = 0; s < top_k; ++s) {
      const double u = static_cast<double>(lcg(h) >> 11) * 0x1.0p-53 * total;
      std::uint32_t pick = e;
      double acc = 0;
      for (std::uint32_t i = 0; i < e; ++i) {
        if (avail[i] <= 0) continue;
        acc += avail[i];
        pick = i;  // the last available expert catches rounding at the top end
        if (u < acc) break;
      }
      ids[static_cast<std::size_t>(t) * top_k + s] = pick;
      total -= avail[pick];
      avail[pick] = 0;
    }
  }
  return ids;
}

struct Model {
  const char* name;
  std::uint32_t e, top_k, k, n;  // weights [e][n][k]; out[t, s, :] = W[id] . in[t, :]
};

std::uint64_t mix_seed(const char* name, std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
}

std::vector<std::uint32_t> make_ids(const Model& md, Routing r, std::uint32_t m) {
  const std::uint64_t seed = mix_seed(md.name, static_cast<std::uint64_t>(r) + 1, m);
  switch (r) {
    case Routing::Uniform: return uniform_ids(m, md.top_k, md.e, seed);
    case Routing::Hot: return hot_ids(m, md.top_k, md.e, mix_seed(md.name, 17, 0));  // the same hot set for every M
    case Routing::Zipf: return zipf_ids(m, md.top_k, md.e, mix_seed(md.name, 23, 0), seed);
  }
  return {};
}

// One line of the LLMM_MOE_ROUTING file: what bench/torch_grouped_mm.py needs to time the same case.
std::string routing_json(const std::string& cname, DType dt, const Model& md, Routing rt, std::uint32_t m,
                         std::uint32_t active, int copies, const std::vector<std::uint32_t>& count) {
  std::string s = "{\"case\": \"" + cname + "\", \"dtype\": \"" + std::string(dtype_name(dt)) + "\", \"model\": \"" +
                  md.name + "\", \"routing\": \"" + routing_name(rt) + "\", \"n_experts\": " + std::to_string(md.e) +
                  ", \"top_k\": " + std::to_string(md.top_k) + ", \"k\": " + std::to_string(md.k) +
                  ", \"n\": " + std::to_string(md.n) + ", \"m\": " + std::to_string(m) +
                  ", \"active\": " + std::to_string(active) + ", \"weight_copies\": " + std::to_string(copies) +
                  ", \"counts\": [";
  for (std::size_t e = 0; e < count.size(); ++e) s += (e ? ", " : "") + std::to_string(count[e]);
  return s + "]}\n";
}

// Sampled float64 check of out[r, c] = sum_k in[r / top_k, k] * W[ids[r]][c][k] (copy 0 of the
// weights), like sample_check: max |err| and max |err| / sum_k |a||b|.
SampledError check_moe(const void* w, DType wt, const void* in, DType it, const void* out, DType ot,
                       const std::vector<std::uint32_t>& ids, const Model& md, int samples) {
  SampledError r;
  const std::size_t ws = dtype_size(wt), is = dtype_size(it), os = dtype_size(ot);
  std::vector<unsigned char> a(static_cast<std::size_t>(md.k) * is), b(static_cast<std::size_t>(md.k) * ws), c(os);
  std::uint64_t h = 0x5eedull;
  for (int s = 0; s < samples; ++s) {
    lcg(h);
    const std::uint64_t row = (h >> 20) % ids.size(), col = (h >> 44) % md.n;
    const std::uint64_t t = row / md.top_k, e = ids[row];
    copy_to_host(a.data(), static_cast<const char*>(in) + t * md.k * is, a.size());
    copy_to_host(b.data(), static_cast<const char*>(w) + (e * md.n + col) * md.k * ws, b.size());
    copy_to_host(c.data(), static_cast<const char*>(out) + (row * md.n + col) * os, os);
    double acc = 0, abs = 0;
    for (std::uint32_t l = 0; l < md.k; ++l) {
      const double av = load_as_double(a.data(), it, l), bv = load_as_double(b.data(), wt, l);
      acc += av * bv;
      abs += std::fabs(av * bv);
    }
    const double got = load_as_double(c.data(), ot, 0);
    const double err = std::isfinite(got) ? std::fabs(got - acc) : INFINITY;
    r.max_abs = std::max(r.max_abs, err);
    if (abs > 0) r.max_rel = std::max(r.max_rel, err / abs);
    ++r.samples;
  }
  return r;
}

// Graphs of several closures timed in alternating rounds (A, B, C, A, B, C, ...), as time_pair
// does for two: drift during the run hits all of them alike.
std::vector<Timing> time_rounds(StreamHandle s, const std::vector<std::function<void(int)>>& fs, int rounds,
                                int repeats) {
  std::vector<std::unique_ptr<GraphTimer>> g;
  for (const auto& f : fs) g.push_back(std::make_unique<GraphTimer>(s, f));
  std::vector<std::vector<double>> samples(fs.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < g.size(); ++i) g[i]->measure(repeats, samples[i]);
  std::vector<Timing> t;
  for (std::size_t i = 0; i < g.size(); ++i) t.push_back(summarize(samples[i], g[i]->calls()));
  return t;
}

struct ModelRun {
  Model md;
  DType dtype;
  std::vector<std::uint32_t> ms;
  std::vector<Routing> routings;
};

void run_model(BenchEnv& env, const ModelRun& mr, std::FILE* routing_log) {
  const Model& md = mr.md;
  const DType dt = mr.dtype;
  const std::size_t es = dtype_size(dt);
  StreamHandle s = env.ctx.stream();
  const double l2 = static_cast<double>(env.ctx.arch().l2_bytes);
  const std::size_t expert_bytes = static_cast<std::size_t>(md.n) * md.k * es;
  const std::size_t stack_bytes = expert_bytes * md.e;
  // Rotation: the smallest active set (top_k experts, M = 1) must not stay in L2 between calls.
  // Copies of the whole stack, at most 16 GiB of them (never needed on the listed shapes).
  const double min_active = static_cast<double>(md.top_k) * static_cast<double>(expert_bytes);
  int copies = min_active >= 3.0 * l2 ? 1 : rotation_copies(min_active, l2);
  copies = std::max(1, std::min<int>(copies, static_cast<int>((16ull << 30) / stack_bytes)));
  std::vector<DeviceBuffer> w;
  for (int i = 0; i < copies; ++i) {
    w.emplace_back(stack_bytes);
    fill_random_device(w.back().data(), dt, static_cast<std::int64_t>(stack_bytes / es), 5 + static_cast<std::uint64_t>(i),
                       1.0, s);
  }
  const std::uint32_t max_m = *std::max_element(mr.ms.begin(), mr.ms.end());
  const std::size_t max_rows = static_cast<std::size_t>(max_m) * md.top_k;
  DeviceBuffer in(static_cast<std::size_t>(max_m) * md.k * es), out(max_rows * md.n * es), ids_d(max_rows * 4),
      xperm(max_rows * md.k * es), yperm(max_rows * md.n * es);
  fill_random_device(in.data(), dt, static_cast<std::int64_t>(max_m) * md.k, 6, 0.25, s);
  fill_random_device(xperm.data(), dt, static_cast<std::int64_t>(max_rows) * md.k, 7, 0.25, s);
  // Room to stage the routed rows (16-bit inputs: the Hopper engine's fast path), and a scratch
  // without it for the A/B rows of the engine gathering rows itself.
  MatmulIdScratch scratch(env.ctx, md.e, max_m, 0, dt == DType::F32 ? 0 : static_cast<std::uint64_t>(md.k) * es),
      scratch_plain(env.ctx, md.e, max_m);
  void* ws = env.ctx.cublaslt_workspace();
  auto wptr = [&](int i) { return w[static_cast<std::size_t>(i % copies)].data(); };

  for (Routing rt : mr.routings) {
    for (std::uint32_t m : mr.ms) {
      const std::uint32_t rows = m * md.top_k;
      const std::string cname = std::string(md.name) + "_" + routing_name(rt) + "_m" + std::to_string(m);
      if (env.skip(cname)) continue;
      std::vector<std::uint32_t> ids = make_ids(md, rt, m);
      copy_to_device(ids_d.data(), ids.data(), ids.size() * 4);
      std::vector<std::uint32_t> count(md.e, 0);
      for (std::uint32_t id : ids) ++count[id];
      std::uint32_t active = 0;
      for (std::uint32_t c : count) active += c > 0;
      if (routing_log) {
        std::fputs(routing_json(cname, dt, md, rt, m, active, copies, count).c_str(), routing_log);
        std::fflush(routing_log);
      }
      try {
        // Baseline: rows permuted by expert (random rows, like a gathered copy of each routed
        // token's input), one cuBLASLt GEMM per active expert; one plan per distinct row count.
        std::vector<std::uint32_t> start(md.e + 1, 0);
        for (std::uint32_t e = 0; e < md.e; ++e) start[e + 1] = start[e] + count[e];
        std::map<std::uint32_t, std::unique_ptr<cuda_dense::CublasLtGemm>> plans;
        std::vector<cuda_dense::DenseArgs> gs;
        std::vector<const cuda_dense::CublasLtGemm*> gplan;
        std::vector<std::uint32_t> gexpert;
        for (std::uint32_t e = 0; e < md.e; ++e) {
          if (!count[e]) continue;
          cuda_dense::DenseArgs g;
          g.dtype = dt, g.m = count[e], g.n = md.n, g.k = md.k, g.a_ld = md.k, g.b_trans = true, g.b_ld = md.k;
          g.c_ld = md.n, g.exact = true;
          g.a = static_cast<const char*>(xperm.data()) + static_cast<std::size_t>(start[e]) * md.k * es;
          g.b = static_cast<const char*>(w[0].data()) + e * expert_bytes;
          g.c = static_cast<char*>(yperm.data()) + static_cast<std::size_t>(start[e]) * md.n * es;
          auto& plan = plans[count[e]];
          if (!plan)
            plan = std::make_unique<cuda_dense::CublasLtGemm>(env.ctx.cublaslt_handle(), g, cuda_dense::LtMath::Default,
                                                              Context::kCublasLtWorkspaceBytes);
          gs.push_back(g), gplan.push_back(plan.get()), gexpert.push_back(e);
        }
        std::vector<std::function<void(int)>> fns;
        fns.push_back([&](int i) {
          const char* wb = static_cast<const char*>(wptr(i));
          for (std::size_t j = 0; j < gs.size(); ++j) {
            cuda_dense::DenseArgs g = gs[j];
            g.b = wb + gexpert[j] * expert_bytes;
            gplan[j]->run(g, ws, s);
          }
        });

        struct RouteRun {
          MatmulIdRoute route;
          MatmulIdGroupedKernel kernel = MatmulIdGroupedKernel::Auto;
          MatmulIdScratch* scratch = nullptr;
          MatmulIdParams p;
          Receipt receipt;
          SampledError err;
        };
        std::vector<RouteRun> runs;
        // Grouped twice on 16-bit shapes: Auto (the Hopper engine on sm_90) and the mma.sync kernel, A/B.
        const bool ab = dt != DType::F32 && env.ctx.arch().cc_major == 9 && m >= 16;
        // `pooled`: the call a user makes by default (route Auto, no scratch: the context's own).
        struct Try { MatmulIdRoute route; MatmulIdGroupedKernel kernel; bool plain; bool pooled = false; };
        std::vector<Try> tries = {{MatmulIdRoute::Direct, MatmulIdGroupedKernel::Auto, false},
                                  {MatmulIdRoute::GroupedPrefill, MatmulIdGroupedKernel::Auto, false},
                                  {MatmulIdRoute::Auto, MatmulIdGroupedKernel::Auto, false, true}};
        if (ab) {
          tries.push_back({MatmulIdRoute::GroupedPrefill, MatmulIdGroupedKernel::MmaSync, false});
          tries.push_back({MatmulIdRoute::GroupedPrefill, MatmulIdGroupedKernel::TiledSm90, true});  // engine after the map, gathering
          // Where Auto runs the engine alone (sorting its rows itself, m <= 16): the engine after
          // moe_map, staged; above, up to the fused engine's limit, that engine forced.
          if (m <= engine::kTiledMoeFusedAutoMaxTokens)
            tries.push_back({MatmulIdRoute::GroupedPrefill, MatmulIdGroupedKernel::TiledSm90, false});
          else if (rows <= static_cast<std::uint32_t>(engine::kTiledMoeFusedMaxRows))
            tries.push_back({MatmulIdRoute::GroupedPrefill, MatmulIdGroupedKernel::TiledSm90Fused, false});
        }
        for (const Try& tr : tries) {
          const MatmulIdRoute route = tr.route;
          if (route == MatmulIdRoute::Direct && m > 64) continue;  // one gemv per routed row: decode only
          if (route == MatmulIdRoute::GroupedPrefill && m < 4) continue;
          RouteRun rr;
          rr.route = route;
          rr.kernel = tr.kernel;
          rr.scratch = tr.pooled ? nullptr : tr.plain ? &scratch_plain : &scratch;
          MatmulIdParams& p = rr.p;
          p.m = m, p.n = md.n, p.k = md.k, p.top_k = md.top_k, p.n_experts = md.e;
          p.expert_stride_bytes = expert_bytes;
          p.route = route, p.input_dtype = dt, p.output_dtype = dt;
          try {
            // One eager call on copy 0, checked before timing.
            View wv = View::contiguous(w[0].data(), dt, {md.e, md.n, md.k}, DeviceKind::CUDA);
            View iv = View::contiguous(in.data(), dt, {m, md.k}, DeviceKind::CUDA);
            View idv = View::contiguous(ids_d.data(), DType::U32, {m, md.top_k}, DeviceKind::CUDA);
            View ov = View::contiguous(out.data(), dt, {m, md.top_k, md.n}, DeviceKind::CUDA);
            MatmulIdOptions opts;
            opts.grouped_kernel = rr.kernel;
            rr.receipt = matmul_id(env.ctx, wv, iv, idv, ov, rr.scratch, p, opts);
            env.ctx.synchronize();  // the checks copy on the legacy stream: ctx's may be non-blocking
            rr.err = check_moe(w[0].data(), dt, in.data(), dt, out.data(), dt, ids, md, 64);
            runs.push_back(rr);
          } catch (const Error& e) {
            std::printf("moe: %s %s %s failed: %s\n", cname.c_str(), std::string(dtype_name(dt)).c_str(),
                        matmul_id_route_name(route), e.what());
          }
        }
        for (const RouteRun& rr : runs) {
          fns.push_back([&, p = rr.p, kernel = rr.kernel, sc = rr.scratch](int i) {
            MatmulIdOptions opts;
            opts.grouped_kernel = kernel;
            View wv = View::contiguous(wptr(i), dt, {md.e, md.n, md.k}, DeviceKind::CUDA);
            View iv = View::contiguous(in.data(), dt, {m, md.k}, DeviceKind::CUDA);
            View idv = View::contiguous(ids_d.data(), DType::U32, {m, md.top_k}, DeviceKind::CUDA);
            View ov = View::contiguous(out.data(), dt, {m, md.top_k, md.n}, DeviceKind::CUDA);
            matmul_id(env.ctx, wv, iv, idv, ov, sc, p, opts);
          });
        }
        if (runs.empty()) continue;
        // The grouped route's map kernel alone (suite moe_map): its share of the route's time.
        const bool grouped_ran = std::any_of(runs.begin(), runs.end(),
                                             [](const RouteRun& rr) { return rr.route == MatmulIdRoute::GroupedPrefill; });
        cuda_moe::MoeArgs map_args;
        map_args.m = m, map_args.n = md.n, map_args.k = md.k, map_args.top_k = md.top_k, map_args.n_experts = md.e;
        map_args.w_dtype = dt, map_args.w = w[0].data(), map_args.expert_stride = static_cast<std::int64_t>(md.n) * md.k;
        map_args.in_dtype = dt, map_args.in = in.data(), map_args.in_token_stride = md.k;
        map_args.ids = ids_d.data(), map_args.out_dtype = dt, map_args.out = out.data();
        map_args.counts = scratch.counts(), map_args.rows = scratch.rows();
        map_args.row_capacity = static_cast<std::int64_t>(scratch.row_capacity());
        map_args.block_counts = scratch.map_block_counts();
        map_args.block_count_words = static_cast<std::int64_t>(scratch.map_block_count_words());
        if (grouped_ran) fns.push_back([&](int) { cuda_moe::launch_moe_map(map_args, s); });
        // The staging copy alone (suite moe_stage: the routed rows in expert order, which the engine
        // then loads by TMA), on the lists the eager calls left in the scratch.
        cuda_moe::MoeArgs stage_args = map_args;
        stage_args.staged = scratch.staged(), stage_args.staged_bytes = static_cast<std::int64_t>(scratch.staged_bytes());
        const bool stage_ran = grouped_ran && std::any_of(runs.begin(), runs.end(), [](const RouteRun& rr) {
          return rr.receipt.kernel.find("moe_stage_rows_") != std::string::npos;
        });
        if (stage_ran) fns.push_back([&](int) { cuda_moe::launch_moe_stage_rows(stage_args, s); });
        std::vector<Timing> t = time_rounds(s, fns, 4, 5);
        for (std::size_t i = 0; i < runs.size(); ++i) {
          const RouteRun& rr = runs[i];
          const Timing& ti = t[i + 1];
          Row row;
          row.suite = "moe", row.route = rr.receipt.route, row.kernel = rr.receipt.kernel;
          row.name = rr.p.route == MatmulIdRoute::Auto               ? cname + "_default"
                     : rr.kernel == MatmulIdGroupedKernel::MmaSync     ? cname + "_mma_sync"
                     : rr.scratch == &scratch_plain                    ? cname + "_gather"
                     : rr.kernel == MatmulIdGroupedKernel::TiledSm90 ? cname + "_mapped"
                     : rr.kernel == MatmulIdGroupedKernel::TiledSm90Fused ? cname + "_fused"
                                                                       : cname;
          row.dtype = std::string(dtype_name(dt)), row.precision = dt == DType::F32 ? "exact" : "-";
          row.m = m, row.n = md.n, row.k = md.k;
          row.batch = active;  // active experts
          row.us = ti.median_us, row.us_min = ti.min_us, row.us_max = ti.max_us;
          row.flops = 2.0 * rows * md.n * md.k;
          row.bytes = static_cast<double>(active) * static_cast<double>(expert_bytes);  // active experts' weights only
          row.baseline = "cublas_per_expert_loop", row.baseline_us = t[0].median_us;
          row.max_abs_err = rr.err.max_abs, row.max_rel_err = rr.err.max_rel;
          row.err_note = std::to_string(rr.err.samples) + " samples";
          row.device = env.device_label;
          env.out.add(row);
        }
        if (grouped_ran) {
          const Timing& tm = t[runs.size() + 1];
          Row row;
          row.suite = "moe_map", row.name = cname, row.route = "map_only", row.kernel.clear();
          for (const std::string& k : cuda_moe::moe_map_kernel_names(map_args)) row.kernel += (row.kernel.empty() ? "" : "+") + k;
          row.dtype = std::string(dtype_name(dt)), row.precision = "-";
          row.m = m, row.n = md.n, row.k = md.k, row.batch = active;
          row.us = tm.median_us, row.us_min = tm.min_us, row.us_max = tm.max_us;
          row.bytes = static_cast<double>(rows) * 4.0;  // the ids
          row.device = env.device_label;
          env.out.add(row);
        }
        if (stage_ran) {
          const Timing& ts = t.back();
          Row row;
          row.suite = "moe_stage", row.name = cname, row.route = "stage_only";
          row.kernel = cuda_moe::moe_stage_rows_kernel_name(stage_args);
          row.dtype = std::string(dtype_name(dt)), row.precision = "-";
          row.m = m, row.n = md.n, row.k = md.k, row.batch = active;
          row.us = ts.median_us, row.us_min = ts.min_us, row.us_max = ts.max_us;
          row.bytes = 2.0 * static_cast<double>(rows) * md.k * es;  // each routed row read and written once
          row.device = env.device_label;
          env.out.add(row);
        }
      } catch (const Error& e) {
        std::printf("moe: %s %s failed: %s\n", cname.c_str(), std::string(dtype_name(dt)).c_str(), e.what());
      }
    }
  }
}

void run_gpu(BenchEnv& env) {
  const Model qwen_gate_up{"qwen3_gateup", 128, 8, 2048, 1536}, qwen_down{"qwen3_down", 128, 8, 768, 2048},
      mixtral{"mixtral_w1", 8, 2, 4096, 14336}, deepseek{"deepseek_v3", 256, 8, 7168, 4096};
  const std::vector<std::uint32_t> all_ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384};
  const std::vector<Routing> all_routings = {Routing::Uniform, Routing::Hot, Routing::Zipf};
  std::vector<ModelRun> runs;
  if (env.decode_only) {  // m <= 32: the direct route and the fused engine, A/B
    const std::vector<std::uint32_t> ms = {1, 2, 4, 8, 16, 32};
    for (const Model& md : {qwen_gate_up, qwen_down, mixtral, deepseek}) runs.push_back({md, DType::BF16, ms, all_routings});
  } else if (env.prefill_only) {
    const std::vector<std::uint32_t> ms = {16, 64, 256, 1024, 4096};
    for (const Model& md : {qwen_gate_up, qwen_down, mixtral, deepseek}) runs.push_back({md, DType::BF16, ms, all_routings});
    runs.push_back({Model{"qwen3_235b_gateup", 128, 8, 4096, 3072}, DType::BF16, {64, 4096}, {Routing::Uniform}});
  } else if (env.quick) {
    runs.push_back({qwen_gate_up, DType::BF16, {1, 16, 256}, {Routing::Uniform, Routing::Zipf}});
  } else {
    // The full M list on every shape: the largest case (DeepSeek M = 16384: ~70 ms per grouped
    // call, extrapolated from run 5's 17.5 ms at M = 4096) costs ~3 s per routing of the suite's
    // estimated ~1.5-2 min (362 graphs), so no M is dropped.
    for (const Model& md : {qwen_gate_up, qwen_down, mixtral, deepseek}) runs.push_back({md, DType::BF16, all_ms, all_routings});
    // The seed's f32 path and f16: a few rows on one shape.
    runs.push_back({qwen_gate_up, DType::F32, {1, 16, 1024}, {Routing::Uniform}});
    runs.push_back({qwen_gate_up, DType::F16, {1, 16, 1024}, {Routing::Uniform}});
  }
  std::FILE* routing_log = nullptr;
  if (const char* path = std::getenv("LLMM_MOE_ROUTING"); path && *path) {
    routing_log = std::fopen(path, "w");
    if (!routing_log) std::printf("moe: cannot write LLMM_MOE_ROUTING=%s: routing not recorded\n", path);
  }
  for (const ModelRun& mr : runs) {
    try {
      run_model(env, mr, routing_log);
    } catch (const Error& e) {
      std::printf("moe: %s %s failed: %s\n", mr.md.name, std::string(dtype_name(mr.dtype)).c_str(), e.what());
    }
  }
  if (routing_log) std::fclose(routing_log);
}
#endif

void run_cpu(BenchEnv& env) {
  MatmulIdParams p;
  p.m = 4, p.n = 256, p.k = 512, p.top_k = 2, p.n_experts = 8;
  p.expert_stride_bytes = 256ull * 512 * 4;
  std::vector<float> w(8u * 256 * 512, 0.01f), in(4u * 512, 0.5f), out(8u * 256);
  std::vector<std::uint32_t> ids = uniform_ids(4, 2, 8, 1);
  auto t0 = std::chrono::steady_clock::now();
  Receipt r = matmul_id(env.ctx, View::contiguous(w.data(), DType::F32, {8, 256, 512}),
                        View::contiguous(in.data(), DType::F32, {4, 512}), View::contiguous(ids.data(), DType::U32, {4, 2}),
                        View::contiguous(out.data(), DType::F32, {4, 2, 256}), nullptr, p);
  Row row;
  row.suite = "moe", row.name = "cpu_direct_m4", row.route = r.route, row.kernel = r.kernel, row.dtype = "f32";
  row.m = 4, row.n = 256, row.k = 512, row.batch = 8;
  row.us = row.us_min = row.us_max = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  row.flops = 2.0 * 8 * 256 * 512;
  row.device = env.device_label;
  env.out.add(row);
}

}  // namespace

void run_moe(BenchEnv& env) {
#ifdef LLMM_HAS_CUDA
  if (env.ctx.is_cuda()) {
    run_gpu(env);
    return;
  }
#endif
  run_cpu(env);
}

}  // namespace llmm::bench
