#include "llmm/error.hpp"

namespace llmm {

std::string_view error_code_name(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Unsupported: return "Unsupported";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::Cuda: return "Cuda";
    case ErrorCode::Internal: return "Internal";
  }
  return "?";
}

}  // namespace llmm
