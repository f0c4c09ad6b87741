#include "support/fp8_case.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

namespace llmm::test {
namespace {

double out_roundoff(DType t) {
  switch (t) {
    case DType::BF16: return std::ldexp(1.0, -8);
    case DType::F16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

Receipt run_fp8_case(Context& ctx, const Fp8Case& c, const MatmulFp8Options& opts) {
  const bool cuda = ctx.is_cuda();
  // Weights with magnitudes that change by row and by K block, so every scale kind matters.
  Rng rng(c.seed);
  std::vector<float> wf(static_cast<std::size_t>(c.n * c.k));
  for (std::int64_t j = 0; j < c.n; ++j)
    for (std::int64_t l = 0; l < c.k; ++l)
      wf[static_cast<std::size_t>(j * c.k + l)] =
          static_cast<float>((2.0 * rng.uniform() - 1.0) * std::ldexp(1.0, static_cast<int>(j % 7) - 3 + static_cast<int>((l / 128) % 3)));
  Fp8Weight q = quantize_fp8(wf.data(), c.n, c.k, c.k, c.kind);
  if (c.nonfinite && c.n > 2 && c.k > 3) q.codes[static_cast<std::size_t>(2 * c.k + 3)] = 0x7F;  // NaN

  HostTensor codes = host_tensor_3d(DType::F8E4M3, 1, c.n, c.k, c.w_pad);
  for (std::int64_t j = 0; j < c.n; ++j)
    std::memcpy(static_cast<unsigned char*>(codes.view.data) + j * (c.k + c.w_pad), q.codes.data() + j * c.k,
                static_cast<std::size_t>(c.k));
  const auto [sr, sc] = fp8_scale_shape(c.kind, c.n, c.k);
  HostTensor scales = host_tensor(DType::F32, {sr, sc});
  std::memcpy(scales.view.data, q.scales.data(), q.scales.size() * 4);

  HostTensor x = host_tensor_3d(c.dtype, 1, c.m, c.k, c.x_pad);
  fill_random(x.view, c.seed + 1);
  const View xh = View::strided(x.view.data, c.dtype, {c.m, c.k}, {c.k + c.x_pad, 1});
  if (c.nonfinite && c.k > 7) {
    if (c.m > 0) store_from_double(xh.data, c.dtype, 5, std::numeric_limits<double>::quiet_NaN());
    if (c.m > 1) store_from_double(xh.data, c.dtype, (c.k + c.x_pad) + 7, std::numeric_limits<double>::infinity());
  }
  HostTensor y = host_tensor_3d(c.dtype, 1, c.m, c.n, c.y_pad);
  std::memset(y.view.data, 0xFF, y.bytes.size());  // NaN in every float dtype

  auto view2 = [](const View& v3, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    return View::strided(v3.data, v3.dtype, {rows, cols}, {ld, 1}, v3.device, v3.device_index);
  };
  // x in e4m3: the caller's codes (rows padded like x's) and scales in the case's layout.
  Fp8Activations qa;
  const std::int64_t groups = (c.k + kFp8Block - 1) / kFp8Block;
  const std::int64_t s_ld = c.x_scales_row_major ? groups : (c.m + 3) / 4 * 4 + c.x_scale_pad;
  HostTensor xc = host_tensor_3d(DType::F8E4M3, 1, c.m, c.k, c.x_pad);
  HostTensor xs = c.x_scales_row_major ? host_tensor(DType::F32, {c.m, groups}) : host_tensor(DType::F32, {groups, s_ld});
  auto x_scales = [&](const View& v) {
    return c.x_scales_row_major ? View::strided(v.data, DType::F32, {c.m, groups}, {groups, 1}, v.device, v.device_index)
                                : View::strided(v.data, DType::F32, {c.m, groups}, {1, s_ld}, v.device, v.device_index);
  };
  if (c.x_e4m3) {
    qa = quantize_fp8_activations(xh, kFp8Block);
    std::memset(xs.view.data, 0xFF, xs.bytes.size());  // NaN where no scale is (the padding: never read)
    for (std::int64_t i = 0; i < c.m; ++i) {
      std::memcpy(static_cast<unsigned char*>(xc.view.data) + i * (c.k + c.x_pad), qa.codes.data() + i * c.k,
                  static_cast<std::size_t>(c.k));
      for (std::int64_t g = 0; g < groups; ++g)
        static_cast<float*>(xs.view.data)[c.x_scales_row_major ? i * groups + g : g * s_ld + i] =
            qa.scales[static_cast<std::size_t>(g * c.m + i)];
    }
  }
  Receipt r;
  if (cuda && c.x_e4m3) {
    DeviceTensor dxc = to_device(xc), dxs = to_device(xs), dc = to_device(codes), ds = to_device(scales), dy = to_device(y);
    const Fp8WeightView w{view2(dc.view, c.n, c.k, c.k + c.w_pad), c.kind, ds.view};
    const Fp8ActivationView xa{view2(dxc.view, c.m, c.k, c.k + c.x_pad), x_scales(dxs.view)};
    r = matmul_fp8(ctx, xa, w, view2(dy.view, c.m, c.n, c.n + c.y_pad), opts);
    ctx.synchronize();
    to_host(dy, y);
  } else if (c.x_e4m3) {
    const Fp8WeightView w{view2(codes.view, c.n, c.k, c.k + c.w_pad), c.kind, scales.view};
    const Fp8ActivationView xa{view2(xc.view, c.m, c.k, c.k + c.x_pad), x_scales(xs.view)};
    r = matmul_fp8(ctx, xa, w, view2(y.view, c.m, c.n, c.n + c.y_pad), opts);
  } else if (cuda) {
    DeviceTensor dx = to_device(x), dc = to_device(codes), ds = to_device(scales), dy = to_device(y);
    const Fp8WeightView w{view2(dc.view, c.n, c.k, c.k + c.w_pad), c.kind, ds.view};
    r = matmul_fp8(ctx, view2(dx.view, c.m, c.k, c.k + c.x_pad), w, view2(dy.view, c.m, c.n, c.n + c.y_pad), opts);
    ctx.synchronize();
    to_host(dy, y);
  } else {
    const Fp8WeightView w{view2(codes.view, c.n, c.k, c.k + c.w_pad), c.kind, scales.view};
    r = matmul_fp8(ctx, xh, w, view2(y.view, c.m, c.n, c.n + c.y_pad), opts);
  }

  // The reference: x as given, or as the W8A8 route quantized it.
  const bool w8a8 = r.route == "cublaslt" || r.route == "tiled_sm90" || c.x_e4m3;
  HostTensor xr = host_tensor(DType::F32, {c.m, c.k});
  const View xrv = View::contiguous(xr.view.data, DType::F32, {c.m, c.k});
  // cublaslt: 1 x 128 groups with block scales, whole rows otherwise; tiled_sm90: 1 x 128 always.
  if (w8a8 && !c.x_e4m3) qa = quantize_fp8_activations(xh, c.kind == Fp8ScaleKind::Block128 || r.route == "tiled_sm90" ? 128 : c.k);
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t l = 0; l < c.k; ++l) {
      double v = load_as_double(xh.data, c.dtype, i * (c.k + c.x_pad) + l);
      if (w8a8) {
        const float s = qa.scales[static_cast<std::size_t>((l / qa.group) * c.m + i)];
        v = static_cast<double>(e4m3fn_bits_to_f32(qa.codes[static_cast<std::size_t>(i * c.k + l)])) * s;
      }
      static_cast<float*>(xr.view.data)[i * c.k + l] = static_cast<float>(v);
    }
  // f32 holds every bf16/f16 value exactly; an e4m3 code times an f32 scale needs up to 28
  // significant bits, so the W8A8 reference recomputes those in double below.
  cpu::MatmulF64 ref = cpu::matmul_fp8_f64(xrv, q, 1);
  if (w8a8) {
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        double s = 0, a = 0;
        for (std::int64_t l = 0; l < c.k; ++l) {
          const double xv = static_cast<double>(e4m3fn_bits_to_f32(qa.codes[static_cast<std::size_t>(i * c.k + l)])) *
                            qa.scales[static_cast<std::size_t>((l / qa.group) * c.m + i)];
          const double p = xv * fp8_weight_value(q, j, l);
          s += p, a += std::fabs(p);
        }
        ref.value[static_cast<std::size_t>(i * c.n + j)] = s;
        ref.abs_sum[static_cast<std::size_t>(i * c.n + j)] = a;
      }
  }

  Tolerance tol;
  tol.u_out = out_roundoff(c.dtype);
  if (r.route == "tiled_sm90") {
    // The engine promotes each 128-k block's tensor-core sum into f32 (reduced precision inside a
    // block only).
    tol.u = std::ldexp(1.0, -11), tol.c = 1.0;
  } else if (w8a8) {
    // cuBLASLt's FP8 tensor cores accumulate in reduced precision between promotions: an H100 run
    // measured up to 4.9 x 2^-13 of sum |x||w| (f32 outputs, k 272 and 512).
    tol.u = std::ldexp(1.0, -10), tol.c = 1.0;
  } else if (r.route == "stream_mma") {
    tol.u = std::ldexp(1.0, -20), tol.c = 4.0;  // exact products, the tensor core's f32 sums (not IEEE-rounded)
  } else if (r.route == "dequant_lt") {
    tol.u = c.dtype == DType::F32 ? std::ldexp(1.0, -20) : out_roundoff(c.dtype), tol.c = 2.0;  // the image's rounding
  } else {
    tol.u = std::ldexp(1.0, -24), tol.c = 16.0;  // exact products, f32 sums
  }
  // Non-finite: the W8A8 route turns a token with an Inf into NaN outputs (its scale is NaN),
  // so every route is held to "non-finite where the reference is" rather than the exact class.
  std::int64_t nonfinite_bad = 0;
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      const double want = ref.value[static_cast<std::size_t>(i * c.n + j)];
      const double got = load_as_double(y.view.data, c.dtype, i * (c.n + c.y_pad) + j);
      if (!std::isfinite(want)) {
        nonfinite_bad += std::isfinite(got) ? 1 : 0;
        ref.value[static_cast<std::size_t>(i * c.n + j)] = 0.0;  // excluded below
        ref.abs_sum[static_cast<std::size_t>(i * c.n + j)] = 0.0;
        store_from_double(y.view.data, c.dtype, i * (c.n + c.y_pad) + j, 0.0);
      }
    }
  EXPECT_EQ(nonfinite_bad, 0) << r.route << " " << r.kernel;
  EXPECT_TRUE(matches_reference(View::strided(y.view.data, c.dtype, {1, c.m, c.n}, {0, c.n + c.y_pad, 1}), ref, tol))
      << r.route << " " << r.kernel << " m " << c.m << " n " << c.n << " k " << c.k << " " << dtype_name(c.dtype) << " "
      << fp8_scale_kind_name(c.kind);
  return r;
}

}  // namespace llmm::test
