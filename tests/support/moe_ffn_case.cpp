#include "support/moe_ffn_case.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "support/random.hpp"

namespace llmm::test {

std::string MoeFfnCase::describe() const {
  std::ostringstream s;
  s << "moe_ffn m " << m << " hidden " << hidden << " inter " << inter << " top_k " << top_k << " experts " << experts
    << " x " << dtype_name(x_dtype) << " w " << dtype_name(w_dtype) << " weights " << dtype_name(w_route_dtype) << " ids "
    << dtype_name(ids_dtype) << " " << moe_activation_name(activation) << (gated ? "" : "_no_mul") << " "
    << moe_gate_layout_name(layout) << " alpha " << alpha << " limit " << limit << (bias_gate_up ? " bias_gate_up" : "")
    << (bias_down ? " bias_down" : "") << " bias " << dtype_name(bias_dtype) << " oor " << out_of_range_every << " nan "
    << nan_token << " seed " << seed;
  return s.str();
}

namespace {
double f(MoeActivation a, double g) {
  if (a == MoeActivation::Silu) return g / (1.0 + std::exp(-g));
  if (a == MoeActivation::GeluTanh) return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
  if (a == MoeActivation::GeluErf) return 0.5 * g * (1.0 + std::erf(g * 0.7071067811865476));
  if (std::isnan(g)) return g;
  return g > 0 ? g * g : 0.0;  // Relu2
}
double act(const MoeFfnCase& c, double g, double u) {
  if (!c.gated) return f(c.activation, g);
  if (c.activation != MoeActivation::SwigluOai) return f(c.activation, g) * u;
  if (std::isnan(g) || std::isnan(u)) return NAN;
  const double gc = std::min<double>(g, c.limit), uc = std::clamp<double>(u, -c.limit, c.limit);
  return (uc + 1.0) * gc / (1.0 + std::exp(-static_cast<double>(c.alpha) * gc));
}
}  // namespace

MoeFfnOptions moe_ffn_options(const MoeFfnCase& c) {
  MoeFfnOptions o;
  o.activation = c.activation, o.gated = c.gated, o.gate_layout = c.layout;
  o.swiglu_alpha = c.alpha, o.swiglu_limit = c.limit;
  return o;
}

MoeFfnBuffers make_moe_ffn(const MoeFfnCase& c) {
  MoeFfnBuffers b;
  b.x = host_tensor(c.x_dtype, {c.m, c.hidden});
  const std::int64_t gu_rows = c.gated ? 2 * c.inter : c.inter;
  b.w_gate_up = host_tensor(c.w_dtype, {c.experts, gu_rows, c.hidden});
  b.w_down = host_tensor(c.w_dtype, {c.experts, c.hidden, c.inter});
  b.ids = host_tensor(c.ids_dtype, {c.m, c.top_k});
  b.topk_weights = host_tensor(c.w_route_dtype, {c.m, c.top_k});
  b.out = host_tensor(c.x_dtype, {c.m, c.hidden});
  // Scales keep the activations O(1): |x| ~ 1, rows of hidden terms of ~1 / sqrt(hidden).
  fill_random(b.x.view, c.seed);
  fill_random(b.w_gate_up.view, c.seed + 1, 0.5 / std::sqrt(static_cast<double>(c.hidden)));
  fill_random(b.w_down.view, c.seed + 2, 0.5 / std::sqrt(static_cast<double>(c.inter)));
  fill_random(b.topk_weights.view, c.seed + 3, 0.3);
  if (c.bias_gate_up) {
    b.bias_gate_up = host_tensor(c.bias_dtype, {c.experts, gu_rows});
    fill_random(b.bias_gate_up.view, c.seed + 5, 0.5);
  }
  if (c.bias_down) {
    b.bias_down = host_tensor(c.bias_dtype, {c.experts, c.hidden});
    fill_random(b.bias_down.view, c.seed + 6, 0.5);
  }
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
        const bool il = c.gated && c.layout == MoeGateLayout::Interleaved;
        const std::int64_t gr = il ? 2 * i : i, ur = il ? 2 * i + 1 : c.inter + i;
        double g = c.bias_gate_up ? b.bias_gate_up.get(e * gu_rows + gr) : 0.0;
        double u = c.bias_gate_up && c.gated ? b.bias_gate_up.get(e * gu_rows + ur) : 0.0;
        for (std::int64_t l = 0; l < c.hidden; ++l) {
          const double xv = b.x.get(t * c.hidden + l);
          g += b.w_gate_up.get((e * gu_rows + gr) * c.hidden + l) * xv;
          if (c.gated) u += b.w_gate_up.get((e * gu_rows + ur) * c.hidden + l) * xv;
        }
        a[static_cast<std::size_t>(i)] = act(c, g, u);
      }
      for (std::int64_t j = 0; j < c.hidden; ++j) {
        const double bd = c.bias_down && in_range ? b.bias_down.get(e * c.hidden + j) : 0.0;
        double y = bd, my = std::fabs(bd);
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
