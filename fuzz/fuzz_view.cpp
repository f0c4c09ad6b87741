// fuzz_view: a View with any rank, shape, strides, dtype and (fake, never dereferenced) data
// pointer -> validate_view, byte_extent, numel, is_contiguous, overlaps, describe, and the
// View::contiguous / View::strided factories. A model recomputes in 128-bit arithmetic which
// views are valid and their extents, so the library's checked 64-bit code is compared with an
// independent answer.
#include <algorithm>
#include <array>
#include <initializer_list>

#include "fuzz_util.hpp"
#include "llmm/view.hpp"

using namespace llmm;
using fuzz::attempt;
using fuzz::i128;
using fuzz::kU64Max;
using fuzz::u128;

namespace {

struct Model {
  bool valid = false;
  u128 extent = 0;  // byte extent when dims and strides are >= 0 (may exceed 64 bits)
};

// What validate_view must decide, from its documented rules.
Model model(const View& v) {
  Model m;
  if (v.rank < 0 || v.rank > View::kMaxRank) return m;
  bool empty = false;
  u128 last = 0;  // element offset of the last element: < 4 * 2^126
  for (int i = 0; i < v.rank; ++i) {
    if (v.dim(i) < 0 || v.stride(i) < 0) return m;
    empty = empty || v.dim(i) == 0;
    if (v.dim(i) > 0) last += static_cast<u128>(v.dim(i) - 1) * static_cast<u128>(v.stride(i));
  }
  if (empty) return {true, 0};
  if (last >= kU64Max) return m;  // (last + 1) * size would not fit 64 bits
  m.extent = (last + 1) * dtype_size(v.dtype);
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data);
  m.valid = m.extent <= kU64Max && addr != 0 && addr % dtype_size(v.dtype) == 0 &&
            m.extent <= static_cast<u128>(UINTPTR_MAX - addr);
  return m;
}

bool model_contiguous(const View& v) {
  if (v.empty()) return true;  // no element: any strides
  i128 expect = 1;  // cannot overflow: 4 factors < 2^63
  for (int i = v.rank - 1; i >= 0; --i) {
    if (v.dim(i) != 1 && v.stride(i) != expect) return false;
    expect *= v.dim(i);
  }
  return true;
}

View consume_view(FuzzedDataProvider& in) {
  View v;
  v.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fuzz::edgy<std::uint64_t>(in)));
  v.dtype = fuzz::pick_dtype(in);
  v.device = in.ConsumeBool() ? DeviceKind::CUDA : DeviceKind::CPU;
  v.device_index = in.ConsumeIntegralInRange(0, 2);
  v.rank = in.ConsumeProbability<float>() < 0.9f ? in.ConsumeIntegralInRange(0, View::kMaxRank) : fuzz::edgy<int>(in);
  for (int i = 0; i < View::kMaxRank; ++i) {
    v.shape[static_cast<std::size_t>(i)] = fuzz::edgy<std::int64_t>(in);
    v.strides[static_cast<std::size_t>(i)] = fuzz::edgy<std::int64_t>(in);
  }
  return v;
}

// The factories take initializer lists: spell out each rank.
template <class F>
View with_lists(int rank, const View& src, F make) {
  auto d = [&](int i) { return src.shape[static_cast<std::size_t>(i)]; };
  auto s = [&](int i) { return src.strides[static_cast<std::size_t>(i)]; };
  switch (rank) {
    case 0: return make({}, {});
    case 1: return make({d(0)}, {s(0)});
    case 2: return make({d(0), d(1)}, {s(0), s(1)});
    case 3: return make({d(0), d(1), d(2)}, {s(0), s(1), s(2)});
    default: return make({d(0), d(1), d(2), d(3)}, {s(0), s(1), s(2), s(3)});
  }
}
using List = std::initializer_list<std::int64_t>;

void check_factories(const View& src) {
  const int rank = src.rank;
  bool negative_dim = false, negative_stride = false;
  for (int i = 0; i < rank; ++i) negative_dim |= src.dim(i) < 0, negative_stride |= src.stride(i) < 0;

  auto s = attempt([&] {
    return with_lists(rank, src, [&](List d, List st) { return View::strided(src.data, src.dtype, d, st, src.device, src.device_index); });
  });
  FUZZ_CHECK(s.has_value() == !(negative_dim || negative_stride), "View::strided refusal disagrees: ", src.describe());
  if (s) {
    FUZZ_CHECK(s->rank == rank, "View::strided rank");
    for (int i = 0; i < rank; ++i) FUZZ_CHECK(s->dim(i) == src.dim(i) && s->stride(i) == src.stride(i), "View::strided field ", i);
  }

  auto c = attempt([&] {
    return with_lists(rank, src, [&](List d, List) { return View::contiguous(src.data, src.dtype, d, src.device, src.device_index); });
  });
  if (negative_dim) FUZZ_CHECK(!c, "View::contiguous accepted a negative dimension: ", src.describe());
  if (!c) return;
  // Row-major strides, a zero dimension counted as 1, each within int64.
  i128 expect = 1;
  for (int i = rank - 1; i >= 0; --i) {
    FUZZ_CHECK(c->dim(i) == src.dim(i) && c->stride(i) == expect, "View::contiguous stride ", i, ": ", c->describe());
    expect *= src.dim(i) == 0 ? 1 : src.dim(i);
  }
  FUZZ_CHECK(c->is_contiguous(), "View::contiguous gave a view is_contiguous() denies: ", c->describe());
}

