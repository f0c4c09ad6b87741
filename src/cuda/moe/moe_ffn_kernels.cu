// moe_ffn's elementwise kernels: the activation (gated or not, with the gate_up bias) between
// the two expert GEMMs and the weighted sum over a token's slots (with the down bias) after them. Memory-bound, grid-stride, f32 math; 16-byte
// vectors where the rows allow them. Deterministic: every output element is written by one thread
// (the slot sum in slot order), no atomics.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/moe/moe_ffn_launch.hpp"
#include "cuda/moe/moe_activation.cuh"
#include "cuda/moe/moe_common.cuh"
#include "llmm/error.hpp"

namespace llmm::cuda_moe {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;

struct ActParams {
  const void* h;
  void* a;
  std::int64_t rows, inter, h_cols;  // h_cols: 2 inter with a gate, inter without
  bool gated, interleaved, vec;
  float alpha, limit;
  const void* bias;  // [experts, h_cols] or null
  DType bias_dtype;
  const void* ids;   // the expert_of view of the routed rows (read only with a bias)
  bool ids64;
  std::int64_t n_experts;
  const std::uint32_t* counts;  // sorted rows (MoeGatedArgs): rows = sum(counts), row i is routed row list[i]
  const std::uint32_t* list;
};

// Every thread of the block: sum(counts[0, n)) (u32: at most m * top_k < 2^32), fixed order.
__device__ std::int64_t block_total(const std::uint32_t* counts, std::int64_t n) {
  __shared__ std::uint32_t s_sum[kThreads / 32];
  std::uint32_t part = 0;
  for (std::int64_t e = threadIdx.x; e < n; e += kThreads) part += counts[e];
  part = __reduce_add_sync(0xffffffffu, part);
  if ((threadIdx.x & 31) == 0) s_sum[threadIdx.x >> 5] = part;
  __syncthreads();
  std::uint32_t total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += s_sum[w];
  return total;
}

__device__ __forceinline__ float bias_f32(const ActParams& p, std::uint32_t e, std::int64_t c) {
  if (e == kNoExpert) return 0.0f;
  const std::int64_t i = static_cast<std::int64_t>(e) * p.h_cols + c;
  switch (p.bias_dtype) {
    case DType::F16: return __half2float(static_cast<const __half*>(p.bias)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[i]);
    default: return static_cast<const float*>(p.bias)[i];
  }
}

// One output a[r, j] from its row's h values (and biases).
template <MoeActivation A>
__device__ __forceinline__ float act_one(const ActParams& p, float g, float u) {
  if constexpr (A == MoeActivation::SwigluOai) return act_gated<A>(g, u, p.alpha, p.limit);
  else return p.gated ? act_gated<A>(g, u, p.alpha, p.limit) : act_f<A>(g);
}

// vec: inter is a multiple of the 16-byte vector's length (the bases are the workspace's,
// 256-byte aligned), so every vector lies in one row, and in one half where the layout has halves.
template <class T, MoeActivation A>
__global__ void __launch_bounds__(kThreads) moe_ffn_act_kernel(ActParams p) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const T* h = static_cast<const T*>(p.h);
  T* a = static_cast<T*>(p.a);
  auto expert = [&](std::int64_t r) {
    if (!p.bias) return kNoExpert;
    struct { const void* ids; bool ids64; std::int64_t n_experts; } v{p.ids, p.ids64, p.n_experts};
    return dev::expert_of(v, p.list ? static_cast<std::int64_t>(p.list[r]) : r);
  };
  const std::int64_t rows = p.counts ? block_total(p.counts, p.n_experts) : p.rows;
  if (p.vec) {
    constexpr int V = cuda_dense::dev::kVec16<T>;
    const std::int64_t per_row = p.inter / V, total = rows * per_row;
    for (std::int64_t i = first; i < total; i += stride) {
      const std::int64_t r = i / per_row, j = (i - r * per_row) * V;
      const T* hr = h + r * p.h_cols;
      float g[V], u[V], o[V];
      if (p.gated && p.interleaved) {  // pairs (gate, up) at columns 2 j .. 2 j + 2 V
        float lo[V], hi[V];
        dev::unpack16<T>(dev::ldg16(hr + 2 * j), lo);
        dev::unpack16<T>(dev::ldg16(hr + 2 * j + V), hi);
#pragma unroll
        for (int e = 0; e < V / 2; ++e) g[e] = lo[2 * e], u[e] = lo[2 * e + 1], g[V / 2 + e] = hi[2 * e], u[V / 2 + e] = hi[2 * e + 1];
      } else {
        dev::unpack16<T>(dev::ldg16(hr + j), g);
        if (p.gated) dev::unpack16<T>(dev::ldg16(hr + p.inter + j), u);
      }
      if (p.bias) {
        const std::uint32_t e = expert(r);
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const std::int64_t jq = j + q;
          g[q] += bias_f32(p, e, p.gated && p.interleaved ? 2 * jq : jq);
          if (p.gated) u[q] += bias_f32(p, e, p.interleaved ? 2 * jq + 1 : p.inter + jq);
        }
      }
#pragma unroll
      for (int e = 0; e < V; ++e) o[e] = act_one<A>(p, g[e], p.gated ? u[e] : 0.0f);
      alignas(16) T out[V];
#pragma unroll
      for (int e = 0; e < V; ++e) out[e] = dev::from_f32<T>(o[e]);
      *reinterpret_cast<uint4*>(a + r * p.inter + j) = *reinterpret_cast<const uint4*>(out);
    }
    return;
  }
  const std::int64_t total = rows * p.inter;
  for (std::int64_t i = first; i < total; i += stride) {
    const std::int64_t r = i / p.inter, j = i - r * p.inter;
    const T* hr = h + r * p.h_cols;
    const std::int64_t gc = p.gated && p.interleaved ? 2 * j : j, uc = p.interleaved ? 2 * j + 1 : p.inter + j;
    float g = dev::to_f32(hr[gc]), u = p.gated ? dev::to_f32(hr[uc]) : 0.0f;
    if (p.bias) {
      const std::uint32_t e = expert(r);
      g += bias_f32(p, e, gc);
      if (p.gated) u += bias_f32(p, e, uc);
    }
    a[i] = dev::from_f32<T>(act_one<A>(p, g, u));
  }
}

