// moe_ffn on FP8 experts: a MoeFfnCase whose f32 weights are snapped to exact FP8 values
// (e4m3 code x a power-of-two scale that differs by expert and scale group), the FP8 stacks
// (codes and scales) that hold them, so the plain-loop reference of make_moe_ffn is the FP8
// FFN's exact reference.
#pragma once
#include "llmm/fp8.hpp"
#include "llmm/moe.hpp"
#include "support/moe_ffn_case.hpp"

namespace llmm::test {

struct Fp8FfnStacks {
  HostTensor gu_codes, gu_scales, dn_codes, dn_scales;
};

// Sets c.prepare_weights (c.w_dtype must be F32) and returns the stacks it fills when
// make_moe_ffn(c) runs (shared state: keep the returned pointer until then).
std::shared_ptr<Fp8FfnStacks> snap_to_fp8(MoeFfnCase& c, Fp8ScaleKind kind);

}  // namespace llmm::test
