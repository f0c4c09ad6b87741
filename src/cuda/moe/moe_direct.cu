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
// Epilogues (MoeDirectEpi): the plain rows; moe_ffn's decode fusions, Activate (a warp per output
// feature reduces its gate and up rows, the activation and gate_up biases applied before one
// store in x's dtype: the gated kernel and the h round trip gone) and SlotSum (a block per
// column pair of a token, its warps over the slots, the routing-weighted sum with the down bias
// in slot order: moe_ffn's combine, bit for bit, with no f32 rows in between).
//
// Instantiations: (w, in) in {(f32,f32), (f16,f16), (f16,f32), (bf16,bf16), (bf16,f32), (e4m3, any
// float)} x {16-byte, scalar} loads for the plain rows, 16-byte loads for the fused epilogues; the
// output dtype is a runtime switch in the store.
#include <algorithm>

#include "cuda/moe/launch.hpp"
#include "cuda/moe/moe_activation.cuh"
#include "cuda/moe/moe_common.cuh"

namespace llmm::cuda_moe {
namespace {

// acc0 / acc1 = the dot products of input row x with weight rows w0 / w1 of expert e (lanes
// striding K with 16-byte loads, two vectors of each row in flight, f32 FMAs, a butterfly warp
// sum), FP8 scales applied (block scales per decoded chunk, rows j0 / j1's; tensor / channel
// scales on the totals). One code path for every epilogue: the same bits.
template <class TW, class TI, bool VEC, bool PAIR>
__device__ __forceinline__ void dot2(const MoeArgs& a, const TI* x, const TW* w0, const TW* w1, std::uint32_t e,
                                     std::int64_t j0, std::int64_t j1, float& acc0, float& acc1) {
  constexpr int VE = static_cast<int>(16 / sizeof(TW));  // weight elements per 16-byte load
  const int lane = static_cast<int>(threadIdx.x & 31);
  // FP8 block scales multiply each decoded chunk: one lookup for PAIR rows (j0 even, j1 = j0 + 1:
  // one 128-row block), one a row otherwise (a gate row and its up row).
  auto scale_chunk = [&](float (&f0)[VE], float (&f1)[VE], std::int64_t l) {
    if constexpr (dev::kIsE4m3<TW>) {
      if (a.w_scale_kind == 2) {
        const float s0 = dev::w_block_scale(a, e, j0, l), s1 = PAIR ? s0 : dev::w_block_scale(a, e, j1, l);
#pragma unroll
        for (int i = 0; i < VE; ++i) f0[i] *= s0, f1[i] *= s1;
      }
    }
  };
  acc0 = 0.0f, acc1 = 0.0f;
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
      scale_chunk(f0, f1, v * VE);
#pragma unroll
      for (int i = 0; i < VE; ++i) {
        acc0 = fmaf(f0[i], xa[i], acc0);
        acc1 = fmaf(f1[i], xa[i], acc1);
      }
      dev::unpack16<TW>(b0, f0);
      dev::unpack16<TW>(b1, f1);
      scale_chunk(f0, f1, (v + 32) * VE);
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
      scale_chunk(f0, f1, v * VE);
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
          const float s0 = dev::w_block_scale(a, e, j0, l);
          w0l *= s0;
          w1l *= PAIR ? s0 : dev::w_block_scale(a, e, j1, l);
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
    acc1 *= dev::w_total_scale(a, e, j1);
  }
}

// A float of a runtime float dtype at p[i] (biases, routing weights: a grid-uniform branch).
__device__ __forceinline__ float load_any(const void* p, DType t, std::int64_t i) {
  if (t == DType::F16) return __half2float(static_cast<const __half*>(p)[i]);
  if (t == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <class TW, class TI, bool VEC, MoeDirectEpi EPI>
__global__ void __launch_bounds__(kMoeDirectThreads) moe_direct_kernel(MoeArgs a, std::int64_t tiles) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t routed = a.m * a.top_k;
  const MoeDirectFusion fu = a.fusion;
  const TW* wbase = static_cast<const TW*>(a.w);
  auto input_row = [&](std::int64_t r) {
    const std::int64_t tok = r / a.top_k, slot = r - tok * a.top_k;
    return static_cast<const TI*>(a.in) + tok * a.in_token_stride + slot * a.in_slot_stride;
  };

  if constexpr (EPI == MoeDirectEpi::SlotSum) {
    // A block per (group of column pairs, token): with top_k >= 4 one pair, warp w taking slots
    // w, w + 4, ...; below, `pairs` pairs, warp w the pair w / top_k and the slot w % top_k. The
    // totals are summed in slot order by one thread per column.
    __shared__ float part[kMoeDirectSlotSumMaxTopK][kMoeDirectRowsPerWarp];  // [pair * top_k + slot][column]
    const std::int64_t pairs = moe_direct_slotsum_pairs(a.top_k);
    const std::int64_t slot_step = pairs > 1 ? a.top_k : kMoeDirectThreads / 32;
    const std::int64_t wp = pairs > 1 ? warp / a.top_k : 0, w_slot = pairs > 1 ? warp % a.top_k : warp;
    for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const std::int64_t cb = t / a.m, tok = t - cb * a.m;
      const std::int64_t j0 = (cb * pairs + wp) * kMoeDirectRowsPerWarp;  // this warp's pair
      if (wp < pairs && j0 < a.n) {  // warp-uniform
        const bool has1 = j0 + 1 < a.n;
        for (std::int64_t s = w_slot; s < (pairs > 1 ? w_slot + 1 : a.top_k); s += slot_step) {
          const std::int64_t r = tok * a.top_k + s;
          const std::uint32_t e = dev::expert_of(a, r);
          float acc0 = 0.0f, acc1 = 0.0f;
          if (e != kNoExpert) {
            const TW* w0 = wbase + static_cast<std::int64_t>(e) * a.expert_stride + j0 * a.k;
            dot2<TW, TI, VEC, true>(a, input_row(r), w0, has1 ? w0 + a.k : w0, e, j0, has1 ? j0 + 1 : j0, acc0, acc1);
          }
          if (lane == 0) part[wp * a.top_k + s][0] = acc0, part[wp * a.top_k + s][1] = acc1;
        }
      }
      __syncthreads();
      const std::int64_t tp = threadIdx.x / kMoeDirectRowsPerWarp, tc = threadIdx.x % kMoeDirectRowsPerWarp;
      const std::int64_t j = (cb * pairs + tp) * kMoeDirectRowsPerWarp + tc;
      if (tp < pairs && j < a.n) {
        float total = 0.0f;
        for (std::int64_t s = 0; s < a.top_k; ++s) {
          const std::int64_t r = tok * a.top_k + s;
          float v = part[tp * a.top_k + s][tc];
          if (fu.bias) {
            const std::uint32_t e = dev::expert_of(a, r);
            if (e != kNoExpert) v += load_any(fu.bias, fu.bias_dtype, static_cast<std::int64_t>(e) * a.n + j);
          }
          total = fmaf(load_any(fu.tw, fu.tw_dtype, r), v, total);
        }
        dev::store_out(a.out, a.out_dtype, tok * a.n + j, total);
      }
      __syncthreads();  // part is rewritten by the next tile
    }
    return;
  }

  // Plain / Activate: a block per (column block, routed row), routed row fastest, so blocks
  // running together read the same weight rows of the experts of all tokens.
  const bool gated_act = EPI == MoeDirectEpi::Activate && fu.gated;
  const std::int64_t inter = gated_act ? a.n / 2 : a.n;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t cb = t / routed, r = t - cb * routed;
    // Rows j0, j1 of the expert this warp reduces, and the output columns they give.
    std::int64_t j0, j1;
    bool has1;
    if (gated_act) {
      const std::int64_t f = cb * (kMoeDirectThreads / 32) + warp;  // one output feature a warp
      if (f >= inter) continue;  // warp-uniform; no block-level synchronisation below
      j0 = fu.interleaved ? 2 * f : f, j1 = fu.interleaved ? 2 * f + 1 : inter + f;
      has1 = true;
    } else {
      j0 = cb * kMoeDirectColsPerBlock + warp * kMoeDirectRowsPerWarp;
      if (j0 >= a.n) continue;
      has1 = j0 + 1 < a.n;
      j1 = has1 ? j0 + 1 : j0;  // a lone last column re-reads its row (result dropped)
    }
    const std::uint32_t e = dev::expert_of(a, r);
    float acc0 = 0.0f, acc1 = 0.0f;
    if (e != kNoExpert) {
      const TW* we = wbase + static_cast<std::int64_t>(e) * a.expert_stride;
      if (gated_act) dot2<TW, TI, VEC, false>(a, input_row(r), we + j0 * a.k, we + j1 * a.k, e, j0, j1, acc0, acc1);
      else dot2<TW, TI, VEC, true>(a, input_row(r), we + j0 * a.k, we + j1 * a.k, e, j0, j1, acc0, acc1);
    }
    if constexpr (EPI == MoeDirectEpi::Activate) {
      if (fu.bias && e != kNoExpert) {  // an out-of-range row stays zeros: its h row was zeros
        const std::int64_t b = static_cast<std::int64_t>(e) * a.n;
        acc0 += load_any(fu.bias, fu.bias_dtype, b + j0);
        if (has1) acc1 += load_any(fu.bias, fu.bias_dtype, b + j1);
      }
      if (gated_act) {
        if (lane == 0)
          dev::store_out(a.out, a.out_dtype, r * inter + (fu.interleaved ? j0 / 2 : j0),
                         activate(fu.activation, true, acc0, acc1, fu.alpha, fu.limit));
      } else {
        if (lane == 0) dev::store_out(a.out, a.out_dtype, r * a.n + j0, activate(fu.activation, false, acc0, 0.0f, 0.0f, 0.0f));
        if (lane == 1 && has1)
          dev::store_out(a.out, a.out_dtype, r * a.n + j0 + 1, activate(fu.activation, false, acc1, 0.0f, 0.0f, 0.0f));
      }
    } else {
      if (lane == 0) dev::store_out(a.out, a.out_dtype, r * a.n + j0, acc0);
      if (lane == 1 && has1) dev::store_out(a.out, a.out_dtype, r * a.n + j0 + 1, acc1);
    }
  }
}

