// Row-major C = op(A) op(B) through column-major cuBLASLt: C^T (n x m) = op(B)^T op(A)^T, so
// B's buffer is cuBLASLt's "A" operand and A's buffer its "B" operand, with no data movement.
#include "cuda/cublaslt/cublaslt_gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <utility>

#include "llmm/error.hpp"

namespace llmm::cuda_dense {
namespace {

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(ErrorCode::Cuda, "cublaslt_gemm: ", what, " failed with status ", static_cast<int>(st));
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail(ErrorCode::Unsupported, "cublaslt_gemm: dtype ", dtype_name(t), " is not a float type");
  }
}

}  // namespace

struct CublasLtGemm::State {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  bool device_scalars = false;
  ~State() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CublasLtGemm::CublasLtGemm(void* lt_handle, const DenseArgs& g, LtMath math, std::size_t workspace_bytes,
                           const LtGemmOptions& opts) {
  auto st = std::make_unique<State>();
  st->handle = static_cast<cublasLtHandle_t>(lt_handle);
  st->workspace = workspace_bytes;
  st->device_scalars = opts.device_scalars;
  cudaDataType_t dt = data_type(g.dtype);
  const DType out_dtype = opts.out_dtype.value_or(g.dtype);
  cublasComputeType_t ct = (g.dtype == DType::F32 && math == LtMath::Tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&st->op, ct, CUDA_R_32F), "MatmulDescCreate");
  // cuBLASLt's A is our B: row-major [k, n] (ld b_ld) reads as column-major n x k = B^T: no op.
  cublasOperation_t opa = g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
  if (opts.device_scalars) {
    cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    check(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)), "set POINTER_MODE");
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t bstride,
                    cudaDataType_t type) {
    check(cublasLtMatrixLayoutCreate(l, type, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld), "MatrixLayoutCreate");
    int batch = static_cast<int>(g.batch);
    check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)), "set BATCH_COUNT");
    check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride, sizeof(bstride)), "set BATCH_OFFSET");
  };
  // Column-major shapes as stored: our B is (b_trans ? k x n : n x k), our A is (a_trans ? m x k : k x m).
  layout(&st->la, g.b_trans ? g.k : g.n, g.b_trans ? g.n : g.k, g.b_ld, g.b_batch, dt);
  layout(&st->lb, g.a_trans ? g.m : g.k, g.a_trans ? g.k : g.m, g.a_ld, g.a_batch, dt);
  layout(&st->lc, g.n, g.m, g.c_ld, g.c_batch, data_type(out_dtype));

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof(workspace_bytes)), "set MAX_WORKSPACE");
  if (opts.min_alignment != 256) {  // else cuBLASLt's default (256 for every operand)
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &opts.min_alignment, sizeof(opts.min_alignment)),
            "set MIN_ALIGNMENT");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st->handle, st->op, st->la, st->lb, st->lc, st->lc, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    fail(ErrorCode::Unsupported, "cublaslt_gemm: no cuBLASLt algorithm for ", dtype_name(g.dtype), " -> ",
         dtype_name(out_dtype), " batch ", g.batch,
         " m ", g.m, " n ", g.n, " k ", g.k, " (status ", static_cast<int>(hs), ")");
  st->algo = result.algo;
  description_ = std::string("cublaslt_") + std::string(dtype_name(g.dtype)) +
                 (ct == CUBLAS_COMPUTE_32F_FAST_TF32 ? "_tf32" : "") + (g.a_trans ? "_t" : "_n") + (g.b_trans ? "t" : "n");
  if (out_dtype != g.dtype) description_.append("_").append(dtype_name(out_dtype));
  s_ = st.release();
}

CublasLtGemm::CublasLtGemm(CublasLtGemm&& o) noexcept : s_(std::exchange(o.s_, nullptr)), description_(std::move(o.description_)) {}
CublasLtGemm& CublasLtGemm::operator=(CublasLtGemm&& o) noexcept {
  if (this != &o) {
    delete s_;
    s_ = std::exchange(o.s_, nullptr);
    description_ = std::move(o.description_);
  }
  return *this;
}
CublasLtGemm::~CublasLtGemm() { delete s_; }

void CublasLtGemm::run(const DenseArgs& g, void* workspace, StreamHandle stream) const {
  if (s_->device_scalars) fail(ErrorCode::Internal, "cublaslt_gemm: ", description_, " needs device alpha and beta");
  const float alpha = 1.0f, beta = 0.0f;
  run(g, workspace, stream, &alpha, &beta);
}

void CublasLtGemm::run(const DenseArgs& g, void* workspace, StreamHandle stream, const float* alpha,
                       const float* beta) const {
  check(cublasLtMatmul(s_->handle, s_->op, alpha, g.b, s_->la, g.a, s_->lb, beta, g.c, s_->lc, g.c, s_->lc,
                       &s_->algo, workspace, s_->workspace, stream),
        "cublasLtMatmul");
}

}  // namespace llmm::cuda_dense
