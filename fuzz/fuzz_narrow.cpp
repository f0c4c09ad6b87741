// fuzz_narrow: the checked arithmetic of include/llmm/checked.hpp against 128-bit arithmetic.
// Each function returns exactly the mathematical value when it fits its type, else throws
// llmm::Error (InvalidArgument) naming what was computed.
#include <climits>

#include "fuzz_util.hpp"
#include "llmm/checked.hpp"

using namespace llmm;
using fuzz::attempt;
using fuzz::i128;
using fuzz::kU64Max;
using fuzz::u128;

namespace {

// A refusal must be InvalidArgument and its message must carry `must_contain` (the op or what).
void check_refusal(const fuzz::Refusal& r, const char* must_contain) {
  FUZZ_CHECK(r.code == ErrorCode::InvalidArgument, r.message);
  FUZZ_CHECK(r.message.find(must_contain) != std::string::npos, "message lacks '", must_contain, "': ", r.message);
}

template <class F>
void check_narrow(std::int64_t v, i128 max, F narrow) {
  fuzz::Refusal why;
  auto r = attempt([&] { return narrow(v, "fuzz_op", "fuzz_size"); }, &why);
  if (v >= 0 && v <= max) {
    FUZZ_CHECK(r && static_cast<i128>(*r) == v, "in-range ", v, " not returned exactly");
  } else {
    FUZZ_CHECK(!r, "out-of-range ", v, " returned as ", r ? static_cast<long long>(*r) : 0);
    check_refusal(why, "fuzz_op");
    check_refusal(why, "fuzz_size");
    check_refusal(why, std::to_string(v).c_str());  // the offending value is in the message
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto v = fuzz::edgy<std::int64_t>(in);
  const auto a = fuzz::edgy<std::uint64_t>(in), b = fuzz::edgy<std::uint64_t>(in);

  check_narrow(v, UINT32_MAX, narrow_u32);
  check_narrow(v, INT_MAX, narrow_int);

  fuzz::Refusal why;
  const u128 prod = static_cast<u128>(a) * b, sum = static_cast<u128>(a) + b;
  auto m = attempt([&] { return checked_mul(a, b, "fuzz_mul"); }, &why);
  if (prod <= kU64Max) FUZZ_CHECK(m && *m == prod, a, " * ", b);
  else {
    FUZZ_CHECK(!m, a, " * ", b, " overflow not refused");
    check_refusal(why, "fuzz_mul");
  }
  auto s = attempt([&] { return checked_add(a, b, "fuzz_add"); }, &why);
  if (sum <= kU64Max) FUZZ_CHECK(s && *s == sum, a, " + ", b);
  else {
    FUZZ_CHECK(!s, a, " + ", b, " overflow not refused");
    check_refusal(why, "fuzz_add");
  }

  // size_t is 64 bits on the platforms llmm builds for: to_usize never refuses there.
  static_assert(sizeof(std::size_t) == sizeof(std::uint64_t));
  auto z = attempt([&] { return to_usize(a, "fuzz_usize"); });
  FUZZ_CHECK(z && *z == a, "to_usize ", a);
  auto u = attempt([&] { return to_u64(v, "fuzz_u64"); }, &why);
  if (v >= 0) FUZZ_CHECK(u && *u == static_cast<std::uint64_t>(v), "to_u64 ", v);
  else {
    FUZZ_CHECK(!u, "to_u64 accepted ", v);
    check_refusal(why, "fuzz_u64");
  }
  return 0;
}
