// plan_matmul: the dense router, a pure function of the problem and the device.
#include "core/dense/dense_kernels.hpp"
#include "core/engine/tiled_sm90_plan.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"

namespace llmm {

const char* route_name(DenseRoute r) noexcept {
  switch (r) {
    case DenseRoute::Auto: return "auto";
    case DenseRoute::Cpu: return "cpu";
    case DenseRoute::ZeroFill: return "zero_fill";
    case DenseRoute::GemvWide: return "gemv_wide";
    case DenseRoute::TiledSm90: return "tiled_sm90";
    case DenseRoute::CublasLt: return "cublaslt";
  }
  return "?";
}

namespace {

// Why a route cannot take the problem, or "" when it can.
std::string refusal(DenseRoute r, const MatmulDesc& d, const ArchInfo& arch) {
  bool cuda = arch.kind == DeviceKind::CUDA;
  switch (r) {
    case DenseRoute::Auto: return "";
    case DenseRoute::Cpu: return cuda ? "the cpu route runs on CPU contexts only" : "";
    case DenseRoute::ZeroFill:
      if (!cuda) return "needs a CUDA context";
      return d.k == 0 ? "" : "needs k == 0 (it writes zeros)";
    case DenseRoute::GemvWide: {
      if (!cuda) return "needs a CUDA context";
      if (d.transpose_a || !d.transpose_b) return "needs x[M, K] . w[N, K]^T (transpose_b, not transpose_a)";
      if (!d.a_vec16 || !d.b_vec16) return "needs 16-byte aligned pointers and strides";
      if (!cuda_dense::gemv_wide_config(d.m, d.n, d.k, d.dtype, arch.cc_major, arch.sm_count))
        return "shape outside the gemv_wide gate (m 1..16, n > 1, k a multiple of one 16-byte vector)";
      return "";
    }
    case DenseRoute::TiledSm90:
      if (!cuda) return "needs a CUDA context";
      return engine::tiled_sm90_dense_refusal(d, arch);
    case DenseRoute::CublasLt:
      if (!cuda) return "needs a CUDA context";
      return d.k > 0 ? "" : "k == 0 is not a cuBLASLt problem";
  }
  return "unknown route";
}

DensePlan with_route(DenseRoute r, std::string reason, const MatmulDesc& d, const ArchInfo& arch) {
  DensePlan p;
  p.route = r;
  p.reason = std::move(reason);
  if (r == DenseRoute::GemvWide) {
    auto c = cuda_dense::gemv_wide_config(d.m, d.n, d.k, d.dtype, arch.cc_major, arch.sm_count);
    p.gemv_wide_vecs = c->vecs_per_block;
    p.gemv_wide_k_lanes = c->k_lanes;
    p.gemv_wide_grid_x = c->grid_x;
  }
  if (r == DenseRoute::TiledSm90 && d.batch > 0 && d.m > 0 && d.n > 0) {  // an empty problem launches nothing
    const engine::TiledSm90Launch l = engine::tiled_sm90_dense_launch(d.dtype, d.batch, d.m, d.n, arch.sm_count);
    p.tiled_bn = l.bn, p.tiled_bm = l.bm;
  }
  return p;
}

}  // namespace

DensePlan plan_matmul(const MatmulDesc& d, const ArchInfo& arch, DenseRoute force) {
  if (d.batch < 0 || d.m < 0 || d.n < 0 || d.k < 0)
    fail(ErrorCode::InvalidArgument, "plan_matmul: sizes must be >= 0 (batch: ", d.batch, ", m: ", d.m, ", n: ", d.n,
         ", k: ", d.k, ")");
  if (!is_float(d.dtype))
    fail(ErrorCode::Unsupported, "plan_matmul: unsupported dtype ", dtype_name(d.dtype), " (f32, f16 and bf16 are supported)");
  if (force != DenseRoute::Auto) {
    std::string why = refusal(force, d, arch);
    if (!why.empty())
      fail(ErrorCode::Unsupported, "matmul: route ", route_name(force), " cannot run (m: ", d.m, ", n: ", d.n,
           ", k: ", d.k, ", ", dtype_name(d.dtype), "): ", why);
    return with_route(force, "forced", d, arch);
  }
  if (arch.kind != DeviceKind::CUDA) return with_route(DenseRoute::Cpu, "CPU context: float64 reference backend", d, arch);
  if (d.k == 0) return with_route(DenseRoute::ZeroFill, "k == 0: the output is zeros", d, arch);
  // Before sm_80 none of llmm's kernels is built (LLMM_CUDA_ARCHS): cuBLASLt serves every shape.
  if (arch.cc_major < 8) return with_route(DenseRoute::CublasLt, "pre-sm_80 device: cuBLASLt", d, arch);
  // Gates below are calibrated on one H200 against cuBLASLt in the same run (docs/performance.md,
  // dense suite, 2026-11-30); each sends a shape to whichever measured faster.
  const bool half = d.dtype == DType::F16 || d.dtype == DType::BF16;
  // gemv_wide (CUDA-core FMAs, K split over up to 4 warps a row group: many loads in flight from
  // few weight rows) against cuBLASLt's skinny kernels, session 26 (H200, `llmm-bench --suite
  // dense --filter "_m1|_m2|_m4|_m8|_m16"`, forced `_gemv_wide` rows against cuBLASLt in the same
  // rows; docs/performance.md "Dense decode routes, recalibrated"). 16-bit: 1.00-1.31x at m <= 2
  // on weights of <= 2^25 elements (3072 x 3072 1.27 / 1.30x, BitNet-2B 2560 x 6912 1.07 / 1.17x),
  // 0.93-1.03x on larger ones except the 128256-row lm head at m 2 (1.02-1.03x); 0.24-0.97x at
  // m >= 4 everywhere (its FMAs and x loads grow with m), so cuBLASLt there. f32 (cuBLAS's
  // skinny SGEMM is weak): 1.10-2.47x at m 2..16 on every shape; at m 1 1.03-1.08x where
  // n >= 3072 and k <= 4096 (also against our gemv on the lm head), 0.95-0.98x on the others.
  // Weight elements of all batch entries (a broadcast weight counted per entry: an upper bound),
  // in double so that no product of sizes can overflow.
  const double weight_elems = static_cast<double>(d.batch) * static_cast<double>(d.n) * static_cast<double>(d.k);
  const bool gemv_wide_ok = refusal(DenseRoute::GemvWide, d, arch).empty();
  if (gemv_wide_ok && half && d.m <= 2 && weight_elems <= 0x1p25)
    return with_route(DenseRoute::GemvWide, "m <= 2, 16-bit x . w^T, weight <= 2^25 elements: gemv_wide measured 1.00-1.31x cuBLASLt", d, arch);
  if (gemv_wide_ok && half && d.m == 2 && d.n >= 65536 && d.k <= 4096)
    return with_route(DenseRoute::GemvWide, "m == 2, 16-bit x . w^T with >= 65536 outputs a row and K <= 4096: gemv_wide measured faster", d, arch);
  if (gemv_wide_ok && d.dtype == DType::F32 && (d.m >= 2 || (d.n >= 3072 && d.k <= 4096)))
    return with_route(DenseRoute::GemvWide, d.m >= 2 ? "m 2..16, f32 x . w^T: stream the weight once for all rows"
                                                     : "m == 1, f32 x . w^T, n >= 3072, K <= 4096: gemv_wide measured faster",
                      d, arch);
  // The 128256-row lm head at m 1: gemv_wide, as at m 2 (1.02-1.04x cuBLASLt there, where the
  // retired gemv kernel measured 1.02-1.04x at m 1); other matrix-vector shapes cuBLASLt's gemv.
  if (gemv_wide_ok && d.m == 1 && d.n >= 65536)
    return with_route(DenseRoute::GemvWide, "m == 1, x . w^T with >= 65536 outputs: gemv_wide measured faster", d, arch);
  // f32 Exact x . w^T on the Hopper engine's 3xTF32 where its tiles fill half the SMs: 1.3-2.1x
  // cuBLASLt's SGEMM there (engine/tiled_sm90_plan.hpp).
  if (engine::tiled_sm90_dense_f32_preferred(d, arch))
    return with_route(DenseRoute::TiledSm90, "f32 Exact x . w^T with tiles for half the SMs: the engine's 3xTF32 measured faster than SGEMM", d, arch);
  // Other tiled-class shapes: cuBLASLt (wgmma on Hopper) measures faster than our engines so far
  // (16-bit: the Hopper engine 0.92-0.95x); see docs/performance.md. Forcing a route runs ours.
  return with_route(DenseRoute::CublasLt, "tiled-class shape: cuBLASLt measured faster than our engines", d, arch);
}

}  // namespace llmm
