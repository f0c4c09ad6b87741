// Weight sources of the Hopper tiled engine (the "decoders"): how a stage's weight box of
// kTiledBM rows x kTiledBK k reaches shared memory, as 16-bit values in the 128-byte-swizzled
// layout the consumers' wgmma descriptors read.
//   TmaWeights  16-bit weights: one TMA box a stage from a 3D map [group][rows][k].
//   Tq2Weights  ternary TQ2_0_g128 weights (codes [rows][k/4] and transposed f16 scales
//               [k/128][ld]: the TernaryWeightCache's layout, tq2_args.hpp). The copy engine
//               brings a stage's codes and scales into a code slot several stages ahead (the
//               kernel's code ring); producer thread r then writes row r of the stage as f16
//               (code - 1) * scale: exact, since an f16 scale times -1, 0 or +1 is an f16. The
//               activation must then be f16 too.
// A group is a batch entry (dense) or an expert (MoE): weight row f of group g is row
// g * group_rows + f of the stack.
#pragma once
#include <cuda.h>
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
  // Codes as bytes [groups * group_rows][k / 4], read in boxes of 16 bytes (64 k) x 128 rows.
  CUtensorMap codes;
  // The transposed scales (TernaryWeight::scales_t) as bytes [k / 128][2 * ld], read in boxes of
  // 256 bytes: 128 rows' f16 scales of one k-block. Out of bounds reads as 0.
  CUtensorMap scales;
  std::int64_t group_rows = 0;  // rows of one group (its n)
  int n = 0;                    // valid rows of a group: rows past it decode to zero
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

  // One thread's row of a code slot: 64 codes (k 64 kb .. 64 kb + 63) and the row's scale.
  struct Row {
    uint4 codes;
    std::uint32_t scale;  // f16 bits; 0 for a row past n, which then decodes to zeros
  };

  // One elected thread: the codes and scales of stage kb of the weight rows row0 .. row0 + 127
  // (of the whole stack) into a code slot by two TMA copies completing on `bar`
  // (kTiledCodeSlotBytes transaction bytes, out-of-bounds parts zero-filled and counted).
  __device__ static void copy(const Params& w, std::uint8_t* slot, std::int64_t row0, int kb, std::uint64_t* bar) {
    ptx::tensor_copy_2d_g2s(slot, &w.codes, kb * (kTiledBK / 4), static_cast<int>(row0), bar);
    ptx::tensor_copy_2d_g2s(slot + kTiledCodeBytes, &w.scales, static_cast<int>(row0) * 2, kb >> 1, bar);
  }

  // Thread r's row out of a landed slot (16 bytes at 16 r: a warp reads 512 contiguous bytes).
  __device__ static Row read(const std::uint8_t* slot, int r, bool valid) {
    Row x;
    x.codes = *reinterpret_cast<const uint4*>(slot + 16 * r);
    x.scale = valid ? *reinterpret_cast<const std::uint16_t*>(slot + kTiledCodeBytes + 2 * r) : 0u;
    return x;
  }

  // Thread r: row r of the stage becomes its 64 f16 weights (code - 1) * scale, unit u (k 8u ..
  // 8u + 7) at unit u ^ (r % 8) as TMA's 128-byte swizzle puts it. Past n: scale 0, so zeros.
  __device__ static void decode(const Row& x, std::uint8_t* a_stage, int r) {
    const std::uint32_t q[4] = {x.codes.x, x.codes.y, x.codes.z, x.codes.w};
    const std::uint32_t s2 = x.scale | (x.scale << 16);
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
