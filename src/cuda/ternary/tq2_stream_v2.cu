// tq2_stream_v2: decode-shaped ternary GEMM (m = 1..16), memory-bound by design.
//
// v1 (tq2_stream.cu, retired in issue 47) spent ~3/4 of its instructions converting f32
// activations into bf16 parts for every weight word (ncu: 2.4 IPC, 3.6 codes per warp
// instruction, 7x over the memory floor). v2 takes all activation work out of the loop:
//
// Per K chunk, the block's 256 threads convert the activation into shared memory once (from
// m = 3, tq2_stage_v2_kernel converts it once for all blocks and the blocks copy it), in the
// order of the mma B fragments: per column (token m, part s) and 16-code word, 8 packed f16
// pairs (x[j], x[j + 8]). Each 128-group of a token is scaled by a power of two sigma (its max
// |x| lands in [2^14, 2^15)) and split into `splits` f16 parts (hi + mid + lo is exact for f32:
// 3 x 11 significand bits; two parts keep 22 bits). Per (group, column) 1 / sigma is kept for
// the epilogue. The codes decode exactly to -1/0/+1 in f16 (decode_word_paired, 2 instructions
// a pair), so each product is exact and the tensor core's f32 sum sees no cancellation.
// (A one-AND decode into f16 subnormals c * 2^(p - 24) was tried first: the tensor core aligns
// products by their exponent fields, so subnormal operands lost up to 10 bits; inputs spread
// over 2^+-20 showed 2^-14 relative errors. Test StreamV2ChunksRowTilesWideRange.)
//
// Each group's 8 mmas go to a zeroed partial, then total += partial / sigma * scale in f32.
// Block layout, the per-warp cp.async code ring, staged scales and the fixed-order reduction:
// tq2_stream_skeleton.cuh (shared with v3). Deterministic, no atomics.
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_stream_skeleton.cuh"

namespace llmm::cuda_ternary {
namespace {

struct EngineF16 {
  static constexpr int kRecBytes = 256;  // 8 words x 8 packed f16 pairs
  static constexpr int kColPad = 16;
  // Records of the words a lane uses in a group (2 t4, 2 t4 + 1) sit at t4 and 4 + t4, so the
  // four lanes of a quad hit different banks.
  static __device__ __forceinline__ int rec_offset(int word) { return ((word & 1) * 4 + (word >> 1)) * 32; }

  using Consts = dev::F16DecodeRegs;  // decode constants in registers (tq2_common.cuh)

  // sigma = 2^sh with max |x| * sigma in [2^14, 2^15): the f16 parts keep their 11 bits down to
  // 2^-24 / 2^15 of the group's max. Record pair j of a word holds (x[j], x[j + 8]).
  template <int SPLIT>
  static __device__ __forceinline__ void convert(const float4& x, int lane, int m, unsigned char* xg, int col_stride,
                                                 float2* cg) {
    const float mx = stream::warp_max(fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
    const int sh = stream::group_shift(mx, 15);
    const float sigma = ldexpf(1.0f, sh);
    const float v[4] = {x.x, x.y, x.z, x.w};
    const int kin = 4 * lane;  // code index inside the group
    unsigned char* const rec = xg + rec_offset(kin >> 4);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int q = (kin + t) & 15;
      const int j = q & 7, half = q >> 3;
      float r = v[t] * sigma;
#pragma unroll
      for (int s = 0; s < SPLIT; ++s) {
        const __half h = __float2half_rn(r);
        r -= __half2float(h);
        *reinterpret_cast<__half*>(rec + (m * SPLIT + s) * col_stride + j * 4 + half * 2) = h;
      }
    }
    const bool bad = stream::warp_any_nonfinite(x);
    if (lane < SPLIT) cg[m * SPLIT + lane] = stream::mark_nonfinite(make_float2(ldexpf(1.0f, -sh), 0.0f), bad);
  }

  template <int NT>
  static __device__ __forceinline__ void group(const stream::Group& cur, const unsigned char* const (&xg)[NT], int rec0,
                                               int rec1, const float2* cf, const Consts& k, float (&total)[NT][4]) {
    float part[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[nt][e] = 0.0f;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      std::uint32_t ra[8], rb[8];
      dev::decode_word_paired_f16(w ? cur.c[0].y : cur.c[0].x, k, ra);
      dev::decode_word_paired_f16(w ? cur.c[1].y : cur.c[1].x, k, rb);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const unsigned char* rec = xg[nt] + (w ? rec1 : rec0);
        const uint4 b0 = *reinterpret_cast<const uint4*>(rec);
        const uint4 b1 = *reinterpret_cast<const uint4*>(rec + 16);
        const std::uint32_t bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int q = 0; q < 4; ++q)
          dev::mma16816<__half>(part[nt], ra[2 * q], rb[2 * q], ra[2 * q + 1], rb[2 * q + 1], bb[2 * q], bb[2 * q + 1]);
      }
    }
    const float d0 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur.s & 0xffffu));
    const float d1 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur.s >> 16));
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float4 c = *reinterpret_cast<const float4*>(cf + 8 * nt);  // columns 2 t4, 2 t4 + 1
      total[nt][0] = fmaf(part[nt][0] * c.x, d0, total[nt][0]);
      total[nt][1] = fmaf(part[nt][1] * c.z, d0, total[nt][1]);
      total[nt][2] = fmaf(part[nt][2] * c.x, d1, total[nt][2]);
      total[nt][3] = fmaf(part[nt][3] * c.z, d1, total[nt][3]);
    }
  }
};

