// Google Benchmark microbenchmarks of host-side code (conversions, the CPU reference). The GPU
// benchmarks live in llmm-bench, which times kernels with CUDA graphs instead.
#include <benchmark/benchmark.h>

#include <vector>

#include "llmm/dtype.hpp"
#include "llmm/reference.hpp"

static void BM_f32_to_f16(benchmark::State& state) {
  std::vector<float> x(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.37f - 700.0f;
  for (auto _ : state)
    for (float v : x) benchmark::DoNotOptimize(llmm::f32_to_f16_bits(v));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}
BENCHMARK(BM_f32_to_f16);

static void BM_f32_to_bf16(benchmark::State& state) {
  std::vector<float> x(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.37f - 700.0f;
  for (auto _ : state)
    for (float v : x) benchmark::DoNotOptimize(llmm::f32_to_bf16_bits(v));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}
BENCHMARK(BM_f32_to_bf16);

static void BM_reference_matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a), c(a);
  llmm::cpu::MatmulProblem p{llmm::View::contiguous(a.data(), llmm::DType::F32, {1, n, n}),
                             llmm::View::contiguous(b.data(), llmm::DType::F32, {1, n, n})};
  llmm::View cv = llmm::View::contiguous(c.data(), llmm::DType::F32, {1, n, n});
  for (auto _ : state) llmm::cpu::matmul(p, cv, 1);
  state.SetItemsProcessed(state.iterations() * 2 * n * n * n);  // flops
}
BENCHMARK(BM_reference_matmul)->Arg(64)->Arg(256);

BENCHMARK_MAIN();
