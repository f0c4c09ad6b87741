#include "support/moe_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "core/moe/moe_kernels.hpp"
#include "llmm/reference.hpp"
#include "support/random.hpp"

namespace llmm::test {

std::string MoeCase::describe() const {
  static const char* routings[] = {"uniform", "skewed", "zipf", "repeats", "counts"};
  std::ostringstream os;
  os << "m" << p.m << " n" << p.n << " k" << p.k << " top_k" << p.top_k << " E" << p.n_experts << " w "
     << dtype_name(w_dtype) << " in " << dtype_name(p.input_dtype) << " out " << dtype_name(p.output_dtype) << " ids "
     << dtype_name(ids_dtype) << " " << (p.input_layout == MatmulIdInputLayout::Slotted ? "slotted" : "shared")
     << (input_rank3 ? "3d" : "") << (slot_major ? " slot-major" : "") << " " << matmul_id_route_name(p.route) << " pad " << expert_pad << "/" << input_pad
     << " " << routings[static_cast<int>(routing)] << (out_of_range_every ? " oor" : "")
     << (precision == Precision::Fast ? " fast" : " exact") << (shape_form ? " shape-form" : "")
     << (nonfinite_every ? " nonfinite" : "") << " kernel " << matmul_id_grouped_kernel_name(grouped_kernel) << " seed "
     << seed;
  return os.str();
}

std::vector<std::int64_t> make_ids(const MoeCase& c) {
  Rng rng(c.seed * 31 + 7);
  const std::uint32_t E = c.p.n_experts, K = c.p.top_k;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(c.p.m) * K);
  std::vector<std::uint32_t> perm(E);
  for (std::uint32_t t = 0; t < c.p.m; ++t) {
    std::int64_t* row = &ids[static_cast<std::size_t>(t) * K];
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
      case Routing::Repeats:  // a token's slots drawn from <= 3 experts: repeats within a token
        for (std::uint32_t s = 0; s < K; ++s) row[s] = rng.uniform_int(0, std::min<std::uint32_t>(E, 3) - 1);
        break;
      case Routing::Counts: break;  // below
    }
  }
  if (c.routing == Routing::Counts) {
    std::vector<std::int64_t> slots;
    for (std::uint32_t e = 0; e < c.expert_counts.size(); ++e) slots.insert(slots.end(), c.expert_counts[e], e);
    if (slots.size() != ids.size()) throw std::invalid_argument("MoeCase: expert_counts must sum to m * top_k");
    for (std::size_t i = slots.size(); i > 1; --i)
      std::swap(slots[i - 1], slots[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
    ids = slots;
  }
  if (c.out_of_range_every > 0) {
    // Values every id dtype must read as out of range: E + r, the largest code (-1 as i32/i64),
    // and for i64 a value that a 32-bit truncation would turn into an in-range id.
    for (std::size_t r = 0, i = 0; r < ids.size(); r += static_cast<std::size_t>(c.out_of_range_every), ++i) {
      switch (i % 3) {
        case 0: ids[r] = static_cast<std::int64_t>(E) + static_cast<std::int64_t>(r % 5); break;
        case 1: ids[r] = c.ids_dtype == DType::U32 ? 0xFFFFFFFFll : -1; break;
        default: ids[r] = c.ids_dtype == DType::I64 ? (1ll << 32) + (r % E) : static_cast<std::int64_t>(E) + 1000; break;
      }
    }
  }
  return ids;
}

std::int64_t as_stored(DType t, std::int64_t v) {
  if (t == DType::U32) return static_cast<std::uint32_t>(v);
  if (t == DType::I32) return static_cast<std::int32_t>(v);
  return v;
}

void store_ids(const MoeCase& c, const std::vector<std::int64_t>& ids, HostTensor& t) {
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const std::int64_t v = ids[r];
    switch (c.ids_dtype) {
      case DType::I64: static_cast<std::int64_t*>(t.view.data)[r] = v; break;
      case DType::I32: static_cast<std::int32_t*>(t.view.data)[r] = static_cast<std::int32_t>(v); break;
      default: static_cast<std::uint32_t*>(t.view.data)[r] = static_cast<std::uint32_t>(v); break;
    }
  }
}

namespace {
// A host tensor of `shape` with the given strides (elements) and storage for its byte extent.
HostTensor strided_tensor(DType dt, std::initializer_list<std::int64_t> shape, std::initializer_list<std::int64_t> strides) {
  HostTensor t;
  t.view = View::strided(nullptr, dt, shape, strides);
  t.bytes.resize(static_cast<std::size_t>(std::max<std::uint64_t>(t.view.byte_extent(), 16)));
  t.view.data = t.bytes.data();
  return t;
}
}  // namespace

