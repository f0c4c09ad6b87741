#include "cpu/reference_matmul_id_tq2.hpp"

#include <algorithm>
#include <vector>

#include "cpu/parallel_for.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cpu {

void matmul_id_tq2_reference(const cuda_ternary::Tq2MoeArgs& a, int threads) {
  const cuda_moe::MoeArgs& g = a.g;
  const std::int64_t rows = g.m * g.top_k, n = g.n, k = g.k, bpr = k / 128;
  const std::int64_t block = detail::column_block(rows, n, threads);
  const std::int64_t col_blocks = (n + block - 1) / block;
  detail::parallel_for(rows * col_blocks, threads, [&](std::int64_t item) {
    const std::int64_t row = item / col_blocks, j0 = (item % col_blocks) * block, j1 = std::min(n, j0 + block);
    const std::uint32_t e = cuda_moe::host_expert_of(g, row);
    if (e == cuda_moe::kNoExpert) {
      for (std::int64_t j = j0; j < j1; ++j) store_from_double(g.out, g.out_dtype, row * n + j, 0.0);
      return;
    }
    const std::int64_t tok = row / g.top_k, slot = row % g.top_k;
    std::vector<double> x(static_cast<std::size_t>(k));
    for (std::int64_t l = 0; l < k; ++l)
      x[static_cast<std::size_t>(l)] = load_as_double(g.in, g.in_dtype, tok * g.in_token_stride + slot * g.in_slot_stride + l);
    for (std::int64_t j = j0; j < j1; ++j) {
      const std::int64_t wr = static_cast<std::int64_t>(e) * n + j;
      const std::uint8_t* codes = a.codes + wr * (k / 4);
      double acc = 0;
      for (std::int64_t b = 0; b < bpr; ++b) {
        const double d = f16_bits_to_f32(a.scales[wr * bpr + b]);  // exact
        for (std::int64_t l = 128 * b; l < 128 * b + 128; ++l) {
          const int code = (codes[l / 4] >> (2 * (l % 4))) & 3;
          acc += x[static_cast<std::size_t>(l)] * (static_cast<double>(code - 1) * d);
        }
      }
      store_from_double(g.out, g.out_dtype, row * n + j, acc);
    }
  });
}

}  // namespace llmm::cpu
