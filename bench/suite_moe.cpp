// MoE suite: matmul_id (Direct for decode, GroupedPrefill for prefill; our time includes the map
// kernel) against a per-expert cuBLASLt loop over rows already permuted by expert (routing not
// counted for the baseline), bf16 weights and activations, uniform routing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llmm/moe.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#endif

namespace llmm::bench {
namespace {

std::vector<std::uint32_t> uniform_ids(std::uint32_t m, std::uint32_t top_k, std::uint32_t e, std::uint64_t seed) {
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(m) * top_k), perm(e);
  std::uint64_t h = seed;
  for (std::uint32_t t = 0; t < m; ++t) {
    for (std::uint32_t i = 0; i < e; ++i) perm[i] = i;
    for (std::uint32_t s = 0; s < top_k; ++s) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      std::uint32_t j = s + static_cast<std::uint32_t>((h >> 33) % (e - s));
      std::swap(perm[s], perm[j]);
      ids[static_cast<std::size_t>(t) * top_k + s] = perm[s];
    }
  }
  return ids;
}

#ifdef LLMM_HAS_CUDA
void run_gpu(BenchEnv& env) {
  StreamHandle s = env.ctx.stream();
  struct Model { const char* name; std::uint32_t e, top_k, k, n; };
  std::vector<Model> models = {{"qwen3_30b_a3b_gateup", 128, 8, 2048, 1536}, {"mixtral_w1", 8, 2, 4096, 14336},
                               {"deepseek_v3_like", 256, 8, 7168, 4096}};
  std::vector<std::uint32_t> ms = {1, 4, 16, 64, 256, 1024, 4096};
  if (env.quick) models.resize(1), ms = {1, 16, 256};
  for (const Model& md : models) {
    const std::size_t wbytes = static_cast<std::size_t>(md.e) * md.n * md.k * 2;
    DeviceBuffer w(wbytes);
    fill_random_device(w.data(), DType::BF16, static_cast<std::int64_t>(wbytes / 2), 5, 1.0, s);
    const std::uint32_t max_m = ms.back();
    MatmulIdScratch scratch(env.ctx, md.e, max_m);
    for (std::uint32_t m : ms) {
      const std::uint32_t rows = m * md.top_k;
      DeviceBuffer in(static_cast<std::size_t>(m) * md.k * 2), out(static_cast<std::size_t>(rows) * md.n * 2),
          ids_d(static_cast<std::size_t>(rows) * 4);
      fill_random_device(in.data(), DType::BF16, static_cast<std::int64_t>(m) * md.k, 6, 0.25, s);
      std::vector<std::uint32_t> ids = uniform_ids(m, md.top_k, md.e, 99 + m);
      copy_to_device(ids_d.data(), ids.data(), ids.size() * 4);
      // Baseline inputs: rows permuted by expert (a copy of each routed row's token input).
      std::vector<std::uint32_t> count(md.e, 0);
      for (std::uint32_t id : ids) ++count[id];
      std::vector<std::uint32_t> start(md.e + 1, 0);
      for (std::uint32_t e = 0; e < md.e; ++e) start[e + 1] = start[e] + count[e];
      DeviceBuffer xperm(static_cast<std::size_t>(rows) * md.k * 2), yperm(static_cast<std::size_t>(rows) * md.n * 2);
      fill_random_device(xperm.data(), DType::BF16, static_cast<std::int64_t>(rows) * md.k, 7, 0.25, s);
      std::uint32_t active = 0;
      std::vector<std::unique_ptr<cuda_dense::CublasLtGemm>> lts(md.e);
      std::vector<cuda_dense::DenseArgs> gs(md.e);
      for (std::uint32_t e = 0; e < md.e; ++e) {
        if (!count[e]) continue;
        ++active;
        cuda_dense::DenseArgs& g = gs[e];
        g.dtype = DType::BF16, g.m = count[e], g.n = md.n, g.k = md.k, g.a_ld = md.k, g.b_trans = true, g.b_ld = md.k;
        g.c_ld = md.n;
        g.a = static_cast<const char*>(xperm.data()) + static_cast<std::size_t>(start[e]) * md.k * 2;
        g.b = static_cast<const char*>(w.data()) + static_cast<std::size_t>(e) * md.n * md.k * 2;
        g.c = static_cast<char*>(yperm.data()) + static_cast<std::size_t>(start[e]) * md.n * 2;
        lts[e] = std::make_unique<cuda_dense::CublasLtGemm>(env.ctx.cublaslt_handle(), g, cuda_dense::LtMath::Default,
                                                            Context::kCublasLtWorkspaceBytes);
      }
      void* ws = env.ctx.cublaslt_workspace();
      auto baseline = [&](int) {
        for (std::uint32_t e = 0; e < md.e; ++e)
          if (lts[e]) lts[e]->run(gs[e], ws, s);
      };
      for (MatmulIdRoute route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill}) {
        if (route == MatmulIdRoute::Direct && m > 64) continue;  // one gemv per routed row: decode only
        if (route == MatmulIdRoute::GroupedPrefill && m < 4) continue;
        MatmulIdParams p;
        p.m = m, p.n = md.n, p.k = md.k, p.top_k = md.top_k, p.n_experts = md.e;
        p.expert_stride_bytes = static_cast<std::uint64_t>(md.n) * md.k * 2;
        p.route = route, p.input_dtype = DType::BF16, p.output_dtype = DType::BF16;
        View wv = View::contiguous(w.data(), DType::BF16, {static_cast<std::int64_t>(wbytes / 2)}, DeviceKind::CUDA);
        View iv = View::contiguous(in.data(), DType::BF16, {m, md.k}, DeviceKind::CUDA);
        View idv = View::contiguous(ids_d.data(), DType::U32, {rows}, DeviceKind::CUDA);
        View ov = View::contiguous(out.data(), DType::BF16, {rows, md.n}, DeviceKind::CUDA);
        Receipt receipt;
        try {
          auto [t, tb] = time_pair(s, [&](int) { receipt = matmul_id(env.ctx, wv, iv, idv, ov, &scratch, p); }, baseline, 3, 5);
          Row row;
          row.suite = "moe", row.name = std::string(md.name) + "_m" + std::to_string(m), row.route = receipt.route;
          row.kernel = receipt.kernel, row.dtype = "bf16", row.m = m, row.n = md.n, row.k = md.k;
          row.batch = active;  // active experts
          row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
          row.flops = 2.0 * rows * md.n * md.k;
          row.bytes = static_cast<double>(active) * md.n * md.k * 2 + static_cast<double>(m) * md.k * 2 +
                      static_cast<double>(rows) * md.n * 2;
          row.baseline = "cublas_per_expert_loop", row.baseline_us = tb.median_us;
          row.device = env.device_label;
          env.out.add(row);
        } catch (const Error& e) {
          std::printf("moe: %s m %u %s failed: %s\n", md.name, m, matmul_id_route_name(route), e.what());
        }
      }
    }
  }
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
                        View::contiguous(in.data(), DType::F32, {4, 512}), View::contiguous(ids.data(), DType::U32, {8}),
                        View::contiguous(out.data(), DType::F32, {8, 256}), nullptr, p);
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
