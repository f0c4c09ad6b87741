// Host-side facts about the expert-ID (MoE) CUDA kernels: which dtype combinations they take,
// the configuration a launch uses and the kernel name it reports. Pure functions of their
// arguments (pointer values included), no CUDA headers: the router and CPU-only tests use them,
// and the launchers in src/cuda/moe call the same functions, so a name or a configuration
// computed here is exactly what a launch uses.
//
// Kernels (see src/cuda/moe/launch.hpp):
//   moe_direct   one streaming kernel over every routed row (decode, MayRepeat routing)
//   moe_map      counts[e] / rows[e][i] of the grouped route, zero rows of bad ids: moe_map_sort,
//                after moe_map_count (per-block expert histograms) when the rows span blocks
//   moe_grouped  tiled tensor-core GEMM over (expert, tile of its routed rows, tile of n)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/moe/moe_args.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_moe {

// Dtype contract of every MoE kernel: weights f32/f16/bf16, input f32 or the weight dtype,
// output f32 or the input dtype.
bool moe_dtypes_supported(DType w, DType in, DType out) noexcept;
bool moe_dtypes_supported(const MoeArgs& args) noexcept;

// ---------------------------------------------------------------------------------------------
// direct: out[r, j] = sum_l in(t, s, l) * W(ids[r], j, l), one warp per two output columns j
// of one routed row r, f32 FMA accumulation (exact in every mode), warp-shuffle reduction.

inline constexpr int kMoeDirectThreads = 128;    // 4 warps
inline constexpr int kMoeDirectRowsPerWarp = 2;  // output columns j a warp reduces at once
inline constexpr int kMoeDirectColsPerBlock = (kMoeDirectThreads / 32) * kMoeDirectRowsPerWarp;

// 16-byte loads of weight rows and input rows: weight base, k * w_size and expert_stride *
// w_size 16-byte aligned, and input base, token and slot strides (bytes) 16-byte aligned.
// Else the kernel reads element by element.
bool moe_direct_vec16(const MoeArgs& args) noexcept;

// Blocks of the direct kernel's work: routed rows x ceil(n / kMoeDirectColsPerBlock) (Plain;
// Activate gated: a warp per output feature, its gate and up rows: routed rows x ceil(inter / 4));
// SlotSum: tokens x ceil(n / 2), a block per output column pair of a token, its warps over the
// slots.
std::int64_t moe_direct_tiles(const MoeArgs& args) noexcept;

// The fused epilogues take 16-byte rows (moe_direct_vec16) and, SlotSum, top_k <= this.
inline constexpr std::int64_t kMoeDirectSlotSumMaxTopK = 64;
// SlotSum's column pairs a block: a warp a (pair, slot) where top_k < 4 (no warp idle at top_k 1,
// 2, 4), else one pair whose slots the 4 warps share.
constexpr std::int64_t moe_direct_slotsum_pairs(std::int64_t top_k) noexcept {
  return top_k >= 4 || top_k <= 0 ? 1 : 4 / top_k;
}
bool moe_direct_fusion_supported(const MoeArgs& args) noexcept;

// moe_direct_<w>_<in>_<out>_<v16|scalar>, e.g. moe_direct_bf16_f32_f32_v16; fused epilogues add
// _act_<activation>[_no_mul] or _slotsum.
std::string moe_direct_kernel_name(const MoeArgs& args);

// ---------------------------------------------------------------------------------------------
// map: a stable counting sort of the routed rows by expert, so each expert's rows come out in
// increasing routed-row order without order-dependent atomics, for any ids. The routed rows are
// cut into chunks (moe_map_grid), one sorting block (kMoeMapThreads threads) a chunk. Inside a block: per-warp counters over contiguous segments, a column prefix and a block
// scan, then a scatter ranked with __match_any_sync. With more than one chunk, moe_map_count first
// writes each chunk's expert histogram (block_counts[chunk][e]); each sorting block then adds the
// rows of the experts before e and of expert e in the chunks before its own. Extra blocks of
// moe_map_sort write the zero rows of out-of-range ids.

inline constexpr int kMoeMapThreads = 1024;
inline constexpr int kMoeMapMaxExperts = 1024;  // 32 warps x 1024 counters: 128 KiB of shared memory
inline constexpr int kMoeMapMaxZeroBlocks = 256;
inline constexpr int kMoeMapIdsPerBlock = 1024;       // 32 warps x 32 ids: one ranking step a warp
inline constexpr int kMoeMapMaxSortBlocks = 256;      // chunks grow past 1024 rows from 256 x 1024 routed rows
inline constexpr int kMoeMapBlockCountWords = 32768;  // block_counts room the scratch holds (128 KiB)

