#include "support/moe_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "llmm/reference.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"

namespace llmm::test {

std::string MoeCase::describe() const {
  static const char* routings[] = {"uniform", "skewed", "zipf", "repeats"};
  std::ostringstream os;
  os << "m" << p.m << " n" << p.n << " k" << p.k << " top_k" << p.top_k << " E" << p.n_experts << " w "
     << dtype_name(w_dtype) << " in " << dtype_name(p.input_dtype) << " out " << dtype_name(p.output_dtype) << " "
     << (p.input_layout == MatmulIdInputLayout::Slotted ? "slotted" : "shared") << " "
     << matmul_id_route_name(p.route) << " pad " << expert_pad << " " << routings[static_cast<int>(routing)]
     << (out_of_range_every ? " oor" : "") << (precision == Precision::Fast ? " fast" : " exact") << " seed " << seed;
  return os.str();
}

MatmulIdParams with_stride(MatmulIdParams p, DType w, std::int64_t pad) {
  p.expert_stride_bytes = (static_cast<std::uint64_t>(p.n) * p.k + static_cast<std::uint64_t>(pad)) * dtype_size(w);
  return p;
}

std::vector<std::uint32_t> make_ids(const MoeCase& c) {
  Rng rng(c.seed * 31 + 7);
  const std::uint32_t E = c.p.n_experts, K = c.p.top_k;
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(c.p.m) * K);
  std::vector<std::uint32_t> perm(E);
  for (std::uint32_t t = 0; t < c.p.m; ++t) {
    std::uint32_t* row = &ids[static_cast<std::size_t>(t) * K];
    switch (c.routing) {
      case Routing::Uniform:  // distinct: partial Fisher-Yates
        for (std::uint32_t e = 0; e < E; ++e) perm[e] = e;
        for (std::uint32_t s = 0; s < K; ++s) {
          std::uint32_t j = s + static_cast<std::uint32_t>(rng.uniform_int(0, E - 1 - s));
          std::swap(perm[s], perm[j]);
          row[s] = perm[s];
        }
        break;
      case Routing::Skewed:  // every token on the same top_k experts (all on one when top_k = 1)
        for (std::uint32_t s = 0; s < K; ++s) row[s] = (E - 1 - s) % E;
        break;
      case Routing::Zipf:  // P(e) ~ 1 / (e + 1), distinct by rejection
        for (std::uint32_t s = 0; s < K; ++s) {
          for (;;) {
            double u = rng.uniform(), h = 0, total = 0;
            for (std::uint32_t e = 0; e < E; ++e) total += 1.0 / (e + 1);
            std::uint32_t pick = E - 1;
            for (std::uint32_t e = 0; e < E; ++e) {
              h += 1.0 / (e + 1) / total;
              if (u < h) {
                pick = e;
                break;
              }
            }
            if (std::find(row, row + s, pick) == row + s) {
              row[s] = pick;
              break;
            }
          }
        }
        break;
      case Routing::Repeats:
        for (std::uint32_t s = 0; s < K; ++s) row[s] = static_cast<std::uint32_t>(rng.uniform_int(0, std::min<std::uint32_t>(E, 3) - 1));
        break;
    }
  }
  if (c.out_of_range_every > 0)
    for (std::size_t r = 0; r < ids.size(); r += static_cast<std::size_t>(c.out_of_range_every))
      ids[r] = (r / static_cast<std::size_t>(c.out_of_range_every)) % 2 ? E + static_cast<std::uint32_t>(r % 5) : 0xFFFFFFFFu;
  return ids;
}

MoeOutcome run_moe_case(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch) {
  const MatmulIdParams p = with_stride(c.p, c.w_dtype, c.expert_pad);
  const MatmulIdCapability cap = matmul_id_capability(c.w_dtype, p);
  const std::size_t wes = dtype_size(c.w_dtype), ies = dtype_size(p.input_dtype), oes = dtype_size(p.output_dtype);
  HostTensor w = host_tensor(c.w_dtype, {static_cast<std::int64_t>(cap.required_weight_bytes / wes)});
  HostTensor in = host_tensor(p.input_dtype, {static_cast<std::int64_t>(cap.required_input_bytes / ies)});
  HostTensor out = host_tensor(p.output_dtype, {static_cast<std::int64_t>(cap.required_output_bytes / oes)});
  fill_random(w.view, c.seed * 3 + 1);
  fill_random(in.view, c.seed * 3 + 2, 0.5);
  poison(out.bytes.data(), out.bytes.size());
  std::vector<std::uint32_t> ids = make_ids(c);
  HostTensor hid = host_tensor(DType::U32, {static_cast<std::int64_t>(ids.size())});
  std::memcpy(hid.bytes.data(), ids.data(), ids.size() * 4);
  MatmulIdOptions o;
  o.precision = c.precision;
  MoeOutcome r;
  if (ctx.is_cuda()) {
    DeviceTensor dw = to_device(w), din = to_device(in), dids = to_device(hid), dout = to_device(out);
    r.receipt = matmul_id(ctx, dw.view, din.view, dids.view, dout.view, scratch, p, o);
    ctx.synchronize();
    to_host(dout, out);
  } else {
    r.receipt = matmul_id(ctx, w.view, in.view, hid.view, out.view, scratch, p, o);
  }
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(w.view.data, c.w_dtype, in.view.data, ids.data(), p);
  // Tolerance: f32 accumulation; 16-bit rounding of f32 operands on tensor cores (Fast), or the
  // bf16 split of Exact; one rounding of the output.
  double u = static_cast<double>(p.k) * std::ldexp(1.0, -24);
  bool f32_operand = p.input_dtype == DType::F32 || c.w_dtype == DType::F32;
  if (f32_operand) u += c.precision == Precision::Fast ? 2 * std::ldexp(1.0, -8) : std::ldexp(1.0, -15);
  double atol = p.output_dtype == DType::F16 ? std::ldexp(1.0, -25) : 1e-30;
  View out3 = View::contiguous(out.view.data, p.output_dtype, {1, ref.rows, ref.n});
  cpu::MatmulF64 as_dense{1, ref.rows, ref.n, p.k, ref.value, ref.abs_sum};
  r.cmp = compare(out3, as_dense, Tolerance{atol, 1.0, u, unit_roundoff(p.output_dtype)});
  for (std::size_t row = 0; row < ids.size(); ++row)
    if (ids[row] >= p.n_experts) {
      ++r.zero_rows_checked;  // compare() already demanded |out| <= atol there (reference 0, abs_sum 0)
    }
  r.out_bytes = out.bytes;
  return r;
}

}  // namespace llmm::test
