// One matmul_id_tq2 case end to end: a ternary expert stack (the seed's LCG codes and scale
// formula over n_experts * n rows), the input, ids and poisoned output of a MoeCase (layouts,
// padding, id dtypes, routings, out-of-range ids), the call on ctx, and the comparison against
// cpu::matmul_id_f64 on the dequantized stack (exact in f32): an oracle independent of the
// library's own CPU route.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmm/ternary_moe.hpp"
#include "support/compare.hpp"
#include "support/moe_case.hpp"

namespace llmm::test {

struct Tq2MoeCase {
  MoeCase base;  // base.p: m, n, k (a multiple of 128), top_k, n_experts, layout, dtypes; base.w_dtype ignored
  Tq2MoeRoute route = Tq2MoeRoute::Auto;
  // Non-empty: input row i (along the input's first dimension) is random times 2^row_exponents[i % size],
  // so that rows far apart in magnitude meet in one call (each must keep its own precision).
  std::vector<int> row_exponents;
  std::string describe() const;
};

struct Tq2MoeOutcome {
  Receipt receipt;
  CompareResult cmp;
  std::vector<unsigned char> out_bytes;
  std::int64_t zero_rows_checked = 0;
};

Tq2MoeOutcome run_tq2_moe_case(Context& ctx, TernaryWeightCache& cache, const Tq2MoeCase& c, MatmulIdScratch* scratch);

}  // namespace llmm::test
