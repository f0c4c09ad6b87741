#include "support/fp8_ffn_case.hpp"

#include <cmath>
#include <memory>

namespace llmm::test {
namespace {

// Expert e's [n, k] f32 weights snapped to code * 2^-p with p by (expert, scale group); the
// codes and scales written to the stacks.
void snap(HostTensor& w, Fp8ScaleKind kind, HostTensor& codes, HostTensor& scales) {
  const std::int64_t experts = w.view.dim(0), n = w.view.dim(1), k = w.view.dim(2);
  const auto [sr, sc] = fp8_scale_shape(kind, n, k);
  codes = host_tensor(DType::F8E4M3, {experts, n, k});
  scales = host_tensor(DType::F32, {experts, sr, sc});
  auto* f = static_cast<float*>(w.view.data);
  auto* c = static_cast<std::uint8_t*>(codes.view.data);
  auto* s = static_cast<float*>(scales.view.data);
  for (std::int64_t e = 0; e < experts; ++e)
    for (std::int64_t g = 0; g < sr * sc; ++g) s[e * sr * sc + g] = std::ldexp(1.0f, -6 - static_cast<int>((e + 3 * g) % 4));
  for (std::int64_t e = 0; e < experts; ++e)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l) {
        const std::int64_t g = kind == Fp8ScaleKind::Tensor ? 0 : kind == Fp8ScaleKind::Channel ? j : (j / 128) * sc + l / 128;
        const float scale = s[e * sr * sc + g];
        const std::int64_t i = (e * n + j) * k + l;
        c[i] = f32_to_e4m3fn_bits(f[i] / scale, true);
        f[i] = e4m3fn_bits_to_f32(c[i]) * scale;  // exact: a 4-bit significand times a power of two
      }
}

}  // namespace

std::shared_ptr<Fp8FfnStacks> snap_to_fp8(MoeFfnCase& c, Fp8ScaleKind kind) {
  auto stacks = std::make_shared<Fp8FfnStacks>();
  c.prepare_weights = [stacks, kind](HostTensor& gu, HostTensor& dn) {
    snap(gu, kind, stacks->gu_codes, stacks->gu_scales);
    snap(dn, kind, stacks->dn_codes, stacks->dn_scales);
  };
  return stacks;
}

}  // namespace llmm::test