void check_one(const View& v) {
  const Model m = model(v);
  fuzz::Refusal why;
  const bool ok = attempt([&] { validate_view(v, "fuzz_view", "v"); return true; }, &why).has_value();
  FUZZ_CHECK(ok == m.valid, "validate_view ", ok ? "accepted" : "refused", " a view the model ",
             m.valid ? "accepts" : "refuses", " (rank ", v.rank, ", ", why.message, ")");
  if (!ok) FUZZ_CHECK(why.code == ErrorCode::InvalidArgument, why.message);
  if (v.rank < 0 || v.rank > View::kMaxRank) return;  // only validate_view is defined for such ranks

  const std::string d = v.describe();
  FUZZ_CHECK(d.rfind(std::string(dtype_name(v.dtype)) + "[", 0) == 0, d);
  FUZZ_CHECK((d.find(" on cuda:" + std::to_string(v.device_index)) != std::string::npos) == (v.device == DeviceKind::CUDA), d);
  if (!ok) return;

  // A valid view: its extent is computable, exact and does not wrap the address space.
  auto ext = attempt([&] { return v.byte_extent(); });
  FUZZ_CHECK(ext.has_value(), "byte_extent refused a valid view: ", d);
  FUZZ_CHECK(*ext == m.extent, "byte_extent ", *ext, " but the model says ", fuzz::str(m.extent), ": ", d);
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data);
  FUZZ_CHECK(*ext <= UINTPTR_MAX - addr, "data + byte_extent wraps: ", d);

  // numel: exact, or refused only when the element count does not fit 64 bits.
  u128 count = 1;  // saturates at 2^64 (each factor < 2^63)
  for (int i = 0; i < v.rank; ++i) count = std::min<u128>(count * static_cast<u128>(v.dim(i)), kU64Max + 1);
  auto n = attempt([&] { return v.numel(); });
  if (count <= kU64Max) FUZZ_CHECK(n && *n == count, "numel ", n ? std::to_string(*n) : "refused", ", expected ", fuzz::str(count), ": ", d);
  else FUZZ_CHECK(!n, "numel ", *n, " for a count beyond 64 bits: ", d);

  FUZZ_CHECK(v.is_contiguous() == model_contiguous(v), "is_contiguous disagrees with the model: ", d);
  FUZZ_CHECK(overlaps(v, v) == !v.empty(), "a non-empty view must overlap itself: ", d);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const View a = consume_view(in);
  View b = consume_view(in);
  if (in.ConsumeBool()) {  // often: b near a on a's device, so that ranges can meet
    b.device = a.device, b.device_index = a.device_index;
    const auto delta = static_cast<std::uintptr_t>(in.ConsumeIntegralInRange<std::int64_t>(-64, 64));
    b.data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(a.data) + delta);  // integers: may wrap
  }
  check_one(a);
  check_one(b);
  if (a.rank >= 0 && a.rank <= View::kMaxRank) check_factories(a);

  const bool ranks_ok = a.rank >= 0 && a.rank <= View::kMaxRank && b.rank >= 0 && b.rank <= View::kMaxRank;
  if (!ranks_ok) return 0;
  // overlaps is symmetric, valid or not: both orders refuse or both give one answer.
  auto ab = attempt([&] { return overlaps(a, b); });
  auto ba = attempt([&] { return overlaps(b, a); });
  FUZZ_CHECK(ab == ba, "overlaps(a, b) != overlaps(b, a): ", a.describe(), " vs ", b.describe());
  const Model ma = model(a), mb = model(b);
  if (ma.valid && mb.valid) {
    const u128 a0 = reinterpret_cast<std::uintptr_t>(a.data), b0 = reinterpret_cast<std::uintptr_t>(b.data);
    const bool expect = a.device == b.device && a.device_index == b.device_index && ma.extent > 0 && mb.extent > 0 &&
                        a0 < b0 + mb.extent && b0 < a0 + ma.extent;
    FUZZ_CHECK(ab && *ab == expect, "overlaps disagrees with the byte ranges: ", a.describe(), " vs ", b.describe());
  }
  return 0;
}
