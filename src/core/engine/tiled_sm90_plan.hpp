// Host planning of the Hopper tiled engine (src/cuda/engine): which problems each instance
// takes, the tile shape and grid a launch uses, and the kernel names. Pure functions, no CUDA
// headers: the routers, CPU tests and the launchers call the same functions, so what a plan
// says is what a launch does.
//
// Instances (one kernel template, tiled_sm90a.cuh; row maps in row_maps_sm90.cuh):
//   dense   c[b] = a[b] . b[b]^T: a [m, k] rows (x), b [n, k] rows (w), f16/bf16, or f32 with
//           Precision::Exact as 3xTF32; c in the same dtype; a batch stride of 0 broadcasts.
//   moe     matmul_id's grouped route: w [E][n, k] f16/bf16, input of the weights' dtype
//           gathered by routed row, output f32 or the input dtype.
//   tq2 moe matmul_id_tq2's grouped_sm90 route: the moe instance's staged expert rows (f16) with
//           the tq2 instance's decoder over a stack of ternary experts; output f32, f16 or bf16.
//   tq2     gemm_tq2's tiled_sm90 route: W [n, k] TQ2_0_g128 codes decoded to f16 by the
//           consumers (Tq2Weights), x [m, k] f16 (the input, or its f16 copy scaled by a power of
//           two), output f32, f16 or bf16; the dense row map, tiled_sm90_tq2_shape's deeper rings.
#pragma once
#include <cstdint>
#include <string>

#include "core/engine/tiled_sm90_shape.hpp"
#include "core/dense/dense_args.hpp"
#include "core/moe/moe_args.hpp"
#include "llmm/context.hpp"
#include "llmm/matmul.hpp"
#include "llmm/moe.hpp"

