// skinny_mma: x[M, K] . w[N, K]^T for M = 1..16 in f16/bf16 on tensor cores (mma.sync m16n8k16).
// Host-side facts (pure): which problems it takes, its configuration, shared-memory layout and
// kernel name.
//
// Why tensor cores: at M = 16 a CUDA-core kernel needs 16 FMAs (plus conversions) per weight
// element, as much ALU time as the weight's memory time on an H200, so it cannot stream the
// weight at full bandwidth. With mma.sync the weight tile is the A operand (16 rows x 16 k) and
// the M vectors are B (k x 8 columns), so the arithmetic is nearly free.
//
// v3 (session 27): a grid of exactly two blocks a SM. The weight is cut into tiles of 16 or 32
// rows (batch entries counted); cluster i of the grid's clusters takes a contiguous range of
// tiles, its `cluster` blocks split K in equal chunk ranges, and a block's 8 warps split its
// range further (warp w: chunks w, w + 8, ...). Sums: a warp's chunks in order, then the warps in
// order (shared memory), then the cluster's blocks in rank order (DSMEM): fixed for given n, k,
// batch and SM count, whatever m is. v2's grid of one row block a block filled 0.73 or 1.7 waves
// of two blocks a SM (ncu, session 26).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dense/dense_args.hpp"

