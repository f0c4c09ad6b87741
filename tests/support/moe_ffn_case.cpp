#include "support/moe_ffn_case.hpp"

#include <cmath>
#include <sstream>

#include "support/random.hpp"

namespace llmm::test {

std::string MoeFfnCase::describe() const {
  std::ostringstream s;
  s << "moe_ffn m " << m << " hidden " << hidden << " inter " << inter << " top_k " << top_k << " experts " << experts
    << " x " << dtype_name(x_dtype) << " w " << dtype_name(w_dtype) << " weights " << dtype_name(w_route_dtype) << " ids "
    << dtype_name(ids_dtype) << " " << moe_activation_name(activation) << " oor " << out_of_range_every << " nan "
    << nan_token << " seed " << seed;
  return s.str();
}

namespace {
double act(MoeActivation a, double g, double u) {
  if (a == MoeActivation::Silu) return g / (1.0 + std::exp(-g)) * u;
  if (a == MoeActivation::GeluTanh) return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
  return 0.5 * g * (1.0 + std::erf(g * 0.7071067811865476)) * u;
}
}  // namespace

MoeFfnBuffers make_moe_ffn(const MoeFfnCase& c) {
  MoeFfnBuffers b;
  b.x = host_tensor(c.x_dtype, {c.m, c.hidden});
  b.w_gate_up = host_tensor(c.w_dtype, {c.experts, 2 * c.inter, c.hidden});
  b.w_down = host_tensor(c.w_dtype, {c.experts, c.hidden, c.inter});
  b.ids = host_tensor(c.ids_dtype, {c.m, c.top_k});
  b.topk_weights = host_tensor(c.w_route_dtype, {c.m, c.top_k});
  b.out = host_tensor(c.x_dtype, {c.m, c.hidden});
  // Scales keep the activations O(1): |x| ~ 1, rows of hidden terms of ~1 / sqrt(hidden).
  fill_random(b.x.view, c.seed);
  fill_random(b.w_gate_up.view, c.seed + 1, 0.5 / std::sqrt(static_cast<double>(c.hidden)));
  fill_random(b.w_down.view, c.seed + 2, 0.5 / std::sqrt(static_cast<double>(c.inter)));
  fill_random(b.topk_weights.view, c.seed + 3, 0.3);
  if (c.prepare_weights) c.prepare_weights(b.w_gate_up, b.w_down);
  if (c.nan_token >= 0 && c.nan_token < c.m)
    store_from_double(b.x.view.data, c.x_dtype, c.nan_token * c.hidden + c.hidden / 2, NAN);
  Rng rng(c.seed + 4);
  for (std::int64_t r = 0; r < c.m * c.top_k; ++r) {
    std::int64_t id = rng.uniform_int(0, c.experts - 1);
    if (c.out_of_range_every > 0 && r % c.out_of_range_every == c.out_of_range_every - 1)
      id = c.ids_dtype == DType::U32 ? c.experts + 3 : (r % 2 ? -1 : c.experts);
    store_from_double(b.ids.view.data, c.ids_dtype, r, static_cast<double>(id));
  }
  poison(b.out.view);
  b.ref.assign(static_cast<std::size_t>(c.m * c.hidden), 0.0);
  b.magnitude.assign(b.ref.size(), 0.0);
  std::vector<double> a(static_cast<std::size_t>(c.inter));
  for (std::int64_t t = 0; t < c.m; ++t)
    for (std::int64_t s = 0; s < c.top_k; ++s) {
      const double idv = b.ids.get(t * c.top_k + s), w = b.topk_weights.get(t * c.top_k + s);
      const bool in_range = idv >= 0 && idv < static_cast<double>(c.experts);
      const auto e = in_range ? static_cast<std::int64_t>(idv) : 0;
      for (std::int64_t i = 0; i < c.inter && in_range; ++i) {
        double g = 0, u = 0;
        for (std::int64_t l = 0; l < c.hidden; ++l) {
          const double xv = b.x.get(t * c.hidden + l);
          g += b.w_gate_up.get((e * 2 * c.inter + i) * c.hidden + l) * xv;
          u += b.w_gate_up.get((e * 2 * c.inter + c.inter + i) * c.hidden + l) * xv;
        }
        a[static_cast<std::size_t>(i)] = act(c.activation, g, u);
      }
      for (std::int64_t j = 0; j < c.hidden; ++j) {
        double y = 0, my = 0;
        for (std::int64_t i = 0; i < c.inter && in_range; ++i) {
          const double wd = b.w_down.get((e * c.hidden + j) * c.inter + i);
          y += wd * a[static_cast<std::size_t>(i)];
          my += std::fabs(wd * a[static_cast<std::size_t>(i)]);
        }
        b.ref[static_cast<std::size_t>(t * c.hidden + j)] += w * y;
        b.magnitude[static_cast<std::size_t>(t * c.hidden + j)] += std::fabs(w) * my;
      }
    }
  return b;
}

std::string compare_moe_ffn(const MoeFfnBuffers& b, const HostTensor& got, double rel, double out_rel) {
  for (std::size_t i = 0; i < b.ref.size(); ++i) {
    const double r = b.ref[i], g = got.get(static_cast<std::int64_t>(i));
    if (std::isnan(r)) {
      if (!std::isnan(g)) return "element " + std::to_string(i) + ": " + std::to_string(g) + " where the reference is NaN";
      continue;
    }
    const double tol = rel * b.magnitude[i] + out_rel * std::fabs(r) + 1e-30;
    if (!(std::fabs(g - r) <= tol))
      return "element " + std::to_string(i) + " (token " + std::to_string(i / static_cast<std::size_t>(got.view.dim(1))) +
             "): got " + std::to_string(g) + ", float64 " + std::to_string(r) + ", tolerance " + std::to_string(tol);
  }
  return "";
}

}  // namespace llmm::test
