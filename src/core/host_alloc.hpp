// Host allocations of ops and caches that may be large (a weight's worth): OutOfMemory naming
// what failed, instead of std::bad_alloc escaping through the API.
#pragma once
#include <cstddef>
#include <exception>
#include <vector>

#include "llmm/error.hpp"

namespace llmm::detail {

template <class T>
std::vector<T> host_vector(std::size_t count, const char* what) {
  try {
    return std::vector<T>(count);
  } catch (const std::exception&) {  // bad_alloc, or length_error past max_size
    fail(ErrorCode::OutOfMemory, what, ": cannot allocate ", count, " x ", sizeof(T), " bytes of host memory");
  }
}

}  // namespace llmm::detail
