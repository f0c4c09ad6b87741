#include "support/fp8_moe_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

namespace llmm::test {

Receipt run_fp8_moe_case(Context& ctx, const Fp8MoeCase& c) {
  Rng rng(c.seed);
  const auto [sr, sc] = fp8_scale_shape(c.kind, c.n, c.k);
  HostTensor codes = host_tensor(DType::F8E4M3, {c.experts, c.n, c.k});
  HostTensor scales = host_tensor(DType::F32, {c.experts, sr, sc});
  std::vector<Fp8Weight> q;
  std::vector<float> wf(static_cast<std::size_t>(c.n * c.k));
  for (std::int64_t e = 0; e < c.experts; ++e) {
    for (std::int64_t j = 0; j < c.n; ++j)
      for (std::int64_t l = 0; l < c.k; ++l)
        wf[static_cast<std::size_t>(j * c.k + l)] = static_cast<float>(
            (2.0 * rng.uniform() - 1.0) * std::ldexp(1.0, static_cast<int>((j + e) % 5) - 2 + static_cast<int>((l / 128) % 3)));
    q.push_back(quantize_fp8(wf.data(), c.n, c.k, c.k, c.kind));
    std::memcpy(static_cast<unsigned char*>(codes.view.data) + e * c.n * c.k, q.back().codes.data(),
                static_cast<std::size_t>(c.n * c.k));
    std::memcpy(static_cast<float*>(scales.view.data) + e * sr * sc, q.back().scales.data(), q.back().scales.size() * 4);
  }
  HostTensor x = host_tensor(c.x_dtype, {c.m, c.k});
  fill_random(x.view, c.seed + 7);
  HostTensor ids = host_tensor(DType::I32, {c.m, c.top_k});
  auto* id = static_cast<std::int32_t*>(ids.view.data);
  for (std::int64_t r = 0; r < c.m * c.top_k; ++r) id[r] = static_cast<std::int32_t>(rng.uniform_int(0, c.experts - 1));
  for (std::int64_t r = 0; r < std::min(c.skew_rows, c.m * c.top_k); ++r) id[r] = 0;
  if (c.m * c.top_k > 3) id[3] = static_cast<std::int32_t>(c.experts + 2);  // out of range: a zero row
  HostTensor out = host_tensor(c.out_dtype, {c.m, c.top_k, c.n});
  std::memset(out.view.data, 0xFF, out.bytes.size());

  Receipt r;
  if (ctx.is_cuda()) {
    DeviceTensor dc = to_device(codes), ds = to_device(scales), dx = to_device(x), di = to_device(ids), dout = to_device(out);
    MatmulIdOptions o;
    o.grouped_kernel = c.grouped_kernel;
    r = matmul_id(ctx, Fp8Experts{dc.view, c.kind, ds.view}, dx.view, di.view, dout.view, nullptr,
                  MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::MayRepeat, c.route, o);
    ctx.synchronize();
    to_host(dout, out);
  } else {
    r = matmul_id(ctx, Fp8Experts{codes.view, c.kind, scales.view}, x.view, ids.view, out.view, nullptr,
                  MatmulIdInputLayout::SharedPerToken, MatmulIdMultiplicity::MayRepeat, c.route);
  }

  // The reference, routed row by routed row through the dense FP8 oracle.
  cpu::MatmulF64 ref;
  ref.batch = 1, ref.m = c.m * c.top_k, ref.n = c.n, ref.k = c.k;
  ref.value.assign(static_cast<std::size_t>(ref.m * c.n), 0.0);
  ref.abs_sum = ref.value;
  for (std::int64_t row = 0; row < c.m * c.top_k; ++row) {
    const std::int32_t e = id[row];
    if (e < 0 || e >= c.experts) continue;
    const View xr = View::contiguous(static_cast<unsigned char*>(x.view.data) + (row / c.top_k) * c.k * dtype_size(c.x_dtype),
                                     c.x_dtype, {1, c.k});
    const cpu::MatmulF64 one = cpu::matmul_fp8_f64(xr, q[static_cast<std::size_t>(e)], 1);
    for (std::int64_t j = 0; j < c.n; ++j) {
      ref.value[static_cast<std::size_t>(row * c.n + j)] = one.value[static_cast<std::size_t>(j)];
      ref.abs_sum[static_cast<std::size_t>(row * c.n + j)] = one.abs_sum[static_cast<std::size_t>(j)];
    }
  }
  Tolerance tol;
  tol.u_out = c.out_dtype == DType::BF16 ? std::ldexp(1.0, -8) : c.out_dtype == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
  const bool grouped_cuda = ctx.is_cuda() && r.route == std::string(matmul_id_route_name(MatmulIdRoute::GroupedPrefill));
  if (grouped_cuda) {
    tol.u = std::ldexp(1.0, -8), tol.c = 2.0;  // weights and input rounded to bf16 in the tiles
  } else {
    tol.u = std::ldexp(1.0, -24), tol.c = 16.0;
  }
  EXPECT_TRUE(matches_reference(View::contiguous(out.view.data, c.out_dtype, {1, c.m * c.top_k, c.n}), ref, tol))
      << r.route << " " << r.kernel << " " << fp8_scale_kind_name(c.kind) << " x " << dtype_name(c.x_dtype) << " out "
      << dtype_name(c.out_dtype) << " m " << c.m;
  return r;
}

}  // namespace llmm::test
