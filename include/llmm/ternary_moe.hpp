// Ternary experts: matmul_id over a stack of TQ2_0_g128 experts.
//   out[t, s, :] = W[ids[t, s]] . in(t, s)    W: n_experts ternary [n, k] weights
// The stack is uploaded once (TernaryWeightCache::get_or_upload_experts); input, ids and output
// follow matmul_id's contract (llmm/moe.hpp): input [m, k] shared by a token's slots, or a row
// per (token, slot) ([m * top_k, k] or [m, top_k, k]); ids [m, top_k] u32 / i32 / i64,
// contiguous; out [m, top_k, n] contiguous, f32 or the input's dtype. Ids outside
// [0, n_experts) give zero rows. Every refusal comes before anything is launched or written.
#pragma once
#include "llmm/moe.hpp"
#include "llmm/ternary.hpp"

namespace llmm {

enum class Tq2MoeRoute {
  Auto,
  Cpu,          // float64 reference (CPU contexts)
  Naive,        // CUDA reference kernel: one thread per output, f32 accumulation; any dtype and ids
  GroupedSm90,  // sm_90: moe_map (stable counting sort by expert), the routed rows staged in expert
                // order, then the Hopper tiled engine with the TQ2 decoder over each expert's
                // rows. Needs an f16 input (16-byte aligned, strides multiples of 8) or a bf16
                // one (any strides: each routed row staged as f16 scaled by its own power of
                // two, undone in the epilogue; the scales in the context's grow-only ternary
                // workspace), and a MatmulIdScratch with staged_row_bytes >= 2 k. f32 inputs
                // take Naive (f16 would round them).
  StreamSm90,   // sm_90, decode: the streaming engine (tq2_stream_v5's) over routed rows; each row
                // streams its expert's codes once and multiplies them by its activation, staged
                // as exact int8 digits (f32-class: f32, f16 and bf16 inputs alike). Any input
                // strides, no scratch (the context's grow-only ternary workspace), at most 65536
                // routed rows; batch-invariant (a row's result does not depend on m).
};
// "auto", "cpu", "tq2_moe_naive", "tq2_moe_grouped_sm90", "tq2_moe_stream_sm90"
const char* tq2_moe_route_name(Tq2MoeRoute r) noexcept;

struct Tq2MoeOptions {
  Tq2MoeRoute force_route = Tq2MoeRoute::Auto;
};

// Auto: the CPU reference on CPU contexts; on sm_90 StreamSm90 for m <= 64 tokens where it takes
// the call; else GroupedSm90 where it takes the call (a bf16
// input, or an f16 one readable by TMA; scratch with room to stage every routed row as f16, at
// most 1024 experts,
// n_experts * n (n rounded up to 8) <= 2^30 - 128); else Naive. Pure; `input_ok` says the input
// is one the route can read (above), `staging_ok` that the scratch can stage every routed row.
Tq2MoeRoute plan_matmul_id_tq2(const MatmulIdParams& p, const ArchInfo& arch, bool input_ok, bool staging_ok,
                               Tq2MoeRoute force = Tq2MoeRoute::Auto);

// Enqueues on ctx's stream (never synchronises). `experts` must be a handle on ctx's device.
// `scratch` (GroupedSm90's map and staging room) may be null: where GroupedSm90 would take the
// call with staging room, the context's own scratch is used (per stream, grow-only, sized by the
// call: run one call of a size before capturing it in a CUDA graph); a caller's scratch is used
// as given (one without staging room sends Auto to Naive).
Receipt matmul_id_tq2(Context& ctx, const WeightHandle& experts, const View& input, const View& ids, const View& out,
                      MatmulIdScratch* scratch, MatmulIdInputLayout layout = MatmulIdInputLayout::SharedPerToken,
                      const Tq2MoeOptions& opts = {});

}  // namespace llmm