MoeBuffers make_moe_buffers(const MoeCase& c) {
  MoeBuffers b;
  MatmulIdParams& p = b.p;
  p = c.p;
  const std::int64_t m = p.m, n = p.n, k = p.k, K = p.top_k, E = p.n_experts;
  const std::int64_t es = n * k + c.expert_pad, ld = k + c.input_pad;
  p.expert_stride_bytes = static_cast<std::uint64_t>(es) * dtype_size(c.w_dtype);
  p.ids_dtype = c.ids_dtype;
  b.w = strided_tensor(c.w_dtype, {E, n, k}, {es, k, 1});
  if (c.input_rank3) {
    p.input_layout = MatmulIdInputLayout::Slotted;
    const std::int64_t ts = K * ld + 3;
    b.in = strided_tensor(p.input_dtype, {m, K, k}, {ts, ld, 1});
    p.input_token_stride = static_cast<std::uint64_t>(ts);
    p.input_slot_stride = static_cast<std::uint64_t>(ld);
  } else if (c.slot_major) {
    p.input_layout = MatmulIdInputLayout::Slotted;
    b.in = strided_tensor(p.input_dtype, {m, K, k}, {ld, m * ld, 1});  // a view [m, top_k, k] over [top_k][m][k]
    p.input_token_stride = static_cast<std::uint64_t>(ld);
    p.input_slot_stride = static_cast<std::uint64_t>(m * ld);
  } else if (p.input_layout == MatmulIdInputLayout::Slotted) {
    b.in = strided_tensor(p.input_dtype, {m * K, k}, {ld, 1});
    p.input_token_stride = static_cast<std::uint64_t>(K * ld);
    p.input_slot_stride = static_cast<std::uint64_t>(ld);
  } else {
    b.in = strided_tensor(p.input_dtype, {m, k}, {ld, 1});
    p.input_token_stride = static_cast<std::uint64_t>(ld);
  }
  b.ids = host_tensor(c.ids_dtype, {m, K});
  b.out = host_tensor(p.output_dtype, {m, K, n});
  fill_random(b.w.view, c.seed * 3 + 1);
  fill_random(b.in.view, c.seed * 3 + 2, 0.5);
  inject_nonfinite(b.w.view, c.seed * 3 + 1, c.nonfinite_every * 3);
  inject_nonfinite(b.in.view, c.seed * 3 + 2, c.nonfinite_every);
  poison(b.out.bytes.data(), b.out.bytes.size());
  store_ids(c, make_ids(c), b.ids);
  return b;
}

int map_kernels(std::uint64_t routed_rows) { return routed_rows > cuda_moe::kMoeMapIdsPerBlock ? 2 : 1; }

MoeOutcome run_moe_case(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch) {
  MoeBuffers b = make_moe_buffers(c);
  const MatmulIdParams& p = b.p;
  MatmulIdOptions o;
  o.precision = c.precision;
  o.grouped_kernel = c.grouped_kernel;
  auto call = [&](const View& w, const View& in, const View& ids, const View& out) {
    if (c.shape_form) return matmul_id(ctx, w, in, ids, out, scratch, p.input_layout, p.id_multiplicity, p.route, o);
    return matmul_id(ctx, w, in, ids, out, scratch, p, o);
  };
  MoeOutcome r;
  if (ctx.is_cuda()) {
    DeviceTensor dw = to_device(b.w), din = to_device(b.in), dids = to_device(b.ids), dout = to_device(b.out);
    r.receipt = call(dw.view, din.view, dids.view, dout.view);
    ctx.synchronize();
    to_host(dout, b.out);
  } else {
    r.receipt = call(b.w.view, b.in.view, b.ids.view, b.out.view);
  }
  cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, c.w_dtype, b.in.view.data, b.ids.view.data, p);
  // Tolerance: f32 accumulation; 16-bit rounding of f32 operands on tensor cores (Fast), or the
  // bf16 split of Exact; one rounding of the output.
  double u = static_cast<double>(p.k) * std::ldexp(1.0, -24);
  bool f32_operand = p.input_dtype == DType::F32 || c.w_dtype == DType::F32;
  if (f32_operand) u += c.precision == Precision::Fast ? 2 * std::ldexp(1.0, -8) : std::ldexp(1.0, -15);
  double atol = p.output_dtype == DType::F16 ? std::ldexp(1.0, -25) : 1e-30;
  View out3 = View::contiguous(b.out.view.data, p.output_dtype, {1, ref.rows, ref.n});
  cpu::MatmulF64 as_dense{1, ref.rows, ref.n, p.k, ref.value, ref.abs_sum};
  r.cmp = compare(out3, as_dense, Tolerance{atol, 1.0, u, unit_roundoff(p.output_dtype), c.nonfinite_every > 0});
  const std::vector<std::int64_t> ids = make_ids(c);
  for (std::int64_t id : ids)
    if (const std::int64_t v = as_stored(c.ids_dtype, id); v < 0 || v >= static_cast<std::int64_t>(p.n_experts))
      ++r.zero_rows_checked;  // compare() already demanded |out| <= atol there (reference 0, abs_sum 0)
  r.out_bytes = b.out.bytes;
  return r;
}

}  // namespace llmm::test
