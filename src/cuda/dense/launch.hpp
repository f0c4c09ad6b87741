// Launchers of the dense CUDA kernels. Host header, no CUDA headers: raw pointers, sizes and
// strides come in a DenseArgs (already validated by llmm::matmul), kernels go on `stream`.
// Every launcher throws llmm::Error(ErrorCode::Cuda, ...) naming the kernel when the launch
// fails, and ErrorCode::Internal when given arguments it does not take (a router bug). None
// synchronizes or allocates. Names: the *_kernel_name functions of core/dense/dense_kernels.hpp.
#pragma once
#include "core/dense/dense_kernels.hpp"
#include "core/dense/dense_args.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_dense {

// The k == 0 product: writes zeros to c (memsets, no kernel); requires k == 0.
void launch_zero_fill(const DenseArgs& args, StreamHandle stream);

// c[v, j] = sum_l a[v, l] * b[j, l] for 2..16 vectors: requires gemv_wide_supports(args) and
// `config` == gemv_wide_config(m, n, k, ...) of a qualifying shape.
void launch_gemv_wide(const DenseArgs& args, const GemvWideConfig& config, StreamHandle stream);

}  // namespace llmm::cuda_dense
