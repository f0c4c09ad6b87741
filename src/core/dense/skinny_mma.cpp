#include "core/dense/skinny_mma.hpp"

#include <cmath>
#include <cstdint>

#include "core/vec16.hpp"

namespace llmm::cuda_dense {

bool skinny_mma_layout_ok(const DenseArgs& g) {
  return !g.a_trans && g.b_trans && detail::rows_vec16(g.a, g.a_ld, g.a_batch, g.dtype) &&
         detail::rows_vec16(g.b, g.b_ld, g.b_batch, g.dtype);
}

std::optional<SkinnyMmaConfig> skinny_mma_config(const DenseArgs& g, int cc_major, int sm_count) {
  if (!skinny_mma_layout_ok(g)) return std::nullopt;
  return skinny_mma_config(g.dtype, g.batch, g.m, g.n, g.k, cc_major, sm_count);
}

std::optional<SkinnyMmaConfig> skinny_mma_config(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n,
                                                 std::int64_t k, int cc_major, int sm_count) {
  if (dtype != DType::F16 && dtype != DType::BF16) return std::nullopt;
  if (m < 1 || m > kSkinnyMmaMaxM || n < 1 || k < 1 || k % 8 != 0 || batch < 1) return std::nullopt;
  if (cc_major != 0 && cc_major < 8) return std::nullopt;
  if (n > kSkinnyMmaMaxDim || k > kSkinnyMmaMaxDim || batch > kSkinnyMmaMaxTiles / (n / 16 + (n % 16 != 0)))
    return std::nullopt;  // the kernel's 32-bit counts
  // sm_count 0 (unknown): an H200's 132; more than 65536 is no GPU (the grid's int stays in range).
  const std::int64_t sms = sm_count <= 0 ? 132 : sm_count > 65536 ? 65536 : sm_count;
  const std::int64_t slots = 2 * sms;  // two blocks a SM (every layout within kSkinnyMmaSmemLimit)
  const std::int64_t chunks = k / 32 + (k % 32 != 0);  // k + 31 could overflow
  SkinnyMmaConfig best;
  best.n_tiles = m <= 8 ? 1 : 2;
  // The (tile rows, cluster) that gives the busiest block the fewest weight bytes: ceil(tiles /
  // clusters) tiles of 16 rt rows, K / cluster each. Ties: 32-row tiles (half the vector copies a
  // weight byte), then fewer blocks a cluster. Counts in double: n and batch may be anything a
  // view allows. Nothing here depends on m, so neither does any sum's order.
  double best_cost = 0.0;
  for (int rt : {2, 1})
    for (int c : {1, 2, 4}) {
      if (c > 1 && (cc_major < 9 || chunks < 8 * c)) continue;  // clusters: sm_90; every warp of a block a chunk
      const double tiles = static_cast<double>(n / (16 * rt) + (n % (16 * rt) != 0)) * static_cast<double>(batch);
      const double clusters = static_cast<double>(slots / c);
      const double per_cluster = std::ceil(tiles / clusters);
      if (c > 1 && per_cluster > kSkinnyMmaPartTiles) continue;
      const double cost = per_cluster * rt / c;
      if (best.blocks == 0 || cost < best_cost) {
        best_cost = cost;
        best.row_tiles = rt, best.cluster = c;
        best.blocks = static_cast<int>(c * (tiles < clusters ? tiles : clusters));
      }
    }
  // The vector image: one batch entry's vectors, beside weight-only rings, where it fits two blocks
  // a SM. It changes where the vectors come from, not one sum (the same values meet the same mmas).
  if (batch == 1 && k <= (std::int64_t{1} << 24)) {  // (a longer K's image never fits)
    const double image = static_cast<double>(kSkinnyMmaWarps) *
                         static_cast<double>(skinny_mma_image_warp_bytes(best.n_tiles, k, best.cluster));
    best.x_image = skinny_mma_smem(best.n_tiles, best.row_tiles, best.cluster, true).bytes + image <= kSkinnyMmaSmemLimit;
  }
  return best;
}

std::string skinny_mma_kernel_name(const DenseArgs& g, const SkinnyMmaConfig& c) {
  return std::string("skinny_mma_") + (g.dtype == DType::BF16 ? "bf16" : "f16") + "_n" + std::to_string(8 * c.n_tiles) + "_r" +
         std::to_string(16 * c.row_tiles) + "_c" + std::to_string(c.cluster) + (c.x_image ? "_xi" : "");
}

}  // namespace llmm::cuda_dense