// `opaque_zero` is 0 at run time; it keeps the decode constants in registers. `staged`: the
// activation as tq2_stage_v2_kernel wrote it, or null (each block converts it).
template <class TIn, class TOut, int SPLIT, int NT>
__global__ void __launch_bounds__(stream::kThreads, 2)
    tq2_stream_v2_kernel(Tq2Args a, int row_tiles, int chunk_groups, bool in_vec, std::uint32_t opaque_zero,
                         const unsigned char* staged) {
  stream::stream_block<EngineF16, TIn, TOut, SPLIT, NT>(a, row_tiles, chunk_groups, in_vec,
                                                        dev::make_f16_decode_regs(opaque_zero), staged);
}

template <class TIn, int SPLIT, int NT>
__global__ void __launch_bounds__(stream::kThreads) tq2_stage_v2_kernel(Tq2Args a, unsigned char* staged, bool in_vec) {
  stream::stage_items<EngineF16, TIn, SPLIT, NT>(a, staged, in_vec);
}

template <class TIn, class TOut, int SPLIT, int NT>
void launch_one(const Tq2Args& a, const Tq2StreamV2Config& c, StreamHandle stream) {
  unsigned char* staged = nullptr;
  if (c.staged) {
    staged = static_cast<unsigned char*>(a.workspace);
    const std::int64_t items = a.m * (a.k / kTq2Group);
    tq2_stage_v2_kernel<TIn, SPLIT, NT><<<static_cast<unsigned>((items + stream::kWarps - 1) / stream::kWarps),
                                          stream::kThreads, 0, stream>>>(a, staged, tq2_input_vec16(a));
  }
  stream::launch_stream(&tq2_stream_v2_kernel<TIn, TOut, SPLIT, NT>, a, c.row_tiles, c.smem_bytes, stream, c.row_tiles,
                        c.chunk_groups, tq2_input_vec16(a), 0u, static_cast<const unsigned char*>(staged));
}

template <class TIn, class TOut, int SPLIT>
void launch_nt(const Tq2Args& a, const Tq2StreamV2Config& c, StreamHandle stream) {
  if constexpr (SPLIT == 3) {
    launch_one<TIn, TOut, 3, 1>(a, c, stream);  // m <= 2
  } else if constexpr (SPLIT == 2) {
    switch (c.n_tiles) {
      case 1: launch_one<TIn, TOut, 2, 1>(a, c, stream); break;
      case 2: launch_one<TIn, TOut, 2, 2>(a, c, stream); break;
      case 3: launch_one<TIn, TOut, 2, 3>(a, c, stream); break;
      default: launch_one<TIn, TOut, 2, 4>(a, c, stream); break;
    }
  } else {
    if (c.n_tiles == 1) launch_one<TIn, TOut, 1, 1>(a, c, stream);
    else launch_one<TIn, TOut, 1, 2>(a, c, stream);
  }
}

}  // namespace

void launch_tq2_stream_v2(const Tq2Args& a, StreamHandle stream) {
  // Default SM count on purpose: the launched configuration is the named one.
  const auto c = tq2_stream_v2_config(a);
  if (!c) fail(ErrorCode::Internal, "tq2_stream_v2: arguments outside the kernel's contract (m ", a.m, ")");
  if (c->staged && (!a.workspace || a.workspace_bytes < tq2_stream_v2_stage_bytes(a)))
    fail(ErrorCode::Internal, "tq2_stream_v2: staged configuration launched without its workspace");
  const std::string name = tq2_stream_v2_kernel_name(a);
  const bool same_out = a.out_dtype == a.in_dtype;
  switch (a.in_dtype) {
    case DType::F32:
      if (c->splits == 3) launch_nt<float, float, 3>(a, *c, stream);
      else if (c->splits == 2) launch_nt<float, float, 2>(a, *c, stream);
      else launch_nt<float, float, 1>(a, *c, stream);
      break;
    case DType::F16:
      if (same_out) launch_nt<__half, __half, 1>(a, *c, stream);
      else launch_nt<__half, float, 1>(a, *c, stream);
      break;
    default:
      if (same_out) launch_nt<__nv_bfloat16, __nv_bfloat16, 1>(a, *c, stream);
      else launch_nt<__nv_bfloat16, float, 1>(a, *c, stream);
      break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