namespace llmm::engine {

// The engine's kernels are built for sm_90a only.
bool tiled_sm90_arch_ok(const ArchInfo& arch) noexcept;

inline constexpr std::int64_t kTiledMoePdlMaxRows = 4096;

struct TiledSm90Launch {
  int bn = 0;          // tokens per tile: 64, 128 or 256 (dense 16-bit: kTiledDenseWidths)
  int bm = kTiledBM;   // weight rows per tile: kTiledBM, or kTiledTallBM (dense 16-bit tall tiles)
  int smem_bytes = 0;  // dynamic shared memory
  int grid = 0;        // persistent CTAs
  std::int64_t tiles = 0;  // dense: the tiles; moe: an upper bound (the real count is on the device)
  bool staged = false;     // moe: tokens from rows staged in expert order (moe_stage_rows), else gathered
  int parts = 1;           // tq2 split: each tile's K in `parts` parts of kb_per_part 64-wide k-blocks
  int kb_per_part = 0;
  // moe: launched by programmatic dependent launch after the route's previous kernel (moe_map or
  // the staging copy) on sm_90, while m * top_k <= kTiledMoePdlMaxRows. Measured in one run (H200,
  // 2026-12-03, PDL on vs off): 1-8% faster at m = 16..256 (a launch gap of ~1 us), 0.6-1.8%
  // slower at m = 4096 on every model (not understood); docs/performance.md.
  bool pdl = false;
  // moe: the engine sorts the routed rows itself (ExpertRowsFused): the route is this one kernel.
  bool fused = false;
  // FP8 weights times FP8 tokens (Fp8MmaWeights: e4m3 wgmmas, bn 128): matmul_fp8's tiled_sm90
  // route (tiled_sm90_dense_w8a8_launch).
  bool w8a8 = false;
  friend bool operator==(const TiledSm90Launch&, const TiledSm90Launch&) = default;
};

// ---- dense
// Why the dense instance cannot take `d` ("" when it can): sm_90, f16/bf16, or f32 with
// Precision::Exact, a not transposed and b transposed (x . w^T), both with 16-byte aligned bases
// and strides (a_vec16, b_vec16), k >= 1, m, n, k and batch <= 2^31 - 129, batched inputs whose
// entries do not overlap (d.batches_disjoint), tiles below 2^31.
std::string tiled_sm90_dense_refusal(const MatmulDesc& d, const ArchInfo& arch);
// The tile that minimises waves x (bn x bm / 128 + 32) over the SMs, a stage's cost in 128-row
// token columns (the 32 stands for the part of a stage a narrower tile does not shrink:
// measured ~40, docs/performance.md "Tile widths that fill whole waves"); sm_count 0 = 132. f32
// picks from 128 and 64 (its ring, tiled_sm90_f32_shape) at 128 rows; 16-bit from
// kTiledDenseWidths at 128 rows (256 down to 64 in steps that let a token count fill whole
// waves: 144 at m 1536, n 3072) and kTiledTallWidths at 256 rows (tall tiles: one wave of 144 at
// m 1536, n 3072), 128 rows winning a tie.
TiledSm90Launch tiled_sm90_dense_launch(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count);
// The launch at a given tile (bn one of the dtype's widths at bm: kTiledDenseWidths, or 128 / 64
// for f32, at kTiledBM; kTiledTallWidths at kTiledTallBM, 16-bit only; InvalidArgument
// otherwise), what tiled_sm90_dense_launch returns for the tile it picks: for benchmarks that
// time every tile on one shape (the rule's calibration).
TiledSm90Launch tiled_sm90_dense_launch_at(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count,
                                           int bn, int bm = kTiledBM);
// tiled_sm90_dense_<dt>_bn<bn>, e.g. tiled_sm90_dense_bf16_bn256, tiled_sm90_dense_f32_3xtf32_bn128;
// tall tiles tiled_sm90_dense_<dt>_bm256_bn<bn>.
std::string tiled_sm90_dense_kernel_name(DType dtype, int bn, int bm = kTiledBM);
// Whether plan_matmul should send f32 Exact to the engine (3xTF32) rather than cuBLASLt's SGEMM:
// where the instance takes it and its launch has at least half as many tiles as the device has
// SMs (sm_count 0 = 132). Measured on the H200 (docs/performance.md, "f32 Exact on the engine"):
// 1.3-2.1x SGEMM from 96 tiles up (m 17 on a 14336-row weight, m 256 on 3072 rows, m 25 on the
// 32000-row lm head); 0.40-0.79x at 24-48 tiles, where one wave of long-K tiles is latency-bound
// and SGEMM streams the weight on every SM.
bool tiled_sm90_dense_f32_preferred(const MatmulDesc& d, const ArchInfo& arch);

// ---- dense FP8 W8A8 (matmul_fp8's tiled_sm90 route; its refusals are matmul_fp8's planner's)
// y [m, n] = x . dequant(w)^T with x quantized per token and 128 channels (e4m3 codes [lt_m, k],
// scales [k / 128][lt_m]) and FP8 weights [n, k]: tiles of 128 x 128 (Fp8MmaWeights' bn), grid
// the SMs or the tiles.
TiledSm90Launch tiled_sm90_dense_w8a8_launch(std::int64_t m, std::int64_t n, int sm_count);
// tiled_sm90_dense_w8a8_<out>_bn128, e.g. tiled_sm90_dense_w8a8_bf16_bn128
std::string tiled_sm90_dense_w8a8_kernel_name(DType out);

// ---- moe (grouped route)
// Why the moe instance cannot take `g` ("" when it can): sm_90, weights and input of one 16-bit
// dtype (or FP8 e4m3 weights with their scales, a bf16 input, k and the expert stride multiples
// of 16: staged rows only), output f32 or the input's dtype, k % 8 == 0, 16-byte aligned weights, expert stride, input base
// and strides, n_experts <= 1024, m * top_k and the tiles (m * top_k / 64 + n_experts) x
// ceil(n / 128) below 2^31 (the kernel's row positions and TMA coordinates are 32-bit).
std::string tiled_sm90_moe_refusal(const cuda_moe::MoeArgs& g, const ArchInfo& arch);
// Tiles of 256 tokens and, for an expert's last rows or an expert with few, of 64 (chosen on the
// device from the counts: the host cannot see the routing). Grid: the SMs. Staged when the scratch has room for every
// routed row (g.staged_bytes >= m * top_k * k * 2): then moe_stage_rows runs before the engine.
TiledSm90Launch tiled_sm90_moe_launch(const cuda_moe::MoeArgs& g, int sm_count);
// The instance that sorts the routed rows itself, in every CTA (no moe_map, no staging copy:
// one kernel): why it cannot take `g` beyond tiled_sm90_moe_refusal ("" when it can): more than
// kTiledMoeFusedMaxRows routed rows, FP8 weights, an output row of more than 2^31 - 1 16-bit words (the
// kernel zeroes out-of-range rows in those units, counted in an int), or an input stride of 2^40
// bytes or more (its token rows come by TMA boxes of a map over the input: one box a row).
std::string tiled_sm90_moe_fused_refusal(const cuda_moe::MoeArgs& g);
// Whether Auto should take it: at m <= kTiledMoeFusedAutoMaxTokens (and within the limit above).
// Measured on the H200 (docs/performance.md, "The fused MoE map" and "One TMA box a token row",
// sessions 22-23): with its token rows by one TMA box a row it takes 0.82-1.01x the mapped
// route's time at m = 16 (hot 0.82-0.97, Mixtral 0.89-0.91, Qwen3 / DeepSeek uniform and zipf
// 0.97-1.01), but 1.01-1.06x at m = 64 on uniform / zipf routing and 1.06-1.54x on hot (64 rows
// a tile: the row boxes' issue, ~14 cycles a box over four warps, against one box for 64 staged
// rows). Under distinct ids an expert gets at most m rows.
inline constexpr std::int64_t kTiledMoeFusedAutoMaxTokens = 16;
bool tiled_sm90_moe_fused_preferred(const cuda_moe::MoeArgs& g);
// Its launch: the moe launch's tiles and grid, the sorted list's shared memory, not staged, no PDL
// (nothing of the route runs before it).
TiledSm90Launch tiled_sm90_moe_fused_launch(const cuda_moe::MoeArgs& g, int sm_count);
// tiled_sm90_moe_<w>_<in>_<out>_bn<bn>x64[_staged|_fused][_sorted] (_sorted: MoeArgs::out_sorted), e.g.
// tiled_sm90_moe_bf16_bf16_f32_bn256x64_staged
std::string tiled_sm90_moe_kernel_name(const cuda_moe::MoeArgs& g, const TiledSm90Launch& l);

// ---- tq2
// Why the tq2 instance cannot take gemm_tq2's problem ("" when it can): sm_90; input f16, bf16,
// or f32 with Fast precision (f32 Exact would need the activation's second f16 part); output f32
// or the input's dtype; k % 128 == 0; n <= 2^30 - 128 (the scale copy's coordinate is a byte
// offset in an int), k and the tiles below 2^31. The f16 input's own
// alignment is checked by the route (tq2_tiled_sm90_plan), which sees the pointers.
std::string tiled_sm90_tq2_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out, bool exact,
                                   const ArchInfo& arch);