namespace llmm::cuda_dense {

inline constexpr int kSkinnyMmaMaxM = 16;      // two n8 tiles of vectors
inline constexpr int kSkinnyMmaWarps = 8;      // warps of a block, all splitting K
inline constexpr int kSkinnyMmaPartTiles = 8;  // tiles a cluster of > 1 block may own (their sums wait in shared memory)
// The kernel counts in 32-bit ints (session 30: its 64-bit divisions and offsets were most of an
// issue-bound instruction stream): n and k at most 2^30, tiles (16-row tiles x batch) < 2^31.
inline constexpr std::int64_t kSkinnyMmaMaxDim = std::int64_t{1} << 30;
inline constexpr std::int64_t kSkinnyMmaMaxTiles = (std::int64_t{1} << 31) - 1;

struct SkinnyMmaConfig {
  int n_tiles = 0;    // n8 tiles of vectors: 1 for M <= 8, 2 for M <= 16
  int row_tiles = 1;  // m16 tiles of weight rows a tile: 1 (16 rows) or 2 (32)
  int cluster = 1;    // blocks of a cluster splitting K over the same tiles: 1, 2 or 4 (sm_90)
  int blocks = 0;     // the grid (a multiple of cluster): two blocks a SM, at most cluster x tiles
  bool x_image = false;  // each warp copies its chunks of the vector rows into shared memory once,
                         // for all of its tiles, and streams only weights (batch 1, where it fits)
  friend bool operator==(const SkinnyMmaConfig&, const SkinnyMmaConfig&) = default;
};

// The shared-memory layout of one block (the kernel's and the planner's one formula): the warps'
// rings, their sums, the cluster's parts, the row map's own tables (map_bytes: the MoE row map's
// sort, core/moe/moe_skinny.hpp), then (x_image) the warps' vector chunks.
struct SkinnyMmaSmem {
  int units = 0;        // 16-byte units a lane copies a chunk into its ring: 2 per row tile, 1 per n8 tile (not with x_image)
  int stages = 0;       // a warp's ring depth in chunks
  int warp_bytes = 0;   // a warp's ring
  int red_stride = 0;   // floats between a column's rows in the warps' sums (rows + 4: no bank conflicts)
  int red_offset = 0, part_offset = 0;
  int map_offset = 0;    // the row map's tables (map_bytes)
  int image_offset = 0;  // the vector image (x_image): kSkinnyMmaWarps x skinny_mma_image_warp_bytes
  int bytes = 0;         // all but the image
};
constexpr SkinnyMmaSmem skinny_mma_smem(int n_tiles, int row_tiles, int cluster, bool x_image = false, int map_bytes = 0) {
  SkinnyMmaSmem l;
  l.units = 2 * row_tiles + (x_image ? 0 : n_tiles);
  // ~6-12 KB a warp: two blocks a SM with every ring, the warps' sums and the cluster's parts
  // (and room for an image of up to 47 KB beside weight-only rings of 16-row tiles).
  l.stages = l.units == 2 ? 6 : l.units == 3 ? 8 : l.units == 4 ? (x_image ? 4 : 5) : l.units == 5 ? 4 : 3;
  l.warp_bytes = l.stages * l.units * 32 * 16;
  const int rows = 16 * row_tiles, cols = 8 * n_tiles;
  l.red_stride = rows + 4;
  l.red_offset = kSkinnyMmaWarps * l.warp_bytes;
  l.part_offset = l.red_offset + kSkinnyMmaWarps * cols * l.red_stride * 4;
  l.map_offset = l.part_offset + (cluster > 1 ? kSkinnyMmaPartTiles * cols * rows * 4 : 0);
  l.image_offset = l.map_offset + map_bytes;
  l.bytes = l.image_offset;
  return l;
}
// The most shared memory a block may take for two blocks a SM on an sm_90 (228 KB a SM, 1 KB of
// it reserved a block).
inline constexpr int kSkinnyMmaSmemLimit = 113 * 1024;
static_assert(skinny_mma_smem(2, 2, 4).bytes <= kSkinnyMmaSmemLimit && skinny_mma_smem(1, 1, 4).bytes <= kSkinnyMmaSmemLimit &&
              skinny_mma_smem(2, 1, 4).bytes <= kSkinnyMmaSmemLimit && skinny_mma_smem(1, 2, 4).bytes <= kSkinnyMmaSmemLimit);

// The split, one formula for the kernel and the tests: part i of `parts` of [0, total) starts at
// floor(total i / parts) (computed without the product: no overflow for any total >= 0); cluster
// ci's tiles are [split(tiles, clusters, ci), split(.., ci + 1)), rank r's chunks of K likewise,
// and warp w of a block takes chunks w, w + 8, ... of its rank's range.
constexpr std::int64_t skinny_mma_split(std::int64_t total, std::int64_t parts, std::int64_t i) {
  return total / parts * i + total % parts * i / parts;
}
constexpr std::int64_t skinny_mma_warp_chunks(std::int64_t rank_chunks, int warp) {
  return rank_chunks > warp ? (rank_chunks - 1 - warp) / kSkinnyMmaWarps + 1 : 0;
}
// One warp's slot of the vector image: its chunks at the busiest rank (warp 0 of ceil(chunks / C)
// chunks), n_tiles 16-byte units a lane each. k as the kernel takes it (k >= 1).
constexpr std::int64_t skinny_mma_image_warp_bytes(int n_tiles, std::int64_t k, int cluster) {
  const std::int64_t chunks = k / 32 + (k % 32 != 0);
  return skinny_mma_warp_chunks(chunks / cluster + (chunks % cluster != 0), 0) * n_tiles * 32 * 16;
}

// Sizes only (what plan_matmul carries): nullopt unless f16/bf16, 1 <= m <= 16, 1 <= n, k <=
// kSkinnyMmaMaxDim, batch x ceil(n / 16) <= kSkinnyMmaMaxTiles, k % 8 == 0, batch >= 1 and cc_major >= 8 (0 = unknown is accepted; clusters only where
// cc_major >= 9). sm_count <= 0 = unknown (132), capped at 65536. Only n_tiles depends on m.
std::optional<SkinnyMmaConfig> skinny_mma_config(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n,
                                                 std::int64_t k, int cc_major, int sm_count);
// The layout the kernel reads: a not transposed, b transposed ([n, k] rows), a and b base
// pointers, row strides and batch strides 16-byte aligned.
bool skinny_mma_layout_ok(const DenseArgs& args);
// Both of the above on one problem.
std::optional<SkinnyMmaConfig> skinny_mma_config(const DenseArgs& args, int cc_major, int sm_count);

// skinny_mma_<f16|bf16>_n<8|16>_r<16|32>_c<1|2|4>, with _xi for the vector image
std::string skinny_mma_kernel_name(const DenseArgs& args, const SkinnyMmaConfig& config);

// Launcher (src/cuda/engine/instances/dense_skinny_mma.cu): throws ErrorCode::Cuda if the launch fails. Runs
// fewer clusters than config.blocks / config.cluster where fewer fit the device at once (the
// tiles' ranges change, their sums do not).
void launch_skinny_mma(const DenseArgs& args, const SkinnyMmaConfig& config, StreamHandle stream);

}  // namespace llmm::cuda_dense
