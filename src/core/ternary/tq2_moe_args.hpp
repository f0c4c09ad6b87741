// Raw, already-validated arguments of one ternary expert-ID matmul (matmul_id_tq2), as the CUDA
// launchers take them. No CUDA headers (host code builds these).
//   out[r, j] = sum_l in(r, l) * W_e[j, l],  r = t * top_k + s a routed row, e = ids[r]
//   W_e[j, l] = (code(e n + j, l) - 1) * scale(e n + j, l / 128)   (tq2_args.hpp's layout over
//               the stack's n_experts * n rows)
// A row whose id is outside [0, n_experts) is zero.
#pragma once
#include <cstdint>

#include "core/moe/moe_args.hpp"

namespace llmm::cuda_ternary {

struct Tq2MoeArgs {
  // Sizes, input (in_dtype, token/slot strides), ids, output, and the grouped route's scratch
  // (counts, rows, staged); g.w points at the codes (the MoE launchers' argument checks want a
  // weight pointer; no kernel reads it as f16), g.w_dtype names the decoded dtype (f16).
  cuda_moe::MoeArgs g;
  const std::uint8_t* codes = nullptr;     // [n_experts * n][k / 4]
  const std::uint16_t* scales = nullptr;   // [n_experts * n][k / 128] f16 bits
  const std::uint16_t* scales_t = nullptr; // [k / 128][scales_t_ld]: expert e's row j at column e * n8 + j (n8 = n rounded to 8)
  std::int64_t scales_t_ld = 0;
};

}  // namespace llmm::cuda_ternary
