// One matmul_id call on FP8 experts (llmm::Fp8Experts) on any context against the float64
// reference built independently per routed row (cpu::matmul_fp8_f64 of the row's expert):
// experts quantized per tensor / channel / 128-block, random x, ids with repeats and one
// out-of-range id (a zero row), a NaN-poisoned output.
#pragma once
#include <cstdint>

#include "llmm/fp8.hpp"
#include "llmm/moe.hpp"

namespace llmm::test {

struct Fp8MoeCase {
  std::int64_t m = 4, n = 136, k = 272, top_k = 2, experts = 5;
  DType x_dtype = DType::BF16, out_dtype = DType::F32;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  MatmulIdRoute route = MatmulIdRoute::Auto;
  MatmulIdGroupedKernel grouped_kernel = MatmulIdGroupedKernel::Auto;
  // Rows 0..skew_rows - 1 of the routing all go to expert 0 (an expert with several wide tiles).
  std::int64_t skew_rows = 0;
  std::uint64_t seed = 1;
};

Receipt run_fp8_moe_case(Context& ctx, const Fp8MoeCase& c);

}  // namespace llmm::test
