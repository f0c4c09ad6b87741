// skinny_mma: x[M, K] . w[N, K]^T for M = 1..16 in f16/bf16 on tensor cores (mma.sync m16n8k16).
// Host-side facts (pure): which problems it takes, its configuration and kernel name.
//
// Why tensor cores: at M = 16 a CUDA-core kernel needs 16 FMAs (plus conversions) per weight
// element, as much ALU time as the weight's memory time on an H200, so it cannot stream the
// weight at full bandwidth. With mma.sync the weight tile is the A operand (16 rows x 16 k) and
// the M vectors are B (k x 8 columns), so the arithmetic is nearly free.
#pragma once
#include <optional>
#include <string>

#include "core/dense/dense_args.hpp"

namespace llmm::cuda_dense {

inline constexpr int kSkinnyMmaMaxM = 16;          // two n8 tiles of vectors

struct SkinnyMmaConfig {
  int n_tiles = 0;    // n8 tiles of vectors: 1 for M <= 8, 2 for M <= 16
  int warps_k = 0;    // warps of a block splitting K over the same weight rows: 4 or 8
  int row_tiles = 2;  // m16 tiles of weight rows a block: 2 (32 rows), or 1 (16 rows) where 32-row
                      // blocks would leave SMs without two blocks (session 26: 3072 rows were 96
                      // blocks on 132 SMs)
  friend bool operator==(const SkinnyMmaConfig&, const SkinnyMmaConfig&) = default;
};

// nullopt unless: f16/bf16, 1 <= m <= 16, n >= 1, k >= 1 and k % 8 == 0, a not transposed, b
// transposed ([n, k] rows), a and b base pointers, row strides and batch strides 16-byte
// aligned, and cc_major >= 8 (0 = unknown is accepted). sm_count 0 = unknown (132).
std::optional<SkinnyMmaConfig> skinny_mma_config(const DenseArgs& args, int cc_major, int sm_count);

// skinny_mma_<f16|bf16>_n<8|16>_wk<4|8>, with _r16 for blocks of 16 weight rows
std::string skinny_mma_kernel_name(const DenseArgs& args, const SkinnyMmaConfig& config);

// Launcher (src/cuda/dense/skinny_mma.cu): throws ErrorCode::Cuda if the launch fails.
void launch_skinny_mma(const DenseArgs& args, const SkinnyMmaConfig& config, StreamHandle stream);

}  // namespace llmm::cuda_dense
