// Host-side facts about the ternary (TQ2_0_g128) CUDA kernels: which calls each kernel takes,
// the configuration a launch uses, and the kernel name it reports. Pure functions of their
// arguments (pointer values included), no CUDA headers: routers and CPU-only tests use them, and
// the launchers in src/cuda/ternary call the same functions, so a name or configuration
// computed here is exactly what a launch uses.
//
// Kernels (all compute out[i, j] = sum_l in[i, l] * W[j, l], see cuda/ternary/tq2_args.hpp):
//   tq2_naive  : reference, one thread per output, f32 FMA in l order.
//   tq2_stream : decode (m <= 16), memory-bound, tensor cores with the weight as the A operand.
//   tq2_stream_v4: decode (m <= 8) on the sm_90 streaming engine (copy-engine ring, persistent).
//   tq2_tiled  : prefill (any m), 128x128 block tiles, tensor cores with the weight as B.
// Both tensor-core kernels decode the 2-bit codes to the exact 16-bit values -1/0/+1 and apply
// the f16 block scale in f32 on a per-128-block partial accumulator, so f16 and bf16 weights
// are equally exact and the scale never meets a 16-bit rounding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/ternary/tq2_args.hpp"

namespace llmm::cuda_ternary {

inline constexpr std::int64_t kTq2Group = 128;  // codes per f16 scale

// The contract every ternary kernel relies on: m, n >= 1; k >= 128 and k % 128 == 0; input
// f32/f16/bf16; output f32 or the input's dtype; in_ld >= k, out_ld >= n; non-null pointers.
bool tq2_args_ok(const Tq2Args& args) noexcept;

// 16-bit parts an activation is split into on tensor cores: f32 input: 3 in the stream kernel's
// Exact mode (bf16 hi + mid + lo, an exact f32 split), 2 in the tiled kernel's Exact mode
// (bf16 hi + lo, error <= 2^-17 |a| per product), 1 in Fast mode (one bf16 rounding); f16/bf16
// input: 1 (exact; `exact` is irrelevant).
int tq2_stream_splits(const Tq2Args& args) noexcept;
int tq2_tiled_splits(const Tq2Args& args) noexcept;

// Input rows can be read with 16-byte loads: `in` 16-byte aligned and in_ld * elem % 16 == 0.
// Otherwise the kernels read the input element by element (same results).
bool tq2_input_vec16(const Tq2Args& args) noexcept;
// Codes can be read with 16-byte loads: `codes` 16-byte aligned (the row stride k/4 is a
// multiple of 32 bytes). Otherwise byte loads (same results).
bool tq2_codes_vec16(const Tq2Args& args) noexcept;

// ---------------------------------------------------------------------------------------------
// tq2_naive

std::string tq2_naive_kernel_name(const Tq2Args& args);  // tq2_naive_<in>_<out>

// ---------------------------------------------------------------------------------------------
// tq2_stream: one block owns 16 weight rows (one m16 mma tile); its warps split K in steps of
// 256 codes (two scale blocks). Activation columns (m rows x splits) are the mma's n8 tiles.

inline constexpr int kTq2StreamMaxM = 16;
inline constexpr int kTq2StreamRows = 16;     // weight rows per block
inline constexpr int kTq2StreamMaxWarps = 8;  // warps splitting K

struct Tq2StreamConfig {
  int splits = 1;   // 16-bit parts per activation (1 or 3)
  int n_tiles = 1;  // n8 tiles of activation columns: 1, 2 or 6 (>= ceil(m * splits / 8))
  int warps = 4;    // warps per block splitting K: 4, or 8 when there are few row tiles
  friend bool operator==(const Tq2StreamConfig&, const Tq2StreamConfig&) = default;
};

// tq2_args_ok and m <= 16.
bool tq2_stream_supports(const Tq2Args& args) noexcept;
// nullopt unless tq2_stream_supports. sm_count 0 = unknown (132).
std::optional<Tq2StreamConfig> tq2_stream_config(const Tq2Args& args, int sm_count = 0) noexcept;
// tq2_stream_<in>_<out>_<math>_n<8*n_tiles>_w<warps>, math f16 | bf16 | bf16x1 | bf16x3
// (empty string when unsupported).
std::string tq2_stream_kernel_name(const Tq2Args& args, int sm_count = 0);

// ---------------------------------------------------------------------------------------------
// tq2_stream_v2: decode (m <= 16), v1's roles with the activation work taken out of the loop.
// A block of 8 warps owns 16 * row_tiles weight rows (row_tiles x k_warps warps, k_warps
// splitting K). The activation, scaled per 128-group by a power of two and split into f16
// parts in mma B-fragment order, sits in shared memory per K chunk: converted by the block, or
// (m >= 3, `staged`) copied from what a first kernel converted once for all blocks. Codes reach
// shared memory through a per-warp cp.async ring. Columns = m x splits: f32 Exact 3 (m <= 2) or
// 2, Fast 1; 16-bit input 1.

inline constexpr int kTq2V2Threads = 256;      // 8 warps
inline constexpr int kTq2StreamStages = 8;     // per-warp cp.async ring depth (groups of 512 B)
inline constexpr int kTq2V2SmemBudget = 100 * 1024;  // two blocks per SM

struct Tq2StreamV2Config {
  int splits = 1;        // f16 parts per activation element: 1, 2 or 3
  int n_tiles = 1;       // n8 tiles of activation columns: ceil(m * splits / 8), 1..4
  int row_tiles = 1;     // 16-row tiles per block: 8, 4, 2 or 1 (k_warps = 8 / row_tiles)
  int chunk_groups = 1;  // 128-code groups of K per shared-memory chunk
  int smem_bytes = 0;    // dynamic shared memory of one block
  bool staged = false;   // v2, m >= 3: a first kernel converts the activation once for all blocks
  friend bool operator==(const Tq2StreamV2Config&, const Tq2StreamV2Config&) = default;
};

// tq2_args_ok, m <= 16 and tq2_codes_vec16.
bool tq2_stream_v2_supports(const Tq2Args& args) noexcept;
int tq2_stream_v2_splits(const Tq2Args& args) noexcept;
int tq2_stream_v2_splits(std::int64_t m, DType in_dtype, bool exact) noexcept;
// nullopt unless supported. sm_count 0 = unknown (132).
std::optional<Tq2StreamV2Config> tq2_stream_v2_config(const Tq2Args& args, int sm_count = 0) noexcept;
// tq2_stream_v2_<in>_<out>_f16x<splits>_n<8*n_tiles>_r<16*row_tiles>[_staged] (empty when
// unsupported).
std::string tq2_stream_v2_kernel_name(const Tq2Args& args, int sm_count = 0);
// Staged configurations first run tq2_stage_v2_<in>_f16x<splits>_n<8*n_tiles> into a device
// workspace of this many bytes (records [m * splits][k / 128][256 B], then [k / 128][8 * n_tiles]
// float2); 0 when the configuration is not staged. Without staging every block converts the
// whole activation itself, which at m = 16 costs as much as the weight stream.
std::size_t tq2_stream_v2_stage_bytes(const Tq2Args& args) noexcept;
// The same from sizes alone (m in 3..16 stages; k % 128 == 0 assumed).
std::size_t tq2_stream_v2_stage_bytes(std::int64_t m, std::int64_t k, DType in_dtype, bool exact) noexcept;
std::string tq2_stream_v2_stage_kernel_name(const Tq2Args& args);

// ---------------------------------------------------------------------------------------------
// tq2_stream_v3: decode for m <= 2 on int8 tensor cores (mma m16n8k32 u8 x s8). Same skeleton
// as v2; the activation of each 128-group is scaled by a power of two to a 23-bit integer and
// split into three signed int8 digits (three B columns per token, exact to 2^-23 of the
// group's max |x|); codes enter as u8 0/1/2 with one AND per 4 codes, and the epilogue
// subtracts the group's digit sums (code c means c - 1). Config fields as v2 (splits = 3,
// n_tiles = 1); records 128 bytes a group.

inline constexpr int kTq2StreamV3MaxM = 2;

// tq2_args_ok, m <= 2 and tq2_codes_vec16.
bool tq2_stream_v3_supports(const Tq2Args& args) noexcept;
std::optional<Tq2StreamV2Config> tq2_stream_v3_config(const Tq2Args& args, int sm_count = 0) noexcept;
// tq2_stream_v3_<in>_<out>_i8x3_r<16*row_tiles> (empty when unsupported).
std::string tq2_stream_v3_kernel_name(const Tq2Args& args, int sm_count = 0);

// ---------------------------------------------------------------------------------------------
// tq2_stream_v4: the sm_90 streaming engine (tq2_stream_v4_sm90a.cu), m <= 8, with the masked
// int8-digit decoder (EngineI8Masked: four digit columns a token, n_tiles = ceil(m / 2) n8 tiles). Persistent: one block per SM (two where shared memory allows), each owning a
// contiguous range of 16-row bands. A producer lane streams every band's codes through a ring of
// `stages` shared-memory stages, four tensor-map copies per stage (16 rows x 128 bytes each,
// 128-byte swizzled: 16 rows x 16 groups = 8 KB a stage), and each band's scales (contiguous in
// the SoA layout: 16 rows x k/128) with one bulk copy into a ring of four band slots; copies
// complete on mbarriers. 8 consumer warps take two groups of each stage (warp w the groups w and
// w + 8), never touch global memory in the loop, and meet once per band for a fixed-order
// reduction. The activation is converted once for all blocks by a first kernel (tq2_stage_v4)
// into a workspace that holds the exact shared-memory image of the records and coefficients;
// each block brings it in with one bulk copy and keeps it for the kernel's life. Both kernels use
// programmatic dependent launch: the weight stream starts before the kernels ahead of it on the
// stream have finished.

inline constexpr int kTq2V4MaxM = 8;
inline constexpr int kTq2V4Consumers = 8;                            // consumer warps
inline constexpr int kTq2V4Threads = 32 * (kTq2V4Consumers + 1);     // + the producer warp
inline constexpr int kTq2V4StageGroups = 2 * kTq2V4Consumers;        // 128-groups per stage
inline constexpr int kTq2V4StageBytes = kTq2V4StageGroups * 16 * 32;  // 8 KB of codes
inline constexpr int kTq2V4MaxStages = 6;
inline constexpr int kTq2V4ScaleSlots = 4;                            // bands of scales in flight
inline constexpr std::int64_t kTq2V4SmemOptin = 232448;               // sm_90 per-block limit
// The last band's scale copy rounds its bytes up to 16: up to 14 bytes past the last scale
// (TernaryWeightCache allocates this tail).
inline constexpr std::size_t kTq2ScalesTailBytes = 32;

struct Tq2StreamV4Config {
  int n_tiles = 1;        // n8 tiles of digit columns: ceil(4 m / 8)
  int stages = 0;         // ring depth
  int blocks_per_sm = 1;  // 1 or 2
  int grid = 0;           // persistent blocks: min(bands, blocks_per_sm * SMs)
  int smem_bytes = 0;     // dynamic shared memory of one block
  friend bool operator==(const Tq2StreamV4Config&, const Tq2StreamV4Config&) = default;
};

// Shared-memory layout of one block (offsets in bytes; the kernel derives the same).
struct Tq2StreamV4Smem {
  int bars = 0, ring = 0, scales = 0, red = 0, coef = 0, xs = 0, total = 0;
  int col_stride = 0;  // bytes per activation column (records of all groups + padding)
};
Tq2StreamV4Smem tq2_stream_v4_smem(std::int64_t m, std::int64_t k, int stages) noexcept;

// tq2_args_ok, m <= 8, n < 2^31, codes and scales 16-byte aligned (vec16), and the whole K's
// activation records fit next to a ring of at least 3 stages.
bool tq2_stream_v4_supports(const Tq2Args& args) noexcept;
// nullopt unless supported. sm_count 0 = unknown (132).
std::optional<Tq2StreamV4Config> tq2_stream_v4_config(const Tq2Args& args, int sm_count = 0) noexcept;
// tq2_stream_v4_<in>_<out>_i8x4_n<8 n_tiles>_s<stages>_b<blocks_per_sm> (empty when unsupported).
inline constexpr int kTq2V4MinStages = 3;
// The staged activation image (coefficients [k/128][8] float2, then 4m + 1 columns of records,
// the last one zero): bytes of the workspace tq2_stage_v4 writes; 0 when v4 cannot take (m, k).
std::size_t tq2_stream_v4_stage_bytes(std::int64_t m, std::int64_t k) noexcept;
// tq2_stage_v4_<in>_i8x4 (empty when unsupported).
std::string tq2_stream_v4_stage_kernel_name(const Tq2Args& args);
std::string tq2_stream_v4_kernel_name(const Tq2Args& args, int sm_count = 0);

// ---------------------------------------------------------------------------------------------
// tq2_tiled: 128 (m) x 128 (n) output tile per 256-thread block, K slices of 64 through a
// 3-stage cp.async ring; 8 warps of 64 x 32.

inline constexpr int kTq2TiledBM = 128, kTq2TiledBN = 128, kTq2TiledBK = 64;
inline constexpr int kTq2TiledThreads = 256, kTq2TiledStages = 3;

// Dynamic shared memory of one block, by input dtype and splits (bytes).
int tq2_tiled_smem_bytes(DType in_dtype, int splits) noexcept;

// tq2_args_ok (any m).
bool tq2_tiled_supports(const Tq2Args& args) noexcept;
// tq2_tiled_<in>_<out>_<math>, math f16 | bf16 | bf16x1 | bf16x2 (empty when unsupported).
std::string tq2_tiled_kernel_name(const Tq2Args& args);

}  // namespace llmm::cuda_ternary
