#include "support/tq2_case.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "llmm/reference.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

namespace llmm::test {

std::vector<BlockTQ2_128> seed_tq2_blocks(std::int64_t n, std::int64_t k, std::uint32_t lcg) {
  auto next_code = [&] {
    lcg = lcg * 1664525u + 1013904223u;
    return static_cast<std::uint8_t>((lcg >> 16) % 3);
  };
  std::vector<BlockTQ2_128> blocks;
  for (std::int64_t row = 0; row < n; ++row)
    for (std::int64_t bk = 0; bk < k / 128; ++bk) {
      BlockTQ2_128 b{};
      for (auto& q : b.qs) {
        std::uint8_t c0 = next_code(), c1 = next_code(), c2 = next_code(), c3 = next_code();
        q = static_cast<std::uint8_t>(c0 | (c1 << 2) | (c2 << 4) | (c3 << 6));
      }
      b.d = f32_to_f16_bits(0.05f + 0.003f * static_cast<float>(row % 17) + 0.002f * static_cast<float>(bk));
      blocks.push_back(b);
    }
  return blocks;
}

std::vector<float> seed_tq2_input(std::int64_t m, std::int64_t k) {
  std::vector<float> in(static_cast<std::size_t>(m * k));
  for (std::int64_t i = 0; i < m * k; ++i) {
    float row = static_cast<float>(i / k), col = static_cast<float>(i % k);
    in[static_cast<std::size_t>(i)] = std::sin(col * 0.011f - 0.37f) + row * 0.0005f;
  }
  return in;
}

std::string Tq2Case::describe() const {
  std::ostringstream os;
  os << "m" << m << " n" << n << " k" << k << " " << tq2_route_name(route) << " "
     << (precision == Precision::Exact ? "exact" : "fast") << " in " << dtype_name(in_dtype) << " out "
     << dtype_name(out_dtype) << " pad " << pad << (seed_input ? " seed-input" : " random-input");
  if (wide_exp > 0) os << " wide 2^+-" << wide_exp;
  if (zero_group) os << " zero-group";
  if (chunk_rows > 0) os << " chunk " << chunk_rows;
  if (stream_image != Tq2StreamImage::Auto) os << (stream_image == Tq2StreamImage::InBlock ? " image in_block" : " image staged");
  if (caller_workspace) os << " caller-workspace";
  if (nonfinite_every > 0) os << " nonfinite";
  if (rot_block > 0) os << " rotated " << rot_block;
  return os.str();
}

void expect_seed_anti_cap_of_eight(Context& ctx) {
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(40, 256, 0x12345678u);
  const std::size_t bytes = b.size() * sizeof(BlockTQ2_128);
  WeightHandle w = cache.get_or_upload(7700001, b.data(), bytes, 40, 256);
  std::vector<float> wf = tq2_dequantize(b.data(), bytes, 40, 256);
  for (std::int64_t m : {1, 7, 8, 9, 100}) {
    std::vector<float> in(static_cast<std::size_t>(m * 256)), out(static_cast<std::size_t>(m * 40), NAN);
    for (std::int64_t i = 0; i < m * 256; ++i)
      in[static_cast<std::size_t>(i)] = static_cast<float>(i % 256) * 0.013f - 0.4f + static_cast<float>(i / 256) * 0.0007f;
    gemm_tq2(ctx, w, in.data(), out.data(), m, 40, 256);
    double max_err = 0;
    bool nonzero = false;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < 40; ++j) {
        double want = 0;
        for (std::int64_t l = 0; l < 256; ++l)
          want += static_cast<double>(in[static_cast<std::size_t>(i * 256 + l)]) * wf[static_cast<std::size_t>(j * 256 + l)];
        double got = out[static_cast<std::size_t>(i * 40 + j)];
        max_err = std::max(max_err, std::isfinite(got) ? std::fabs(got - want) : INFINITY);
        nonzero = nonzero || std::fabs(got) > 1e-6;
      }
    EXPECT_LT(max_err, 1e-3) << "m " << m;
    EXPECT_TRUE(nonzero) << "m " << m;
  }
}

