// skinny_mma (v3) for dense matmul: the streaming engine's tensor-core kernel
// (engine/stream/skinny_mma_engine.cuh) with the dense row map, C[M, N] = X[M, K] . W[N, K]^T
// for M <= 16 in f16/bf16, batched; the vector image at batch 1 where the plan fits it.
#include "core/dense/skinny_mma.hpp"
#include "cuda/engine/stream/skinny_mma_engine.cuh"
#include "cuda/engine/stream/skinny_rows.cuh"

namespace llmm::cuda_dense {

void launch_skinny_mma(const DenseArgs& g, const SkinnyMmaConfig& c, StreamHandle s) {
  if (g.m > 8 * c.n_tiles || g.m < 1 || g.batch < 1)
    fail(ErrorCode::Internal, "launch_skinny_mma: n_tiles ", c.n_tiles, " for m ", g.m, ", batch ", g.batch);
  const std::int64_t image = c.x_image ? kSkinnyMmaWarps * skinny_mma_image_warp_bytes(c.n_tiles, g.k, c.cluster) : 0;
  if (c.x_image && g.batch != 1)
    fail(ErrorCode::Internal, "skinny_mma: a vector image of ", image, " bytes for batch ", g.batch, " planned");
  const auto stream = static_cast<cudaStream_t>(s);
  if (g.dtype == DType::F16)
    engine::stream::launch_skinny_config<engine::stream::SkinnyDenseRows, __half>(g, c, image, stream, "skinny_mma");
  else if (g.dtype == DType::BF16)
    engine::stream::launch_skinny_config<engine::stream::SkinnyDenseRows, __nv_bfloat16>(g, c, image, stream, "skinny_mma");
  else fail(ErrorCode::Internal, "launch_skinny_mma: dtype ", dtype_name(g.dtype));
}

}  // namespace llmm::cuda_dense
