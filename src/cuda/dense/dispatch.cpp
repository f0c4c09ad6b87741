// CUDA side of llmm::matmul: resolve the plan's kernel (and cuBLASLt algorithm), let the
// context refuse it, then launch. Nothing is enqueued before every check has passed.
#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "core/dense/dense_dispatch.hpp"
#include "core/dense/dense_kernels.hpp"
#include "core/ranges.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "cuda/dense/launch.hpp"
#include "cuda/engine/launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

using cuda_dense::DenseArgs;

// Resolved cuBLASLt plans of a context, keyed by everything but the pointers (a fixed array, not
// a formatted string: the lookup is on every call's host path).
using LtKey = std::array<std::int64_t, 14>;
struct LtCache {
  std::map<LtKey, std::shared_ptr<cuda_dense::CublasLtGemm>> plans;
};

LtKey lt_key(const DenseArgs& g) {
  return {static_cast<std::int64_t>(g.dtype), g.batch, g.m, g.n, g.k, g.a_batch, g.a_ld, g.a_trans, g.b_batch, g.b_ld,
          g.b_trans, g.c_batch, g.c_ld, g.exact};
}

const cuda_dense::CublasLtGemm& lt_plan(Context& ctx, const DenseArgs& g) {
  auto& slot = ctx.cache_slot("dense.cublaslt");
  if (!slot) slot = std::make_shared<LtCache>();
  auto& cache = *static_cast<LtCache*>(slot.get());
  const LtKey key = lt_key(g);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) {
    auto math = g.dtype == DType::F32 && !g.exact ? cuda_dense::LtMath::Tf32 : cuda_dense::LtMath::Default;
    auto plan = std::make_shared<cuda_dense::CublasLtGemm>(ctx.cublaslt_handle(), g, math,
                                                           Context::kCublasLtWorkspaceBytes);
    it = cache.plans.emplace(key, std::move(plan)).first;
  }
  return *it->second;
}

// What a launch over g reads (a, b) and writes (c); cuBLASLt also uses its workspace.
LaunchRanges dense_ranges(const DenseArgs& g, const void* workspace) {
  LaunchRanges r;
  if (g.k > 0) r.reads.push_back(matrix_range(g.a, g.dtype, g.batch, g.a_batch, g.a_trans ? g.k : g.m, g.a_trans ? g.m : g.k, g.a_ld));
  if (g.k > 0) r.reads.push_back(matrix_range(g.b, g.dtype, g.batch, g.b_batch, g.b_trans ? g.n : g.k, g.b_trans ? g.k : g.n, g.b_ld));
  r.writes.push_back(matrix_range(g.c, g.dtype, g.batch, g.c_batch, g.m, g.n, g.c_ld));
  if (workspace) {
    r.reads.push_back({workspace, Context::kCublasLtWorkspaceBytes});
    r.writes.push_back({workspace, Context::kCublasLtWorkspaceBytes});
  }
  return r;
}

}  // namespace

Receipt run_dense_cuda(Context& ctx, const DensePlan& plan, const DenseArgs& g) {
  StreamHandle s = ctx.stream();
  std::string name;
  cuda_dense::GemvWideConfig wide{};
  engine::TiledSm90Launch sm90{};
  const cuda_dense::CublasLtGemm* lt = nullptr;
  void* workspace = nullptr;
  switch (plan.route) {  // resolve: may throw, nothing enqueued yet
    case DenseRoute::ZeroFill: name = cuda_dense::zero_fill_name(g); break;
    case DenseRoute::GemvWide:  // the plan's configuration, launched as planned (the launcher checks it)
      wide = cuda_dense::gemv_wide_config_of(plan.gemv_wide_vecs, plan.gemv_wide_k_lanes, plan.gemv_wide_grid_x);
      if (wide.passes < 1 || !cuda_dense::gemv_wide_supports(g))
        fail(ErrorCode::Internal, "matmul: gemv_wide planned for a problem it does not take");
      name = cuda_dense::gemv_wide_kernel_name(g, wide);
      break;
    case DenseRoute::TiledSm90:  // the plan's tile, launched as planned
      if (plan.tiled_bn <= 0 || plan.tiled_bm <= 0) fail(ErrorCode::Internal, "matmul: tiled_sm90 planned without a tile");
      sm90 = engine::tiled_sm90_dense_launch_at(g.dtype, g.batch, g.m, g.n, ctx.arch().sm_count, plan.tiled_bn, plan.tiled_bm);
      name = engine::tiled_sm90_dense_kernel_name(g.dtype, sm90.bn, sm90.bm);
      break;
    case DenseRoute::CublasLt:
      lt = &lt_plan(ctx, g);
      workspace = ctx.cublaslt_workspace();
      name = lt->description();
      break;
    default: fail(ErrorCode::Internal, "matmul: route ", route_name(plan.route), " has no CUDA kernel");
  }
  ctx.check_launchable(name);
  switch (plan.route) {
    case DenseRoute::ZeroFill: cuda_dense::launch_zero_fill(g, s); break;
    case DenseRoute::GemvWide: cuda_dense::launch_gemv_wide(g, wide, s); break;
    case DenseRoute::TiledSm90: engine::launch_tiled_sm90_dense(g, sm90, s); break;
    case DenseRoute::CublasLt: lt->run(g, workspace, s); break;
    default: break;
  }
  ctx.note_launch(name, [&] { return dense_ranges(g, workspace); });
  return Receipt{route_name(plan.route), name, 1};
}

}  // namespace llmm::detail
