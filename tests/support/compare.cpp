#include "compare.hpp"

#include <cmath>
#include <sstream>

#include "llmm/error.hpp"

namespace llmm::test {

std::string CompareResult::summary() const {
  std::ostringstream os;
  os << bad << " of " << checked << " elements out of tolerance";
  if (nonfinite) os << " (" << nonfinite << " non-finite in the reference)";
  os << "; max abs err " << max_abs_err
     << ", max rel err " << max_rel_err;
  if (first_bad >= 0)
    os << "; first bad at flat index " << first_bad << ": got " << first_bad_got << ", want "
       << first_bad_want << " (bound " << first_bad_bound << ")";
  return os.str();
}

CompareResult compare(const View& out, const cpu::MatmulF64& ref, const Tolerance& tol) {
  if (out.rank != 3 || out.dim(0) != ref.batch || out.dim(1) != ref.m || out.dim(2) != ref.n)
    fail(ErrorCode::InvalidArgument, "compare: output ", out.describe(), " does not match reference [",
         ref.batch, ", ", ref.m, ", ", ref.n, "]");
  CompareResult r;
  for (std::int64_t b = 0; b < ref.batch; ++b)
    for (std::int64_t i = 0; i < ref.m; ++i)
      for (std::int64_t j = 0; j < ref.n; ++j) {
        std::int64_t flat = (b * ref.m + i) * ref.n + j;
        double want = ref.value[static_cast<std::size_t>(flat)];
        double got = load_as_double(out.data, out.dtype, b * out.stride(0) + i * out.stride(1) + j * out.stride(2));
        double bound = tol.atol + tol.c * tol.u * ref.abs_sum[static_cast<std::size_t>(flat)] +
                       tol.u_out * std::fabs(want);
        double err = std::fabs(got - want);
        ++r.checked;
        bool good = std::isfinite(got) && err <= bound;
        if (tol.ieee_nonfinite && !std::isfinite(want)) {  // the class must match exactly
          good = std::isnan(want) ? std::isnan(got) : got == want;
          ++r.nonfinite;
          if (good) continue;
        }
        if (std::isfinite(got)) {
          r.max_abs_err = std::max(r.max_abs_err, err);
          if (want != 0) r.max_rel_err = std::max(r.max_rel_err, err / std::fabs(want));
        } else {
          r.max_abs_err = INFINITY;
        }
        if (!good) {
          if (r.bad++ == 0) {
            r.first_bad = flat;
            r.first_bad_got = got;
            r.first_bad_want = want;
            r.first_bad_bound = bound;
          }
        }
      }
  return r;
}

::testing::AssertionResult matches_reference(const View& out, const cpu::MatmulF64& ref, const Tolerance& tol) {
  CompareResult r = compare(out, ref, tol);
  if (r.ok()) return ::testing::AssertionSuccess() << r.summary();
  return ::testing::AssertionFailure() << r.summary();
}

}  // namespace llmm::test