// The same without the arch check (what the sizes and dtypes alone rule out).
std::string tiled_sm90_tq2_shape_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out,
                                         bool exact);
// The dense launch for one [m, n] problem, with the ternary ring (tiled_sm90_tq2_shape).
TiledSm90Launch tiled_sm90_tq2_launch(std::int64_t m, std::int64_t n, int sm_count);
// Whether gemm_tq2's router should take the engine for an [m, n] prefill (the engine against
// tq2_dequant_lt, measured on the H200 over 25 DiT/Llama/BitNet shapes, docs/performance.md): when
// the launch fills the SMs, at least 3/4 of them with tiles and its waves at least 80% full.
// Fewer or ragged waves lose to dequantizing the weight for cuBLASLt until split-K exists.
bool tiled_sm90_tq2_preferred(std::int64_t m, std::int64_t n, int sm_count);
// tiled_sm90_tq2_f16_<out>_bn<bn>, e.g. tiled_sm90_tq2_f16_bf16_bn256; with K in parts
// (tiled_sm90_tq2_split_launch) _k<parts>, e.g. tiled_sm90_tq2_f16_bf16_bn128_k5
std::string tiled_sm90_tq2_kernel_name(DType out, int bn, int parts = 1);

// ---- tq2 with K in parts (gemm_tq2's tiled_sm90_splitk route, for few feature tiles)
// The parts a tile's K is cut into: as many as let one token tile's worth of units fill 132 SMs
// (132 / ceil(n / 128)), at most one per 16 k-blocks (a part streams >= 1024 of K: parts of
// 10 k-blocks only tied tq2_dequant_lt on the H200, docs/performance.md "K in parts"), at most 16,
// then evened out so that no part is empty. A function of n, k and the SM count only, never of
// m (nor of the device): the route stays batch-invariant. 1 when n alone fills the SMs.
int tiled_sm90_tq2_split_parts(std::int64_t n, std::int64_t k);
// Why the split launch cannot take the problem ("" when it can): tiled_sm90_tq2_shape_refusal's
// reasons, and more than 2^31 - 1 work units (tiles of 64 tokens x parts: the kernel's unit index is an int).
std::string tiled_sm90_tq2_split_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out,
                                         bool exact);
