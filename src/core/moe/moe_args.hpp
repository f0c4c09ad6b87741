// Raw, already-validated arguments of one expert-ID matmul (matmul_id), as the CUDA launchers
// take them. No CUDA headers.
//
//   routed row r = t * top_k + s   (token t < m, slot s < top_k), e = ids[r] (u32, or i64 when
//                                    ids64: a value outside [0, n_experts) is out of range)
//   out[r, j] = sum_l in(t, s, l) * W(e, j, l)       for 0 <= e < n_experts
//   out[r, j] = 0                                     for e >= n_experts (no weight address formed)
//   W(e, j, l)   = w[e * expert_stride + j * k + l]   (each expert row-major [n, k], elements)
//   in(t, s, l)  = in[t * in_token_stride + s * in_slot_stride + l]
//                  (SharedPerToken: slot stride 0; Slotted: token stride top_k * k, slot stride k)
//   out(r, j)    = out[r * n + j]                      ([m, top_k, n] contiguous)
//
// Grouped route scratch (caller-owned, device memory): counts[e] = routed rows of expert e;
// rows[off(e) + i] = the i-th routed row r of expert e, in increasing r (token order), where
// off(e) = counts[0] + ... + counts[e - 1] (a counting sort: every in-range routed row once,
// whatever the ids repeat). The map kernel writes both (and zeroes the output rows of
// out-of-range ids); the grouped kernel reads them. row_capacity >= m * top_k.
#pragma once
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"
#include "llmm/moe_ffn.hpp"

namespace llmm::cuda_moe {

// The direct kernel's epilogues: matmul_id's plain rows, or moe_ffn's decode fusions (the same
// per-(row, column) dot products, f32 FMAs in the same order, then):
//   Activate  out [m * top_k, inter] of out_dtype, inter = n / 2 gated (else n):
//             out[r, f] = act(acc(r, gate row of f) + bias[e, row], acc(r, up row of f) + bias[e, row])
//             (without a gate act(acc(r, f) + bias[e, f])): the gated kernel folded into gate_up;
//   SlotSum   out [m, n] of out_dtype: out[t, j] = sum_{s < top_k} tw[t, s] * (acc(t * top_k + s, j)
//             + bias[e, j]), in slot order (an out-of-range id adds tw * 0): bit for bit the f32
//             rows of the plain kernel then moe_ffn's combine, folded into down.
enum class MoeDirectEpi : std::uint8_t { Plain, Activate, SlotSum };
struct MoeDirectFusion {
  MoeDirectEpi epi = MoeDirectEpi::Plain;
  MoeActivation activation = MoeActivation::Silu;  // Activate
  bool gated = true, interleaved = false;          // Activate: gate / up rows (MoeGateLayout)
  float alpha = 1.702f, limit = 7.0f;              // Activate, SwigluOai
  const void* bias = nullptr;                      // [n_experts, n] of bias_dtype, or null
  DType bias_dtype = DType::F32;
  const void* tw = nullptr;  // SlotSum: routing weights [m, top_k] of tw_dtype (f32, f16, bf16)
  DType tw_dtype = DType::F32;
};

struct MoeArgs {
  std::int64_t m = 0, n = 0, k = 0, top_k = 0, n_experts = 0;
  DType w_dtype = DType::F32;
  const void* w = nullptr;
  std::int64_t expert_stride = 0;  // elements, >= n * k
  // FP8 weights (w_dtype F8E4M3): W(e, j, l) = e4m3(code) * scale, the f32 scales of expert e at
  // w_scales + e * w_scale_expert_stride in fp8_scale_shape(w_scale_kind, n, k) row-major order
  // (0: tensor, 1: channel, 2: [128, 128] block, as llmm::Fp8ScaleKind). Unused otherwise.
  const float* w_scales = nullptr;
  int w_scale_kind = 2;
  std::int64_t w_scale_expert_stride = 0;
  DType in_dtype = DType::F32;
  const void* in = nullptr;
  std::int64_t in_token_stride = 0, in_slot_stride = 0;  // elements
  const void* ids = nullptr;                             // [m * top_k] u32 (or i32) words, or i64
  bool ids64 = false;
  DType out_dtype = DType::F32;
  void* out = nullptr;  // [m * top_k, n]
  bool exact = true;    // f32 input on tensor cores: keep f32 accuracy
  std::uint32_t* counts = nullptr;  // grouped: [n_experts]
  std::uint32_t* rows = nullptr;    // grouped: [row_capacity]
  std::int64_t row_capacity = 0;    // words at rows, >= m * top_k
  // Grouped route, optional: the map's per-chunk expert histograms (moe_map_grid), or null (one
  // sorting block then).
  std::uint32_t* block_counts = nullptr;
  std::int64_t block_count_words = 0;
  // Grouped route, optional: room for every routed input row in expert order (staged row i = the
  // input row of rows[i], k elements of in_dtype each), or null. The Hopper engine stages there.
  void* staged = nullptr;
  std::int64_t staged_bytes = 0;
  // Grouped route on the Hopper engine, moe_ffn's sorted pipeline (otherwise false):
  //   out_sorted  the engine writes the output of list position i (rows[i]) to out row i, not to
  //               its routed row: out holds sum(counts) rows in expert order, and the map leaves
  //               the rows of out-of-range ids alone (they have no position);
  //   presorted   counts and rows already hold this call's list (a previous call's map over the same
  //               ids) and `staged` already holds input row i at position i (that call's sorted
  //               output, activated): no map, no staging, the engine alone.
  bool out_sorted = false;
  bool presorted = false;
  // Grouped route, optional: one u32 word, zero between launches (moe_map zeroes it; the staged
  // engine leaves it zero), from which the staged Hopper engine hands out its tiles in order as
  // its CTAs free up, instead of a fixed share a CTA; null: the fixed share.
  std::uint32_t* tile_counter = nullptr;
  // Direct route: the epilogue (Plain for matmul_id).
  MoeDirectFusion fusion;
};

inline constexpr std::uint32_t kNoExpert = 0xffffffffu;

// The expert of routed row r on the host (CPU backend), or kNoExpert when the id is out of range.
inline std::uint32_t host_expert_of(const MoeArgs& a, std::int64_t r) {
  const std::uint64_t v = a.ids64 ? static_cast<std::uint64_t>(static_cast<const std::int64_t*>(a.ids)[r])
                                  : static_cast<const std::uint32_t*>(a.ids)[r];
  return v < static_cast<std::uint64_t>(a.n_experts) ? static_cast<std::uint32_t>(v) : kNoExpert;
}

}  // namespace llmm::cuda_moe
