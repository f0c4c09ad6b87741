// Smoke suite: proves the harness end to end. CPU: the reference backend on a few shapes.
// GPU: the two ceilings every other figure is read against (device copy bandwidth and
// cuBLASLt bf16 GEMM), plus cuBLASLt in each dtype, each checked against float64 samples.
#include <algorithm>
#include <chrono>
#include <vector>

#include "llmm/reference.hpp"
#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "gpu/device_data.hpp"
#include "gpu/timing.hpp"
#include "llmm/buffer.hpp"
#include "llmm/error.hpp"
#endif

namespace llmm::bench {
namespace {

void fill_host(std::vector<unsigned char>& buf, DType t, std::int64_t n, std::uint64_t seed) {
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::int64_t i = 0; i < n; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(h >> 11) * 0x1.0p-53;
    store_from_double(buf.data(), t, i, ((h >> 33) & 1 ? -1 : 1) * (0.25 + u));
  }
}

void run_cpu(BenchEnv& env) {
  struct Case { const char* name; std::int64_t m, n, k; DType t; };
  std::vector<Case> cases = {{"ref_f32_64", 64, 64, 64, DType::F32},
                             {"ref_bf16_256", 256, 256, 256, DType::BF16},
                             {"ref_f16_255x257x129", 255, 257, 129, DType::F16}};
  // The CPU backend is the float64 reference: these rows show that it runs and agrees, not speed
  // (a 1536 x 3072 x 3072 row took 12 s of the main job's 13.6 s on 2 cores; 512^3 shows the rate).
  if (!env.quick) cases.push_back({"ref_bf16_512", 512, 512, 512, DType::BF16});
  for (const Case& c : cases) {
    std::size_t es = dtype_size(c.t);
    std::vector<unsigned char> a(static_cast<std::size_t>(c.m * c.k) * es), b(static_cast<std::size_t>(c.n * c.k) * es),
        out(static_cast<std::size_t>(c.m * c.n) * es);
    fill_host(a, c.t, c.m * c.k, 1);
    fill_host(b, c.t, c.n * c.k, 2);
    cpu::MatmulProblem p{View::contiguous(a.data(), c.t, {1, c.m, c.k}), View::contiguous(b.data(), c.t, {1, c.n, c.k}),
                         false, true};
    View cv = View::contiguous(out.data(), c.t, {1, c.m, c.n});
    std::vector<double> us;
    int reps = c.m * c.n * c.k > 1e9 ? 1 : 3;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cpu::matmul(p, cv, env.ctx.arch().cpu_threads);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    Row row;
    row.suite = "smoke";
    row.name = c.name;
    row.route = "cpu_reference";
    row.kernel = "matmul_f64";
    row.dtype = std::string(dtype_name(c.t));
    row.m = c.m, row.n = c.n, row.k = c.k;
    row.us = us[us.size() / 2], row.us_min = us.front(), row.us_max = us.back();
    row.flops = 2.0 * c.m * c.n * c.k;
    row.bytes = static_cast<double>((c.m * c.k + c.n * c.k + c.m * c.n) * static_cast<std::int64_t>(es));
    if (c.m * c.n * c.k <= 1e8) {  // the rounded output against the float64 values
      cpu::MatmulF64 ref = cpu::matmul_f64(p);
      double mx = 0, mr = 0;
      for (std::size_t i = 0; i < ref.value.size(); ++i) {
        double e = std::abs(load_as_double(out.data(), c.t, static_cast<std::int64_t>(i)) - ref.value[i]);
        mx = std::max(mx, e);
        mr = std::max(mr, e / ref.abs_sum[i]);
      }
      row.max_abs_err = mx, row.max_rel_err = mr, row.err_note = "full";
    }
    row.device = env.device_label;
    env.out.add(row);
  }
}

#ifdef LLMM_HAS_CUDA
void run_gpu(BenchEnv& env) {
  StreamHandle s = env.ctx.stream();
  const double l2 = static_cast<double>(env.ctx.arch().l2_bytes);
  {  // Copy ceiling: bytes read + written.
    std::size_t bytes = env.quick ? (256u << 20) : (1u << 30);
    DeviceBuffer src(bytes), dst(bytes);
    fill_random_device(src.data(), DType::F32, static_cast<std::int64_t>(bytes / 4), 9, 1.0, s);
    Timing t = time_graph(s, [&](int) {
      if (cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        fail(ErrorCode::Cuda, "copy ceiling: cudaMemcpyAsync failed");
    });
    Timing tk = time_graph(s, [&](int) { copy_kernel_device(dst.data(), src.data(), bytes, env.ctx.arch().sm_count, s); });
    for (int variant = 0; variant < 2; ++variant) {
      const Timing& tv = variant == 0 ? t : tk;
      Row row;
      row.suite = "smoke", row.name = "copy_" + std::to_string(bytes >> 20) + "MiB";
      row.route = variant == 0 ? "cudaMemcpyAsync" : "copy_kernel";
      row.kernel = variant == 0 ? "d2d" : "copy16_grid_stride";
      row.dtype = "u8", row.m = static_cast<std::int64_t>(bytes);
      row.us = tv.median_us, row.us_min = tv.min_us, row.us_max = tv.max_us;
      row.bytes = 2.0 * static_cast<double>(bytes);  // read + written
      row.device = env.device_label;
      env.out.add(row);
    }
  }
  // The launch floor of this timing method (issues 13, 14: how much of a small decode call's
  // ~4-5 us any kernel pays): one empty kernel a call, and an empty pair chained by PDL.
  {
    DeviceBuffer sink(256);
    for (int kernels : {1, 2}) {
      if (kernels == 2 && env.ctx.arch().cc_major < 9) continue;  // PDL: sm_90
      const Timing t = time_graph(s, [&](int) { null_kernels_device(static_cast<float*>(sink.data()), kernels, s); });
      Row row;
      row.suite = "smoke", row.name = kernels == 1 ? "launch_floor_1_kernel" : "launch_floor_2_kernels_pdl";
      row.route = "null_kernel", row.kernel = kernels == 1 ? "null_kernel" : "null_kernel+null_kernel_pdl";
      row.dtype = "-";
      row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
      row.device = env.device_label;
      env.out.add(row);
    }
  }
  struct Case { const char* name; std::int64_t m, n, k; DType t; cuda_dense::LtMath math; const char* prec; };
  std::vector<Case> cases = {
      {"cublas_bf16_llama_ffn", 4096, 14336, 4096, DType::BF16, cuda_dense::LtMath::Default, "-"},
      {"cublas_f16_llama_ffn", 4096, 14336, 4096, DType::F16, cuda_dense::LtMath::Default, "-"},
      {"cublas_f32_dit_out", 1536, 3072, 3072, DType::F32, cuda_dense::LtMath::Default, "exact"},
      {"cublas_tf32_dit_out", 1536, 3072, 3072, DType::F32, cuda_dense::LtMath::Tf32, "fast"},
  };
  if (!env.quick) cases.push_back({"cublas_bf16_square8k", 8192, 8192, 8192, DType::BF16, cuda_dense::LtMath::Default, "-"});
  const std::size_t ws_bytes = 32u << 20;
  DeviceBuffer ws(ws_bytes);
  for (const Case& c : cases) {
    std::size_t es = dtype_size(c.t);
    double wbytes = static_cast<double>(c.n * c.k) * es;
    int copies = rotation_copies(wbytes + static_cast<double>(c.m * c.k + c.m * c.n) * es, l2);
    DeviceBuffer a(static_cast<std::size_t>(c.m * c.k) * es), cbuf(static_cast<std::size_t>(c.m * c.n) * es);
    std::vector<DeviceBuffer> w;
    for (int i = 0; i < copies; ++i) {
      w.emplace_back(static_cast<std::size_t>(c.n * c.k) * es);
      fill_random_device(w.back().data(), c.t, c.n * c.k, 100 + static_cast<std::uint64_t>(i), 1.0, s);
    }
    fill_random_device(a.data(), c.t, c.m * c.k, 7, 0.25, s);
    cuda_dense::DenseArgs g;
    g.dtype = c.t, g.m = c.m, g.n = c.n, g.k = c.k;
    g.a = a.data(), g.a_ld = c.k, g.b_trans = true, g.b_ld = c.k, g.c = cbuf.data(), g.c_ld = c.n;
    g.b = w[0].data();
    cuda_dense::CublasLtGemm lt(env.ctx.cublaslt_handle(), g, c.math, ws_bytes);
    Timing t = time_graph(s, [&](int i) {
      cuda_dense::DenseArgs gi = g;
      gi.b = w[static_cast<std::size_t>(i % copies)].data();
      lt.run(gi, ws.data(), s);
    });
    lt.run(g, ws.data(), s);
    SampledError err = sample_check(g);
    Row row;
    row.suite = "smoke", row.name = c.name, row.route = "cublaslt", row.kernel = lt.description();
    row.dtype = std::string(dtype_name(c.t)), row.precision = c.prec;
    row.m = c.m, row.n = c.n, row.k = c.k;
    row.us = t.median_us, row.us_min = t.min_us, row.us_max = t.max_us;
    row.flops = 2.0 * c.m * c.n * c.k;
    row.bytes = static_cast<double>(c.m * c.k + c.n * c.k + c.m * c.n) * es;
    row.max_abs_err = err.max_abs, row.max_rel_err = err.max_rel, row.err_note = std::to_string(err.samples) + " samples";
    row.device = env.device_label;
    env.out.add(row);
  }
}
#endif

}  // namespace

void run_smoke(BenchEnv& env) {
#ifdef LLMM_HAS_CUDA
  if (env.ctx.is_cuda()) {
    run_gpu(env);
    return;
  }
#endif
  run_cpu(env);
}

}  // namespace llmm::bench