Tq2Outcome run_tq2_case(Context& ctx, TernaryWeightCache& cache, const Tq2Case& c) {
  std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(c.n, c.k, 0x9E3779B1u ^ (static_cast<std::uint32_t>(c.n) << 8) ^
                                                                   static_cast<std::uint32_t>(c.k));
  std::uint64_t key = (static_cast<std::uint64_t>(c.n) << 32) ^ static_cast<std::uint64_t>(c.k);
  WeightHandle w = cache.get_or_upload(key, blocks.data(), blocks.size() * sizeof(BlockTQ2_128), c.n, c.k);

  HostTensor in = host_tensor_3d(c.in_dtype, 1, c.m, c.k, c.pad);
  HostTensor out = host_tensor_3d(c.out_dtype, 1, c.m, c.n, c.pad);
  if (c.seed_input) {
    std::vector<float> s = seed_tq2_input(c.m, c.k);
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t l = 0; l < c.k; ++l)
        store_from_double(in.view.data, c.in_dtype, i * in.view.stride(1) + l, s[static_cast<std::size_t>(i * c.k + l)]);
  } else if (c.wide_exp > 0) {
    Rng rng(c.seed);
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t l = 0; l < c.k; ++l) {
        double x = (0.5 + rng.uniform()) * std::ldexp(1.0, static_cast<int>(rng.uniform_int(-c.wide_exp, c.wide_exp)));
        store_from_double(in.view.data, c.in_dtype, i * in.view.stride(1) + l, rng.next() & 1 ? -x : x);
      }
  } else {
    fill_random(in.view, c.seed);
  }
  if (c.zero_group)
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t l = 128; l < 256 && l < c.k; ++l) store_from_double(in.view.data, c.in_dtype, i * in.view.stride(1) + l, 0.0);
  inject_nonfinite(in.view, c.seed + 77, c.nonfinite_every);
  poison(out.bytes.data(), out.bytes.size());
  // The rotation's signs and the input the reference sees: H (s * x) per block, in float64 by
  // the Sylvester recursion written here, rounded to f32 once.
  HostTensor signs = host_tensor_3d(DType::F32, 1, 1, c.k > 0 ? c.k : 1);
  HostTensor rotated = host_tensor_3d(DType::F32, 1, c.m, c.k);
  if (c.rot_block > 0) {
    Rng rng(c.seed * 7919 + 13);
    for (std::int64_t l = 0; l < c.k; ++l) store_from_double(signs.view.data, DType::F32, l, rng.next() & 1 ? -1.0 : 1.0);
    const std::int64_t b = c.rot_block;
    std::vector<double> h(static_cast<std::size_t>(b * b));  // H_b, built by H_2j = [[H_j, H_j], [H_j, -H_j]]
    h[0] = 1.0;
    for (std::int64_t j = 1; j < b; j *= 2)
      for (std::int64_t r = 0; r < j; ++r)
        for (std::int64_t q = 0; q < j; ++q) {
          const double v = h[static_cast<std::size_t>(r * b + q)];
          h[static_cast<std::size_t>(r * b + q + j)] = v, h[static_cast<std::size_t>((r + j) * b + q)] = v;
          h[static_cast<std::size_t>((r + j) * b + q + j)] = -v;
        }
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t l0 = 0; l0 < c.k; l0 += b)
        for (std::int64_t r = 0; r < b; ++r) {
          double acc = 0;
          for (std::int64_t q = 0; q < b; ++q)
            acc += h[static_cast<std::size_t>(r * b + q)] * signs.get(l0 + q) * in.get(i * in.view.stride(1) + l0 + q);
          store_from_double(rotated.view.data, DType::F32, i * c.k + l0 + r, acc / std::sqrt(static_cast<double>(b)));
        }
  }
  auto as2d = [](const View& v) {
    return View::strided(v.data, v.dtype, {v.dim(1), v.dim(2)}, {v.stride(1), 1}, v.device, v.device_index);
  };
  Tq2Options o;
  o.precision = c.precision, o.force_route = c.route;
  o.dequant_chunk_rows = c.chunk_rows;
  o.stream_image = c.stream_image;
  o.rotation_block = c.rot_block;
  if (c.rot_block > 0) o.rotation_signs = static_cast<const float*>(signs.view.data);
  Tq2Outcome r;
  if (ctx.is_cuda()) {
    DeviceTensor dsigns = to_device(signs);
    if (c.rot_block > 0) o.rotation_signs = static_cast<const float*>(dsigns.view.data);
    DeviceBuffer ws;
    if (c.caller_workspace) {
      o.workspace_bytes = tq2_workspace_bytes(c.m, c.n, c.k, c.in_dtype, c.out_dtype, o);
      ws = DeviceBuffer(o.workspace_bytes, ctx.arch().device_index);
      o.workspace = ws.data();
    }
    DeviceTensor din = to_device(in), dout = to_device(out);
    r.receipt = gemm_tq2(ctx, w, as2d(din.view), as2d(dout.view), o);
    ctx.synchronize();
    to_host(dout, out);
  } else {
    r.receipt = gemm_tq2(ctx, w, as2d(in.view), as2d(out.view), o);
  }
  std::vector<float> wf = tq2_dequantize(blocks.data(), blocks.size() * sizeof(BlockTQ2_128), c.n, c.k);
  cpu::MatmulF64 ref = cpu::matmul_f64({c.rot_block > 0 ? rotated.view : in.view,
                                         View::contiguous(wf.data(), DType::F32, {1, c.n, c.k}), false, true});
  // Tolerance: f32 accumulation, plus the input's rounding in Fast (bf16) or the exact split.
  double u = static_cast<double>(c.k) * std::ldexp(1.0, -24);
  if (c.in_dtype == DType::F32) u += c.precision == Precision::Fast ? std::ldexp(1.0, -8) : std::ldexp(1.0, -16);
  double atol = c.out_dtype == DType::F16 ? std::ldexp(1.0, -25) : 1e-30;
  r.cmp = compare(out.view, ref, Tolerance{atol, 1.0, u, unit_roundoff(c.out_dtype), c.nonfinite_every > 0});
  r.max_abs_err = r.cmp.max_abs_err;
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j)
      if (std::fabs(load_as_double(out.view.data, c.out_dtype, i * out.view.stride(1) + j)) > 1e-6) r.any_nonzero = true;
  r.padding_untouched = true;
  std::size_t es = dtype_size(c.out_dtype);
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = c.n; j < c.n + c.pad; ++j)
      for (std::size_t b = 0; b < es; ++b) {
        std::size_t at = static_cast<std::size_t>(i * out.view.stride(1) + j) * es + b;
        if (at < out.bytes.size() && out.bytes[at] != 0xFF) r.padding_untouched = false;
      }
  r.out_bytes = out.bytes;
  return r;
}

}  // namespace llmm::test