template <class TW, class TI>
void launch_typed(const MoeArgs& a, bool vec, StreamHandle s) {
  const std::int64_t tiles = moe_direct_tiles(a);
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(tiles, 0x7fffffff)));
  switch (a.fusion.epi) {
    case MoeDirectEpi::Plain:
      if (vec) moe_direct_kernel<TW, TI, true, MoeDirectEpi::Plain><<<grid, kMoeDirectThreads, 0, s>>>(a, tiles);
      else moe_direct_kernel<TW, TI, false, MoeDirectEpi::Plain><<<grid, kMoeDirectThreads, 0, s>>>(a, tiles);
      break;
    case MoeDirectEpi::Activate:  // the fused epilogues take 16-byte rows only
      moe_direct_kernel<TW, TI, true, MoeDirectEpi::Activate><<<grid, kMoeDirectThreads, 0, s>>>(a, tiles);
      break;
    case MoeDirectEpi::SlotSum:
      moe_direct_kernel<TW, TI, true, MoeDirectEpi::SlotSum><<<grid, kMoeDirectThreads, 0, s>>>(a, tiles);
      break;
  }
}

}  // namespace

void launch_moe_direct(const MoeArgs& a, StreamHandle s) {
  const std::string name = moe_direct_kernel_name(a);
  host::check_common(a, name);
  if (moe_direct_tiles(a) == 0) return;  // no output element
  const bool vec = moe_direct_vec16(a);
  host::require(a.fusion.epi == MoeDirectEpi::Plain || moe_direct_fusion_supported(a), name,
                "a fused epilogue needs 16-byte rows (and top_k <= 64 with its routing weights for the slot sum)");
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
