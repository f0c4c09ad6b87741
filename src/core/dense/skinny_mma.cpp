#include "core/dense/skinny_mma.hpp"

#include <cstdint>

#include "core/vec16.hpp"

namespace llmm::cuda_dense {
std::optional<SkinnyMmaConfig> skinny_mma_config(const DenseArgs& g, int cc_major, int sm_count) {
  if (g.dtype != DType::F16 && g.dtype != DType::BF16) return std::nullopt;
  if (g.m < 1 || g.m > kSkinnyMmaMaxM || g.n < 1 || g.k < 1 || g.k % 8 != 0) return std::nullopt;
  if (g.a_trans || !g.b_trans) return std::nullopt;
  if (!detail::rows_vec16(g.a, g.a_ld, g.a_batch, g.dtype) || !detail::rows_vec16(g.b, g.b_ld, g.b_batch, g.dtype))
    return std::nullopt;
  if (cc_major != 0 && cc_major < 8) return std::nullopt;
  const std::int64_t sms = sm_count > 0 ? sm_count : 132;
  SkinnyMmaConfig c;
  c.n_tiles = g.m <= 8 ? 1 : 2;
  // Blocks of 32 rows while they give every SM two, else of 16 (twice the blocks).
  // Block counts in double: n and batch may be anything a view allows, and no product overflows.
  const auto blocks = [&](std::int64_t rows) { return static_cast<double>(g.n / rows + (g.n % rows != 0)) * static_cast<double>(g.batch); };
  c.row_tiles = blocks(32) < 2.0 * static_cast<double>(sms) ? 1 : 2;
  // Few row blocks (small N): more warps split K so that enough loads are in flight.
  c.warps_k = blocks(16 * c.row_tiles) < 4.0 * static_cast<double>(sms) ? 8 : 4;
  return c;
}

std::string skinny_mma_kernel_name(const DenseArgs& g, const SkinnyMmaConfig& c) {
  return std::string("skinny_mma_") + (g.dtype == DType::BF16 ? "bf16" : "f16") + "_n" + std::to_string(8 * c.n_tiles) +
         "_wk" + std::to_string(c.warps_k) + (c.row_tiles == 1 ? "_r16" : "");
}

}  // namespace llmm::cuda_dense
