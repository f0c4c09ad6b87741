// moe_ffn's activations on the device: f(g) and the gated act(g, u) of llmm::MoeActivation, in
// f32; the clamps and relu keep a NaN. Used by the activation kernel and the direct kernel's
// fused epilogue (one definition: the same bits on both paths).
#pragma once
#include "llmm/moe_ffn.hpp"

namespace llmm::cuda_moe {

// f(g) of the activation; NaN stays NaN (relu: a NaN is not < 0).
template <MoeActivation A>
__device__ __forceinline__ float act_f(float g) {
  if constexpr (A == MoeActivation::Silu) {
    return g / (1.0f + expf(-g));
  } else if constexpr (A == MoeActivation::GeluTanh) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  } else if constexpr (A == MoeActivation::GeluErf) {
    return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
  } else {  // Relu2 (SwigluOai goes through act_gated only)
    const float r = g < 0.0f ? 0.0f : g;
    return r * r;
  }
}

// act(g, u) with a gate; the clamps of gpt-oss's SwiGLU keep a NaN.
template <MoeActivation A>
__device__ __forceinline__ float act_gated(float g, float u, float alpha, float limit) {
  if constexpr (A == MoeActivation::SwigluOai) {
    const float gc = g > limit ? limit : g;
    const float uc = u > limit ? limit : u < -limit ? -limit : u;
    return (uc + 1.0f) * gc / (1.0f + expf(-alpha * gc));
  } else {
    return act_f<A>(g) * u;
  }
}

// act at a runtime activation (a grid-uniform branch): act(g, u) with a gate, f(g) without.
__device__ __forceinline__ float activate(MoeActivation a, bool gated, float g, float u, float alpha, float limit) {
  switch (a) {
    case MoeActivation::Silu: return gated ? act_gated<MoeActivation::Silu>(g, u, alpha, limit) : act_f<MoeActivation::Silu>(g);
    case MoeActivation::GeluTanh:
      return gated ? act_gated<MoeActivation::GeluTanh>(g, u, alpha, limit) : act_f<MoeActivation::GeluTanh>(g);
    case MoeActivation::GeluErf:
      return gated ? act_gated<MoeActivation::GeluErf>(g, u, alpha, limit) : act_f<MoeActivation::GeluErf>(g);
    case MoeActivation::Relu2: return gated ? act_gated<MoeActivation::Relu2>(g, u, alpha, limit) : act_f<MoeActivation::Relu2>(g);
    case MoeActivation::SwigluOai: return act_gated<MoeActivation::SwigluOai>(g, u, alpha, limit);
  }
  return 0.0f;
}

}  // namespace llmm::cuda_moe
