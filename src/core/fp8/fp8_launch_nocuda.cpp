// CPU-only builds: matmul_fp8's CUDA routes are refused (a CUDA context cannot exist here).
#include "core/fp8/fp8_launch.hpp"
#include "llmm/error.hpp"

namespace llmm::detail {

bool cublaslt_fp8_serves(Context&, const Fp8LaunchArgs&) { return false; }

Receipt run_matmul_fp8_cuda(Context&, const Fp8Plan& plan, const Fp8LaunchArgs&) {
  fail(ErrorCode::Unsupported, "matmul_fp8: route ", fp8_route_name(plan.route), " needs a CUDA build of llmm");
}

}  // namespace llmm::detail
