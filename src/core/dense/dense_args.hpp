// Raw, already-validated arguments of one batched dense matmul, as the CUDA launchers take
// them: pointers, sizes, strides in elements, and the stream. No CUDA headers here, so host
// code (plans, the public op) can build these without a CUDA toolkit.
//
//   C[b, i, j] = sum_l A(b, i, l) * B(b, l, j),   0 <= b < batch, i < m, j < n, l < k
//   A(b, i, l) = a[b * a_batch + (a_trans ? l * a_ld + i : i * a_ld + l)]
//   B(b, l, j) = b[b * b_batch + (b_trans ? j * b_ld + l : l * b_ld + j)]
//   C(b, i, j) = c[b * c_batch + i * c_ld + j]
//
// All strides are >= 0 (a batch stride of 0 broadcasts), the innermost stride of every
// operand is 1, and c does not overlap a or b: llmm::matmul checks all of this first.
#pragma once
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_dense {

struct DenseArgs {
  DType dtype = DType::F32;  // a, b and c share it; accumulation is f32
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t a_batch = 0, a_ld = 0;
  bool a_trans = false;
  const void* b = nullptr;
  std::int64_t b_batch = 0, b_ld = 0;
  bool b_trans = false;
  void* c = nullptr;
  std::int64_t c_batch = 0, c_ld = 0;
  bool exact = true;  // f32 inputs: Exact keeps f32 accuracy; false allows tf32/bf16 tensor cores
};

}  // namespace llmm::cuda_dense
