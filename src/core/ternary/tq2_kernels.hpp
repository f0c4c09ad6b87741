// Host-side facts about the ternary (TQ2_0_g128) CUDA kernels: which calls each kernel takes,
// the configuration a launch uses, and the kernel name it reports. Pure functions of their
// arguments (pointer values included), no CUDA headers: routers and CPU-only tests use them, and
// the launchers in src/cuda/ternary call the same functions, so a name or configuration
// computed here is exactly what a launch uses.
//
// Kernels (all compute out[i, j] = sum_l in[i, l] * W[j, l], see core/ternary/tq2_args.hpp):
//   tq2_naive  : reference, one thread per output, f32 FMA in l order.
//   tq2_stream_v2..v5: decode (m <= 16), memory-bound, tensor cores with the weight as the A operand
//              (v4 and v5 on the sm_90 streaming engine: copy-engine ring, persistent).
//   tq2_tiled  : prefill (any m), 128x128 block tiles, tensor cores with the weight as B.
// The f16 tensor-core kernels decode the 2-bit codes to the exact 16-bit values -1/0/+1 and apply
// the f16 block scale in f32 on a per-128-block partial accumulator, so f16 and bf16 weights
// are equally exact and the scale never meets a 16-bit rounding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/ternary/tq2_args.hpp"