// The id of routed row r as an expert index, or kNoExpert outside [0, n_experts).
__device__ __forceinline__ std::uint32_t routed_expert(const void* ids, bool ids64, std::int64_t n_experts, std::int64_t r) {
  const std::uint64_t id = ids64 ? static_cast<std::uint64_t>(__ldg(static_cast<const long long*>(ids) + r))
                                 : __ldg(static_cast<const std::uint32_t*>(ids) + r);
  return id < static_cast<std::uint64_t>(n_experts) ? static_cast<std::uint32_t>(id) : kNoExpert;
}

__device__ __forceinline__ float down_bias(const void* bias, DType dtype, std::uint32_t e, std::int64_t hidden, std::int64_t j) {
  const std::int64_t i = static_cast<std::int64_t>(e) * hidden + j;
  if (dtype == DType::F16) return __half2float(static_cast<const __half*>(bias)[i]);
  if (dtype == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[i]);
  return static_cast<const float*>(bias)[i];
}

// V consecutive outputs a thread (V = 16 bytes of TY where hidden and out allow, else 1): the
// slots in order, one fmaf each, so every V gives the same bits. y rows of out-of-range ids are
// not read (v = 0: w * 0 keeps a NaN / Inf weight's NaN).
template <class TY, class TW, class TO, bool BIAS, int V>
__global__ void __launch_bounds__(kThreads) moe_ffn_combine_kernel(const TY* y, const TW* w, TO* out, std::int64_t m,
                                                                   std::int64_t top_k, std::int64_t hidden,
                                                                   const void* bias, DType bias_dtype, const void* ids,
                                                                   bool ids64, std::int64_t n_experts) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t per_row = hidden / V, total = m * per_row;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const std::int64_t t = i / per_row, j = (i - t * per_row) * V;
    float s[V];
