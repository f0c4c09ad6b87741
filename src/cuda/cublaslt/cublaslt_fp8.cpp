// cuBLASLt FP8 GEMM (column-major): D (n x m) = op(A) B with A = the weight codes stored k x n
// (ld w_ld, transposed: n x k) and B = the activation codes k x m (ld k). D is row-major y [m, n].
// Hopper's FP8 GEMM takes only this "TN" form (both operands K-contiguous).
#include "cuda/cublaslt/cublaslt_fp8.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

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
  ~State() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CublasLtFp8Gemm::CublasLtFp8Gemm(void* lt_handle, const LtFp8Shape& g, std::size_t workspace_bytes) {
  auto st = std::make_unique<State>();
  st->handle = static_cast<cublasLtHandle_t>(lt_handle);
  st->workspace = workspace_bytes;
  check(cublasLtMatmulDescCreate(&st->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
  const cublasLtMatmulMatrixScale_t a_mode =
      g.block ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const cublasLtMatmulMatrixScale_t b_mode =
      g.block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)), "set A_SCALE_MODE");
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)), "set B_SCALE_MODE");
  // The heuristic wants the scale pointers' presence; placeholders until run() sets the real ones.
  const void* none = nullptr;
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &none, sizeof(none)), "set A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &none, sizeof(none)), "set B_SCALE_POINTER");
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check(cublasLtMatrixLayoutCreate(&st->la, CUDA_R_8F_E4M3, u(g.k), u(g.n), g.w_ld), "MatrixLayoutCreate A");
  check(cublasLtMatrixLayoutCreate(&st->lb, CUDA_R_8F_E4M3, u(g.k), u(g.m), g.k), "MatrixLayoutCreate B");
  check(cublasLtMatrixLayoutCreate(&st->ld, out_type(g.out), u(g.n), u(g.m), g.y_ld), "MatrixLayoutCreate D");

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof(workspace_bytes)), "set MAX_WORKSPACE");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(st->handle, st->op, st->la, st->lb, st->ld, st->ld, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    fail(ErrorCode::Unsupported, "cublaslt_fp8: no cuBLASLt FP8 algorithm for m ", g.m, " n ", g.n, " k ", g.k, " (",
         g.block ? "block" : "row", " scales, ", dtype_name(g.out), " out; status ", static_cast<int>(hs), ")");
  st->algo = result.algo;
  description_ = std::string("cublaslt_fp8_") + (g.block ? "block_" : "row_") + std::string(dtype_name(g.out));
  s_ = st.release();
}

CublasLtFp8Gemm::~CublasLtFp8Gemm() { delete s_; }

void CublasLtFp8Gemm::run(const std::uint8_t* w_codes, const float* w_scales, const std::uint8_t* x_codes,
                          const float* x_scales, void* y, void* workspace, StreamHandle stream) const {
  check(cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)),
        "set A_SCALE_POINTER");
  check(cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)),
        "set B_SCALE_POINTER");
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(s_->handle, s_->op, &alpha, w_codes, s_->la, x_codes, s_->lb, &beta, y, s_->ld, y, s_->ld, &s_->algo,
                       workspace, s_->workspace, static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace llmm::cuda_fp8
