// Raw, already-validated arguments of one expert-ID matmul (matmul_id), as the CUDA launchers
// take them. No CUDA headers.
//
//   routed row r = t * top_k + s   (token t < m, slot s < top_k), e = ids[r] (u32)
//   out[r, j] = sum_l in(t, s, l) * W(e, j, l)       for 0 <= e < n_experts
//   out[r, j] = 0                                     for e >= n_experts (no weight address formed)
//   W(e, j, l)   = w[e * expert_stride + j * k + l]   (each expert row-major [n, k], elements)
//   in(t, s, l)  = in[t * in_token_stride + s * in_slot_stride + l]
//                  (SharedPerToken: slot stride 0; Slotted: token stride top_k * k, slot stride k)
//   out(r, j)    = out[r * n + j]                      ([m, top_k, n] contiguous)
//
// Grouped route scratch (caller-owned, device memory): counts[e] = routed rows of expert e;
// rows[e * row_capacity + i] = the i-th routed row r of expert e, in increasing r (token order).
// The map kernel writes both (and zeroes the output rows of out-of-range ids); the grouped
// kernel reads them. row_capacity >= m (ids are distinct per token on this route).
#pragma once
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_moe {

struct MoeArgs {
  std::int64_t m = 0, n = 0, k = 0, top_k = 0, n_experts = 0;
  DType w_dtype = DType::F32;
  const void* w = nullptr;
  std::int64_t expert_stride = 0;  // elements, >= n * k
  DType in_dtype = DType::F32;
  const void* in = nullptr;
  std::int64_t in_token_stride = 0, in_slot_stride = 0;  // elements
  const std::uint32_t* ids = nullptr;                    // [m * top_k]
  DType out_dtype = DType::F32;
  void* out = nullptr;  // [m * top_k, n]
  bool exact = true;    // f32 input on tensor cores: keep f32 accuracy
  std::uint32_t* counts = nullptr;  // grouped: [n_experts]
  std::uint32_t* rows = nullptr;    // grouped: [n_experts][row_capacity]
  std::int64_t row_capacity = 0;
};

}  // namespace llmm::cuda_moe
