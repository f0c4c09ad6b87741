// Suite "host": the host time of one C++ call (issue 47's target: <= 2 us for a planned call), on
// problems so small that the GPU keeps up. Each figure is the wall time of a batch of calls
// enqueued back to back, with no synchronisation inside the batch, divided by the calls; the
// median of 21 batches (a batch is short enough that the launch queue never fills, so the host is
// what is timed). The baseline is cuBLASLt's own host cost for the same problem: a resolved
// CublasLtGemm (algorithm chosen once) run directly, which is the least any cuBLASLt route can pay.
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "suites.hpp"

#ifdef LLMM_HAS_CUDA
#include "cuda/common/tensor_map.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "gpu/device_data.hpp"
#include "llmm/buffer.hpp"
#include "llmm/matmul.hpp"
#include "llmm/ternary.hpp"
#endif

namespace llmm::bench {

#ifdef LLMM_HAS_CUDA
namespace {

constexpr int kBatch = 100, kBatches = 21;

// Median host microseconds a call of fn over kBatches batches of kBatch calls.
double host_us(Context& ctx, const std::function<void()>& fn) {
  for (int i = 0; i < 50; ++i) fn();  // warm: plans, caches, module loads
  ctx.synchronize();
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    ctx.synchronize();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void add_row(BenchEnv& env, const char* name, const std::string& route, const std::string& kernel, DType t,
             std::int64_t m, std::int64_t n, std::int64_t k, double us, const char* baseline, double base_us) {
  Row row;
  row.suite = "host", row.name = name, row.route = route, row.kernel = kernel;
  row.dtype = std::string(dtype_name(t));
  row.m = m, row.n = n, row.k = k;
  row.us = row.us_min = row.us_max = us;
  row.baseline = baseline, row.baseline_us = base_us;
  row.device = env.device_label;
  env.out.add(row);
}

}  // namespace

void run_host(BenchEnv& env) {
  if (!env.ctx.is_cuda()) {
    std::printf("host: needs a GPU (the host cost of CUDA calls); skipped\n");
    return;
  }
  Context& ctx = env.ctx;
  const StreamHandle s = ctx.stream();
  const std::int64_t n = 256, k = 256;
  DeviceBuffer w(static_cast<std::size_t>(n * k) * 2), x(static_cast<std::size_t>(16 * k) * 2),
      y(static_cast<std::size_t>(16 * n) * 4);
  fill_random_device(w.data(), DType::BF16, n * k, 1, 1.0, s);
  fill_random_device(x.data(), DType::BF16, 16 * k, 2, 1.0, s);
  for (std::int64_t m : {1, 8}) {  // m 1: gemv_wide; m 8: cuBLASLt (Auto's routes at this size)
    const View a = View::contiguous(x.data(), DType::BF16, {m, k}, DeviceKind::CUDA);
    const View b = View::contiguous(w.data(), DType::BF16, {n, k}, DeviceKind::CUDA);
    const View c = View::contiguous(y.data(), DType::BF16, {m, n}, DeviceKind::CUDA);
    MatmulOptions o;
    o.transpose_b = true;
    Receipt r;
    const double us = host_us(ctx, [&] { r = matmul(ctx, a, b, c, o); });
    cuda_dense::DenseArgs g;
    g.dtype = DType::BF16, g.m = m, g.n = n, g.k = k, g.a_ld = k, g.b_trans = true, g.b_ld = k, g.c_ld = n;
    g.a = x.data(), g.b = w.data(), g.c = y.data();
    const cuda_dense::CublasLtGemm lt(ctx.cublaslt_handle(), g, cuda_dense::LtMath::Default, Context::kCublasLtWorkspaceBytes);
    void* ws = ctx.cublaslt_workspace();
    const double base = host_us(ctx, [&] { lt.run(g, ws, s); });
    add_row(env, m == 1 ? "matmul_bf16_m1" : "matmul_bf16_m8", r.route, r.kernel, DType::BF16, m, n, k, us,
            "cublaslt_run", base);
  }
  // gemm_tq2 at m 1 with bf16 activations (what a BitNet decode step runs), against the same
  // cuBLASLt host floor of the dense bf16 layer it replaces.
  {
    std::vector<float> wf(static_cast<std::size_t>(n * k));
    for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(static_cast<int>(i * 2654435761u % 3) - 1);
    const std::vector<BlockTQ2_128> blocks = tq2_quantize(wf.data(), n, k);
    TernaryWeightCache cache(ctx);
    const WeightHandle wt = cache.get_or_upload(1, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k);
    const View xv = View::contiguous(x.data(), DType::BF16, {1, k}, DeviceKind::CUDA);
    const View yv = View::contiguous(y.data(), DType::BF16, {1, n}, DeviceKind::CUDA);
    Receipt r;
    const double us = host_us(ctx, [&] { r = gemm_tq2(ctx, wt, xv, yv, Tq2Options{}); });
    cuda_dense::DenseArgs g;
    g.dtype = DType::BF16, g.m = 1, g.n = n, g.k = k, g.a_ld = k, g.b_trans = true, g.b_ld = k, g.c_ld = n;
    g.a = x.data(), g.b = w.data(), g.c = y.data();
    const cuda_dense::CublasLtGemm lt(ctx.cublaslt_handle(), g, cuda_dense::LtMath::Default, Context::kCublasLtWorkspaceBytes);
    void* ws = ctx.cublaslt_workspace();
    const double base = host_us(ctx, [&] { lt.run(g, ws, s); });
    add_row(env, "gemm_tq2_bf16_m1", r.route, r.kernel + " x" + std::to_string(r.kernels_launched), DType::BF16, 1, n, k,
            us, "cublaslt_run", base);
  }
  // What a call is made of, each against one plain launch of a one-warp kernel: the two
  // shared-memory attribute calls a launcher makes before each launch, and the encoding of the
  // two weight tensor maps a TMA decode launch makes (both redone every call today).
  {
    DeviceBuffer sink(64);
    auto* f = static_cast<float*>(sink.data());
    const double launch = host_us(ctx, [&] { null_kernels_device(f, 1, s); });
    add_row(env, "null_kernel_launch", "probe", "null_kernel", DType::F32, 0, 0, 0, launch, "null_kernel_launch", launch);
    const double attr = host_us(ctx, [&] { set_smem_attributes_device(64 * 1024); });
    add_row(env, "func_set_attribute_x2", "probe", "cudaFuncSetAttribute x2", DType::F32, 0, 0, 0, attr, "null_kernel_launch",
            launch);
    const std::uint64_t dims[2] = {static_cast<std::uint64_t>(k / 4), static_cast<std::uint64_t>(n)};
    const std::uint32_t box[2] = {64, 128};
    const double maps = host_us(ctx, [&] {
      (void)cuda_common::make_tensor_map_u8_2d(w.data(), dims, dims[0], box, true, "probe");
      (void)cuda_common::make_tensor_map_u8_2d(w.data(), dims, dims[0], box, false, "probe");
    });
    add_row(env, "tensor_map_encode_x2", "probe", "cuTensorMapEncodeTiled x2", DType::U8, 0, 0, 0, maps, "null_kernel_launch",
            launch);
  }
}
#else
void run_host(BenchEnv&) { std::printf("host: needs a CUDA build; skipped\n"); }
#endif

}  // namespace llmm::bench
