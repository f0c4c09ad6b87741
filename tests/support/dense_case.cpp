#include "support/dense_case.hpp"

#include <cmath>
#include <sstream>

#include "core/engine/tiled_sm90_plan.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

namespace llmm::test {

std::string DenseCase::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << " b" << batch << " m" << m << " n" << n << " k" << k << (ta ? " ta" : "") << (tb ? " tb" : "")
     << " pad" << pad << (a_bcast ? " a_bcast" : "") << (b_bcast ? " b_bcast" : "")
     << (precision == Precision::Fast ? " fast" : " exact") << " route " << route_name(route)
     << (nonfinite_every ? " nonfinite" : "") << " seed " << seed;
  return os.str();
}

Tolerance dense_tolerance(DType dtype, Precision precision, std::int64_t k) {
  double acc = static_cast<double>(k) * std::ldexp(1.0, -24);
  double prod = 0;  // 16-bit inputs multiply exactly in f32
  if (dtype == DType::F32) prod = precision == Precision::Fast ? 2 * std::ldexp(1.0, -11) : 4 * std::ldexp(1.0, -22);
  // f16 outputs below 2^-14 are subnormal: their rounding error is absolute (half of 2^-24).
  double atol = dtype == DType::F16 ? std::ldexp(1.0, -25) : 1e-30;
  return Tolerance{atol, 1.0, prod + acc, unit_roundoff(dtype)};
}

namespace {

// True when every byte of `bytes` outside the logical [batch, m, n] elements of `v` is still 0xFF.
bool padding_untouched(const std::vector<unsigned char>& bytes, const View& v) {
  std::vector<bool> logical(bytes.size(), false);
  std::size_t es = dtype_size(v.dtype);
  for (std::int64_t b = 0; b < v.dim(0); ++b)
    for (std::int64_t i = 0; i < v.dim(1); ++i)
      for (std::int64_t j = 0; j < v.dim(2); ++j) {
        std::size_t off = static_cast<std::size_t>(b * v.stride(0) + i * v.stride(1) + j) * es;
        for (std::size_t e = 0; e < es; ++e) logical[off + e] = true;
      }
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (!logical[i] && bytes[i] != 0xFF) return false;
  return true;
}

}  // namespace

DenseOutcome run_dense_case(Context& ctx, const DenseCase& c) {
  HostTensor a = c.ta ? host_tensor_3d(c.dtype, c.batch, c.k, c.m, c.pad, 3 * c.pad, c.a_bcast)
                      : host_tensor_3d(c.dtype, c.batch, c.m, c.k, c.pad, 3 * c.pad, c.a_bcast);
  HostTensor b = c.tb ? host_tensor_3d(c.dtype, c.batch, c.n, c.k, c.pad, 3 * c.pad, c.b_bcast)
                      : host_tensor_3d(c.dtype, c.batch, c.k, c.n, c.pad, 3 * c.pad, c.b_bcast);
  HostTensor out = host_tensor_3d(c.dtype, c.batch, c.m, c.n, c.pad, 3 * c.pad);
  fill_random(a.view, c.seed * 3 + 1);
  fill_random(b.view, c.seed * 3 + 2);
  inject_nonfinite(a.view, c.seed * 3 + 1, c.nonfinite_every);
  inject_nonfinite(b.view, c.seed * 3 + 2, c.nonfinite_every * 2);
  poison(out.bytes.data(), out.bytes.size());

  MatmulOptions o;
  o.transpose_a = c.ta, o.transpose_b = c.tb, o.precision = c.precision, o.force_route = c.route;
  DenseOutcome r;
  if (ctx.is_cuda()) {
    DeviceTensor da = to_device(a), db = to_device(b), dout = to_device(out);
    r.receipt = matmul(ctx, da.view, db.view, dout.view, o);
    ctx.synchronize();
    to_host(dout, out);
  } else {
    r.receipt = matmul(ctx, a.view, b.view, out.view, o);
  }
  cpu::MatmulF64 ref = cpu::matmul_f64({a.view, b.view, c.ta, c.tb});
  Tolerance tol = c.tolerance ? *c.tolerance : dense_tolerance(c.dtype, c.precision, c.k);
  tol.ieee_nonfinite = c.nonfinite_every > 0;
  r.cmp = compare(out.view, ref, tol);
  r.padding_untouched = padding_untouched(out.bytes, out.view);
  r.out_bytes = out.bytes;
  return r;
}

std::optional<MN> tiled_sm90_width_shape(int bn, int sm_count, int bm) {
  for (std::int64_t n : {130, 390, 1000, 3000})
    for (std::int64_t m = bn + 1; m <= 80 * 256; ++m)
      if (m % bn != 0) {
        const engine::TiledSm90Launch l = engine::tiled_sm90_dense_launch(DType::BF16, 1, m, n, sm_count);
        if (l.bn == bn && l.bm == bm) return MN{m, n};
      }
  return std::nullopt;
}

}  // namespace llmm::test
