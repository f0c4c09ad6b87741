// Rules shared by matmul_id_capability (pure, params only) and matmul_id (views): one place for
// the dtype rules and the input strides, so both read a call the same way.
#pragma once
#include <cstdint>

#include "llmm/dtype.hpp"
#include "llmm/context.hpp"
#include "llmm/fp8.hpp"
#include "llmm/moe.hpp"
#include "llmm/view.hpp"

namespace llmm::detail {

// Weights f32/f16/bf16, input f32/f16/bf16, output f32 or the input's dtype, ids u32/i32/i64;
// InvalidArgument naming the argument otherwise.
void check_matmul_id_dtypes(DType weights, DType input, DType output, DType ids);

// The input's token and slot strides in elements, the layout's dense values where params leaves
// them unset (SharedPerToken: token k, slot 0; Slotted: token top_k * k, slot k). Refuses a slot
// stride given for SharedPerToken.
struct MatmulIdInputStrides {
  std::uint64_t token = 0, slot = 0;
};
MatmulIdInputStrides matmul_id_input_strides(const MatmulIdParams& p);

// matmul_id_params with another op's name in its messages (matmul_id_tq2 reads its views by the
// same rules, its weights' shape given as a [n_experts, n, k] view).
MatmulIdParams matmul_id_params_named(const char* op, const View& w, const View& in, const View& ids, const View& out,
                                      MatmulIdInputLayout layout, MatmulIdMultiplicity multiplicity, MatmulIdRoute route);

}  // namespace llmm::detail

namespace llmm::cuda_moe {
struct MoeArgs;
}

namespace llmm::detail {

// The direct route's kernel arguments of a matmul_id call (route Direct, MayRepeat), after every
// check matmul_id makes on these views; nothing is launched. moe_ffn's fused decode epilogues
// start from them (and point the output elsewhere). fp8: the scales of f8e4m3 weights, or null.
// False when the call has no output element (nothing would run).
bool matmul_id_direct_args(const Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                           MatmulIdInputLayout layout, const MatmulIdOptions& opts, const Fp8Experts* fp8,
                           cuda_moe::MoeArgs& args);

// The grouped route's kernel arguments of a matmul_id call over `scratch` (route GroupedPrefill,
// MayRepeat, dense experts, or FP8 codes with `fp8`), after every check matmul_id makes; nothing is launched. moe_ffn's
// sorted pipeline starts from them. False when the call has no output element or its outputs
// are all zero (k or n_experts 0: the direct kernel's job).
bool matmul_id_grouped_args(const Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                            MatmulIdInputLayout layout, const MatmulIdOptions& opts, MatmulIdScratch& scratch,
                            cuda_moe::MoeArgs& args, const Fp8Experts* fp8 = nullptr);

}  // namespace llmm::detail
