// Float64 reference matmul: the oracle every kernel is tested against. Deliberately plain:
// operands are converted to double, then each output row is a sequence of axpy passes over
// the rows of B (the inner loop runs over n, which vectorises without reordering any sum).
#include <algorithm>
#include <cmath>
#include <vector>

#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "cpu/parallel_for.hpp"
#include "llmm/reference.hpp"

namespace llmm::cpu {
namespace {

constexpr const char* kOp = "reference_matmul";

struct Dims {
  std::int64_t batch, m, n, k;
};

Dims check_problem(const MatmulProblem& p) {
  for (const View* v : {&p.a, &p.b}) {
    const char* name = v == &p.a ? "a" : "b";
    validate_view(*v, kOp, name);
    if (v->rank != 3) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " must be 3-D [batch, rows, cols], got ", v->describe());
    if (!is_float(v->dtype)) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " has non-float dtype ", dtype_name(v->dtype));
    if (v->device != DeviceKind::CPU) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is not on the CPU: ", v->describe());
  }
  Dims d{};
  d.m = p.transpose_a ? p.a.dim(2) : p.a.dim(1);
  d.k = p.transpose_a ? p.a.dim(1) : p.a.dim(2);
  std::int64_t kb = p.transpose_b ? p.b.dim(2) : p.b.dim(1);
  d.n = p.transpose_b ? p.b.dim(1) : p.b.dim(2);
  if (kb != d.k) fail(ErrorCode::InvalidArgument, kOp, ": inner dimensions differ: a gives k=", d.k, ", b gives k=", kb);
  std::int64_t ba = p.a.dim(0), bb = p.b.dim(0);
  if (ba != bb && ba != 1 && bb != 1)
    fail(ErrorCode::InvalidArgument, kOp, ": batch sizes ", ba, " and ", bb, " differ");
  d.batch = std::max(ba, bb);
  (void)checked_mul(checked_mul(to_u64(d.batch, "batch"), to_u64(d.m, "m"), kOp), to_u64(d.n, "n"), kOp);
  return d;
}

// Element (r, c) of batch `bi` of a 3-D view, as double; a batch of size 1 broadcasts.
double at(const View& v, std::int64_t bi, std::int64_t r, std::int64_t c) {
  std::int64_t b = v.dim(0) == 1 ? 0 : bi;
  return load_as_double(v.data, v.dtype, b * v.stride(0) + r * v.stride(1) + c * v.stride(2));
}

// Calls sink(batch, row, j0, values, abs_sums) for every block of output columns
// (values[j - j0] for columns j0..j0 + values.size()); abs_sums is empty unless asked. Each output
// accumulates over l in order, whatever the threads: the same bits on every run.
template <class Sink>
void compute(const MatmulProblem& p, const Dims& d, bool want_abs, int threads, Sink sink) {
  std::vector<double> bmat(static_cast<std::size_t>(d.k * d.n));
  const std::int64_t block = detail::column_block(d.m, d.n, threads);
  const std::int64_t col_blocks = (d.n + block - 1) / block;
  for (std::int64_t bi = 0; bi < d.batch; ++bi) {
    if (bi == 0 || p.b.dim(0) != 1)  // b as doubles, [k][n]: at m = 1 this is most of the work
      detail::parallel_for(d.k, threads, [&](std::int64_t l) {
        for (std::int64_t j = 0; j < d.n; ++j)
          bmat[static_cast<std::size_t>(l * d.n + j)] = p.transpose_b ? at(p.b, bi, j, l) : at(p.b, bi, l, j);
      });
    detail::parallel_for(d.m * col_blocks, threads, [&](std::int64_t item) {
      const std::int64_t i = item / col_blocks, j0 = (item % col_blocks) * block;
      const std::int64_t w = std::min(block, d.n - j0);
      std::vector<double> acc(static_cast<std::size_t>(w), 0.0);
      std::vector<double> abs(want_abs ? static_cast<std::size_t>(w) : 0, 0.0);
      for (std::int64_t l = 0; l < d.k; ++l) {
        double av = p.transpose_a ? at(p.a, bi, l, i) : at(p.a, bi, i, l);
        const double* brow = &bmat[static_cast<std::size_t>(l * d.n + j0)];
        for (std::int64_t j = 0; j < w; ++j) acc[static_cast<std::size_t>(j)] += av * brow[j];
        if (want_abs)
          for (std::int64_t j = 0; j < w; ++j) abs[static_cast<std::size_t>(j)] += std::fabs(av * brow[j]);
      }
      sink(bi, i, j0, acc, abs);
    });
  }
}

}  // namespace

MatmulF64 matmul_f64(const MatmulProblem& p, int threads) {
  Dims d = check_problem(p);
  MatmulF64 r{d.batch, d.m, d.n, d.k, {}, {}};
  std::size_t total = static_cast<std::size_t>(d.batch * d.m * d.n);
  r.value.resize(total);
  r.abs_sum.resize(total);
  compute(p, d, true, threads, [&](std::int64_t bi, std::int64_t i, std::int64_t j0, const std::vector<double>& acc,
                                   const std::vector<double>& abs) {
    std::size_t base = static_cast<std::size_t>((bi * d.m + i) * d.n + j0);
    std::copy(acc.begin(), acc.end(), r.value.begin() + static_cast<std::ptrdiff_t>(base));
    std::copy(abs.begin(), abs.end(), r.abs_sum.begin() + static_cast<std::ptrdiff_t>(base));
  });
  return r;
}

void matmul(const MatmulProblem& p, const View& c, int threads) {
  Dims d = check_problem(p);
  validate_view(c, kOp, "c");
  if (c.rank != 3 || c.dim(0) != d.batch || c.dim(1) != d.m || c.dim(2) != d.n)
    fail(ErrorCode::InvalidArgument, kOp, ": c must be [", d.batch, ", ", d.m, ", ", d.n, "], got ", c.describe());
  if (!is_float(c.dtype) || c.device != DeviceKind::CPU)
    fail(ErrorCode::InvalidArgument, kOp, ": c must be a float CPU view, got ", c.describe());
  compute(p, d, false, threads, [&](std::int64_t bi, std::int64_t i, std::int64_t j0, const std::vector<double>& acc,
                                    const std::vector<double>&) {
    for (std::size_t j = 0; j < acc.size(); ++j)
      store_from_double(c.data, c.dtype, bi * c.stride(0) + i * c.stride(1) + (j0 + static_cast<std::int64_t>(j)) * c.stride(2),
                        acc[j]);
  });
}

}  // namespace llmm::cpu
