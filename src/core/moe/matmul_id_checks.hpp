// Checks shared by matmul_id_capability (pure, params only) and matmul_id (views): one place for
// the dtype rules, so both refuse the same calls with the same words.
#pragma once
#include "llmm/dtype.hpp"

namespace llmm::detail {

// Weights f32/f16/bf16, input f32/f16/bf16, output f32 or the input's dtype, ids u32/i32/i64;
// InvalidArgument naming the argument otherwise.
void check_matmul_id_dtypes(DType weights, DType input, DType output, DType ids);

}  // namespace llmm::detail
