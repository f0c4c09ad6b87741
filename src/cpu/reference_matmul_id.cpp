// Float64 expert-ID matmul reference: one plain dot product per output element.
#include "llmm/fp8.hpp"
#include "llmm/moe.hpp"
#include <algorithm>
#include <cmath>

#include "cpu/parallel_for.hpp"
#include "llmm/error.hpp"
#include "llmm/reference.hpp"

namespace llmm::cpu {

namespace {
// The reference over any weight: value(e, j, l) as a double.
template <class WeightValue>
MatmulIdF64 matmul_id_f64_of(WeightValue value, const void* in, const void* ids, const MatmulIdParams& p, int threads) {
  const std::int64_t rows = static_cast<std::int64_t>(p.m) * p.top_k, n = p.n, k = p.k;
  const bool slotted = p.input_layout == MatmulIdInputLayout::Slotted;
  const std::int64_t ts = p.input_token_stride ? static_cast<std::int64_t>(*p.input_token_stride)
                                               : (slotted ? static_cast<std::int64_t>(p.top_k) * k : k);
  const std::int64_t ss = slotted ? (p.input_slot_stride ? static_cast<std::int64_t>(*p.input_slot_stride) : k) : 0;
  MatmulIdF64 r{rows, n, std::vector<double>(static_cast<std::size_t>(rows * n), 0.0),
                std::vector<double>(static_cast<std::size_t>(rows * n), 0.0)};
  // The expert of a routed row, or n_experts when the id is out of range (negative included).
  auto expert = [&](std::int64_t row) -> std::uint64_t {
    const double v = load_as_double(ids, p.ids_dtype, row);  // exact: ids below 2^53 matter
    return v >= 0 && v < p.n_experts ? static_cast<std::uint64_t>(v) : p.n_experts;
  };
  // Items: (routed row, block of outputs); each output is one dot product in l order.
  const std::int64_t block = detail::column_block(rows, n, threads);
  const std::int64_t col_blocks = (n + block - 1) / block;
  detail::parallel_for(rows * col_blocks, threads, [&](std::int64_t item) {
    const std::int64_t row = item / col_blocks, j0 = (item % col_blocks) * block;
    const std::uint64_t e = expert(row);
    if (e >= p.n_experts) return;  // zero row
    const std::int64_t tok = row / p.top_k, slot = row % p.top_k;
    std::vector<double> x(static_cast<std::size_t>(k));
    for (std::int64_t l = 0; l < k; ++l) x[static_cast<std::size_t>(l)] = load_as_double(in, p.input_dtype, tok * ts + slot * ss + l);
    for (std::int64_t j = j0; j < std::min(n, j0 + block); ++j) {
      double acc = 0, abs = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        double prod = x[static_cast<std::size_t>(l)] * value(static_cast<std::int64_t>(e), j, l);
        acc += prod;
        abs += std::fabs(prod);
      }
      r.value[static_cast<std::size_t>(row * n + j)] = acc;
      r.abs_sum[static_cast<std::size_t>(row * n + j)] = abs;
    }
  });
  return r;
}
}  // namespace

MatmulIdF64 matmul_id_f64(const void* w, DType wt, const void* in, const void* ids, const MatmulIdParams& p,
                          int threads) {
  const std::int64_t wstride = static_cast<std::int64_t>(p.expert_stride_bytes / dtype_size(wt));
  const std::int64_t k = p.k;
  return matmul_id_f64_of([&](std::int64_t e, std::int64_t j, std::int64_t l) { return load_as_double(w, wt, e * wstride + j * k + l); },
                          in, ids, p, threads);
}

MatmulIdF64 matmul_id_fp8_f64(const void* codes, const float* scales, Fp8ScaleKind kind, const void* in, const void* ids,
                              const MatmulIdParams& p, int threads) {
  const std::int64_t wstride = static_cast<std::int64_t>(p.expert_stride_bytes);
  const std::int64_t n = p.n, k = p.k, kb = (k + kFp8Block - 1) / kFp8Block;
  const auto shape = fp8_scale_shape(kind, n, k);
  const std::int64_t per_expert = shape.first * shape.second;  // a plain local: lambdas capture it
  const auto* c = static_cast<const std::uint8_t*>(codes);
  return matmul_id_f64_of(
      [&](std::int64_t e, std::int64_t j, std::int64_t l) {
        const std::int64_t g = kind == Fp8ScaleKind::Tensor ? 0 : kind == Fp8ScaleKind::Channel ? j : (j / kFp8Block) * kb + l / kFp8Block;
        return static_cast<double>(e4m3fn_bits_to_f32(c[e * wstride + j * k + l])) *
               static_cast<double>(scales[e * per_expert + g]);
      },
      in, ids, p, threads);
}

}  // namespace llmm::cpu
