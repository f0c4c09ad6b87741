// One matmul_id case end to end: weights with padding between experts, an input in either
// layout, ids from a routing pattern (uniform, skewed, Zipf, repeats, out-of-range mixed in),
// a poisoned output, the call on ctx (uploading for CUDA), and the float64 comparison.
#include <cstdint>
#include <string>
#include <vector>

#include "llmm/moe.hpp"
#include "support/compare.hpp"

#pragma once

namespace llmm::test {

enum class Routing { Uniform, Skewed, Zipf, Repeats };

struct MoeCase {
  MatmulIdParams p;
  DType w_dtype = DType::F32;
  std::int64_t expert_pad = 0;  // extra elements between experts
  Routing routing = Routing::Uniform;
  int out_of_range_every = 0;   // every Nth routed row gets an id >= n_experts (0: none)
  Precision precision = Precision::Exact;
  std::uint64_t seed = 1;
  std::string describe() const;
};

struct MoeOutcome {
  Receipt receipt;
  CompareResult cmp;
  std::vector<unsigned char> out_bytes;
  std::int64_t zero_rows_checked = 0;  // out-of-range rows verified to be exactly zero
};

// Fills params' expert_stride_bytes from w_dtype and expert_pad.
MatmulIdParams with_stride(MatmulIdParams p, DType w_dtype, std::int64_t expert_pad);
std::vector<std::uint32_t> make_ids(const MoeCase& c);
MoeOutcome run_moe_case(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch);

}  // namespace llmm::test