// The launch: those parts, and the tile width with the fewest waves of units x per-stage cost,
// both planned for 132 SMs whatever sm_count is (so the workspace does not depend on the
// device); sm_count sets only the grid.
TiledSm90Launch tiled_sm90_tq2_split_launch(std::int64_t m, std::int64_t n, std::int64_t k, int sm_count);
// Workspace of a split launch: the parts' f32 slots [tiles][parts][2][64 x bn] and two u32
// counters a tile (zeroed before each launch). Overflow-checked (InvalidArgument).
std::uint64_t tiled_sm90_tq2_split_slot_bytes(const TiledSm90Launch& l);
std::uint64_t tiled_sm90_tq2_split_counter_bytes(const TiledSm90Launch& l);
// Whether gemm_tq2's router should take the split route for an [m, n, k] prefill (before the
// unsplit engine): K in parts (parts > 1), m <= 128 (measured at m = 128: 1.4-1.9x the best other
// route on three shapes, even on a fourth; slower than both at m = 512; docs/performance.md "K in
// parts"), and
// the units filling the SMs as tiled_sm90_tq2_preferred asks of tiles.
bool tiled_sm90_tq2_split_preferred(std::int64_t m, std::int64_t n, std::int64_t k, int sm_count);
// The largest m the router sends to the split route.
inline constexpr std::int64_t kTiledSm90Tq2SplitMaxM = 128;

// ---- tq2 moe
// Why the tq2 moe instance cannot take a matmul_id_tq2 call ("" when it can): sm_90; f16 input,
// or bf16 (the route first writes it as f16 scaled by a power of two); output f32 or the input's; 1..1024 experts; n_experts * round8(n) <= 2^30 - 128 (the scale copy's byte
// coordinate); routed rows and tiles below 2^31. Pointers, strides and scratch are the route's
// to check (plan_matmul_id_tq2's input_ok / staging_ok).
std::string tiled_sm90_tq2_moe_refusal(const MatmulIdParams& p, const ArchInfo& arch);
// The moe launch (wide tiles of 256, narrow ones of 64 chosen on the device), always staged,
// with the ternary ring.
TiledSm90Launch tiled_sm90_tq2_moe_launch(const cuda_moe::MoeArgs& g, int sm_count);
// tiled_sm90_tq2_moe_f16_<out>_bn256x64_staged (the rows it reads are f16 whatever the input's dtype)
std::string tiled_sm90_tq2_moe_kernel_name(DType out);

}  // namespace llmm::engine
