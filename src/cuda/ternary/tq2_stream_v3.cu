// tq2_stream_v3: decode-shaped ternary GEMM for m <= 2 on int8 tensor cores: the int8-digit
// decoder (tq2_i8_digits.cuh) on the cp.async skeleton (tq2_stream_skeleton.cuh), which owns the
// rows, batches and reduction.
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_i8_digits.cuh"

namespace llmm::cuda_ternary {
namespace {

template <class TIn, class TOut>
__global__ void __launch_bounds__(stream::kThreads, 2)
    tq2_stream_v3_kernel(Tq2Args a, int row_tiles, int chunk_groups, bool in_vec) {
  stream::stream_block<EngineI8, TIn, TOut, 3, 1>(a, row_tiles, chunk_groups, in_vec, EngineI8::Consts{}, nullptr);
}

template <class TIn, class TOut>
void launch_one(const Tq2Args& a, const Tq2StreamV2Config& c, StreamHandle stream) {
  stream::launch_stream(&tq2_stream_v3_kernel<TIn, TOut>, a, c.row_tiles, c.smem_bytes, stream, c.row_tiles,
                        c.chunk_groups, tq2_input_vec16(a));
}

}  // namespace

void launch_tq2_stream_v3(const Tq2Args& a, StreamHandle stream) {
  const auto c = tq2_stream_v3_config(a);  // default SM count: the launched config is the named one
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v3: arguments outside the kernel's contract (m ", a.m, ")");
  const std::string name = tq2_stream_v3_kernel_name(a);
  with_in_out(a, [&](auto in, auto out) { launch_one<decltype(in), decltype(out)>(a, *c, stream); });
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
