// Element-wise comparison of an output against the float64 reference with a tolerance
//   |out - ref| <= atol + c * u * sum_k |a_ik||b_kj| + u_out * |ref|
// (u: unit roundoff of the precision mode; u_out: of the output dtype, for its one rounding).
#pragma once
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "llmm/reference.hpp"
#include "llmm/view.hpp"

namespace llmm::test {

struct Tolerance {
  double atol = 0.0;
  double c = 1.0;
  double u = 0.0;
  double u_out = 0.0;
  // Inputs hold Inf/NaN on purpose: where the reference is NaN, +Inf or -Inf the output must be
  // exactly that (IEEE propagation); finite reference values keep the bound above.
  bool ieee_nonfinite = false;
};

struct CompareResult {
  std::int64_t checked = 0, bad = 0;
  std::int64_t nonfinite = 0;  // elements whose reference is NaN or +-Inf (ieee_nonfinite)
  std::int64_t first_bad = -1;  // flat [batch, m, n] index
  double first_bad_got = 0, first_bad_want = 0, first_bad_bound = 0;
  double max_abs_err = 0, max_rel_err = 0;
  bool ok() const { return checked > 0 && bad == 0; }
  std::string summary() const;
};

// `out` is a 3-D [batch, m, n] host view with the reference's sizes. NaN/Inf never pass, but
// for a non-finite reference under tol.ieee_nonfinite (then only the same class passes).
CompareResult compare(const View& out, const cpu::MatmulF64& ref, const Tolerance& tol);

// gtest form: EXPECT_TRUE(matches_reference(out, ref, tol)) prints the summary on failure.
::testing::AssertionResult matches_reference(const View& out, const cpu::MatmulF64& ref, const Tolerance& tol);

}  // namespace llmm::test