#pragma unroll
    for (int q = 0; q < V; ++q) s[q] = 0.0f;
    for (std::int64_t k = 0; k < top_k; ++k) {
      const std::int64_t r = t * top_k + k;
      const std::uint32_t e = routed_expert(ids, ids64, n_experts, r);
      float v[V];
      if (e == kNoExpert) {
#pragma unroll
        for (int q = 0; q < V; ++q) v[q] = 0.0f;
      } else if constexpr (V == 1) {
        v[0] = dev::to_f32(__ldg(y + r * hidden + j));
      } else {
        dev::unpack16<TY>(dev::ldg16(y + r * hidden + j), v);
      }
      if constexpr (BIAS)
        if (e != kNoExpert)
#pragma unroll
          for (int q = 0; q < V; ++q) v[q] += down_bias(bias, bias_dtype, e, hidden, j + q);
      const float wf = dev::to_f32(w[r]);
#pragma unroll
      for (int q = 0; q < V; ++q) s[q] = fmaf(wf, v[q], s[q]);
    }
    if constexpr (V == 1) {
      out[i] = dev::from_f32<TO>(s[0]);
    } else {
      constexpr int kBytes = V * static_cast<int>(sizeof(TO));  // 16, or 8 (f32 rows, 16-bit out)
      using Store = std::conditional_t<kBytes == 16, uint4, uint2>;
      static_assert(kBytes == 16 || kBytes == 8);
      alignas(16) TO o[V];
#pragma unroll
      for (int q = 0; q < V; ++q) o[q] = dev::from_f32<TO>(s[q]);
      *reinterpret_cast<Store*>(out + t * hidden + j) = *reinterpret_cast<const Store*>(o);
    }
  }
}

int blocks_for(std::int64_t work) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxBlocks, (work + kThreads - 1) / kThreads)));
}

template <class T>
void launch_gated_typed(const MoeGatedArgs& g, StreamHandle stream) {
  ActParams p{};
  p.h = g.h, p.a = g.a, p.rows = g.rows, p.inter = g.inter, p.h_cols = g.gated ? 2 * g.inter : g.inter;
  p.gated = g.gated, p.interleaved = g.gated && g.layout == MoeGateLayout::Interleaved;
  p.vec = g.inter % cuda_dense::dev::kVec16<T> == 0;
  p.alpha = g.alpha, p.limit = g.limit;
  p.bias = g.bias, p.bias_dtype = g.bias_dtype, p.ids = g.ids, p.ids64 = g.ids_dtype == DType::I64, p.n_experts = g.experts;
  p.counts = g.counts, p.list = g.list;
  const std::int64_t work = p.vec ? g.rows * (g.inter / cuda_dense::dev::kVec16<T>) : g.rows * g.inter;
  const int blocks = blocks_for(work);
  switch (g.activation) {
    case MoeActivation::Silu: moe_ffn_act_kernel<T, MoeActivation::Silu><<<blocks, kThreads, 0, stream>>>(p); break;
    case MoeActivation::GeluTanh: moe_ffn_act_kernel<T, MoeActivation::GeluTanh><<<blocks, kThreads, 0, stream>>>(p); break;
    case MoeActivation::GeluErf: moe_ffn_act_kernel<T, MoeActivation::GeluErf><<<blocks, kThreads, 0, stream>>>(p); break;
    case MoeActivation::Relu2: moe_ffn_act_kernel<T, MoeActivation::Relu2><<<blocks, kThreads, 0, stream>>>(p); break;
    case MoeActivation::SwigluOai: moe_ffn_act_kernel<T, MoeActivation::SwigluOai><<<blocks, kThreads, 0, stream>>>(p); break;
  }
}

}  // namespace

std::string moe_ffn_gated_kernel_name(const MoeGatedArgs& g) {
  return std::string("moe_ffn_gated_") + moe_activation_name(g.activation) + (g.gated ? "" : "_no_mul") + "_" +
         std::string(dtype_name(g.dtype));
}

