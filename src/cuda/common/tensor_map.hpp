// Host side of the Hopper copy engine: tensor maps (CUtensorMap) for cp.async.bulk.tensor,
// encoded through the driver entry point the runtime hands out (no link to libcuda).
// Included by *_sm90a.cu host code only.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace llmm::cuda_common {

// A 2D tensor of bytes (dims innermost first; the row stride in bytes a multiple of 16 below
// 2^40; base 16-byte aligned) cut into boxes of box[0] x box[1] bytes (each <= 256; box[0] a
// multiple of 16, and <= 128 with swizzle), out-of-bounds elements zero-filled. swizzle128: the
// copy engine stores the 16-byte unit u of box line r at unit u ^ (r % 8) (its 128-byte pattern;
// the shared-memory target must then be 1024-byte aligned), so that reads down a column of lines
// spread over the banks. Throws llmm::Error(ErrorCode::Cuda) naming `who` when the driver refuses.
CUtensorMap make_tensor_map_u8_2d(const void* base, const std::uint64_t (&dims)[2], std::uint64_t row_stride,
                                  const std::uint32_t (&box)[2], bool swizzle128, const char* who);

// A 3D tensor of 16-bit or 32-bit elements (elem_bytes 2 or 4; dims innermost first; the two
// outer strides in bytes, multiples of 16 below 2^40; base 16-byte aligned) cut into boxes of
// box[0] x box[1] x box[2] elements (box[0] * elem_bytes <= 128 bytes, each <= 256), stored with
// the 128-byte swizzle; out-of-bounds elements are zero-filled (+0.0 for f16/bf16/f32). The
// copies move bits, so one map serves f16 and bf16. Throws llmm::Error(ErrorCode::Cuda) naming
// `who` when the driver refuses.
CUtensorMap make_tensor_map_3d_sw128(const void* base, int elem_bytes, const std::uint64_t (&dims)[3],
                                     const std::uint64_t (&strides)[2], const std::uint32_t (&box)[3], const char* who);

// A 3D tensor of bytes (dims innermost first; the two outer strides in bytes, multiples of 16
// below 2^40; base 16-byte aligned) in unswizzled boxes of box[0] x box[1] x box[2] bytes
// (box[0] a multiple of 16, each <= 256), out-of-bounds bytes zero-filled: FP8 weight stacks.
CUtensorMap make_tensor_map_u8_3d(const void* base, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                                  const std::uint32_t (&box)[3], const char* who);

// The general 3D form of the two above: elements of 1, 2 or 4 bytes, with the 128-byte swizzle
// (box[0] * elem_bytes <= 128) or without (box[0] * elem_bytes a multiple of 16).
CUtensorMap make_tensor_map_3d(const void* base, int elem_bytes, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                              const std::uint32_t (&box)[3], bool swizzle128, const char* who);

}  // namespace llmm::cuda_common
