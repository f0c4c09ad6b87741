// Host plan of tq2_moe_stream_sm90, the decode route of ternary experts (matmul_id_tq2 at small m)
// on the sm_90 streaming engine (tq2_stream_v5's skeleton with a routed-row map). Pure functions,
// no CUDA headers: the router, the CPU tests and the launcher compute the same configuration.
//
// Work: items (routed row r, 128-row super-band s of expert ids[r], part p of K), r-major. Each
// item streams that expert's codes and transposed scales (the stack is one [n_experts * n] row
// matrix) and multiplies them by one activation row: the token's (input shared by a token's
// slots) or the (token, slot)'s. A routed row re-reads its expert (the direct route's rule;
// rows that share an expert hit L2 when they run together). The activation becomes v5's
// int8-digit image, one self-contained m = 1 image per activation row: converted by each block
// for the rows its items use (K whole), or staged once by a kernel before and loaded by each
// block (K in parts: that kernel also zeroes the parts' counters). Parts depend on n, k and top_k alone: a row's result does
// not depend on m or on the other rows (batch-invariant within the route).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/ternary/tq2_kernels.hpp"
#include "llmm/moe.hpp"

namespace llmm::cuda_ternary {

// Auto takes the route for m <= this many tokens. Measured against the grouped route on Qwen3-30B
// shapes (session 10, run 3): 1.25-1.46x at m = 64, 0.66-0.76x at m = 128 (a routed row re-reads
// its expert; docs/performance.md, "Ternary experts").
inline constexpr std::int64_t kTq2MoeStreamAutoMaxTokens = 64;

// The super-bands x parts one token's rows aim for (tq2_stream_v5_parts with super-bands =
// ceil(n / 128) x top_k). Lower than v5's 212: a decode call's whole weight set is in flight at
// once on either cut, so parts only add the partials' fence, atomic and reduction. Session 10
// run 1 at v5's target cut Qwen3-30B gate_up (96 super-bands) into 4 one-stage parts: m = 1 10.1 us,
// m = 16 86 us (1.2 TB/s).
inline constexpr std::int64_t kTq2MoeStreamTargetItems = 64;

struct Tq2MoeStreamConfig {
  int stages = 0, blocks_per_sm = 1, grid = 0, smem_bytes = 0;
  Tq2StreamV5Parts parts;
  std::int64_t routed = 0;      // m * top_k
  std::int64_t bands = 0;       // ceil(n / 128) super-bands per routed row
  std::int64_t items = 0;       // routed x bands x parts
  std::int64_t image_rows = 0;  // activation rows: m (shared by a token's slots) or m * top_k
  int col_stride = 0;           // bytes per record column (v4/v5's)
  int row_bytes = 0;            // one activation row's image: coefficients [groups][8] float2, 5 record columns
  int rows_cap = 0;             // the most image rows one block's items use
  int image_smem = 0;           // shared-memory offset of the block's image rows (from the 1024-aligned base)
  bool overlap = false;         // grid <= SMs: the kernel variant that overlaps a stage's groups (more registers)
  // No staging kernel: each block's consumers convert the activation rows it uses into shared
  // memory themselves (one launch instead of two, no workspace). Only with K whole (one part:
  // no counters to zero) and where it measured faster (the rule in tq2_moe_stream_config).
  // Else the staging kernel writes the image to the workspace (and zeroes the part counters).
  bool stage_in_block = false;
  std::size_t counters_off = 0, partials_off = 0, workspace_bytes = 0;  // all 0 with stage_in_block
  friend bool operator==(const Tq2MoeStreamConfig&, const Tq2MoeStreamConfig&) = default;
};

// The image rows block `block` of `grid` loads: [first, first + count).
struct Tq2MoeStreamRows {
  std::int64_t first = 0, count = 0;
};
Tq2MoeStreamRows tq2_moe_stream_block_rows(const Tq2MoeStreamConfig& c, std::int64_t top_k, bool slotted, int block) noexcept;

// nullopt when the route cannot take the sizes (k not a multiple of 128, the image rows a block
// needs beyond shared memory, more rows than the tensor maps address). slotted: a row per
// (token, slot). sm_count 0 means 132.
std::optional<Tq2MoeStreamConfig> tq2_moe_stream_config(std::int64_t m, std::int64_t top_k, std::int64_t n, std::int64_t k,
                                                        std::int64_t n_experts, bool slotted, int sm_count = 0) noexcept;

// "" when the route can run the call on `arch`, else why not (sm_90a only; f32/f16/bf16 input,
// slotted when the input's slot stride is not 0 (matmul_id_input_strides),
// f32 or input-dtype output; sizes as above).
std::string tq2_moe_stream_refusal(const MatmulIdParams& p, const ArchInfo& arch);

std::string tq2_moe_stream_stage_kernel_name(DType in);
// tq2_moe_stream_sm90_<in>_<out>_i8x4_s<stages>_b<blocks_per_sm>_p<parts>[_ilp][_inblock].
std::string tq2_moe_stream_kernel_name(const Tq2MoeStreamConfig& c, DType in, DType out);

}  // namespace llmm::cuda_ternary