// The most experts the map (and grouped) kernels support: 1024.
int moe_map_max_experts() noexcept;

// Blocks that zero the output rows of out-of-range ids (one warp per routed row, grid-stride):
// min(ceil(m * top_k / 32), kMoeMapMaxZeroBlocks); 0 when m * top_k == 0, n == 0 or out_sorted.
std::int64_t moe_map_zero_blocks(const MoeArgs& args) noexcept;

// The sorting grid: `blocks` chunks of `chunk` routed rows (the last may be shorter, none empty).
// One block while m * top_k <= kMoeMapIdsPerBlock or there is no block_counts room (null, or less
// than 2 x n_experts words); else b = min(ceil(routed / kMoeMapIdsPerBlock), kMoeMapMaxSortBlocks,
// block_count_words / n_experts) and chunk = ceil(routed / b) (<= 1024 rows unless b was capped).
// {0, 0} when m * top_k == 0.
struct MoeMapGrid {
  std::int64_t blocks = 0, chunk = 0;
};
MoeMapGrid moe_map_grid(const MoeArgs& args) noexcept;

// The map's kernels in launch order: {"moe_map_count", "moe_map_sort"} when moe_map_grid gives
// more than one block, else {"moe_map_sort"}.
std::vector<std::string> moe_map_kernel_names(const MoeArgs& args);

// moe_stage_rows_<in>, e.g. moe_stage_rows_bf16 (the optional copy of the routed rows into expert order)
std::string moe_stage_rows_kernel_name(const MoeArgs& args);

// ---------------------------------------------------------------------------------------------
// grouped: one 256-thread block computes a kMoeGroupedBM (routed rows of one expert) x
// kMoeGroupedBN (output columns) tile; K in slices of bk through two shared-memory stages,
// staged through registers (dtype conversions happen there). Each block finds its (expert,
// row tile) from counts by a block-wide scan, so n_experts <= moe_map_max_experts() here too.

inline constexpr int kMoeGroupedThreads = 256;
inline constexpr int kMoeGroupedBM = 64;
inline constexpr int kMoeGroupedBN = 128;

enum class MoeGroupedMath {
  F16,     // mma m16n8k16 f16 (f16 weights, f16 input)
  BF16,    // mma m16n8k16 bf16 (bf16 weights, bf16 input; or f32 input rounded once, !exact)
  TF32,    // mma m16n8k8 tf32, one pass (16-bit weights are exact in tf32; f32 input rounded)
  TF32x2,  // tf32 with the f32 input split hi + lo (16-bit weights, f32 input, exact)
  TF32x3,  // 3xTF32: f32 weights and f32 input split hi + lo (exact)
};

struct MoeGroupedConfig {
  MoeGroupedMath math = MoeGroupedMath::TF32;
  int bm = kMoeGroupedBM, bn = kMoeGroupedBN;
  int bk = 0;           // 32 for the 16-bit maths, 16 for the tf32 maths
  bool in_vec = false;  // input rows by 16-byte loads (base, token/slot strides 16-byte aligned)
  bool w_vec = false;   // weight rows by 16-byte loads (base, k, expert stride 16-byte aligned)
  friend bool operator==(const MoeGroupedConfig&, const MoeGroupedConfig&) = default;
};

const char* moe_grouped_math_name(MoeGroupedMath math) noexcept;  // f16 bf16 tf32 2xtf32 3xtf32

// Configuration for supported dtypes (moe_dtypes_supported); math:
//   w == in (16-bit) -> F16 / BF16;  bf16 w, f32 in: exact ? TF32x2 : BF16;
//   f16 w, f32 in: exact ? TF32x2 : TF32;  f32 w: exact ? TF32x3 : TF32.
MoeGroupedConfig moe_grouped_config(const MoeArgs& args) noexcept;

// Grid of the grouped kernel, from m, top_k and n_experts only (no host sync on counts):
// x = row-tile slots, an upper bound of sum_e ceil(count_e / bm) over all experts:
//     ceil(m * top_k / bm) + min(n_experts, m * top_k); blocks past the real tiles exit.
// y = ceil(n / bn) column tiles.
std::int64_t moe_grouped_row_slots(const MoeArgs& args) noexcept;
std::int64_t moe_grouped_col_tiles(const MoeArgs& args) noexcept;

// moe_grouped_<w>_<in>_<out>_<math>_<bm>x<bn>x<bk>, e.g. moe_grouped_bf16_bf16_bf16_bf16_64x128x32
std::string moe_grouped_kernel_name(const MoeArgs& args);

}  // namespace llmm::cuda_moe
