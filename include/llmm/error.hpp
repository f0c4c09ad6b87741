// llmm::Error: every refused call throws one, naming the op and the offending values.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace llmm {

enum class ErrorCode { InvalidArgument, Unsupported, OutOfMemory, Cuda, Internal };

std::string_view error_code_name(ErrorCode c) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// fail(ErrorCode::InvalidArgument, "matmul: k ", k, " differs from ", k2)
template <class... Args>
[[noreturn]] void fail(ErrorCode code, const Args&... args) {
  throw Error(code, detail::concat(args...));
}

}  // namespace llmm
