// skinny_mma over expert stacks (matmul_id's grouped route, kernel SkinnyMma): the streaming
// engine's tensor-core kernel (engine/stream/skinny_mma_engine.cuh) with the expert row map,
// each block sorting the m * top_k <= 256 routed rows itself (core/moe/moe_skinny.hpp).
#include "core/moe/moe_skinny.hpp"
#include "cuda/engine/stream/skinny_mma_engine.cuh"
#include "cuda/engine/stream/skinny_rows.cuh"

namespace llmm::cuda_moe {

// The expert map's sort takes one routed row a thread.
static_assert(engine::stream::kSkinnyThreads >= kSkinnyMoeMaxRows);

void launch_skinny_mma_moe(const MoeArgs& g, const cuda_dense::SkinnyMmaConfig& c, StreamHandle s) {
  ArchInfo any;  // the arch was checked by the plan; here the arguments only
  if (const std::string why = skinny_mma_moe_refusal(g, any); !why.empty())
    fail(ErrorCode::Internal, "launch_skinny_mma_moe: ", why);
  if (c.x_image) fail(ErrorCode::Internal, "launch_skinny_mma_moe: a vector image planned");
  const auto stream = static_cast<cudaStream_t>(s);
  if (g.w_dtype == DType::F16)
    engine::stream::launch_skinny_config<engine::stream::SkinnyExpertRows, __half>(g, c, 0, stream, "skinny_mma_moe");
  else
    engine::stream::launch_skinny_config<engine::stream::SkinnyExpertRows, __nv_bfloat16>(g, c, 0, stream, "skinny_mma_moe");
}

}  // namespace llmm::cuda_moe