namespace llmm::cuda_ternary {

inline constexpr std::int64_t kTq2Group = 128;  // codes per f16 scale

// The contract every ternary kernel relies on: m, n >= 1; k >= 128 and k % 128 == 0; input
// f32/f16/bf16; output f32 or the input's dtype; in_ld >= k, out_ld >= n; non-null pointers.
bool tq2_args_ok(const Tq2Args& args) noexcept;

// 16-bit parts an activation is split into on the tiled kernel's tensor cores: f32 input: 2 in
// Exact mode (bf16 hi + lo, error <= 2^-17 |a| per product), 1 in Fast mode (one bf16 rounding);
// f16/bf16 input: 1 (exact; `exact` is irrelevant).
int tq2_tiled_splits(const Tq2Args& args) noexcept;

// Input rows can be read with 16-byte loads: `in` 16-byte aligned and in_ld * elem % 16 == 0.
// Otherwise the kernels read the input element by element (same results).
bool tq2_input_vec16(const Tq2Args& args) noexcept;
// Codes can be read with 16-byte loads: `codes` 16-byte aligned (the row stride k/4 is a
// multiple of 32 bytes). Otherwise byte loads (same results).
bool tq2_codes_vec16(const Tq2Args& args) noexcept;

// ---------------------------------------------------------------------------------------------
// tq2_stream_v2: decode (m <= 16), the weight as the A operand of f16 mma tiles and the
// activation columns as B, with the activation work taken out of the loop (v1, tq2_stream,
// converted it for every weight word; retired in issue 47).
// A block of 8 warps owns 16 * row_tiles weight rows (row_tiles x k_warps warps, k_warps
// splitting K). The activation, scaled per 128-group by a power of two and split into f16
// parts in mma B-fragment order, sits in shared memory per K chunk: converted by the block, or
// (m >= 3, `staged`) copied from what a first kernel converted once for all blocks. Codes reach
// shared memory through a per-warp cp.async ring. Columns = m x splits: f32 Exact 3 (m <= 2) or
// 2, Fast 1; 16-bit input 1.

inline constexpr int kTq2StreamMaxM = 16;      // the m16n8 streaming kernels' largest m
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

// The activation image of the sm_90 streaming engine (v4, v5): staged once for all blocks by a
// first kernel, or converted by each block's consumer warps (Tq2StreamImage::InBlock) while the
// producer streams the first stages: one launch instead of two and no workspace, paid for by
// every block converting the same rows (from L2). Auto always stages: measured on the H200
// (2026-12-01, session 14 run 1) in-block lost everywhere, 1.08-1.59x slower (dit_proj m1 11.38 vs
// 10.49 us; BitNet-2B qkv m1 6.31 us against 4.28 us at m2 staged), see docs/performance.md. InBlock
// stays as a forced option for callers without workspace. In-block kernels are built for m <=
// kTq2StreamInBlockMaxM only.
inline constexpr std::int64_t kTq2StreamInBlockMaxM = 4;
bool tq2_stream_in_block(std::int64_t m, int parts, Tq2StreamImage image) noexcept;
// Why a forced image cannot run on v4 / v5 (InBlock with m > 4, or with K in parts on v5), or "".
std::string tq2_stream_image_refusal(const Tq2Args& args, bool v5);

// v4 holds two blocks per SM with the full ring when that fits in half an SM's shared memory
// (m x k small enough), else one block with the deepest ring that fits.
bool tq2_stream_v4_two_blocks(std::int64_t m, std::int64_t k) noexcept;

struct Tq2StreamV4Config {
  int n_tiles = 1;        // n8 tiles of digit columns: ceil(4 m / 8)
  int stages = 0;         // ring depth
  int blocks_per_sm = 1;  // 1 or 2
  int grid = 0;           // persistent blocks: min(bands, blocks_per_sm * SMs)
  int smem_bytes = 0;     // dynamic shared memory of one block
  bool stage_in_block = false;  // the blocks convert the image (no staging kernel, no workspace)
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
// tq2_stream_v4_<in>_<out>_i8x4_n<8 n_tiles>_s<stages>_b<blocks_per_sm>[_inblock] (empty when unsupported).
inline constexpr int kTq2V4MinStages = 3;
// The staged activation image (coefficients [k/128][8] float2, then 4m + 1 columns of records,
// the last one zero): bytes of the workspace tq2_stage_v4 writes; 0 when v4 cannot take (m, k).
std::size_t tq2_stream_v4_stage_bytes(std::int64_t m, std::int64_t k) noexcept;
// tq2_stage_v4_<in>_i8x4 (empty when unsupported or when the blocks convert the image).
std::string tq2_stream_v4_stage_kernel_name(const Tq2Args& args);
std::string tq2_stream_v4_kernel_name(const Tq2Args& args, int sm_count = 0);

// ---------------------------------------------------------------------------------------------
// tq2_stream_v5: the sm_90 streaming engine with warp-owned row bands (tq2_stream_v5_sm90a.cu),
// m <= 8, the same decoder and staged activation image as v4. What changed (ncu of v4 on
// 27648x3072, session 9: 110 warp instructions per 512-byte group, of which ~35 decode and mma;
// the rest per-stage and per-band overhead, a band being only 24 groups there, split over 8 warps
// that met at a named barrier and a 232-instruction reduction for every band):
// - work items are (super-band of 128 rows, part of K): warp w owns band 8 s + w of the item and
//   sums its part's groups alone, in order; no block barrier, no shared-memory reduction;
// - a stage is 128 rows x 4 groups: one tensor-map copy of codes (16 KB, 128-byte swizzle) and
//   one of their scales from the transposed copy (scales_t, 4 groups x 128 rows, 1 KB);
// - K is cut into `parts` of `part_groups` groups (a function of n and k alone, so results are
//   bitwise independent of m and of the grid): one part writes the output itself; several write
//   f32 partials to the workspace and the last part to arrive (a counter per band, zeroed by the
//   staging kernel) sums them in part order.

// m <= kTq2V5NarrowMaxM: ceil(m / 2) n8 tiles, parts from (n, k) (tq2_stream_v5_parts), the image
// whole where it fits. m = 9..16 ("wide", session 15): n8 tiles rounded up to 6 or 8 (two kernel
// instances, not four), the image always one part's slice, and parts from (n, k) with each part's
// slice at m = 16 fitting beside kTq2V5WideStages stages (tq2_stream_v5_parts_for): results stay
// bitwise independent of m within 1..8 and within 9..16 (not across 8 | 9, where parts may differ).
inline constexpr int kTq2V5MaxM = 16;
inline constexpr int kTq2V5NarrowMaxM = 8;
inline constexpr int kTq2V5WideStages = 4;
// Auto takes the wide kernels from this K on (measured: they won at k 14336 and 28672 and lost on
// every shape with k <= 8192; the threshold sits between).
inline constexpr std::int64_t kTq2V5WideMinK = 12288;
// ... and below it where the shape is mid-sized: fewer than kTq2V5TargetItems super-bands and at
// least 2^24 weights (session 16 run 1, m = 16: won 1.09-1.37x on 13824x2560, 14336x4096 and
// 2560x6912 (17.7 M weights), lost 5-9% on 3840x2560 (9.8 M), 3072x3072 and 27648x3072, even on
// 28672x8192).
inline constexpr std::int64_t kTq2V5WideMinWeights = std::int64_t{1} << 24;
// Auto's v5 at m <= 2 where v4 holds two blocks (K in <= 2 parts) only from this many weights:
// measured on Llama-8B up (58.7 M) and BitNet-2B gate_up (35.4 M) only; small shapes stay on v4.
inline constexpr std::int64_t kTq2V5TwoBlockMinWeights = std::int64_t{1} << 25;
// Auto takes v5 with K in at most this many parts (forced v5 takes any): 14 parts measured 1.10x
// v2 at m = 8 (BitNet-2B down); far past that the last part's serial sum would dominate.
inline constexpr int kTq2V5MaxAutoParts = 16;
inline constexpr int kTq2V5Consumers = 8;
inline constexpr int kTq2V5Threads = 32 * (kTq2V5Consumers + 1);
inline constexpr int kTq2V5Rows = 16 * kTq2V5Consumers;             // rows of a super-band
inline constexpr int kTq2V5StageGroups = 4;                          // 128-groups per stage
inline constexpr int kTq2V5CodeBytes = kTq2V5Rows * kTq2V5StageGroups * 32;  // 16 KB
inline constexpr int kTq2V5ScaleBytes = kTq2V5Rows * kTq2V5StageGroups * 2;  // 1 KB
inline constexpr int kTq2V5StageBytes = kTq2V5CodeBytes + kTq2V5ScaleBytes;
inline constexpr int kTq2V5MinStages = 2, kTq2V5MaxStages = 8;
// Items the parts aim for: four fifths of two blocks on each of 132 SMs. Each block asks for its
// first stages at once, so with that many blocks nearly the whole weight is in flight and whole-K
// items cost no reduction; below it, too few bytes are in flight and too few warps decode (session
// 9, run 3: aiming for 528 items cut 27648x3072 into 3 parts and ran 1.27x slower than v4, the
// partials' fence, atomic and loads serialised after every 2-stage item).
inline constexpr std::int64_t kTq2V5TargetItems = 212;

struct Tq2StreamV5Parts {
  int parts = 1;        // ceil(groups / part_groups)
  int part_groups = 4;  // groups of every part but the last; a multiple of kTq2V5StageGroups
  friend bool operator==(const Tq2StreamV5Parts&, const Tq2StreamV5Parts&) = default;
};
// The fewest parts (each a multiple of 4 groups, as even as possible) that give
// ceil(n / 128) x parts >= kTq2V5TargetItems, or parts of 4 groups. n >= 1, k >= 128.
// `target` replaces kTq2V5TargetItems (tq2_moe_stream_sm90 aims lower).
Tq2StreamV5Parts tq2_stream_v5_parts(std::int64_t n, std::int64_t k, std::int64_t target = kTq2V5TargetItems) noexcept;
// The parts v5 uses at m: tq2_stream_v5_parts(n, k) at m <= 8 where its whole image or its slice
// fits at m, else (long K at m up to 8: session 17's branch) the fewest parts, at least 2 and at
// least those, whose slice at m = 8 fits beside 2 stages; at m = 9..16 the fewest parts, at
// least tq2_stream_v5_parts', whose slice at m = 16 fits beside kTq2V5WideStages stages (a
// function of n and k alone within 9..16). Parts of 4 groups when nothing fits (the image plan
// then refuses). So a row's result is the same at every m of one of these ranges (the receipt's
// _p<parts> names them), not across them.
Tq2StreamV5Parts tq2_stream_v5_parts_for(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
// n8 tiles of digit columns (4 m of them): ceil(m / 2) at m <= 8, 6 at m = 9..12, 8 at 13..16.
int tq2_stream_v5_n_tiles(std::int64_t m) noexcept;

struct Tq2StreamV5Config {
  int n_tiles = 1, stages = 0, blocks_per_sm = 1, grid = 0, smem_bytes = 0;
  Tq2StreamV5Parts parts;
  std::int64_t items = 0;  // ceil(n / 128) x parts
  bool stage_in_block = false;  // the blocks convert the image (no staging kernel, no workspace)
  bool sliced = false;          // the image one part at a time (tq2_stream_v5_image_plan)
  friend bool operator==(const Tq2StreamV5Config&, const Tq2StreamV5Config&) = default;
};

// Shared memory of one block (offsets from the base rounded up to 1024; total includes that
// slack): mbarriers, the ring, then v4's activation image (coefficients, record columns) of
// `image_groups` groups (0: every group of K).
struct Tq2StreamV5Smem {
  int ring = 0, coef = 0, xs = 0, total = 0, col_stride = 0;
};
Tq2StreamV5Smem tq2_stream_v5_smem(std::int64_t m, std::int64_t k, int stages, int image_groups = 0) noexcept;

// How v5 holds the activation image: every group of K, or, where that does not fit beside a
// 2-stage ring and K is in parts, one part's groups at a time (sliced): the staging kernel writes
// one slice a part (coefficients, then record columns of part_groups groups), and a block loads
// the slice of its item's part with one bulk copy when the part changes (items go part-major, so
// a block sees one or two parts). Long K at m >= 2 (Llama-70B down: 28672) fits only so. Sliced
// at m <= kTq2V5SlicedMaxM, and always at m = 9..16 (even with K in one part).
// image_groups = 0: neither fits.
inline constexpr int kTq2V5SlicedMaxM = 8;  // narrow sliced kernels: m <= 8 (session 15; session 14 built m <= 4)
struct Tq2StreamV5ImagePlan {
  bool sliced = false;
  int image_groups = 0;  // groups one image (slice) holds
  friend bool operator==(const Tq2StreamV5ImagePlan&, const Tq2StreamV5ImagePlan&) = default;
};
Tq2StreamV5ImagePlan tq2_stream_v5_image_plan(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
// Bytes of one staged image (a slice when sliced): coefficients, then 4 m + 1 record columns.
std::int64_t tq2_stream_v5_image_bytes(std::int64_t m, std::int64_t k, int image_groups) noexcept;
// tq2_args_ok, m <= 16, n < 2^31, codes 16-byte aligned, the transposed scales present (ld a
// multiple of 8, >= n, 16-byte aligned), and the activation image (whole or a part's slice) next
// to a 2-stage ring.
bool tq2_stream_v5_supports(const Tq2Args& args) noexcept;

std::optional<Tq2StreamV5Config> tq2_stream_v5_config(const Tq2Args& args, int sm_count = 0) noexcept;
// Workspace: the activation image (v4's; sliced: one slice a part), a u32 counter per 16-row
// band, f32 partials [parts][m][n] when parts > 1 (16-byte aligned pieces); 0 when v5 cannot
// take (m, n, k).
std::size_t tq2_stream_v5_workspace_bytes(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
// Empty when the blocks convert the image themselves (or v5 cannot take the call).
std::string tq2_stream_v5_stage_kernel_name(const Tq2Args& args);
// tq2_stream_v5_<in>_<out>_i8x4_n<8 n_tiles>_s<stages>_b<blocks_per_sm>_p<parts>[_sliced|_inblock].
std::string tq2_stream_v5_kernel_name(const Tq2Args& args, int sm_count = 0);

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
