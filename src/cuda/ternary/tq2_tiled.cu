// tq2_tiled: prefill-shaped ternary GEMM (any m), tensor cores (mma.sync m16n8k16).
//
// One 256-thread block computes a 128 (m) x 128 (n) tile of out; its 8 warps are 2 (m) x 4 (n),
// each owning 64 x 32 = 4 x 4 mma tiles. K advances in slices of 64 through a 3-stage cp.async
// ring holding the raw input tile and the code bytes (16 per weight row). Each slice is then
// made ready in shared memory:
//   * codes -> the decoded weight tile B16[n][k] of exact -1/0/+1 values in the mma type;
//   * f32 input -> A16[part][m][k]: bf16 hi (Fast: the only part) and lo = bf16(a - hi) (Exact);
//     f16/bf16 input is read by ldmatrix straight from the ring.
// Scale: each 128-block's products go to a zeroed partial accumulator (two slices), then
// acc += partial * scale(n) in f32. Decoding to -1/0/+1 keeps the weight exact in bf16 too (a
// code x f16-scale product is not), so one mechanism serves f16, bf16 and f32; Exact's two
// passes share the decoded tile and the partial. Exact error: |a - hi - lo| <= 2^-18 |a|,
// plus f32 accumulation.
// Padded 16-bit rows (64 + 8 elements) keep the ldmatrix reads free of bank conflicts.
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_common.cuh"

namespace llmm::cuda_ternary {
namespace {

constexpr int BM = kTq2TiledBM, BN = kTq2TiledBN, BK = kTq2TiledBK, S = kTq2TiledStages;
constexpr int THREADS = kTq2TiledThreads;
constexpr int LD16 = BK + 8;           // elements per padded 16-bit row
constexpr int CODE_ROW = BK / 4;       // code bytes per weight row per slice (16)
constexpr int WM = 64, WN = 32, MT = WM / 16, NT = WN / 8;
static_assert(BK == 64 && 128 % BK == 0 && CODE_ROW == 16);

template <class TIn, int SPLIT>
struct Smem {
  static constexpr bool kF32 = sizeof(TIn) == 4;
  static constexpr int RAW_STAGE = kF32 ? BM * BK * 4 : BM * LD16 * 2;  // bytes
  static constexpr int CODE_STAGE = BN * CODE_ROW;
  static constexpr int RAW = 0;
  static constexpr int CODES = RAW + S * RAW_STAGE;
  static constexpr int A16 = CODES + S * CODE_STAGE;
  static constexpr int A16_PART = BM * LD16 * 2;
  static constexpr int B16 = A16 + (kF32 ? SPLIT * A16_PART : 0);
  static constexpr int BYTES = B16 + BN * LD16 * 2;
  static_assert(RAW_STAGE % 16 == 0 && CODES % 16 == 0 && A16 % 16 == 0 && B16 % 16 == 0);
};

template <class TIn, class TOut, class TM, int SPLIT>
__global__ void __launch_bounds__(THREADS, 1) tq2_tiled_kernel(Tq2Args a, bool in_vec, bool codes_vec) {
  using L = Smem<TIn, SPLIT>;
  constexpr bool kF32 = L::kF32;
  extern __shared__ __align__(16) unsigned char smem[];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 2) * WM, wn = (warp & 3) * WN;
  const int g = lane >> 2, t4 = lane & 3;

  // Tile order: groups of 8 m-tiles walk n together (activations and weights shared in L2).
  const std::int64_t tiles_m = (a.m + BM - 1) / BM, tiles_n = (a.n + BN - 1) / BN;
  const std::int64_t tile = blockIdx.x;
  constexpr std::int64_t GROUP = 8;
  const std::int64_t group = tile / (GROUP * tiles_n);
  const std::int64_t first_m = group * GROUP;
  const std::int64_t gm = min(tiles_m - first_m, GROUP);
  const std::int64_t in_group = tile - group * GROUP * tiles_n;
  const std::int64_t m0 = (first_m + in_group % gm) * BM, n0 = (in_group / gm) * BN;

  const std::int64_t nblk = a.k / 128, row_bytes = a.k / 4;
  const int ktiles = static_cast<int>(a.k / BK);
  const TIn* const in = static_cast<const TIn*>(a.in);

