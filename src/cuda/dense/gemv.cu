// launch_gemv: m == 1 or n == 1, any layout, mapped onto the rows or cols kernel.
#include <algorithm>

#include "cuda/dense/gemv_kernels.cuh"
#include "cuda/dense/launch.hpp"

namespace llmm::cuda_dense {
namespace {

// Enough blocks to cover every tile once (kernels grid-stride beyond this).
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 30;

template <class T>
void launch_typed(const GemvProblem& p, StreamHandle stream) {
  if (p.rows) {
    const std::int64_t rows_per_block = (kGemvRowsThreads / 32) / p.split;
    const std::int64_t tiles = (p.outputs + rows_per_block - 1) / rows_per_block * p.batch;
    const dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxBlocks)));
    if (p.w_vec && p.x_vec) {
      gemv_rows_kernel<T, true, true><<<grid, kGemvRowsThreads, 0, stream>>>(p);
    } else if (p.w_vec) {
      gemv_rows_kernel<T, true, false><<<grid, kGemvRowsThreads, 0, stream>>>(p);
    } else {
      gemv_rows_kernel<T, false, false><<<grid, kGemvRowsThreads, 0, stream>>>(p);
    }
  } else {
    const std::int64_t width = std::int64_t{p.split} * (p.w_vec ? dev::kVec16<T> : 1);
    const std::int64_t tiles = (p.outputs + width - 1) / width * p.batch;
    const dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxBlocks)));
    if (p.w_vec) {
      gemv_cols_kernel<T, true><<<grid, kGemvColsThreads, 0, stream>>>(p);
    } else {
      gemv_cols_kernel<T, false><<<grid, kGemvColsThreads, 0, stream>>>(p);
    }
  }
}

}  // namespace

void launch_gemv(const DenseArgs& args, StreamHandle stream) {
  const std::string name = gemv_kernel_name(args);
  if (args.m != 1 && args.n != 1) {
    fail(ErrorCode::Internal, name, ": needs m == 1 or n == 1, got m ", args.m, " n ", args.n);
  }
  if (args.k < 0 || args.batch < 0) fail(ErrorCode::Internal, name, ": negative size");
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  const GemvProblem p = gemv_problem(args, host::current_sm_count());
  const bool ok = host::with_float_type(args.dtype, [&](auto t) { launch_typed<decltype(t)>(p, stream); });
  if (!ok) fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(args.dtype));
  host::check_launch(name);
}

}  // namespace llmm::cuda_dense
