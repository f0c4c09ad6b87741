// Row-major batched GEMM through cuBLASLt, with the same addressing as DenseArgs:
// the benchmark baseline, and the router's `cublaslt` route for large dense shapes.
// Internal header (needs a CUDA build); not part of the public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/dense/dense_args.hpp"

namespace llmm::cuda_dense {

enum class LtMath { Default, Tf32 };  // Tf32: f32 operands on tf32 tensor cores

// Beyond the dense route's plain GEMM (the defaults): another C/D dtype (e.g. f16 operands, f32
// output), alpha/beta read from device memory when the GEMM runs, and operand pointers less
// aligned than cuBLASLt's default assumption of 256 bytes.
struct LtGemmOptions {
  std::optional<DType> out_dtype;     // C and D (default: the operands' dtype)
  bool device_scalars = false;        // alpha and beta are device pointers given to run()
  std::uint32_t min_alignment = 256;  // bytes every operand pointer is aligned to
};

// A resolved cuBLASLt plan for one problem (descriptors + the heuristic's first algorithm).
// Construct once, run many times (it is capturable in CUDA graphs: no allocation in run()).
class CublasLtGemm {
 public:
  // Throws llmm::Error(Unsupported) when cuBLASLt has no algorithm for the problem.
  CublasLtGemm(void* lt_handle, const DenseArgs& shape, LtMath math, std::size_t workspace_bytes,
               const LtGemmOptions& options = {});
  CublasLtGemm(CublasLtGemm&&) noexcept;
  CublasLtGemm& operator=(CublasLtGemm&&) noexcept;
  ~CublasLtGemm();

  // Runs on the pointers of `args` (shape/strides must equal the constructor's): C = A B.
  void run(const DenseArgs& args, void* workspace, StreamHandle stream) const;
  // D = alpha A B + beta C with C = D = args.c; alpha, beta point to one float each, in host
  // memory, or in device memory (read when the GEMM runs) with options.device_scalars.
  void run(const DenseArgs& args, void* workspace, StreamHandle stream, const float* alpha, const float* beta) const;
  const std::string& description() const { return description_; }

  struct State;

 private:
  State* s_ = nullptr;
  std::string description_;
};

}  // namespace llmm::cuda_dense
