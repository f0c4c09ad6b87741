// Dense matmul: c[b] = op(a[b]) . op(b[b]) for f32/f16/bf16, batched, strided, transposed,
// routed by shape (gemv_wide, the Hopper tiled engine, cuBLASLt, CPU reference).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "llmm/context.hpp"
#include "llmm/view.hpp"

namespace llmm {

enum class Precision { Exact, Fast };  // Fast: f32 operands may round to tf32 on tensor cores

enum class DenseRoute {
  Auto,      // let plan_matmul choose (the default)
  Cpu,       // the float64 reference backend (CPU contexts)
  ZeroFill,  // k == 0: the output is zeros (a memset, no kernel)
  GemvWide,  // x[M, K] . w[N, K]^T for M = 1..16 on CUDA cores (f32; 16-bit at M <= 2 on small weights)
  TiledSm90, // the Hopper tiled engine (wgmma, TMA, warp-specialized): f16/bf16, or f32 Exact as
             // 3xTF32, x . w^T on sm_90
  CublasLt,  // vendor GEMM, for the shapes where it measures faster
};
const char* route_name(DenseRoute r) noexcept;

struct MatmulOptions {
  bool transpose_a = false;  // a is [batch, k, m]
  bool transpose_b = false;  // b is [batch, n, k]
  Precision precision = Precision::Exact;
  DenseRoute force_route = DenseRoute::Auto;  // tests and benchmarks: run one route by name
};

// What an op did: the seed's dispatch receipt.
struct Receipt {
  std::string route;
  std::string kernel;
  int kernels_launched = 0;
};

// The routing inputs, after validation and batch folding: pure values.
struct MatmulDesc {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  DType dtype = DType::F32;
  bool transpose_a = false, transpose_b = false;
  Precision precision = Precision::Exact;
  bool a_vec16 = false, b_vec16 = false;  // base, row and batch strides 16-byte aligned
  // Every batched input (batch stride > 0) starts each entry past the previous entry's last row:
  // the Hopper engine's 3D tensor maps take such strides only.
  bool batches_disjoint = true;
};

struct DensePlan {
  DenseRoute route = DenseRoute::Auto;
  std::string reason;  // why this route: for receipts, logs and tests
  // Route configuration, launched as planned (zeros for other routes): gemv_wide's vectors per
  // block, K lanes and grid; the Hopper tiled engine's tile (tokens x weight rows).
  int gemv_wide_vecs = 0, gemv_wide_k_lanes = 0, gemv_wide_grid_x = 0;
  int tiled_bn = 0, tiled_bm = 0;
};

// Pure: picks the route for a problem on a device (arch.kind CPU gives Cpu). `force` other
// than Auto returns that route if it accepts the problem, else throws Unsupported naming why.
DensePlan plan_matmul(const MatmulDesc& desc, const ArchInfo& arch, DenseRoute force = DenseRoute::Auto);

// c[b, i, j] = sum_l opA(a)[b, i, l] * opB(b)[b, l, j]. a, b, c are rank 2 ([rows, cols], one
// batch) or 3 ([batch, rows, cols]); a batch stride of 0 broadcasts; rank 2 operands broadcast
// over c's batch. Innermost strides must be 1. a, b and c share one dtype (f32, f16, bf16);
// accumulation is f32 (float64 on the CPU backend). Enqueues on ctx's stream, never syncs.
// Throws llmm::Error (before anything is enqueued) on any invalid argument.
Receipt matmul(Context& ctx, const View& a, const View& b, const View& c, const MatmulOptions& opts = {});

}  // namespace llmm