  // Ring stage <- input rows m0.. and code rows n0.. of slice kt. k % 128 == 0, so every
  // slice is whole in k: only rows past m or n are out of range (zero-stored, never read).
  auto load_stage = [&](int stage, int kt) {
    const std::int64_t k0 = static_cast<std::int64_t>(kt) * BK;
    unsigned char* raw = smem + L::RAW + stage * L::RAW_STAGE;
    constexpr int VE = 16 / static_cast<int>(sizeof(TIn));
    constexpr int CPR = BK / VE;  // 16-byte chunks per row
    constexpr int LDR = kF32 ? BK : LD16;
#pragma unroll
    for (int i = 0; i < BM * CPR / THREADS; ++i) {
      const int c = tid + i * THREADS;
      const int r = c / CPR, cc = (c % CPR) * VE;
      TIn* dst = reinterpret_cast<TIn*>(raw) + r * LDR + cc;
      const std::int64_t gr = m0 + r;
      if (gr >= a.m) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      } else if (in_vec) {
        dev::cp_async16(dst, in + gr * a.in_ld + k0 + cc);
      } else {
#pragma unroll
        for (int e = 0; e < VE; ++e) dst[e] = in[gr * a.in_ld + k0 + cc + e];
      }
    }
    if (tid < BN) {
      unsigned char* dst = smem + L::CODES + stage * L::CODE_STAGE + tid * CODE_ROW;
      const std::int64_t gn = n0 + tid;
      const std::uint8_t* src = a.codes + gn * row_bytes + k0 / 4;
      if (gn >= a.n) *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      else if (codes_vec) dev::cp_async16(dst, src);
      else *reinterpret_cast<uint4*>(dst) = dev::load16_bytes(src);
    }
  };

  float acc[MT][NT][4], part[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = part[i][j][e] = 0.0f;
  float sc[NT][2];  // scales of this thread's columns for the current 128-block

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    dev::cp_async_commit();
  }

  TM* const b16 = reinterpret_cast<TM*>(smem + L::B16);
  // ldmatrix row of this lane: A [m][k]: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15)
  // (m8-15,k8-15) = a0..a3; B [n][k]: (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15).
  const int a_lane = (wm + (lane & 15)) * LD16 + (lane >> 4) * 8;
  const int b_lane = (wn + (lane & 7) + ((lane >> 4) << 3)) * LD16 + ((lane >> 3) & 1) * 8;

  for (int kt = 0; kt < ktiles; ++kt) {
    dev::cp_async_wait<S - 2>();
    __syncthreads();  // slice kt landed; every warp is done with the previous slice
    if (kt + S - 1 < ktiles) load_stage((kt + S - 1) % S, kt + S - 1);
    dev::cp_async_commit();

    const int stage = kt % S;
    if (kt % 2 == 0) {  // first slice of a 128-block: fetch its scales (used after the second)
      const std::int64_t blk = kt / 2;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::int64_t col = n0 + wn + nt * 8 + 2 * t4 + e;
          sc[nt][e] = col < a.n ? dev::f16_bits_to_f32(__ldg(a.scales + col * nblk + blk)) : 0.0f;
        }
    }
    // Decode the code slice: thread -> row tid / 2, 8 bytes (32 codes) at (tid % 2) * 8.
    {
      const int r = tid >> 1, h = tid & 1;
      const uint2 bytes = *reinterpret_cast<const uint2*>(smem + L::CODES + stage * L::CODE_STAGE + r * CODE_ROW + 8 * h);
      const std::uint32_t wv[2] = {bytes.x, bytes.y};
      std::uint32_t o[16];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint2 d = dev::decode_byte_natural<TM>((wv[i / 4] >> (8 * (i % 4))) & 0xffu);
        o[2 * i] = d.x;
        o[2 * i + 1] = d.y;
      }
      uint4* dst = reinterpret_cast<uint4*>(b16 + r * LD16 + 32 * h);
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    }
    if constexpr (kF32) {
      // f32 slice -> bf16 parts; thread -> consecutive 16-byte chunks (conflict-free reads).
      const float* raw = reinterpret_cast<const float*>(smem + L::RAW + stage * L::RAW_STAGE);
#pragma unroll
      for (int i = 0; i < BM * BK / 4 / THREADS; ++i) {
        const int c = tid + i * THREADS;
        const int r = c / (BK / 4), cc = (c % (BK / 4)) * 4;
        const float4 v = *reinterpret_cast<const float4*>(raw + r * BK + cc);
        const std::uint32_t h0 = dev::pack_bf16x2(v.x, v.y), h1 = dev::pack_bf16x2(v.z, v.w);
        TM* dst = reinterpret_cast<TM*>(smem + L::A16) + r * LD16 + cc;
        *reinterpret_cast<uint2*>(dst) = make_uint2(h0, h1);
        if constexpr (SPLIT == 2) {
          const std::uint32_t l0 = dev::pack_bf16x2(v.x - dev::bf16_lo_f32(h0), v.y - dev::bf16_hi_f32(h0));
          const std::uint32_t l1 = dev::pack_bf16x2(v.z - dev::bf16_lo_f32(h1), v.w - dev::bf16_hi_f32(h1));
          *reinterpret_cast<uint2*>(dst + BM * LD16) = make_uint2(l0, l1);
        }
      }
    }
    __syncthreads();  // decoded tiles ready

    const std::uint32_t b_addr = dev::smem_addr(b16) + b_lane * 2;
    const std::uint32_t a_base = kF32 ? dev::smem_addr(smem + L::A16)
                                      : dev::smem_addr(smem + L::RAW + stage * L::RAW_STAGE);
    const std::uint32_t a_addr = a_base + a_lane * 2;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      std::uint32_t bfr[NT][2];
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t r[4];
        dev::ldmatrix_x4(r, b_addr + (np * 16 * LD16 + kk) * 2);
        bfr[2 * np][0] = r[0];
        bfr[2 * np][1] = r[1];
        bfr[2 * np + 1][0] = r[2];
        bfr[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int p = 0; p < (kF32 ? SPLIT : 1); ++p) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          std::uint32_t af[4];
          dev::ldmatrix_x4(af, a_addr + (p * BM * LD16 + mt * 16 * LD16 + kk) * 2);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            dev::mma16816<TM>(part[mt][nt], af[0], af[1], af[2], af[3], bfr[nt][0], bfr[nt][1]);
        }
      }
    }
    if (kt % 2 == 1) {  // 128-block complete: scale it into the accumulator
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[mt][nt][e] = fmaf(part[mt][nt][e], sc[nt][e & 1], acc[mt][nt][e]);
            part[mt][nt][e] = 0.0f;
          }
    }
  }
  dev::cp_async_wait<0>();  // only empty groups remain

  // Epilogue: rows g, g + 8 and columns 2 t4, 2 t4 + 1 of each mma tile.
  TOut* const out = static_cast<TOut*>(a.out);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::int64_t row = m0 + wm + mt * 16 + g + half * 8;
      if (row >= a.m) continue;
      TOut* orow = out + row * a.out_ld;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const std::int64_t col = n0 + wn + nt * 8 + 2 * t4;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= a.n) continue;
          float v = acc[mt][nt][2 * half + e];
          if (v != v) v = dev::ieee_dot<TIn>(a, row, col + e);  // Inf in a split: NaN parts (tq2_common.cuh)
          orow[col + e] = dev::from_f32<TOut>(v);
        }
      }
    }
}

