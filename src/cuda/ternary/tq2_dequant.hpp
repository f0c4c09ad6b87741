// Launchers of the tq2_dequant_lt route's own kernels (src/cuda/ternary/tq2_dequant.cu): the
// activation's per-row scaling into f16 parts (also the tiled_sm90 routes'), the weight's
// dequantization to f16, and the per-row scaling of the GEMMs' f32 result into the output. Host
// header, no CUDA headers; arguments already validated by the route (core/ternary/
// tq2_dequant_lt_plan.hpp), kernels go on `stream`, none synchronizes, allocates or uses atomics. Each throws llmm::Error(Cuda) naming the kernel if its launch fails.
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

// Per row i, with G_i = max |x[i, :]| over finite elements and e_i = clamp(ilogb(G_i) - 14, -115,
// 113) (0 when G_i == 0): part 0 = f16(x[i][l] * 2^-e_i) ("hi") and, parts == 2 (f32 input only),
// part 1 = f16((x[i][l] * 2^-e_i - hi) * 2^11) ("lo"), each [m][k] row-major at out + p * part_bytes
// (16-byte aligned); alpha[i] = 2^e_i. Each row's scale depends on that row only (a row far below
// the largest keeps its precision; the result of a row does not depend on the others).
void launch_tq2_rowscale_f16(const Tq2LtInput& x, int parts, void* out, std::size_t part_bytes, float* alpha,
                             StreamHandle stream);

// The routed rows of a MoE input in expert order (moe_map's counting sort, on the device).
struct Tq2RowGather {
  const std::uint32_t* rows = nullptr;    // [routed]: routed row token * top_k + slot, by expert
  const std::uint32_t* counts = nullptr;  // [n_experts]: rows per expert (their sum: rows to stage)
  int n_experts = 0, top_k = 1;
  std::int64_t token_stride = 0, slot_stride = 0;  // elements: input row of (t, s) at t * ts + s * ss
  std::int64_t routed = 0;                         // m * top_k: an upper bound of sum(counts)
};

// tq2_rowscale over routed rows (matmul_id_tq2's grouped route, f32/bf16 input, k % 8 == 0):
// staged[i] = f16(x_row(rows[i]) * 2^-e_i) ([routed][k], 16-byte aligned) and alpha[i] = 2^e_i
// for i < sum(counts), e_i from that row alone; one kernel instead of a scaled copy and
// moe_stage_rows. Entries past sum(counts) are left as they were (the engine never reads them).
void launch_tq2_rowscale_stage_f16(const void* x, DType dtype, std::int64_t k, const Tq2RowGather& g, void* staged,
                                   float* alpha, StreamHandle stream);

// w[r][l] = f16((code(row0 + r, l) - 1) * scale(row0 + r, l / 128)) for r < rows, l < k: exact
// (codes [n][k/4], scales [n][k/128] f16 bits, tq2_args.hpp's layout). w 16-byte aligned.
void launch_tq2_dequant_f16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t row0,
                            std::int64_t rows, std::int64_t k, void* w, StreamHandle stream);

// dst[i][j] = dst_dtype(alpha[i] * src[i][j]) for i < m, j < cols: src f32 rows src_ld floats
// apart, dst f32 (src == dst allowed: in place) or bf16; alpha device floats [m] (tq2_rowscale's).
void launch_tq2_lt_scale_rows(const float* src, std::int64_t src_ld, const float* alpha, void* dst, DType dst_dtype,
                              std::int64_t dst_ld, std::int64_t m, std::int64_t cols, StreamHandle stream);

}  // namespace llmm::cuda_ternary
