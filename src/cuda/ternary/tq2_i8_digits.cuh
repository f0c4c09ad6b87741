// The int8-digit ternary decoder of the sm_90 streaming engine (tq2_stream_v4 / v5):
// EngineI8Masked. 2-bit codes stay integers and enter int8 tensor cores (mma.sync m16n8k32 u8 x s8
// -> s32); the activation of each 128-group becomes exact signed int8 digits.
//
// Codes, plainly: byte b of (w >> 2s) & 0x03030303 is code 4b + s of the word, so 16 codes would
// become four u8x4 A registers in 7 instructions (one mma consumes 512 codes); the masked form
// below saves the shifts.
//
// Activation, per 128-group: scaled by a power of two 2^sh so its max |x| lands in
// [2^21, 2^22), rounded to an integer (exact to 2^-23 of the group's max, f32-class), split into
// three signed int8 digits x = d0 + 256 d1 + 65536 d2, stored in the B-record order of the word
// registers above. Products and 128-term sums are exact in int32. Code c means c - 1, so the
// epilogue subtracts the group's digit sum: per group and column a float2
// (2^(8s - sh), -digit_sum * 2^(8s - sh)) turns the int32 sum into f32 with one I2F and one FFMA,
// then total += that * scale.
//
// Interface (what a streaming skeleton calls):
//   kRecBytes, kColPad   B-record bytes per (column, group); padding after each column
//   rec_offset(word)     offset of a 16-code word's record inside its group
//   convert<kSplit>(...) one (token, group) item: activation -> records + coefficients
//   group<1>(...)        one group of this lane's codes: decode, mma, add into total
#pragma once
#include "cuda/ternary/tq2_stream_skeleton.cuh"

namespace llmm::cuda_ternary {

// The masked decoder: one LOP3 per A register instead of a shift and a mask.
// Register s of a word keeps its codes in place, (w & (0x03030303 << 2s)): byte b is
// c(4b + s) * 4^s (at most 128, still a u8). The B side compensates exactly: the digits of
// register s are those of X * 4^(3 - s) (X the group's 22-bit integer activation), so every
// product is 64 * c * X; four signed int8 digits (|X * 64| < 2^28) make four B columns per token
// (two tokens per n8 tile; NT tiles take m <= 2 NT). The epilogue's correction for c - 1 is the digit sum
// weighted by 4^s; coefficients carry the extra 2^-6. Saves 12 of ~62 instructions per group.
struct EngineI8Masked {
  static constexpr int kSplit = 4;
  static constexpr int kRecBytes = 128;
  static constexpr int kColPad = 64;
  // The words a lane uses in a group (2 t4, 2 t4 + 1) sit at t4 and 4 + t4: a quad's 16-byte
  // loads hit different banks.
  static __device__ __forceinline__ int rec_offset(int word) { return ((word & 1) * 4 + (word >> 1)) * 16; }

  struct Consts {};

  static __device__ __forceinline__ void convert(const float4& x, int lane, int m, unsigned char* xg, int col_stride,
                                                 float2* cg) {
    const float mx = stream::warp_max(fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
    const int sh = stream::group_shift(mx, 22);
    const float sigma = ldexpf(1.0f, sh);
    const float v[4] = {x.x, x.y, x.z, x.w};
    // Position 4 lane + t: register t (codes q with q % 4 = t), byte lane % 4 of word lane / 4.
    unsigned char* const rec = xg + rec_offset(lane >> 2) + (lane & 3);
    int sum[4] = {0, 0, 0, 0};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int xi = __float2int_rn(v[t] * sigma) * (1 << (2 * (3 - t)));  // |xi| < 2^28
      const int d0 = (xi << 24) >> 24;
      int r = (xi - d0) >> 8;
      const int d1 = (r << 24) >> 24;
      r = (r - d1) >> 8;
      const int d2 = (r << 24) >> 24;
      const int d3 = (r - d2) >> 8;  // |d3| <= 16
      const int d[4] = {d0, d1, d2, d3};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        rec[(m * 4 + s) * col_stride + 4 * t] = static_cast<unsigned char>(d[s]);
        sum[s] += d[s] * (1 << (2 * t));  // weighted by the A side's 4^t
      }
    }
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum[s] += __shfl_xor_sync(0xffffffffu, sum[s], o);
    const bool bad = stream::warp_any_nonfinite(x);  // an int8 digit has no NaN or Inf
    if (lane < 4) {
      const int mine = lane == 0 ? sum[0] : lane == 1 ? sum[1] : lane == 2 ? sum[2] : sum[3];
      const float c = ldexpf(1.0f, 8 * lane - sh - 6);
      cg[m * 4 + lane] = stream::mark_nonfinite(make_float2(c, -static_cast<float>(mine) * c), bad);  // exact: |sum| < 2^21
    }
  }