template <class TIn, class TOut, class TM, int SPLIT>
void launch_one(const Tq2Args& a, StreamHandle stream, const std::string& name) {
  constexpr int smem = Smem<TIn, SPLIT>::BYTES;
  auto* kernel = &tq2_tiled_kernel<TIn, TOut, TM, SPLIT>;
  if (smem != tq2_tiled_smem_bytes(a.in_dtype, SPLIT))  // the host fact must describe this kernel
    fail(ErrorCode::Internal, name, ": shared-memory size ", smem, " differs from tq2_tiled_smem_bytes");
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::Cuda, name, ": cannot reserve ", smem, " bytes of shared memory: ", cudaGetErrorString(e));
  }
  const std::int64_t tiles = ((a.m + BM - 1) / BM) * ((a.n + BN - 1) / BN);
  if (tiles > std::int64_t{0x7fffffff}) fail(ErrorCode::Internal, name, ": ", tiles, " tiles exceed one grid");
  kernel<<<static_cast<unsigned>(tiles), THREADS, smem, stream>>>(a, tq2_input_vec16(a), tq2_codes_vec16(a));
}

}  // namespace

void launch_tq2_tiled(const Tq2Args& a, StreamHandle stream) {
  const std::string name = tq2_tiled_kernel_name(a);
  if (!tq2_tiled_supports(a)) fail(ErrorCode::Internal, "tq2_tiled: arguments outside the kernel's contract");
  const bool same_out = a.out_dtype == a.in_dtype;
  switch (a.in_dtype) {
    case DType::F32:
      if (tq2_tiled_splits(a) == 2) launch_one<float, float, __nv_bfloat16, 2>(a, stream, name);
      else launch_one<float, float, __nv_bfloat16, 1>(a, stream, name);
      break;
    case DType::F16:
      if (same_out) launch_one<__half, __half, __half, 1>(a, stream, name);
      else launch_one<__half, float, __half, 1>(a, stream, name);
      break;
    default:
      if (same_out) launch_one<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 1>(a, stream, name);
      else launch_one<__nv_bfloat16, float, __nv_bfloat16, 1>(a, stream, name);
      break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
