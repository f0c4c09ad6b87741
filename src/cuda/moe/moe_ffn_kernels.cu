// moe_ffn's elementwise kernels: the gated activation between the two expert GEMMs and the
// weighted sum over a token's slots after them. Memory-bound, grid-stride, f32 math; 16-byte
// vectors where the rows allow them. Deterministic: every output element is written by one thread
// (the slot sum in slot order), no atomics.
#include <cmath>

#include "core/moe/moe_ffn_launch.hpp"
#include "cuda/moe/moe_common.cuh"
#include "llmm/error.hpp"

namespace llmm::cuda_moe {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;

template <MoeActivation A>
__device__ __forceinline__ float gated(float g, float u) {
  if constexpr (A == MoeActivation::Silu) {
    return g / (1.0f + expf(-g)) * u;
  } else if constexpr (A == MoeActivation::GeluTanh) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g))) * u;
  } else {
    return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f)) * u;
  }
}

// vec: inter is a multiple of the 16-byte vector's length (the bases are the workspace's,
// 256-byte aligned), so every vector lies in one row's gate or up half.
template <class T, MoeActivation A>
__global__ void __launch_bounds__(kThreads) moe_ffn_gated_kernel(const T* h, T* a, std::int64_t rows, std::int64_t inter,
                                                                 bool vec) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (vec) {
    constexpr int V = cuda_dense::dev::kVec16<T>;
    const std::int64_t per_row = inter / V, total = rows * per_row;
    for (std::int64_t i = first; i < total; i += stride) {
      const std::int64_t r = i / per_row, j = (i - r * per_row) * V;
      const T* hr = h + r * 2 * inter;
      float g[V], u[V], o[V];
      dev::unpack16<T>(dev::ldg16(hr + j), g);
      dev::unpack16<T>(dev::ldg16(hr + inter + j), u);
#pragma unroll
      for (int e = 0; e < V; ++e) o[e] = gated<A>(g[e], u[e]);
      alignas(16) T out[V];
#pragma unroll
      for (int e = 0; e < V; ++e) out[e] = dev::from_f32<T>(o[e]);
      *reinterpret_cast<uint4*>(a + r * inter + j) = *reinterpret_cast<const uint4*>(out);
    }
    return;
  }
  const std::int64_t total = rows * inter;
  for (std::int64_t i = first; i < total; i += stride) {
    const std::int64_t r = i / inter, j = i - r * inter;
    const T* hr = h + r * 2 * inter;
    a[i] = dev::from_f32<T>(gated<A>(dev::to_f32(hr[j]), dev::to_f32(hr[inter + j])));
  }
}

template <class TW, class TO>
__global__ void __launch_bounds__(kThreads) moe_ffn_combine_kernel(const float* y, const TW* w, TO* out, std::int64_t m,
                                                                   std::int64_t top_k, std::int64_t hidden) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t total = m * hidden;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const std::int64_t t = i / hidden, j = i - t * hidden;
    float s = 0.0f;
    for (std::int64_t k = 0; k < top_k; ++k) s = fmaf(dev::to_f32(w[t * top_k + k]), y[(t * top_k + k) * hidden + j], s);
    out[i] = dev::from_f32<TO>(s);
  }
}

int blocks_for(std::int64_t work) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxBlocks, (work + kThreads - 1) / kThreads)));
}

template <class T>
void launch_gated_typed(const MoeGatedArgs& g, StreamHandle stream) {
  const bool vec = g.inter % cuda_dense::dev::kVec16<T> == 0;
  const std::int64_t work = vec ? g.rows * (g.inter / cuda_dense::dev::kVec16<T>) : g.rows * g.inter;
  const T* h = static_cast<const T*>(g.h);
  T* a = static_cast<T*>(g.a);
  const int blocks = blocks_for(work);
  switch (g.activation) {
    case MoeActivation::Silu:
      moe_ffn_gated_kernel<T, MoeActivation::Silu><<<blocks, kThreads, 0, stream>>>(h, a, g.rows, g.inter, vec);
      break;
    case MoeActivation::GeluTanh:
      moe_ffn_gated_kernel<T, MoeActivation::GeluTanh><<<blocks, kThreads, 0, stream>>>(h, a, g.rows, g.inter, vec);
      break;
    case MoeActivation::GeluErf:
      moe_ffn_gated_kernel<T, MoeActivation::GeluErf><<<blocks, kThreads, 0, stream>>>(h, a, g.rows, g.inter, vec);
      break;
  }
}

}  // namespace

std::string moe_ffn_gated_kernel_name(const MoeGatedArgs& g) {
  return std::string("moe_ffn_gated_") + moe_activation_name(g.activation) + "_" + std::string(dtype_name(g.dtype));
}

void launch_moe_ffn_gated(const MoeGatedArgs& g, StreamHandle stream) {
  if (g.rows == 0 || g.inter == 0) return;
  if (!g.h || !g.a) fail(ErrorCode::Internal, "launch_moe_ffn_gated: null intermediate");
  const bool ok = cuda_dense::host::with_float_type(g.dtype, [&](auto t) { launch_gated_typed<decltype(t)>(g, stream); });
  if (!ok) fail(ErrorCode::Internal, "launch_moe_ffn_gated: dtype ", dtype_name(g.dtype));
  cuda_dense::host::check_launch(moe_ffn_gated_kernel_name(g));
}

std::string moe_ffn_combine_kernel_name(const MoeCombineArgs& c) {
  return "moe_ffn_combine_" + std::string(dtype_name(c.w_dtype)) + "_" + std::string(dtype_name(c.out_dtype));
}

void launch_moe_ffn_combine(const MoeCombineArgs& c, StreamHandle stream) {
  if (c.m == 0 || c.hidden == 0) return;
  if (!c.out || (c.top_k > 0 && (!c.y || !c.w))) fail(ErrorCode::Internal, "launch_moe_ffn_combine: null operand");
  bool ok = false;
  cuda_dense::host::with_float_type(c.w_dtype, [&](auto tw) {
    using TW = decltype(tw);
    ok = cuda_dense::host::with_float_type(c.out_dtype, [&](auto to) {
      using TO = decltype(to);
      moe_ffn_combine_kernel<TW, TO><<<blocks_for(c.m * c.hidden), kThreads, 0, stream>>>(
          c.y, static_cast<const TW*>(c.w), static_cast<TO*>(c.out), c.m, c.top_k, c.hidden);
    });
  });
  if (!ok) fail(ErrorCode::Internal, "launch_moe_ffn_combine: dtypes ", dtype_name(c.w_dtype), ", ", dtype_name(c.out_dtype));
  cuda_dense::host::check_launch(moe_ffn_combine_kernel_name(c));
}

}  // namespace llmm::cuda_moe
