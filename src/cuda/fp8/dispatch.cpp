// CUDA side of llmm::matmul_fp8: resolve every kernel of the plan (names, the cuBLASLt FP8
// algorithm), let the context refuse any, then launch as planned.
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>

#include "core/fp8/fp8_launch.hpp"
#include "core/ranges.hpp"
#include "cuda/cublaslt/cublaslt_fp8.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/fp8/fp8_kernels.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {
namespace {

using LtKey = std::array<std::int64_t, 7>;
struct LtFp8Cache {
  std::map<LtKey, std::shared_ptr<cuda_fp8::CublasLtFp8Gemm>> plans;  // null: cuBLASLt has no algorithm
};

// The call's cuBLASLt FP8 GEMM, or null where the heuristic serves none (asked once per shape).
const cuda_fp8::CublasLtFp8Gemm* lt_plan(Context& ctx, const Fp8LaunchArgs& a) {
  auto& slot = ctx.cache_slot("matmul_fp8.cublaslt");
  if (!slot) slot = std::make_shared<LtFp8Cache>();
  auto& cache = *static_cast<LtFp8Cache*>(slot.get());
  const bool block = a.kind == Fp8ScaleKind::Block128;
  // The rows cuBLASLt sees (block: m padded to a multiple of 4, D staged in rows of n).
  const std::int64_t lt_m = fp8_lt_rows(a.kind, a.m), y_ld = lt_m != a.m ? a.n : a.y_ld;
  const LtKey key{lt_m, a.n, a.k, a.w_ld, y_ld, static_cast<std::int64_t>(a.dtype), block};
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) {
    cuda_fp8::LtFp8Shape s;
    s.m = lt_m, s.n = a.n, s.k = a.k, s.w_ld = a.w_ld, s.y_ld = y_ld, s.out = a.dtype, s.block = block;
    std::shared_ptr<cuda_fp8::CublasLtFp8Gemm> g;
    try {
      g = std::make_shared<cuda_fp8::CublasLtFp8Gemm>(ctx.cublaslt_handle(), s, Context::kCublasLtWorkspaceBytes);
    } catch (const Error&) {
      // No algorithm, or a descriptor this cuBLASLt refuses: not served (Auto plans another route;
      // a forced cublaslt is refused with the reason).
    }
    it = cache.plans.emplace(key, std::move(g)).first;
  }
  return it->second.get();
}

std::int64_t scale_count(const Fp8LaunchArgs& a) {
  const auto [r, c] = fp8_scale_shape(a.kind, a.n, a.k);
  return r * c;
}

LaunchRanges inputs_outputs(const Fp8LaunchArgs& a) {
  LaunchRanges r;
  r.reads.push_back(matrix_range(a.x, a.dtype, 1, 0, a.m, a.k, a.x_ld));
  r.reads.push_back(matrix_range(a.codes, DType::U8, 1, 0, a.n, a.k, a.w_ld));
  r.reads.push_back(elems_range(a.scales, DType::F32, scale_count(a)));
  r.writes.push_back(matrix_range(a.y, a.dtype, 1, 0, a.m, a.n, a.y_ld));
  return r;
}

}  // namespace

bool cublaslt_fp8_serves(Context& ctx, const Fp8LaunchArgs& a) { return lt_plan(ctx, a) != nullptr; }

