// tq2_moe_naive: the obviously-right reference of matmul_id_tq2 on the GPU. One thread per output
// element (routed row r, column j): the row's expert from its id (zero row when out of range),
// W_e(j, l) decoded as (code - 1) * f32(scale), f32 FMA with the f32 value of the input in l
// order. Any input dtype and strides, any ids; slow by design (the weights are re-read per row).
#include "cuda/moe/moe_common.cuh"
#include "cuda/ternary/tq2_common.cuh"
#include "cuda/ternary/tq2_moe_naive.hpp"

namespace llmm::cuda_ternary {
namespace {

template <class TIn>
__global__ void __launch_bounds__(256) tq2_moe_naive_kernel(Tq2MoeArgs a) {
  const cuda_moe::MoeArgs& g = a.g;
  const std::int64_t total = g.m * g.top_k * g.n;
  const std::int64_t row_bytes = g.k / 4, blocks = g.k / 128;
  const TIn* in = static_cast<const TIn*>(g.in);
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx / g.n, j = idx % g.n;
    const std::uint32_t e = cuda_moe::dev::expert_of(g, r);
    float acc = 0.0f;
    if (e != cuda_moe::kNoExpert) {
      const std::int64_t wr = static_cast<std::int64_t>(e) * g.n + j;
      const std::uint8_t* codes = a.codes + wr * row_bytes;
      const std::uint16_t* scales = a.scales + wr * blocks;
      const std::int64_t t = r / g.top_k, s = r % g.top_k;
      const TIn* x = in + t * g.in_token_stride + s * g.in_slot_stride;
      for (std::int64_t l = 0; l < g.k; ++l) {
        const int code = (codes[l / 4] >> (2 * (l % 4))) & 3;
        const float w = static_cast<float>(code - 1) * dev::f16_bits_to_f32(scales[l / 128]);
        acc = fmaf(dev::to_f32(x[l]), w, acc);
      }
    }
    cuda_moe::dev::store_out(g.out, g.out_dtype, idx, acc);
  }
}

template <class TIn>
void launch_typed(const Tq2MoeArgs& a, StreamHandle stream) {
  const std::int64_t total = a.g.m * a.g.top_k * a.g.n;
  const std::int64_t blocks = (total + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 * 16 ? blocks : 65536 * 16);
  tq2_moe_naive_kernel<TIn><<<grid, 256, 0, stream>>>(a);
}

}  // namespace

std::string tq2_moe_naive_kernel_name(const Tq2MoeArgs& a) {
  return "tq2_moe_naive_" + std::string(dtype_name(a.g.in_dtype)) + "_" + std::string(dtype_name(a.g.out_dtype));
}

void launch_tq2_moe_naive(const Tq2MoeArgs& a, StreamHandle stream) {
  const std::string name = tq2_moe_naive_kernel_name(a);
  const cuda_moe::MoeArgs& g = a.g;
  if (g.m * g.top_k * g.n == 0) return;
  if (!a.codes || !a.scales || !g.in || !g.ids || !g.out || g.k < 128 || g.k % 128 != 0 || !is_float(g.in_dtype) ||
      (g.out_dtype != DType::F32 && g.out_dtype != g.in_dtype))
    fail(ErrorCode::Internal, name, ": arguments outside the kernel's contract");
  switch (g.in_dtype) {
    case DType::F32: launch_typed<float>(a, stream); break;
    case DType::F16: launch_typed<__half>(a, stream); break;
    default: launch_typed<__nv_bfloat16>(a, stream); break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
