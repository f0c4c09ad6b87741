// FP8 e4m3 weights on the Hopper tiled engine (Fp8Weights): the producer's TMA thread brings a
// stage's codes [128 rows][64 k] (8 KB, half a 16-bit box) with its token rows; each consumer
// warpgroup decodes its 64 rows' codes exactly (e4m3 -> f16 -> f32), multiplies each by its scale
// in f32 and rounds once to bf16 (the mma.sync grouped kernel's weights, bit for bit), into one
// of its two 16-bit boxes in the 128-byte-swizzled layout its wgmma descriptors read, while its
// previous stage's wgmmas run. The weights cross DRAM at one byte each.
// Scales: per tensor, per output channel (row), or per [128 rows][128 k] block (DeepSeek's
// layout, [ceil(n / 128)][ceil(k / 128)] a group); a tile's 128 rows start at a multiple of 128
// and a stage's 64 k lie inside one 128-k block, so a block-scaled stage has one scale.
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

// A consumer thread's scales over one tile: of its four rows (channel scales), the tensor's, or
// (block scales) the current 128-k block's and the next one's, loaded a block ahead so that no
// stage but a tile's first waits on a global load.
struct Fp8TileScales {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float next = 0.0f;
  const float* blocks = nullptr;  // block scales of the tile's 128 rows
  int last_block = 0;
};

struct Fp8Weights {
  using Params = Fp8WeightsParams;
  static constexpr bool kDecode = false;
  static constexpr bool kSplit = false;
  static constexpr bool kConvert = true;
  static constexpr bool kFp8Mma = false;
  static constexpr int kHalfCodeBytes = 64 * kTiledBK;   // a consumer's 64 rows of codes
  static constexpr int kHalfBoxBytes = 64 * kTiledBK * 2;  // a consumer's 16-bit box

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

  // Consumer thread t (0..127) of a warpgroup converts units t + 128 i (i < 4) of its 64 rows:
  // rows t / 8 + 16 i. Their scales at the tile's first stage kb0 (rows row0 .. row0 + 63 of
  // group `group`); a row past n holds zero codes and has no channel scale (0 keeps it zero).
  __device__ static Fp8TileScales tile_scales(const Params& w, int group, int row0, int kb0, int t) {
    Fp8TileScales x;
    const float* const g = w.scales + group * w.scale_group_stride;
    if (w.kind == 1) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int f = row0 + (t >> 3) + 16 * i;
        x.s[i] = f < w.n ? __ldg(g + f) : 0.0f;
      }
    } else if (w.kind == 0) {
      const float v = __ldg(g);
      x.s[0] = x.s[1] = x.s[2] = x.s[3] = v;
    } else {
      x.blocks = g + (row0 >> 7) * w.scale_cols, x.last_block = w.scale_cols - 1;
      const int b = kb0 >> 1;
      const float v = __ldg(x.blocks + b);
      x.s[0] = x.s[1] = x.s[2] = x.s[3] = v;
      x.next = __ldg(x.blocks + min(b + 1, x.last_block));
    }
    return x;
  }
  // Before stage kb > kb0: at a new 128-k block the prefetched scale becomes current and the
  // next block's is loaded.
  __device__ static void advance(const Params& w, Fp8TileScales& x, int kb) {
    if (w.kind == 2 && (kb & 1) == 0) {
      x.s[0] = x.s[1] = x.s[2] = x.s[3] = x.next;
      x.next = __ldg(x.blocks + min((kb >> 1) + 1, x.last_block));
    }
  }

  // Its units of the stage's codes at shared address `codes` ([64 rows][64 bytes]) into the
  // 16-bit box at `box` (row r's 16-byte unit u at r * 128 + ((u ^ r % 8) << 4)), all four loaded
  // before any is converted; a warp reads 256 contiguous bytes and writes four whole 128-byte
  // rows a unit.
  template <bool BF16>
  __device__ static void convert(std::uint32_t codes, std::uint32_t box, const Fp8TileScales& x, int t) {
    constexpr int kUnits = 64 * kTiledBK / 8 / 128;  // 4 a thread
    std::uint32_t lo[kUnits], hi[kUnits];
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int u = t + 128 * i;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo[i]), "=r"(hi[i]) : "r"(codes + 8 * u));
    }
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int u = t + 128 * i, row = u >> 3, unit = u & 7;
      const float sc = x.s[i];
      const std::uint32_t o0 = pair<BF16>(lo[i], sc), o1 = pair<BF16>(lo[i] >> 16, sc), o2 = pair<BF16>(hi[i], sc),
                          o3 = pair<BF16>(hi[i] >> 16, sc);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(box + row * 128 + ((unit ^ (row & 7)) << 4)), "r"(o0),
                   "r"(o1), "r"(o2), "r"(o3)
                   : "memory");
    }
  }
};

}  // namespace llmm::engine