Receipt run_matmul_fp8_cuda(Context& ctx, const Fp8Plan& plan, const Fp8LaunchArgs& a) {
  const StreamHandle s = ctx.stream();
  switch (plan.route) {
    case Fp8Route::Stream: {
      const std::string name = cuda_fp8::gemv_e4m3_kernel_name(a, plan.gemv_vecs, plan.gemv_k_lanes);
      ctx.check_launchable(name);
      cuda_fp8::launch_gemv_e4m3(a, plan.gemv_vecs, plan.gemv_k_lanes, plan.gemv_grid_x, s);
      ctx.note_launch(name, [&] { return inputs_outputs(a); });
      return Receipt{"stream", name, 1};
    }
    case Fp8Route::StreamMma: {
      const std::string name = cuda_fp8::gemv_mma_e4m3_kernel_name(a, plan.mma_k_warps);
      ctx.check_launchable(name);
      cuda_fp8::launch_gemv_mma_e4m3(a, plan.mma_k_warps, s);
      ctx.note_launch(name, [&] { return inputs_outputs(a); });
      return Receipt{"stream_mma", name, 1};
    }
    case Fp8Route::CublasLt: {
      const Fp8WorkspaceLayout lay = fp8_workspace_layout(plan.route, a.m, a.n, a.k, a.kind, a.dtype);
      if (!a.workspace || lay.total > plan.workspace_bytes) fail(ErrorCode::Internal, "matmul_fp8: cublaslt without its workspace");
      const cuda_fp8::CublasLtFp8Gemm* ltp = lt_plan(ctx, a);
      if (!ltp) fail(ErrorCode::Internal, "matmul_fp8: cublaslt planned for a shape cuBLASLt does not serve");
      const auto& lt = *ltp;
      const std::string qname = cuda_fp8::quantize_kernel_name(a);
      ctx.check_launchable(qname);
      ctx.check_launchable(lt.description());
      cuda_fp8::launch_quantize(a, lay, s);
      const auto* codes = reinterpret_cast<const std::uint8_t*>(a.workspace + lay.act_codes);
      const auto* x_scales = reinterpret_cast<const float*>(a.workspace + lay.act_scales);
      const bool staged_w = a.kind == Fp8ScaleKind::Tensor ||
                            (a.kind == Fp8ScaleKind::Block128 && lay.w_scale_ld != (a.k + kFp8Block - 1) / kFp8Block);
      const float* w_scales = staged_w ? reinterpret_cast<const float*>(a.workspace + lay.w_scales) : a.scales;
      void* lt_ws = ctx.cublaslt_workspace();
      void* d = lay.y_staged ? static_cast<void*>(a.workspace + lay.y_stage) : a.y;
      lt.run(a.codes, w_scales, codes, x_scales, d, lt_ws, s);
      if (lay.y_staged) {  // the m real rows of the padded D (a copy on the stream: capturable)
        const std::size_t es = dtype_size(a.dtype);
        const cudaError_t e = cudaMemcpy2DAsync(a.y, static_cast<std::size_t>(a.y_ld) * es, d, static_cast<std::size_t>(a.n) * es,
                                                static_cast<std::size_t>(a.n) * es, static_cast<std::size_t>(a.m),
                                                cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s));
        if (e != cudaSuccess) fail(ErrorCode::Cuda, "matmul_fp8: copying the staged rows failed: ", cudaGetErrorString(e));
      }
      const ByteRange ws{a.workspace, lay.total};
      ctx.note_launch(qname, [&] {
        LaunchRanges r;
        r.reads.push_back(matrix_range(a.x, a.dtype, 1, 0, a.m, a.k, a.x_ld));
        r.reads.push_back(elems_range(a.scales, DType::F32, scale_count(a)));
        r.writes.push_back(ws);
        return r;
      });
      ctx.note_launch(lt.description(), [&] {
        LaunchRanges r = inputs_outputs(a);
        r.reads.erase(r.reads.begin());  // x itself is read by the quantization only
        r.reads.push_back(ws);
        r.reads.push_back({lt_ws, Context::kCublasLtWorkspaceBytes});
        r.writes.push_back({lt_ws, Context::kCublasLtWorkspaceBytes});
        if (lay.y_staged) r.writes.push_back(ws);
        return r;
      });
      return Receipt{"cublaslt", lt.description(), 2};
    }
    case Fp8Route::TiledSm90: {
      const engine::TiledSm90Launch l = engine::tiled_sm90_dense_w8a8_launch(a.m, a.n, ctx.arch().sm_count);
      const std::string ename = engine::tiled_sm90_dense_w8a8_kernel_name(a.dtype);
      if (a.x_e4m3) {  // the caller's codes and scales: nothing to quantize
        ctx.check_launchable(ename);
        const std::int64_t groups = (a.k + kFp8Block - 1) / kFp8Block;
        engine::launch_tiled_sm90_dense_w8a8(a, {static_cast<const std::uint8_t*>(a.x), a.x_ld, a.m, a.x_scales, a.x_scale_ld}, l, s);
        ctx.note_launch(ename, [&] {
          LaunchRanges r = inputs_outputs(a);
          r.reads.front() = matrix_range(a.x, DType::U8, 1, 0, a.m, a.k, a.x_ld);
          r.reads.push_back(matrix_range(a.x_scales, DType::F32, 1, 0, groups, a.m, a.x_scale_ld));
          return r;
        });
        return Receipt{"tiled_sm90", ename, 1};
      }
      const Fp8WorkspaceLayout lay = fp8_workspace_layout(plan.route, a.m, a.n, a.k, a.kind, a.dtype);
      if (!a.workspace || lay.total > plan.workspace_bytes) fail(ErrorCode::Internal, "matmul_fp8: tiled_sm90 without its workspace");
      const std::string qname = cuda_fp8::quantize_kernel_name(a, true);
      ctx.check_launchable(qname);
      ctx.check_launchable(ename);
      cuda_fp8::launch_quantize(a, lay, s);
      const auto* codes = reinterpret_cast<const std::uint8_t*>(a.workspace + lay.act_codes);
      const auto* x_scales = reinterpret_cast<const float*>(a.workspace + lay.act_scales);
      engine::launch_tiled_sm90_dense_w8a8(a, {codes, a.k, lay.lt_m, x_scales, lay.lt_m}, l, s);
      const ByteRange ws{a.workspace, lay.total};
      ctx.note_launch(qname, [&] {
        LaunchRanges r;
        r.reads.push_back(matrix_range(a.x, a.dtype, 1, 0, a.m, a.k, a.x_ld));
        r.writes.push_back(ws);
        return r;
      });
      ctx.note_launch(ename, [&] {
        LaunchRanges r = inputs_outputs(a);
        r.reads.erase(r.reads.begin());  // x itself is read by the quantization only
        r.reads.push_back(ws);
        return r;
      });
      return Receipt{"tiled_sm90", qname + "+" + ename, 2};
    }
    case Fp8Route::DequantLt: {
      const Fp8WorkspaceLayout lay = fp8_workspace_layout(plan.route, a.m, a.n, a.k, a.kind, a.dtype);
      if ((a.n * a.k > 0 && !a.workspace) || lay.total > plan.workspace_bytes)
        fail(ErrorCode::Internal, "matmul_fp8: dequant_lt without its workspace");
      const std::string dname = cuda_fp8::dequant_kernel_name(a);
      ctx.check_launchable(dname);
      const int dev = ctx.arch().device_index;
      // The image as a dense weight [n, k]; matmul validates and routes the rest (its own checks
      // cannot fail on what matmul_fp8 validated, so nothing is left half-enqueued).
      const View xv = View::strided(const_cast<void*>(a.x), a.dtype, {a.m, a.k}, {a.x_ld, 1}, DeviceKind::CUDA, dev);
      const View wv = View::contiguous(a.workspace ? static_cast<void*>(a.workspace) : const_cast<std::uint8_t*>(a.codes), a.dtype, {a.n, a.k},
                                       DeviceKind::CUDA, dev);
      const View yv = View::strided(a.y, a.dtype, {a.m, a.n}, {a.y_ld, 1}, DeviceKind::CUDA, dev);
      MatmulOptions mo;
      mo.transpose_b = true;
      mo.precision = Precision::Exact;
      cuda_fp8::launch_dequant(a, a.workspace + lay.image, s);
      ctx.note_launch(dname, [&] {
        LaunchRanges r;
        r.reads.push_back(matrix_range(a.codes, DType::U8, 1, 0, a.n, a.k, a.w_ld));
        r.reads.push_back(elems_range(a.scales, DType::F32, scale_count(a)));
        r.writes.push_back({a.workspace, lay.total});
        return r;
      });
      Receipt r = matmul(ctx, xv, wv, yv, mo);
      return Receipt{"dequant_lt", dname + "+" + r.kernel, r.kernels_launched + 1};
    }
    default: fail(ErrorCode::Internal, "matmul_fp8: route ", fp8_route_name(plan.route), " has no CUDA kernel");
  }
}

}  // namespace llmm::detail
