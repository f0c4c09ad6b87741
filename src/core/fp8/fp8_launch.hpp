// Seam between llmm::matmul_fp8 (host) and its CUDA routes (src/cuda/fp8/dispatch.cpp, or a
// refusal in CPU-only builds). Everything here is validated and planned; the launch plans nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>

#include "llmm/fp8.hpp"

namespace llmm::detail {

struct Fp8LaunchArgs {
  DType dtype = DType::BF16;  // x and y
  std::int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;
  std::int64_t x_ld = 0;
  const std::uint8_t* codes = nullptr;  // [n, k] e4m3, row stride w_ld
  std::int64_t w_ld = 0;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  const float* scales = nullptr;  // fp8_scale_shape(kind, n, k), row-major
  void* y = nullptr;
  std::int64_t y_ld = 0;
  char* workspace = nullptr;  // plan.workspace_bytes, 256-byte aligned
  // x given in e4m3 (matmul_fp8's Fp8ActivationView): x is then its codes [m, k] (rows x_ld
  // bytes apart), x_scales its scales, token-major, x_scale_ld floats from one 128-k group to
  // the next (a multiple of 4, >= m); dtype is y's.
  bool x_e4m3 = false;
  const float* x_scales = nullptr;
  std::int64_t x_scale_ld = 0;
};

// Byte offsets of the CublasLt route's workspace parts (activation codes, activation scales,
// the weight scales as cuBLASLt reads them), and of DequantLt's weight image.
struct Fp8WorkspaceLayout {
  std::size_t act_codes = 0, act_scales = 0, w_scales = 0, image = 0, total = 0;
  std::int64_t w_scale_ld = 0;  // Block128: the k-block pitch cuBLASLt wants (a multiple of 4)
  // CublasLt: the token rows cuBLASLt sees. cuBLASLt's sm_90 block-scale GEMM serves only m % 4
  // == 0 (its VEC128 activation scales [k / 128][m]), so the block kind pads m to lt_m with zero
  // tokens, and D goes to y_stage ([lt_m, n] rows of n) whose first m rows are then copied to y.
  std::int64_t lt_m = 0;
  bool y_staged = false;
  std::size_t y_stage = 0;
  // TiledSm90: x quantized in 1 x 128 groups for every weight kind (the scales [k / 128][lt_m]),
  // and no weight scales staged.
  bool act_groups128 = false;
};
// The token rows the cublaslt route hands cuBLASLt for m tokens of a scale kind.
inline std::int64_t fp8_lt_rows(Fp8ScaleKind kind, std::int64_t m) {
  if (kind != Fp8ScaleKind::Block128 || m % 4 == 0 || m > std::numeric_limits<std::int64_t>::max() - 4) return m;
  return m - m % 4 + 4;
}
Fp8WorkspaceLayout fp8_workspace_layout(Fp8Route route, std::int64_t m, std::int64_t n, std::int64_t k,
                                        Fp8ScaleKind kind, DType dtype);

// Whether cuBLASLt's sm_90 FP8 GEMM serves the call (shape, strides, output dtype, scale kind):
// asked of cuBLASLt's heuristic once per shape, kept in the context (false in CPU-only builds).
// Nothing is enqueued.
bool cublaslt_fp8_serves(Context& ctx, const Fp8LaunchArgs& args);

Receipt run_matmul_fp8_cuda(Context& ctx, const Fp8Plan& plan, const Fp8LaunchArgs& args);

}  // namespace llmm::detail
