// tq2_naive: the obviously-right reference. One thread per output element; W(j, l) decoded as
// (code - 1) * f32(scale), f32 FMA with the f32 value of the input, in l order.
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_common.cuh"

namespace llmm::cuda_ternary {
namespace {

template <class TIn, class TOut>
__global__ void __launch_bounds__(256) tq2_naive_kernel(Tq2Args a) {
  const std::int64_t total = a.m * a.n;
  const std::int64_t row_bytes = a.k / 4, blocks = a.k / 128;
  const TIn* in = static_cast<const TIn*>(a.in);
  TOut* out = static_cast<TOut*>(a.out);
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx / a.n, j = idx % a.n;
    const std::uint8_t* codes = a.codes + j * row_bytes;
    const std::uint16_t* scales = a.scales + j * blocks;
    const TIn* x = in + i * a.in_ld;
    float acc = 0.0f;
    for (std::int64_t l = 0; l < a.k; ++l) {
      const int code = (codes[l / 4] >> (2 * (l % 4))) & 3;
      const float w = static_cast<float>(code - 1) * dev::f16_bits_to_f32(scales[l / 128]);
      acc = fmaf(dev::to_f32(x[l]), w, acc);
    }
    out[i * a.out_ld + j] = dev::from_f32<TOut>(acc);
  }
}

template <class TIn, class TOut>
void launch_typed(const Tq2Args& a, StreamHandle stream) {
  const std::int64_t total = a.m * a.n;
  const std::int64_t blocks = (total + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 * 16 ? blocks : 65536 * 16);
  tq2_naive_kernel<TIn, TOut><<<grid, 256, 0, stream>>>(a);
}

}  // namespace

void launch_tq2_naive(const Tq2Args& a, StreamHandle stream) {
  const std::string name = tq2_naive_kernel_name(a);
  if (!tq2_args_ok(a)) fail(ErrorCode::Internal, name, ": arguments outside the kernel's contract");
  switch (a.in_dtype) {
    case DType::F32: launch_typed<float, float>(a, stream); break;
    case DType::F16:
      if (a.out_dtype == DType::F32) launch_typed<__half, float>(a, stream);
      else launch_typed<__half, __half>(a, stream);
      break;
    default:
      if (a.out_dtype == DType::F32) launch_typed<__nv_bfloat16, float>(a, stream);
      else launch_typed<__nv_bfloat16, __nv_bfloat16>(a, stream);
      break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
