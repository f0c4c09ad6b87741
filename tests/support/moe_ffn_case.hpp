// A random moe_ffn call (x, experts, ids with out-of-range ones, routing weights), its float64
// reference computed here by plain loops (independent of the library's), and the per-element
// magnitude that bounds a rounded result's error.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llmm/moe_ffn.hpp"
#include "support/tensor.hpp"

namespace llmm::test {

struct MoeFfnCase {
  std::int64_t m = 5, hidden = 40, inter = 24, top_k = 2, experts = 4;
  DType x_dtype = DType::F32, w_dtype = DType::F32, w_route_dtype = DType::F32, ids_dtype = DType::I32;
  MoeActivation activation = MoeActivation::Silu;
  bool gated = true;                                  // false: w_gate_up [experts, inter, hidden]
  MoeGateLayout layout = MoeGateLayout::Halves;
  float alpha = 1.702f, limit = 7.0f;                 // SwigluOai
  bool bias_gate_up = false, bias_down = false;       // random expert biases of bias_dtype
  DType bias_dtype = DType::F32;
  int out_of_range_every = 0;  // every n-th routed slot gets an id outside [0, experts)
  int nan_token = -1;          // a NaN in this token's x (its output only must be NaN)
  std::uint64_t seed = 1;
  // Called on the random weights (gate_up, down) before the reference is computed: e.g. to snap
  // them to the values an FP8 stack holds exactly.
  std::function<void(HostTensor&, HostTensor&)> prepare_weights;
  std::string describe() const;
};

struct MoeFfnBuffers {
  HostTensor x, w_gate_up, w_down, ids, topk_weights, out;  // out poisoned (NaN)
  HostTensor bias_gate_up, bias_down;                      // [experts, rows] / [experts, hidden] when asked
  std::vector<double> ref, magnitude;                      // [m * hidden]
};

MoeFfnBuffers make_moe_ffn(const MoeFfnCase& c);

// The case's activation options (biases not set: their views depend on where the buffers live).
MoeFfnOptions moe_ffn_options(const MoeFfnCase& c);

// |got - ref| <= rel * magnitude + |ref| * out_rel (NaN where ref is NaN); returns the first
// failure's description, empty when every element passes.
std::string compare_moe_ffn(const MoeFfnBuffers& b, const HostTensor& got, double rel, double out_rel);

}  // namespace llmm::test