void launch_moe_ffn_gated(const MoeGatedArgs& g, StreamHandle stream) {
  if (g.rows == 0 || g.inter == 0) return;
  if (!g.h || !g.a) fail(ErrorCode::Internal, "launch_moe_ffn_gated: null intermediate");
  if (g.bias && !g.ids) fail(ErrorCode::Internal, "launch_moe_ffn_gated: a bias without the ids");
  if ((g.counts == nullptr) != (g.list == nullptr) || (g.counts && (g.experts < 1 || g.experts > 0xffffffffLL)))
    fail(ErrorCode::Internal, "launch_moe_ffn_gated: sorted rows need both counts and the list, and 1.. experts");
  if (!g.gated && g.activation == MoeActivation::SwigluOai)
    fail(ErrorCode::Internal, "launch_moe_ffn_gated: swigluoai without a gate");
  const bool ok = cuda_dense::host::with_float_type(g.dtype, [&](auto t) { launch_gated_typed<decltype(t)>(g, stream); });
  if (!ok) fail(ErrorCode::Internal, "launch_moe_ffn_gated: dtype ", dtype_name(g.dtype));
  cuda_dense::host::check_launch(moe_ffn_gated_kernel_name(g));
}

std::string moe_ffn_combine_kernel_name(const MoeCombineArgs& c) {
  return "moe_ffn_combine_" + std::string(dtype_name(c.y_dtype)) + "_" + std::string(dtype_name(c.w_dtype)) + "_" +
         std::string(dtype_name(c.out_dtype));
}

void launch_moe_ffn_combine(const MoeCombineArgs& c, StreamHandle stream) {
  if (c.m == 0 || c.hidden == 0) return;
  if (!c.out || (c.top_k > 0 && (!c.y || !c.w || !c.ids))) fail(ErrorCode::Internal, "launch_moe_ffn_combine: null operand");
  if (c.y_dtype != DType::F32 && c.y_dtype != c.out_dtype)
    fail(ErrorCode::Internal, "launch_moe_ffn_combine: rows of ", dtype_name(c.y_dtype), " for a ", dtype_name(c.out_dtype),
         " output");
  const bool ids64 = c.ids_dtype == DType::I64;
  bool ok = false;
  cuda_dense::host::with_float_type(c.w_dtype, [&](auto tw) {
    using TW = decltype(tw);
    ok = cuda_dense::host::with_float_type(c.out_dtype, [&](auto to) {
      using TO = decltype(to);
      auto typed = [&](auto ty) {  // rows in f32, or in the output's dtype
        using TY = decltype(ty);
        constexpr int V = cuda_dense::dev::kVec16<TY>;
        // Vectors where every row of y (a 256-byte aligned workspace) and of out starts on one.
        const bool vec = c.hidden % V == 0 && reinterpret_cast<std::uintptr_t>(c.y) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(c.out) % (V * sizeof(TO)) == 0;
        auto launch = [&](auto bias_tag, auto v_tag) {
          constexpr bool B = decltype(bias_tag)::value;
          constexpr int W = decltype(v_tag)::value;
          moe_ffn_combine_kernel<TY, TW, TO, B, W><<<blocks_for(c.m * (c.hidden / W)), kThreads, 0, stream>>>(
              static_cast<const TY*>(c.y), static_cast<const TW*>(c.w), static_cast<TO*>(c.out), c.m, c.top_k, c.hidden,
              c.bias, c.bias_dtype, c.ids, ids64, c.experts);
        };
        using Yes = std::true_type;
        using No = std::false_type;
        using One = std::integral_constant<int, 1>;
        using Vec = std::integral_constant<int, V>;
        if (c.bias) vec ? launch(Yes{}, Vec{}) : launch(Yes{}, One{});
        else vec ? launch(No{}, Vec{}) : launch(No{}, One{});
      };
      if (c.y_dtype == DType::F32) typed(float{});
      else typed(TO{});
    });
  });
  if (!ok) fail(ErrorCode::Internal, "launch_moe_ffn_combine: dtypes ", dtype_name(c.w_dtype), ", ", dtype_name(c.out_dtype));
  cuda_dense::host::check_launch(moe_ffn_combine_kernel_name(c));
}

}  // namespace llmm::cuda_moe
