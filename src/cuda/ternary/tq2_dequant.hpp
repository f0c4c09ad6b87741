// Launchers of the tq2_dequant_lt route's own kernels (src/cuda/ternary/tq2_dequant.cu): the
// activation's scaling and split into f16 parts, the weight's dequantization to f16, and the f32
// temp's scaled rounding to bf16. Host header, no CUDA headers; arguments already validated by
// the route (core/ternary/tq2_dequant_lt_plan.hpp), kernels go on `stream`, none synchronizes,
// allocates or uses atomics. Each throws llmm::Error(Cuda) naming the kernel if its launch fails.
#pragma once
#include <cstddef>
#include <cstdint>

#include "llmm/context.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_ternary {

// An activation [m, k] (k % 8 == 0), f32 or bf16, rows in_ld elements apart.
struct Tq2LtInput {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t m = 0, k = 0, ld = 0;
};

// partial[b] = max |x| over the finite elements of rows b, b + blocks, b + 2 blocks, ...
// (0 when there are none). 1 <= blocks <= 1024, blocks <= m.
void launch_tq2_lt_absmax(const Tq2LtInput& x, float* partial, int blocks, StreamHandle stream);

// With G = max(partial[0 .. blocks)) and e = clamp(ilogb(G) - 14, -115, 113) (0 when G == 0):
// part 0 = f16(x * 2^-e) ("hi") and, parts == 2, part 1 = f16((x * 2^-e - hi) * 2^11) ("lo"),
// each [m][k] row-major at parts_base + p * part_bytes (16-byte aligned); and
// scalars = {2^e, 2^(e - 11), 0, 1} for the GEMMs' device-side alpha and beta.
void launch_tq2_lt_split(const Tq2LtInput& x, const float* partial, int blocks, int parts, void* parts_base,
                         std::size_t part_bytes, float* scalars, StreamHandle stream);

// Per row i, with G_i = max |x[i, :]| over finite elements and e_i as above (0 when G_i == 0):
// out[i][l] = f16(x[i][l] * 2^-e_i) ([m][k] row-major, 16-byte aligned) and alpha[i] = 2^e_i.
// The tiled_sm90 routes' activation: one kernel, each row scaled by its own maximum.
void launch_tq2_rowscale_f16(const Tq2LtInput& x, void* out, float* alpha, StreamHandle stream);

// w[r][l] = f16((code(row0 + r, l) - 1) * scale(row0 + r, l / 128)) for r < rows, l < k: exact
// (codes [n][k/4], scales [n][k/128] f16 bits, tq2_args.hpp's layout). w 16-byte aligned.
void launch_tq2_dequant_f16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t row0,
                            std::int64_t rows, std::int64_t k, void* w, StreamHandle stream);

// dst[i][j] = bf16(*alpha * src[i][j]) for i < m, j < cols (src rows src_ld floats apart, 16-byte
// aligned, src_ld % 4 == 0; alpha a device float).
void launch_tq2_lt_scale_bf16(const float* src, std::int64_t src_ld, const float* alpha, void* dst, std::int64_t dst_ld,
                              std::int64_t m, std::int64_t cols, StreamHandle stream);

}  // namespace llmm::cuda_ternary