namespace llmm::engine {

// FP8 weights times FP8 tokens (W8A8, Fp8MmaWeights): a stage is one 128-k block, the weights'
// codes [128 rows][128 k] by TMA in the 128-byte swizzle (the wgmma A operand as it lands), the
// staged tokens' codes [bn][128 k] (moe_stage_rows quantized each routed row per 128 channels,
// quantize_fp8_activations' rule) and their bn f32 scales of that block. Each consumer issues four
// e4m3 m64nBNk32 wgmmas into a zeroed block sum, then promotes it into its f32 accumulator times
// the weight scale and each token's scale (the tensor cores sum in reduced precision: never more
// than one 128-k block before the f32 promotion).
struct Fp8MmaWeightsParams {
  CUtensorMap codes;     // [groups][n][k] bytes, boxes of 128 k x 128 rows, 128-byte swizzle
  CUtensorMap x_scales;  // the token rows' scales, f32 [k blocks][ld] (3D, one batch), boxes of (bn + 4) x 1
  const float* scales = nullptr;  // the weights' f32 scales, group g's at scales + g * scale_group_stride
  std::int64_t scale_group_stride = 0;
  int kind = 2;         // 0 tensor, 1 channel, 2 [128, 128] block (llmm::Fp8ScaleKind)
  int scale_cols = 0;   // block scales: ceil(k / 128)
  int n = 0;            // a group's rows
};

// A consumer thread's weight scales over one tile: of its rows r and r + 8 (channel; the tensor's
// for both), or the current 128-k block's and the next one's (block: one for the tile's 128 rows).
struct Fp8MmaTileScales {
  float w0 = 0.0f, w1 = 0.0f, next = 0.0f;
  const float* blocks = nullptr;
  int last_block = 0;
};

struct Fp8MmaWeights {
  using Params = Fp8MmaWeightsParams;
  static constexpr bool kDecode = false;
  static constexpr bool kSplit = false;
  static constexpr bool kConvert = false;
  static constexpr bool kFp8Mma = true;

  __device__ static void copy(const Params& w, std::uint8_t* codes, int group, int feat0, int kb, std::uint64_t* bar) {
    ptx::tensor_copy_3d_g2s(codes, &w.codes, kb * kTiledW8a8BK, feat0, group, bar);
  }
  // The scales of rows row0 .. row0 + bn - 1 for k-block kb (rows past the staged ones read 0),
  // from row0 rounded down to a multiple of 4: a TMA box must start on a 16-byte aligned global
  // address (else the copy faults as an illegal instruction), and an expert's first staged row
  // is anywhere. So the box holds bn + kScaleBoxExtra rows, row0's scale at x_scale_shift(row0).
  static constexpr int kScaleBoxExtra = 4;
  __device__ static int x_scale_shift(int row0) { return row0 & 3; }
  __device__ static void copy_x_scales(const Params& w, void* dst, int row0, int kb, std::uint64_t* bar) {
    ptx::tensor_copy_3d_g2s(dst, &w.x_scales, row0 - x_scale_shift(row0), kb, 0, bar);
  }
  // Rows row and row + 8 of group `group` (row: this thread's first accumulator row) at the tile's
  // first k-block kb0; a row past n has zero codes (its scale 0 keeps it zero).
  __device__ static Fp8MmaTileScales tile_scales(const Params& w, int group, int row, int kb0) {
    Fp8MmaTileScales x;
    const float* const g = w.scales + group * w.scale_group_stride;
    if (w.kind == 1) {
      x.w0 = row < w.n ? __ldg(g + row) : 0.0f;
      x.w1 = row + 8 < w.n ? __ldg(g + row + 8) : 0.0f;
    } else if (w.kind == 0) {
      x.w0 = x.w1 = __ldg(g);
    } else {
      x.blocks = g + (row >> 7) * w.scale_cols, x.last_block = w.scale_cols - 1;
      x.w0 = x.w1 = __ldg(x.blocks + kb0);
      x.next = __ldg(x.blocks + min(kb0 + 1, x.last_block));
    }
    return x;
  }
  // Before k-block kb > kb0: the prefetched block scale becomes current, the next one is loaded.
  __device__ static void advance(const Params& w, Fp8MmaTileScales& x, int kb) {
    if (w.kind == 2) {
      x.w0 = x.w1 = x.next;
      x.next = __ldg(x.blocks + min(kb + 1, x.last_block));
    }
  }
};

}  // namespace llmm::engine
