// Ternary weights made by other tools, converted to TQ2_0_g128 blocks (llmm's AoS form, what
// TernaryWeightCache::get_or_upload and llmm.upload_tq2 take). Pure host functions: each checks
// the byte count against the shape first, then every block, and refuses bad input naming the
// row and block (an invalid code, a non-finite scale); nothing is returned half-converted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "llmm/ternary.hpp"

namespace llmm {

// GGUF TQ2_0 (llama.cpp): a row of k weights is k / 256 blocks of 66 bytes {qs[64], d (f16)};
// weight j of a block is code (qs[32 * (j / 128) + j % 32] >> 2 * ((j % 128) / 32)) & 3, value
// (code - 1) * d. Each 128-weight half becomes one TQ2_0_g128 block with the same d: lossless.
// Requires k % 256 == 0 and bytes == n * k / 256 * 66; refuses code 3 and a non-finite d.
std::vector<BlockTQ2_128> tq2_from_gguf_tq2_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// GGUF TQ1_0 (llama.cpp): k / 256 blocks of 54 bytes {qs[48], qh[4], d (f16)} holding 5 (qs) or
// 4 (qh) base-3 digits a byte in fixed point (digit i of byte b: ((b * 3^i) mod 256) * 3 >> 8),
// in llama.cpp's order (qs[0..31]: weights 32 i + m; qs[32..47]: 160 + 16 i + m; qh: 240 + 4 i
// + j). Every byte decodes, so only d can be bad. Lossless. Requires k % 256 == 0.
std::vector<BlockTQ2_128> tq2_from_gguf_tq1_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// Q2_0 with 128-weight groups as PrismML first wrote it (the first Ternary-Bonsai GGUFs, as GGML
// type 42, which upstream ggml now uses for its group-64 Q2_0 below): a row of k weights is
// k / 128 blocks of 34 bytes {d (f16), qs[32]}, weight j at bits 2 * (j % 4) of qs[j / 4], value
// (code - 1) * d. TQ2_0_g128 is the same block with the scale last: a reorder, lossless. The
// format also allows code 3 (+2), which a ternary block cannot hold: refused, naming the row,
// block and byte, as is a non-finite d. Requires k % 128 == 0 and bytes == n * k / 128 * 34.
std::vector<BlockTQ2_128> tq2_from_q2_0_g128(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// PQ2_0, GGML type 142 in PrismML's llama.cpp fork (the current Ternary-Bonsai GGUFs): byte for
// byte the layout of tq2_from_q2_0_g128 above ({d, qs[32]} per 128 weights, codes 0..3 = -1, 0,
// +1, +2 times d), converted by the same code; errors name PQ2_0. Lossless; refuses code 3 (+2).
std::vector<BlockTQ2_128> tq2_from_pq2_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// PTQ1_0, GGML type 143 in PrismML's fork: TQ1_0's base-3 digits with one scale per 128 weights.
// A row is k / 128 blocks of 28 bytes {qs[24], qh[2], d (f16)}; digit i of a byte as in TQ1_0;
// weight 16 i + m is digit i of qs[m] (m < 16), 80 + 8 i + m digit i of qs[16 + m] (m < 8),
// 120 + 2 i + h digit i of qh[h] (i < 4); value (digit - 1) * d. Every byte decodes, so only d can
// be bad (non-finite: refused). Lossless. Requires k % 128 == 0 and bytes == n * k / 128 * 28.
std::vector<BlockTQ2_128> tq2_from_ptq1_0(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// Q2_0 as upstream ggml defines it (GGML type 42): a row is k / 64 blocks of 18 bytes {d (f16),
// qs[16]}, weight j at bits 2 * (j % 4) of qs[j / 4], value (code - 1) * d, codes 0..3 = -1, 0,
// +1, +2. A TQ2_0_g128 block has one scale for 128 weights, so blocks 2 i and 2 i + 1 of a row
// become TQ2_0_g128 block i exactly when their scales have the same f16 bits, or when one of the
// two is all zeros (every code 1; the other's scale is kept). Otherwise refused, naming the row,
// both blocks and both scales: a group-64 variant of TQ2_0_g128 is not implemented. Also refuses
// code 3 (+2 x d, not ternary) naming the row, block and byte, and a non-finite d. Lossless where
// it converts. Requires k % 128 == 0 and bytes == n * k / 64 * 18.
std::vector<BlockTQ2_128> tq2_from_q2_0_g64(const void* data, std::size_t bytes, std::int64_t n, std::int64_t k);

// Hugging Face BitNet packing (BitNet b1.58 2B4T, Falcon3-1.58bit): uint8 [out / 4, in], weight
// row r in packed row r % (out / 4) at bits 2 * (r / (out / 4)), code - 1 in {-1, 0, 1}; the
// layer divides its output by the per-tensor weight_scale, so every block gets d = 1 /
// weight_scale rounded to f16: lossless but for that one rounding (relative error <= 2^-11).
// Requires out % 4 == 0, in % 128 == 0, a finite weight_scale > 0 whose inverse is a normal f16;
// refuses code 3 naming the packed row and column.
std::vector<BlockTQ2_128> tq2_from_bitnet(const std::uint8_t* packed, std::size_t bytes, std::int64_t out,
                                          std::int64_t in, float weight_scale);

}  // namespace llmm