  // One group of T 16-row tiles (the same group of T row bands): cur[t] is tile t's codes and
  // scales, xg[nt] this lane's column 8 nt + g at the group's records, cf the group's
  // coefficients ([8 NT] float2) + 2 t4. Each B fragment is loaded once and serves all T tiles
  // (the ring kernel's warp on 32 rows: half the B loads' shared-memory wavefronts a row).
  template <int NT, int T>
  static __device__ __forceinline__ void group_tiles(const stream::Group (&cur)[T], const unsigned char* const (&xg)[NT],
                                                     int rec0, int rec1, const float2* cf, float (&total)[T][NT][4]) {
    int acc[T][NT][4];
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[t][nt][0] = acc[t][nt][1] = acc[t][nt][2] = acc[t][nt][3] = 0;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      std::uint32_t ra[T][4], rb[T][4];
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const std::uint32_t wa = w ? cur[t].c[0].y : cur[t].c[0].x, wb = w ? cur[t].c[1].y : cur[t].c[1].x;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          ra[t][s] = wa & (0x03030303u << (2 * s));
          rb[t][s] = wb & (0x03030303u << (2 * s));
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4 b = *reinterpret_cast<const uint4*>(xg[nt] + (w ? rec1 : rec0));
#pragma unroll
        for (int t = 0; t < T; ++t) {
          ptx::mma_16832_u8s8(acc[t][nt], ra[t][0], rb[t][0], ra[t][1], rb[t][1], b.x, b.y);
          ptx::mma_16832_u8s8(acc[t][nt], ra[t][2], rb[t][2], ra[t][3], rb[t][3], b.z, b.w);
        }
      }
    }
    float d0[T], d1[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      d0[t] = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur[t].s & 0xffffu));
      d1[t] = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur[t].s >> 16));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float4 c = *reinterpret_cast<const float4*>(cf + 8 * nt);  // columns 8 nt + 2 t4, + 1
#pragma unroll
      for (int t = 0; t < T; ++t) {
        total[t][nt][0] = fmaf(fmaf(static_cast<float>(acc[t][nt][0]), c.x, c.y), d0[t], total[t][nt][0]);
        total[t][nt][1] = fmaf(fmaf(static_cast<float>(acc[t][nt][1]), c.z, c.w), d0[t], total[t][nt][1]);
        total[t][nt][2] = fmaf(fmaf(static_cast<float>(acc[t][nt][2]), c.x, c.y), d1[t], total[t][nt][2]);
        total[t][nt][3] = fmaf(fmaf(static_cast<float>(acc[t][nt][3]), c.z, c.w), d1[t], total[t][nt][3]);
      }
    }
  }

  // One tile (tq2_stream_v4).
  template <int NT>
  static __device__ __forceinline__ void group(const stream::Group& cur, const unsigned char* const (&xg)[NT], int rec0,
                                               int rec1, const float2* cf, float (&total)[NT][4]) {
    const stream::Group one[1] = {cur};
    float t1[1][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) t1[0][nt][i] = total[nt][i];
    group_tiles<NT, 1>(one, xg, rec0, rec1, cf, t1);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) total[nt][i] = t1[0][nt][i];
  }
};

}  // namespace llmm::cuda_ternary
