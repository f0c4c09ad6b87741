// The validity of one TQ2_0_g128 block, checked the same way by every reader of AoS bytes
// (tq2_dequantize, TernaryWeightCache): no code 3, a finite scale.
#pragma once
#include <cstdint>

namespace llmm::detail {

// Throws InvalidArgument "<who>: invalid code 3 in row r, block b, byte i" or "<who>: non-finite
// scale (bits 0x7c00) in row r, block b" for the 34-byte block at `blk`.
void check_tq2_block(const unsigned char* blk, const char* who, std::int64_t row, std::int64_t block);

}  // namespace llmm::detail
