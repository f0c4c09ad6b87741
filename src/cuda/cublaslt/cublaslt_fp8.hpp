// y [m, n] = (x codes . w codes^T) times f32 scales through cuBLASLt's FP8 tensor cores on sm_90
// (cuBLAS >= 12.9 scale modes): the weight per [128, 128] block with x per token and 128
// channels (BLK128x128 x VEC128), or both per row (OUTER_VEC). Internal header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "llmm/context.hpp"
#include "llmm/fp8.hpp"

namespace llmm::cuda_fp8 {

struct LtFp8Shape {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t w_ld = 0;  // codes row stride (bytes)
  std::int64_t y_ld = 0;
  DType out = DType::BF16;
  bool block = true;  // BLK128x128 x VEC128, else OUTER_VEC x OUTER_VEC
};

// Descriptors and the heuristic's algorithm for one shape. Construct once (throws
// llmm::Error(Unsupported) when cuBLASLt has no algorithm), run many times (capturable).
class CublasLtFp8Gemm {
 public:
  CublasLtFp8Gemm(void* lt_handle, const LtFp8Shape& shape, std::size_t workspace_bytes);
  CublasLtFp8Gemm(const CublasLtFp8Gemm&) = delete;
  CublasLtFp8Gemm& operator=(const CublasLtFp8Gemm&) = delete;
  ~CublasLtFp8Gemm();
  // w_scales: [n / 128 blocks][k-block pitch] (block) or [n]; x_scales: [k / 128][m] or [m].
  // The scale pointers are set on the shared descriptor for this call (one thread per context).
  void run(const std::uint8_t* w_codes, const float* w_scales, const std::uint8_t* x_codes, const float* x_scales, void* y,
           void* workspace, StreamHandle stream) const;
  const std::string& description() const { return description_; }

  struct State;

 private:
  State* s_ = nullptr;
  std::string description_;
};

}  // namespace llmm::cuda_fp8
