// Float64 reference of matmul_id_tq2 (the CPU route): each output one dot product over k in
// order, the ternary weight decoded on the fly ((code - 1) * scale, exact), products and sums in
// double, rounded once to the output dtype. Multithreaded over (routed row, column block).
#pragma once
#include "core/ternary/tq2_moe_args.hpp"

namespace llmm::cpu {
// Writes every output row of a (zero rows for out-of-range ids). The args must be valid.
void matmul_id_tq2_reference(const cuda_ternary::Tq2MoeArgs& a, int threads = 0);
}  // namespace llmm::cpu
