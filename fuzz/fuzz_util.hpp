// Shared by the libFuzzer targets: decoding input bytes into arguments, and the contract every
// target checks: a call either succeeds (then its properties must hold) or throws llmm::Error.
// Anything else (another exception type, a violated property) aborts, which libFuzzer reports
// as a crash and saves the input as a reproducer.
#pragma once
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "llmm/dtype.hpp"
#include "llmm/error.hpp"

namespace fuzz {

using u128 = unsigned __int128;
using i128 = __int128;
inline constexpr u128 kU64Max = std::numeric_limits<std::uint64_t>::max();

template <class... Args>
[[noreturn]] void die(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  std::fprintf(stderr, "%s:%d: property violated: %s\n", file, line, os.str().c_str());
  std::abort();
}

// FUZZ_CHECK(cond, "context", value, ...): abort with the condition and the context.
#define FUZZ_CHECK(cond, ...) \
  do { \
    if (!(cond)) ::fuzz::die(__FILE__, __LINE__, #cond __VA_OPT__(, " -- ", ) __VA_ARGS__); \
  } while (0)

// 128-bit values for messages (ostream has no operator<< for them).
inline std::string str(u128 v) {
  std::string s;
  do s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10))); while ((v /= 10) != 0);
  return s;
}

struct Refusal {
  llmm::ErrorCode code = llmm::ErrorCode::Internal;
  std::string message;
};

// f()'s result, or nullopt when it threw llmm::Error (a valid refusal, described in *why).
// f must return a value (wrap void calls: [&] { call(); return true; }).
template <class F>
auto attempt(F&& f, Refusal* why = nullptr) -> std::optional<std::invoke_result_t<F>> {
  try {
    return f();
  } catch (const llmm::Error& e) {
    // Every refusal names the op and the values: an empty message is a defect too.
    FUZZ_CHECK(e.what()[0] != '\0', "llmm::Error with an empty message");
    if (why) *why = Refusal{e.code(), e.what()};
    return std::nullopt;
  } catch (const std::exception& e) {
    die(__FILE__, __LINE__, "exception other than llmm::Error: ", e.what());
  } catch (...) {
    die(__FILE__, __LINE__, "non-std exception");
  }
}

// Every DType the library defines (valid enum values only). Extend with new enumerators.
inline constexpr llmm::DType kDTypes[] = {llmm::DType::F32, llmm::DType::F16, llmm::DType::BF16, llmm::DType::U8,
                                          llmm::DType::U32, llmm::DType::I32, llmm::DType::I64};
inline llmm::DType pick_dtype(FuzzedDataProvider& in) { return in.PickValueInArray(kDTypes); }

// An integer biased towards where size arithmetic breaks: small values, powers of two and their
// neighbours, the type's limits, and sometimes anything at all.
template <class T>
T edgy(FuzzedDataProvider& in) {
  using L = std::numeric_limits<T>;
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: return in.ConsumeIntegralInRange<T>(std::is_signed_v<T> ? T(-2) : T(0), T(20));
    case 1: {
      const int shift = in.ConsumeIntegralInRange<int>(0, L::digits - 1);
      T v = static_cast<T>(T(1) << shift);
      v = static_cast<T>(v + in.ConsumeIntegralInRange<int>(-1, 1));
      if constexpr (std::is_signed_v<T>)
        if (in.ConsumeBool()) v = static_cast<T>(-v);
      return v;
    }
    case 2: return in.PickValueInArray({L::max(), L::min(), static_cast<T>(L::max() - 1), static_cast<T>(L::max() / 2)});
    default: return in.ConsumeIntegral<T>();
  }
}

}  // namespace fuzz
