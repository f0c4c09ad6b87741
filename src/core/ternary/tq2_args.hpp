// Raw, already-validated arguments of one ternary GEMM, as the CUDA launchers take them.
// No CUDA headers (host code builds these).
//
//   out[i, j] = sum_l in[i, l] * W[j, l],  0 <= i < m, 0 <= j < n, 0 <= l < k,  k % 128 == 0
//   W[j, l]   = (code(j, l) - 1) * scale(j, l / 128)     (codes 0/1/2 mean -1/0/+1; 3 never stored)
//   code(j, l) = (codes[j * (k / 4) + l / 4] >> (2 * (l % 4))) & 3     (4 codes a byte, LSB first)
//   scale(j, b) = f16 bits scales[j * (k / 128) + b]
//   in(i, l)   = in[i * in_ld + l]   (in_dtype f32, f16 or bf16)
//   out(i, j)  = out[i * out_ld + j] (out_dtype f32, or the input's dtype)
//
// Device layout ("SoA", made by TernaryWeightCache from the AoS BlockTQ2_128 stream): the codes
// of a row are contiguous (k/4 bytes, 32 bytes per 128-block, base 256-byte aligned, row stride
// k/4 so every 128-block's 32 bytes are 16-byte aligned), the scales apart ([n][k/128] f16).
// The scales are followed by kTq2ScalesTailBytes readable bytes (tq2_stream_v4 copies whole
// 16-byte units). Both kernels can then stream a row (or a tile of rows) with 16-byte loads.
#pragma once
#include <cstddef>
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"
#include "llmm/ternary.hpp"

namespace llmm::cuda_ternary {

struct Tq2Args {
  const std::uint8_t* codes = nullptr;    // [n][k/4]
  const std::uint16_t* scales = nullptr;  // [n][k/128] f16 bits
  // The same scales transposed, [k/128][scales_t_ld] (ld >= n, a multiple of 8; columns n..
  // zero): read by the tiled_sm90 route's TMA, 128 rows of one k-block in one piece.
  const std::uint16_t* scales_t = nullptr;
  std::int64_t scales_t_ld = 0;
  std::int64_t m = 0, n = 0, k = 0;
  const void* in = nullptr;
  DType in_dtype = DType::F32;
  std::int64_t in_ld = 0;
  void* out = nullptr;
  DType out_dtype = DType::F32;
  std::int64_t out_ld = 0;
  bool exact = true;  // f32 input: Exact keeps f32 accuracy (abs err < 1e-3 on the seed sweeps)
  // tq2_dequant_lt only: the caller's workspace (nullptr: the context's) and weight rows per
  // dequantized chunk (0: automatic).
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::int64_t chunk_rows = 0;
  Tq2StreamImage stream_image = Tq2StreamImage::Auto;  // tq2_stream_v5 only
  // The Hadamard rotation of x (Tq2Options::rotation_*): rot_block 0 or 128..1024 on CUDA, applied
  // by tq2_stage_i8x4 (v4, v5 staged); the CPU reference takes any power of two.
  const float* rot_signs = nullptr;
  int rot_block = 0;
};

}  // namespace llmm::cuda_ternary
