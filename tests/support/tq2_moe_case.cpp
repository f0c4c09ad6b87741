#include "support/tq2_moe_case.hpp"

#include <cmath>
#include <cstring>

#include "support/random.hpp"
#include "support/tq2_case.hpp"

namespace llmm::test {

std::string Tq2MoeCase::describe() const {
  return base.describe() + " tq2 route " + tq2_moe_route_name(route) + (row_exponents.empty() ? "" : " rows 2^e apart");
}

Tq2MoeOutcome run_tq2_moe_case(Context& ctx, TernaryWeightCache& cache, const Tq2MoeCase& c, MatmulIdScratch* scratch) {
  MoeCase mc = c.base;
  mc.w_dtype = DType::F32, mc.expert_pad = 0, mc.nonfinite_every = 0;
  MoeBuffers b = make_moe_buffers(mc);
  if (!c.row_exponents.empty()) {
    View row = b.in.view;  // the first dimension cut to one index, every other kept
    row.shape[0] = 1;
    for (std::int64_t i = 0; i < b.in.view.dim(0); ++i) {
      row.data = b.in.bytes.data() + static_cast<std::size_t>(i * b.in.view.stride(0)) * dtype_size(row.dtype);
      const int e = c.row_exponents[static_cast<std::size_t>(i) % c.row_exponents.size()];
      fill_random(row, mc.seed * 7 + static_cast<std::uint64_t>(i), std::ldexp(1.0, e));
    }
  }
  inject_nonfinite(b.in.view, mc.seed * 3 + 2, c.base.nonfinite_every);  // the input only: ternary weights are finite
  const MatmulIdParams& p = b.p;
  const std::int64_t rows = static_cast<std::int64_t>(p.n_experts) * p.n;
  const std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(rows, p.k, static_cast<std::uint32_t>(mc.seed * 2654435761u));
  const std::size_t bytes = blocks.size() * sizeof(BlockTQ2_128);
  const std::vector<float> wf = tq2_dequantize(blocks.data(), bytes, rows, p.k);
  std::memcpy(b.w.bytes.data(), wf.data(), wf.size() * 4);  // [E, n, k] f32, no padding
  const WeightHandle h = cache.get_or_upload_experts(mc.seed, blocks.data(), bytes, p.n_experts, p.n, p.k);
  Tq2MoeOptions o;
  o.force_route = c.route;
  Tq2MoeOutcome r;
  if (ctx.is_cuda()) {
    DeviceTensor din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
    r.receipt = matmul_id_tq2(ctx, h, din.view, dids.view, dout.view, scratch, p.input_layout, o);
    ctx.synchronize();
    to_host(dout, b.out);
  } else {
    r.receipt = matmul_id_tq2(ctx, h, b.in.view, b.ids.view, b.out.view, scratch, p.input_layout, o);
  }
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::F32, b.in.view.data, b.ids.view.data, p);
  // f32 accumulation over k of exact products (a ternary weight times a 16-bit input is exact in
  // f32; an f32 input's product rounds once), then one rounding to the output dtype.
  const double u = static_cast<double>(p.k + 1) * std::ldexp(1.0, -24);
  const double atol = p.output_dtype == DType::F16 ? std::ldexp(1.0, -25) : 1e-30;
  View out3 = View::contiguous(b.out.view.data, p.output_dtype, {1, ref.rows, ref.n});
  cpu::MatmulF64 as_dense{1, ref.rows, ref.n, p.k, ref.value, ref.abs_sum};
  r.cmp = compare(out3, as_dense, Tolerance{atol, 1.0, u, unit_roundoff(p.output_dtype), c.base.nonfinite_every > 0});
  for (std::int64_t id : make_ids(mc))
    if (const std::int64_t v = as_stored(mc.ids_dtype, id); v < 0 || v >= static_cast<std::int64_t>(p.n_experts))
      ++r.zero_rows_checked;
  r.out_bytes = b.out.bytes;
  return r;
}

}  // namespace llmm::test
