// cuBLASLt FP8 GEMM on sm_90. Hopper's FP8 GEMM takes only the "TN" form (both operands
// K-contiguous: A transposed, B not). Two operand orders give row-major y [m, n]:
//   weights-as-A: D (n x m, column-major = y) = W^T-op . X  (A = codes k x n ld w_ld, B = x codes
//                 k x m ld k), scale modes (A, B) = (BLK128x128, VEC128) or (OUTER_VEC, OUTER_VEC);
//   x-as-A:       D (m x n, row-major order = y) = X^T-op . W  (A = x codes, B = weight codes),
//                 scale modes (VEC128, BLK128x128) or (OUTER_VEC, OUTER_VEC).
// The constructor asks the heuristic for each order in turn and keeps the first it serves (the
// description names it). The scale layouts are the same for both: x's [k / 128][m] (token
// fastest) or [m]; the weight's [n / 128][k-block pitch, a multiple of 4] or [n].
#include "cuda/cublaslt/cublaslt_fp8.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "llmm/error.hpp"

namespace llmm::cuda_fp8 {
namespace {

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(ErrorCode::Cuda, "cublaslt_fp8: ", what, " failed with status ", static_cast<int>(st));
}

cudaDataType_t out_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail(ErrorCode::Unsupported, "cublaslt_fp8: output dtype ", dtype_name(t), " is not f32, f16 or bf16");
  }
}

}  // namespace

struct CublasLtFp8Gemm::State {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  bool x_is_a = false;
  void reset() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    la = lb = ld = nullptr;
    op = nullptr;
  }
  ~State() { reset(); }

  // Builds the descriptors for one operand order and asks the heuristic: its status (and found).
  cublasStatus_t try_order(const LtFp8Shape& g, bool x_as_a, std::size_t workspace_bytes, int* found) {
    reset();
    x_is_a = x_as_a;
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
    const std::int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                       outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const std::int32_t w_mode = g.block ? blk : outer, x_mode = g.block ? vec : outer;
    const std::int32_t a_mode = x_as_a ? x_mode : w_mode, b_mode = x_as_a ? w_mode : x_mode;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)), "set A_SCALE_MODE");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)), "set B_SCALE_MODE");
    // Stand-in scale pointers (256-byte aligned, never read) until run() sets the call's own.
    const void* stand_in = reinterpret_cast<const void*>(std::uintptr_t{256});
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &stand_in, sizeof(stand_in)), "set A_SCALE_POINTER");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &stand_in, sizeof(stand_in)), "set B_SCALE_POINTER");
    const std::int8_t fast_accum = 0;  // promote partial sums (FP8 MMA accumulates in reduced precision)
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)), "set FAST_ACCUM");
    auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    const std::uint64_t x_cols = u(g.m), w_cols = u(g.n);
    check(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, u(g.k), x_as_a ? x_cols : w_cols, x_as_a ? g.k : g.w_ld),
          "MatrixLayoutCreate A");
    check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, u(g.k), x_as_a ? w_cols : x_cols, x_as_a ? g.w_ld : g.k),
          "MatrixLayoutCreate B");
    if (x_as_a) {  // D = m x n in row-major order: y itself
      check(cublasLtMatrixLayoutCreate(&ld, out_type(g.out), u(g.m), u(g.n), g.y_ld), "MatrixLayoutCreate D");
      const cublasLtOrder_t row = CUBLASLT_ORDER_ROW;
      check(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row)), "set D ORDER");
    } else {  // D = n x m column-major: y
      check(cublasLtMatrixLayoutCreate(&ld, out_type(g.out), u(g.n), u(g.m), g.y_ld), "MatrixLayoutCreate D");
    }
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                               sizeof(workspace_bytes)), "set MAX_WORKSPACE");
    cublasLtMatmulHeuristicResult_t result{};
    *found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ld, ld, pref, 1, &result, found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs == CUBLAS_STATUS_SUCCESS && *found > 0) algo = result.algo;
    return hs;
  }
};

CublasLtFp8Gemm::CublasLtFp8Gemm(void* lt_handle, const LtFp8Shape& g, std::size_t workspace_bytes) {
  auto st = std::make_unique<State>();
  st->handle = static_cast<cublasLtHandle_t>(lt_handle);
  st->workspace = workspace_bytes;
  int found = 0;
  cublasStatus_t hs_w = st->try_order(g, false, workspace_bytes, &found);
  cublasStatus_t hs_x = CUBLAS_STATUS_NOT_SUPPORTED;
  if (hs_w != CUBLAS_STATUS_SUCCESS || found == 0) hs_x = st->try_order(g, true, workspace_bytes, &found);
  if (found == 0)
    fail(ErrorCode::Unsupported, "cublaslt_fp8: no cuBLASLt FP8 algorithm for m ", g.m, " n ", g.n, " k ", g.k, " (",
         g.block ? "block" : "row", " scales, ", dtype_name(g.out), " out; heuristic status ", static_cast<int>(hs_w),
         " with the weights as A, ", static_cast<int>(hs_x), " with x as A)");
  description_ = std::string("cublaslt_fp8_") + (g.block ? "block_" : "row_") + std::string(dtype_name(g.out)) +
                 (st->x_is_a ? "_xa" : "_wa");
  s_ = st.release();
}

CublasLtFp8Gemm::~CublasLtFp8Gemm() { delete s_; }

void CublasLtFp8Gemm::run(const std::uint8_t* w_codes, const float* w_scales, const std::uint8_t* x_codes,
                          const float* x_scales, void* y, void* workspace, StreamHandle stream) const {
  const void* a = s_->x_is_a ? static_cast<const void*>(x_codes) : w_codes;
  const void* b = s_->x_is_a ? static_cast<const void*>(w_codes) : x_codes;
  const float* as = s_->x_is_a ? x_scales : w_scales;
  const float* bs = s_->x_is_a ? w_scales : x_scales;
  check(cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof(as)), "set A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof(bs)), "set B_SCALE_POINTER");
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(s_->handle, s_->op, &alpha, a, s_->la, b, s_->lb, &beta, y, s_->ld, y, s_->ld, &s_->algo, workspace,
                       s_->workspace, static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace llmm::cuda_fp8
