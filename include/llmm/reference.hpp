// CPU reference backend: float64 accumulation, any strides, transposes and float dtypes.
// It is the test oracle: simple loops, deterministic, multithreaded over output rows.
#pragma once
#include <cstdint>
#include <vector>

#include "llmm/moe.hpp"
#include "llmm/view.hpp"

namespace llmm::cpu {

// Batched operands as 3-D views: a [batch, m, k] ([batch, k, m] when transpose_a), b [batch, k, n]
// ([batch, n, k] when transpose_b), c [batch, m, n]. A batch stride of 0 broadcasts.
struct MatmulProblem {
  View a, b;
  bool transpose_a = false;
  bool transpose_b = false;
};

// Exact-ish result in float64 plus, per element, sum_k |a_mk||b_kn| (the scale that
// floating-point error bounds are proportional to). Row-major [batch, m, n].
struct MatmulF64 {
  std::int64_t batch = 0, m = 0, n = 0, k = 0;
  std::vector<double> value;
  std::vector<double> abs_sum;
};

// Throws InvalidArgument (op "reference_matmul") on mismatched shapes or non-float dtypes.
MatmulF64 matmul_f64(const MatmulProblem& p, int threads = 0);

// c = a . b with float64 accumulation, rounded once to c's dtype. c is a 3-D CPU view.
void matmul(const MatmulProblem& p, const View& c, int threads = 0);

// Expert-ID matmul in float64 over host buffers laid out as matmul_id's contract (params give
// the shapes, strides and dtypes; ids of params.ids_dtype): value and sum_k |in||w| per output,
// [m * top_k, n] row-major; rows of out-of-range ids are 0 with abs_sum 0. The params must be
// valid (matmul_id checks them; zero sizes are fine).
struct MatmulIdF64 {
  std::int64_t rows = 0, n = 0;
  std::vector<double> value, abs_sum;
};
MatmulIdF64 matmul_id_f64(const void* weights, DType weight_dtype, const void* input, const void* ids,
                          const MatmulIdParams& params, int threads = 0);
// The same on FP8 experts (codes and scales as llmm::Fp8Experts, params as matmul_id_params
// reads the codes' view): the oracle of the FP8 expert kernels.
MatmulIdF64 matmul_id_fp8_f64(const void* codes, const float* scales, Fp8ScaleKind kind, const void* input, const void* ids,
                              const MatmulIdParams& params, int threads = 0);

}  // namespace llmm::cpu
