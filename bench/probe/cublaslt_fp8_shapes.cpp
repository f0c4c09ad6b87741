// Which shapes cuBLASLt's sm_90 FP8 GEMM serves with the scale modes matmul_fp8's cublaslt route
// uses (BLK128x128 x VEC128, OUTER_VEC x OUTER_VEC), through the route's own CublasLtFp8Gemm: one
// line per (scale kind, m, n, k), "ok <description>" or the refusal. Host-side heuristic queries
// only (no kernel runs). The planner's cuBLASLt gate is written from this table.
#include <cublasLt.h>

#include <cstdio>
#include <vector>

#include "cuda/cublaslt/cublaslt_fp8.hpp"
#include "llmm/error.hpp"

int main() {
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::printf("cublaslt_fp8_shapes: no cuBLASLt handle\n");
    return 1;
  }
  const std::vector<long> ms{1, 2, 3, 4, 5, 8, 12, 15, 16, 17, 24, 32, 37, 64, 100, 128, 2048};
  const std::vector<long> ns{128, 136, 256, 2048};
  const std::vector<long> ks{128, 144, 256, 272, 4096};
  for (bool block : {true, false})
    for (long k : ks)
      for (long n : ns) {
        std::printf("%s n %ld k %ld:", block ? "block" : "row", n, k);
        for (long m : ms) {
          llmm::cuda_fp8::LtFp8Shape s;
          s.m = m, s.n = n, s.k = k, s.w_ld = k, s.y_ld = n, s.out = llmm::DType::BF16, s.block = block;
          try {
            llmm::cuda_fp8::CublasLtFp8Gemm g(h, s, std::size_t{32} << 20);
            std::printf(" m%ld=%s", m, g.description().substr(g.description().size() - 2).c_str());
          } catch (const llmm::Error& e) {
            std::printf(" m%ld=no", m);
          }
        }
        std::printf("\n");
      }
  // The output dtypes and a y row stride above n, at one shape.
  for (llmm::DType out : {llmm::DType::F32, llmm::DType::F16, llmm::DType::BF16})
    for (bool block : {true, false}) {
      llmm::cuda_fp8::LtFp8Shape s;
      s.m = 64, s.n = 256, s.k = 256, s.w_ld = 256, s.y_ld = 264, s.out = out, s.block = block;
      try {
        llmm::cuda_fp8::CublasLtFp8Gemm g(h, s, std::size_t{32} << 20);
        std::printf("out %s %s y_ld 264: ok %s\n", llmm::dtype_name(out).data(), block ? "block" : "row", g.description().c_str());
      } catch (const llmm::Error& e) {
        std::printf("out %s %s y_ld 264: %s\n", llmm::dtype_name(out).data(), block ? "block" : "row", e.what());
      }
    }
  cublasLtDestroy(h);
  return 0;
}
