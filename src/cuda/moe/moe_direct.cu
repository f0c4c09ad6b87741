// moe_direct: out[r, j] = sum_l in(t, s, l) * W(ids[r], j, l) for every routed row r = t*top_k+s.
//
// Streaming engine (memory-bound at decode sizes). A 128-thread block owns one routed row r and
// 8 consecutive output columns j; each warp reduces two columns j, j+1 (two weight rows
// sharing one read of the input row), lanes striding K with 16-byte loads (two vectors of each
// row in flight), f32 FMA accumulation and a butterfly warp reduction: deterministic, exact in
// every precision mode. Work items t = (column block, routed row) are numbered routed row
// fastest, so blocks running together read the same weight rows of the experts of all tokens
// (tokens sharing an expert then hit L2). An id >= n_experts writes zeros without forming a
// weight address.
//
// Instantiations: (w, in) in {(f32,f32), (f16,f16), (f16,f32), (bf16,bf16), (bf16,f32), (e4m3, any
// float)} x
// {16-byte, scalar} loads; the output dtype is a runtime switch in the store.
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

template <class TW, class TI, bool VEC>
__global__ void __launch_bounds__(kMoeDirectThreads) moe_direct_kernel(MoeArgs a) {
  constexpr int VE = static_cast<int>(16 / sizeof(TW));  // weight elements per 16-byte load
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  // FP8 block scales multiply each decoded chunk (rows j and j + 1 share a 128-row block: j even).
  auto scale_chunk = [&](float (&f0)[VE], float (&f1)[VE], std::uint32_t e, std::int64_t j, std::int64_t l) {
    if constexpr (dev::kIsE4m3<TW>) {
      if (a.w_scale_kind == 2) {
        const float sc = dev::w_block_scale(a, e, j, l);
#pragma unroll
        for (int i = 0; i < VE; ++i) f0[i] *= sc, f1[i] *= sc;
      }
    }
  };
  const std::int64_t routed = a.m * a.top_k;
  const std::int64_t col_blocks = (a.n + kMoeDirectColsPerBlock - 1) / kMoeDirectColsPerBlock;
  const std::int64_t tiles = routed * col_blocks;

  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t cb = t / routed, r = t - cb * routed;
    const std::int64_t j0 = cb * kMoeDirectColsPerBlock + warp * kMoeDirectRowsPerWarp;
    if (j0 >= a.n) continue;  // warp-uniform; no block-level synchronisation below
    const bool has1 = j0 + 1 < a.n;
    const std::uint32_t e = dev::expert_of(a, r);
    float acc0 = 0.0f, acc1 = 0.0f;
    if (e != kNoExpert) {
      const std::int64_t tok = r / a.top_k, slot = r - tok * a.top_k;
      const TI* x = static_cast<const TI*>(a.in) + tok * a.in_token_stride + slot * a.in_slot_stride;
      const TW* w0 = static_cast<const TW*>(a.w) + static_cast<std::int64_t>(e) * a.expert_stride + j0 * a.k;
      const TW* w1 = has1 ? w0 + a.k : w0;  // a lone last column re-reads its row (result dropped)
      if constexpr (VEC) {
        const std::int64_t nv = a.k / VE;  // k * sizeof(TW) % 16 == 0: no tail
        std::int64_t v = lane;
        for (; v + 32 < nv; v += 64) {
          const uint4 a0 = dev::ldg16(w0 + v * VE), a1 = dev::ldg16(w1 + v * VE);
          const uint4 b0 = dev::ldg16(w0 + (v + 32) * VE), b1 = dev::ldg16(w1 + (v + 32) * VE);
          float xa[VE], xb[VE];
          dev::load_f32<TI, VE>(x + v * VE, xa);
          dev::load_f32<TI, VE>(x + (v + 32) * VE, xb);
          float f0[VE], f1[VE];
          dev::unpack16<TW>(a0, f0);
          dev::unpack16<TW>(a1, f1);
          scale_chunk(f0, f1, e, j0, v * VE);
#pragma unroll
          for (int i = 0; i < VE; ++i) {
            acc0 = fmaf(f0[i], xa[i], acc0);
            acc1 = fmaf(f1[i], xa[i], acc1);
          }
          dev::unpack16<TW>(b0, f0);
          dev::unpack16<TW>(b1, f1);
          scale_chunk(f0, f1, e, j0, (v + 32) * VE);
#pragma unroll
          for (int i = 0; i < VE; ++i) {
            acc0 = fmaf(f0[i], xb[i], acc0);
            acc1 = fmaf(f1[i], xb[i], acc1);
          }
        }
        if (v < nv) {
          const uint4 a0 = dev::ldg16(w0 + v * VE), a1 = dev::ldg16(w1 + v * VE);
          float xa[VE], f0[VE], f1[VE];
          dev::load_f32<TI, VE>(x + v * VE, xa);
          dev::unpack16<TW>(a0, f0);
          dev::unpack16<TW>(a1, f1);
          scale_chunk(f0, f1, e, j0, v * VE);
#pragma unroll
          for (int i = 0; i < VE; ++i) {
            acc0 = fmaf(f0[i], xa[i], acc0);
            acc1 = fmaf(f1[i], xa[i], acc1);
          }
        }
      } else {
#pragma unroll 4
        for (std::int64_t l = lane; l < a.k; l += 32) {
          const float xl = dev::to_f32(x[l]);
          float w0l = dev::to_f32(w0[l]), w1l = dev::to_f32(w1[l]);
          if constexpr (dev::kIsE4m3<TW>) {
            if (a.w_scale_kind == 2) {
              const float sc = dev::w_block_scale(a, e, j0, l);
              w0l *= sc, w1l *= sc;
            }
          }
          acc0 = fmaf(w0l, xl, acc0);
          acc1 = fmaf(w1l, xl, acc1);
        }
      }
      acc0 = dev::warp_sum(acc0);
      acc1 = dev::warp_sum(acc1);
      if constexpr (dev::kIsE4m3<TW>) {  // tensor / channel scales on the totals
        acc0 *= dev::w_total_scale(a, e, j0);
        if (has1) acc1 *= dev::w_total_scale(a, e, j0 + 1);
      }
    }
    if (lane == 0) dev::store_out(a.out, a.out_dtype, r * a.n + j0, acc0);
    if (lane == 1 && has1) dev::store_out(a.out, a.out_dtype, r * a.n + j0 + 1, acc1);
  }
}

