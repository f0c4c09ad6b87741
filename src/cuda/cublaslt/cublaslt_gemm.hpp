// Row-major batched GEMM through cuBLASLt, with the same addressing as DenseArgs:
// the benchmark baseline, and the router's `cublaslt` route for large dense shapes.
// Internal header (needs a CUDA build); not part of the public API.
#pragma once
#include <cstddef>
#include <string>

#include "cuda/dense/dense_args.hpp"

namespace llmm::cuda_dense {

enum class LtMath { Default, Tf32 };  // Tf32: f32 operands on tf32 tensor cores

// A resolved cuBLASLt plan for one problem (descriptors + the heuristic's first algorithm).
// Construct once, run many times (it is capturable in CUDA graphs: no allocation in run()).
class CublasLtGemm {
 public:
  // Throws llmm::Error(Unsupported) when cuBLASLt has no algorithm for the problem.
  CublasLtGemm(void* lt_handle, const DenseArgs& shape, LtMath math, std::size_t workspace_bytes);
  CublasLtGemm(CublasLtGemm&&) noexcept;
  CublasLtGemm& operator=(CublasLtGemm&&) noexcept;
  ~CublasLtGemm();

  // Runs on the pointers of `args` (shape/strides must equal the constructor's).
  void run(const DenseArgs& args, void* workspace, StreamHandle stream) const;
  const std::string& description() const { return description_; }

  struct State;

 private:
  State* s_ = nullptr;
  std::string description_;
};

}  // namespace llmm::cuda_dense
