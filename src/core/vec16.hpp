// Whether an operand can be read with 16-byte vector loads: the one predicate every kernel
// selector uses (base pointer aligned, and each stride a whole number of 16-byte vectors).
#pragma once
#include <cstdint>

#include "llmm/dtype.hpp"

namespace llmm::detail {

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// `elems` elements of t span a whole number of 16-byte vectors.
inline bool bytes16(std::int64_t elems, DType t) {
  return (elems * static_cast<std::int64_t>(dtype_size(t))) % 16 == 0;
}

// Rows of a (batched) matrix: base, row stride and batch stride all keep 16-byte alignment.
inline bool rows_vec16(const void* p, std::int64_t ld, std::int64_t batch_stride, DType t) {
  return aligned16(p) && bytes16(ld, t) && bytes16(batch_stride, t);
}

}  // namespace llmm::detail
