// The float64 reference of x . w^T on FP8 e4m3 weights (the FP8 kernels' oracle).
#include <cmath>

#include "cpu/parallel_for.hpp"
#include "llmm/error.hpp"
#include "llmm/fp8.hpp"

namespace llmm {

namespace cpu {
MatmulF64 matmul_fp8_f64(const View& x, const Fp8Weight& w, int threads) {
  constexpr const char* op = "reference_matmul_fp8";
  if (x.rank != 2 || x.dim(1) != w.k || !is_float(x.dtype))
    fail(ErrorCode::InvalidArgument, op, ": x must be a float [m, ", w.k, "] view, got ", x.describe());
  if (w.codes.size() != static_cast<std::size_t>(w.n * w.k))
    fail(ErrorCode::InvalidArgument, op, ": ", w.codes.size(), " codes for a [", w.n, ", ", w.k, "] weight");
  check_fp8_scales(op, w.kind, w.n, w.k, w.scales.data(), w.scales.size());
  MatmulF64 r;
  r.batch = 1, r.m = x.dim(0), r.n = w.n, r.k = w.k;
  r.value.assign(static_cast<std::size_t>(r.m * r.n), 0.0);
  r.abs_sum.assign(r.value.size(), 0.0);
  std::vector<double> wv(static_cast<std::size_t>(w.n * w.k));
  for (std::int64_t i = 0; i < w.n; ++i)
    for (std::int64_t j = 0; j < w.k; ++j) wv[static_cast<std::size_t>(i * w.k + j)] = fp8_weight_value(w, i, j);
  detail::parallel_for(r.m, threads, [&](std::int64_t i) {
    for (std::int64_t j = 0; j < r.n; ++j) {
      double s = 0, a = 0;
      for (std::int64_t l = 0; l < r.k; ++l) {
        const double p = load_as_double(x.data, x.dtype, i * x.stride(0) + l * x.stride(1)) *
                         wv[static_cast<std::size_t>(j * r.k + l)];
        s += p, a += std::fabs(p);
      }
      r.value[static_cast<std::size_t>(i * r.n + j)] = s;
      r.abs_sum[static_cast<std::size_t>(i * r.n + j)] = a;
    }
  });
  return r;
}
}  // namespace cpu

}  // namespace llmm