template <class TW, class TI>
void launch_typed(const MoeArgs& a, bool vec, StreamHandle s) {
  const std::int64_t tiles = moe_direct_tiles(a);
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(tiles, 0x7fffffff)));
  if (vec) moe_direct_kernel<TW, TI, true><<<grid, kMoeDirectThreads, 0, s>>>(a);
  else moe_direct_kernel<TW, TI, false><<<grid, kMoeDirectThreads, 0, s>>>(a);
}

}  // namespace

void launch_moe_direct(const MoeArgs& a, StreamHandle s) {
  const std::string name = moe_direct_kernel_name(a);
  host::check_common(a, name);
  if (moe_direct_tiles(a) == 0) return;  // no output element
  const bool vec = moe_direct_vec16(a);
  const bool in32 = a.in_dtype == DType::F32;
  switch (a.w_dtype) {
    case DType::F32: launch_typed<float, float>(a, vec, s); break;
    case DType::F16:
      if (in32) launch_typed<__half, float>(a, vec, s);
      else launch_typed<__half, __half>(a, vec, s);
      break;
    case DType::BF16:
      if (in32) launch_typed<__nv_bfloat16, float>(a, vec, s);
      else launch_typed<__nv_bfloat16, __nv_bfloat16>(a, vec, s);
      break;
    case DType::F8E4M3:  // FP8 codes, any float input
      if (in32) launch_typed<dev::e4m3, float>(a, vec, s);
      else if (a.in_dtype == DType::F16) launch_typed<dev::e4m3, __half>(a, vec, s);
      else launch_typed<dev::e4m3, __nv_bfloat16>(a, vec, s);
      break;
    default: host::require(false, name, "weight dtype");
  }
  host::check_launch(name);
}

}  // namespace llmm::cuda_moe
