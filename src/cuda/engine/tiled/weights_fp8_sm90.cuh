// FP8 e4m3 weights on the Hopper tiled engine (Fp8Weights): the producer's TMA thread brings a
// stage's codes [128 rows][64 k] (8 KB, half a 16-bit box) beside the 16-bit box they become;
// producer warps 1-3 decode each code exactly (e4m3 -> f16 -> f32), multiply it by its scale in
// f32 and round once to the activation's 16-bit dtype (the mma.sync grouped kernel's weights, bit
// for bit), stored in the 128-byte-swizzled layout the consumers' wgmma descriptors read. The
// consumers run the 16-bit loop unchanged: the weights cross DRAM at one byte each.
// Scales: per tensor, per output channel (row), or per [128 rows][128 k] block (DeepSeek's
// layout, [ceil(n / 128)][ceil(k / 128)] a group); a tile's 128 rows start at a multiple of 128
// and a stage's 64 k inside one 128-k block, so a block-scaled stage has one scale.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/engine/tiled_sm90_shape.hpp"
#include "cuda/engine/tiled/wgmma_sm90.cuh"

namespace llmm::engine {

struct Fp8WeightsParams {
  // Codes as bytes [groups][n][k] (a 3D map, boxes of 64 k x 128 rows, unswizzled): rows past a
  // group's n and k past its end read as 0.
  CUtensorMap codes;
  const float* scales = nullptr;          // f32, group g's at scales + g * scale_group_stride
  std::int64_t scale_group_stride = 0;
  int kind = 2;                           // 0 tensor, 1 channel, 2 [128, 128] block (llmm::Fp8ScaleKind)
  int scale_cols = 0;                     // block scales: ceil(k / 128)
  int n = 0;                              // a group's rows
};

struct Fp8Weights {
  using Params = Fp8WeightsParams;
  static constexpr bool kDecode = false;
  static constexpr bool kSplit = false;
  static constexpr bool kConvert = true;
  static constexpr int kConvertWarps = 3;  // producer warps 1..3
  static constexpr int kBoxBytes = kTiledBM * kTiledBK * 2;  // the 16-bit box; the codes follow it

  // The TMA thread: stage kb's codes of rows feat0 .. feat0 + 127 of group `group` to `codes`,
  // completing on `bar` (kTiledFp8CodeBytes transaction bytes, out-of-bounds parts zero-filled).
  __device__ static void copy(const Params& w, std::uint8_t* codes, int group, int feat0, int kb, std::uint64_t* bar) {
    ptx::tensor_copy_3d_g2s(codes, &w.codes, kb * kTiledBK, feat0, group, bar);
  }

  // Two codes (the low 16 bits of `two`) times `s`, rounded to the 16-bit dtype, packed.
  template <bool BF16>
  __device__ static std::uint32_t pair(std::uint32_t two, float s) {
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3)));
    if constexpr (BF16) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f.x * s, f.y * s);
      return *reinterpret_cast<const std::uint32_t*>(&h);
    } else {
      const __half2 h = __floats2half2_rn(f.x * s, f.y * s);
      return *reinterpret_cast<const std::uint32_t*>(&h);
    }
  }

  // Converter thread t of kConvertWarps * 32: the stage's codes at shared address `codes`
  // ([128 rows][64 bytes]) into the 16-bit box at `box` (row r's 16-byte unit u at
  // r * 128 + ((u ^ r % 8) << 4)), one unit (8 codes of a row) at a time; a warp reads 256
  // contiguous bytes and writes four whole 128-byte rows.
  template <bool BF16>
  __device__ static void convert(const Params& w, std::uint32_t codes, std::uint32_t box, int group, int feat0, int kb, int t) {
    const float* const s = w.scales + group * w.scale_group_stride;
    const float stage_scale = w.kind == 2 ? __ldg(s + (feat0 >> 7) * w.scale_cols + (kb >> 1)) : w.kind == 0 ? __ldg(s) : 0.0f;
    constexpr int kUnits = kTiledBM * kTiledBK / 8;
#pragma unroll 2
    for (int u = t; u < kUnits; u += kConvertWarps * 32) {
      const int row = u >> 3, unit = u & 7, f = feat0 + row;
      // A row past n holds zero codes; its channel scale does not exist (0 keeps it zero).
      const float sc = w.kind == 1 ? (f < w.n ? __ldg(s + f) : 0.0f) : stage_scale;
      std::uint32_t lo, hi;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(codes + 8 * u));
      const std::uint32_t o0 = pair<BF16>(lo, sc), o1 = pair<BF16>(lo >> 16, sc), o2 = pair<BF16>(hi, sc),
                          o3 = pair<BF16>(hi >> 16, sc);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(box + row * 128 + ((unit ^ (row & 7)) << 4)), "r"(o0),
                   "r"(o1), "r"(o2), "r"(o3)
                   : "memory");
    }
  }
};

}  // namespace llmm::engine
