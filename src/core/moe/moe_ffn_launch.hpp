// Seam between moe_ffn and its two elementwise CUDA kernels (src/cuda/moe/moe_ffn_kernels.cu; a
// refusal in CPU-only builds). Arguments are validated by moe_ffn; launchers enqueue on `stream`,
// never synchronise or allocate, and throw llmm::Error (Cuda) naming the kernel when a launch fails.
#pragma once
#include <cstdint>
#include <string>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"
#include "llmm/moe_ffn.hpp"

namespace llmm::cuda_moe {

// a[r, j] = act(g, u) for r < rows, j < inter, with g and u read from h [rows, gate_up rows]
// (gate_up rows = 2 inter: gate j and up j by `layout`; inter without a gate: act(h[r, j])) plus
// bias[e, row] where given, e = ids[r] (rows are routed rows, r = token * top_k + slot; an id
// outside [0, experts) takes no bias: its h row is zeros); a [rows, inter]. h, a contiguous of
// dtype t (f32, f16, bf16); f32 math, one rounding.
struct MoeGatedArgs {
  DType dtype = DType::F32;
  MoeActivation activation = MoeActivation::Silu;
  bool gated = true;
  MoeGateLayout layout = MoeGateLayout::Halves;
  float alpha = 1.702f, limit = 7.0f;  // SwigluOai
  const void* h = nullptr;
  void* a = nullptr;
  std::int64_t rows = 0, inter = 0;
  const void* bias = nullptr;  // [experts, gate_up rows] of bias_dtype, or null
  DType bias_dtype = DType::F32;
  const void* ids = nullptr;  // [rows] of ids_dtype: read only with a bias
  DType ids_dtype = DType::I32;
  std::int64_t experts = 0;
  // Sorted rows (moe_ffn's sorted pipeline): h's rows are the list positions of moe_map's
  // counts / rows (MoeArgs::out_sorted), so only the first sum(counts) rows are read and written
  // (the rest were never written), and row i's expert is that of routed row list[i].
  const std::uint32_t* counts = nullptr;  // [experts], or null: routed rows
  const std::uint32_t* list = nullptr;    // [rows] routed row of each position (with counts)
};
std::string moe_ffn_gated_kernel_name(const MoeGatedArgs& g);
void launch_moe_ffn_gated(const MoeGatedArgs& g, StreamHandle stream);

// out[t, j] = sum_{s < top_k} w[t, s] * (y[t, s, j] + bias[e, j]), in slot order, f32: y
// [m, top_k, hidden] of y_dtype (f32, or out's dtype), w [m, top_k] (f32, f16, bf16) and out
// [m, hidden] (f32, f16, bf16)
// contiguous; bias [experts, hidden] of bias_dtype or null, e = ids[t, s]. A slot whose id lies
// outside [0, experts) adds w * 0 and its y row is not read (the sorted pipeline never writes
// it). top_k 0: zeros.
struct MoeCombineArgs {
  DType w_dtype = DType::F32, out_dtype = DType::F32, y_dtype = DType::F32;
  const void* y = nullptr;
  const void* w = nullptr;
  void* out = nullptr;
  std::int64_t m = 0, top_k = 0, hidden = 0;
  const void* bias = nullptr;
  DType bias_dtype = DType::F32;
  const void* ids = nullptr;  // [m, top_k] of ids_dtype
  DType ids_dtype = DType::I32;
  std::int64_t experts = 0;
};
std::string moe_ffn_combine_kernel_name(const MoeCombineArgs& c);
void launch_moe_ffn_combine(const MoeCombineArgs& c, StreamHandle stream);

}  // namespace llmm::cuda_moe
