// Weight sources of the Hopper tiled engine (the "decoders"): how a stage's weight box of
// kTiledBM rows x kTiledBK k reaches shared memory, as 16-bit values in the 128-byte-swizzled
// layout the consumers' wgmma descriptors read.
//   TmaWeights  16-bit weights: one TMA box a stage from a 3D map [group][rows][k].
//   Tq2Weights  ternary TQ2_0_g128 weights (codes [rows][k/4], f16 scales [rows][k/128]; the
//               TernaryWeightCache's layout, tq2_args.hpp). Producer thread r owns weight row r of
//               the box: it loads the row's 16 bytes of codes and its scale into registers a few
//               stages ahead, then writes the stage's row as f16 (code - 1) * scale: exact, since
//               an f16 scale times -1, 0 or +1 is an f16. The activation must then be f16 too.
// A group is a batch entry (dense) or an expert (MoE): weight row f of group g is row
// g * group_rows + f of the stack.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "core/engine/tiled_sm90_shape.hpp"
#include "cuda/engine/tiled/wgmma_sm90.cuh"

namespace llmm::engine {

struct TmaWeightsParams {};
struct TmaWeights {
  using Params = TmaWeightsParams;
  static constexpr bool kDecode = false;
};

struct Tq2WeightsParams {
  const std::uint8_t* codes = nullptr;    // [groups * group_rows][k / 4]
  const std::uint16_t* scales = nullptr;  // [groups * group_rows][k / 128] f16 bits, readable 2 bytes past the end
  std::int64_t group_rows = 0;            // rows of one group (its n)
  int n = 0;                              // valid rows of a group: rows past it decode to zero
  int k = 0;                              // a multiple of 128
  // nullptr, or a device float every output is multiplied by (the power of two that brought a
  // bf16/f32 activation into f16's range): exact unless the product leaves f32's range.
  const float* alpha = nullptr;
};

namespace tq2_detail {
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
// (pair - 1025) * s for a pair of f16 values 1024 + code: -s, 0 or +s per half, exactly.
__device__ __forceinline__ std::uint32_t scale_pair(std::uint32_t pair, std::uint32_t s2) {
  const __half2 v = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&pair), __half2half2(__ushort_as_half(0x6401))),
                            *reinterpret_cast<const __half2*>(&s2));
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
}  // namespace tq2_detail

struct Tq2Weights {
  using Params = Tq2WeightsParams;
  static constexpr bool kDecode = true;
  // How many stages ahead a producer thread loads its row's codes and scale into registers.
  // (Measured: no faster than the cp.async versions before it, because all these loads share one
  // scoreboard; the next version copies codes and scales by TMA: docs/performance.md.)
  static constexpr int kLoadAhead = 6;

  struct Row {
    uint4 codes;           // 64 codes, k 64 kb .. 64 kb + 63
    std::uint32_t scale;   // f16 bits of the row's scale
    bool valid;            // the row exists (feat0 + r < n): else it decodes to zeros
  };

  // Producer thread r, at stage kb of a tile whose weight rows start at feat0 of group `group`:
  // its row's 16 bytes of codes and its scale, as loads still in flight (used D stages later).
  // The loads are unconditional (a row past n reads row n - 1 and is masked at the decode): a
  // conditional load would be merged with a default value right away, waiting for the data.
  __device__ static Row load(const Params& w, int group, int feat0, int kb, int r) {
    Row x;
    const int f = feat0 + r;
    x.valid = f < w.n;
    const std::int64_t row = static_cast<std::int64_t>(group) * w.group_rows + (x.valid ? f : w.n - 1);
    x.codes = __ldg(reinterpret_cast<const uint4*>(w.codes + row * (w.k / 4) + kb * (kTiledBK / 4)));
    x.scale = __ldg(w.scales + row * (w.k / 128) + (kb >> 1));
    return x;
  }

  // Thread r: row r of the stage becomes its 64 f16 weights (code - 1) * scale, unit u (k 8u ..
  // 8u + 7) at unit u ^ (r % 8) as TMA's 128-byte swizzle puts it. Past n: scale 0, so zeros.
  __device__ static void decode(const Row& x, std::uint8_t* a_stage, int r) {
    const std::uint32_t q[4] = {x.codes.x, x.codes.y, x.codes.z, x.codes.w};
    const std::uint32_t s = x.valid ? x.scale & 0xffffu : 0u;
    const std::uint32_t s2 = s | (s << 16);
    std::uint8_t* const row = a_stage + r * 128;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      // 16 codes, k 16w .. 16w + 15: t[j] holds code j (low half) and code j + 8 (high half) as
      // the f16 values 1024 + code.
      std::uint32_t t[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) t[j] = ((q[w] >> (2 * j)) & 0x00030003u) | 0x64006400u;
      std::uint32_t lo[4], hi[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        lo[j] = tq2_detail::scale_pair(tq2_detail::prmt(t[2 * j], t[2 * j + 1], 0x5410), s2);
        hi[j] = tq2_detail::scale_pair(tq2_detail::prmt(t[2 * j], t[2 * j + 1], 0x7632), s2);
      }
      const int u0 = ((2 * w) ^ (r & 7)) << 4, u1 = ((2 * w + 1) ^ (r & 7)) << 4;
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(ptx::smem_addr(row + u0)), "r"(lo[0]), "r"(lo[1]),
                   "r"(lo[2]), "r"(lo[3])
                   : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(ptx::smem_addr(row + u1)), "r"(hi[0]), "r"(hi[1]),
                   "r"(hi[2]), "r"(hi[3])
                   : "memory");
    }
  }
};

}  // namespace llmm::engine
