// launch_gemv_wide: 1..16 vectors against a [n, k] weight, config from gemv_wide_config.
#include <algorithm>

#include "cuda/dense/gemv_wide_kernels.cuh"
#include "cuda/dense/launch.hpp"

namespace llmm::cuda_dense {
namespace {

template <class T, int NV>
void launch_nv(const GemvWideParams& p, dim3 grid, StreamHandle stream) {
  gemv_wide_kernel<T, GemvWeightsOf<T>, NV><<<grid, kGemvWideThreads, 0, stream>>>(p, GemvWeightsOf<T>{});
}

}  // namespace

void launch_gemv_wide(const DenseArgs& args, const GemvWideConfig& cfg, StreamHandle stream) {
  const std::string name = gemv_wide_kernel_name(args, cfg);
  if (!gemv_wide_supports(args)) {
    fail(ErrorCode::Internal, name, ": layout or alignment not supported (a_trans ", args.a_trans,
         ", b_trans ", args.b_trans, ", a_ld ", args.a_ld, ", b_ld ", args.b_ld, ")");
  }
  const int ve = vec16_elems(args.dtype);
  const bool cfg_ok =
      (cfg.vecs_per_block == 1 || cfg.vecs_per_block == 2 || cfg.vecs_per_block == 4 || cfg.vecs_per_block == 8) &&
      (cfg.k_lanes == 32 || cfg.k_lanes == 64 || cfg.k_lanes == 128) && cfg.passes >= 1 &&
      std::int64_t{cfg.passes} * cfg.vecs_per_block >= args.m && cfg.grid_x >= 1 &&
      cfg.grid_x <= cfg.passes && cfg.rows_per_block == (128 / cfg.k_lanes) * kGemvWideRowsPerWarp;
  if (!cfg_ok || ve == 0 || args.k % ve != 0 || args.m < 1 || args.n < 1 || args.k < 0 ||
      args.batch < 1) {
    fail(ErrorCode::Internal, name, ": config does not fit m ", args.m, " n ", args.n, " k ",
         args.k, " (vecs ", cfg.vecs_per_block, " passes ", cfg.passes, " k_lanes ", cfg.k_lanes,
         " grid_x ", cfg.grid_x, ")");
  }
  const GemvWideParams p{args, cfg.passes, cfg.k_lanes};
  const std::int64_t tiles = (args.n + cfg.rows_per_block - 1) / cfg.rows_per_block * args.batch;
  const dim3 grid(static_cast<unsigned>(cfg.grid_x),
                  static_cast<unsigned>(std::min(tiles, host::kMaxGridYZ)));
  host::with_float_type(args.dtype, [&](auto t) {
    using T = decltype(t);
    switch (cfg.vecs_per_block) {
      case 1: launch_nv<T, 1>(p, grid, stream); break;
      case 2: launch_nv<T, 2>(p, grid, stream); break;
      case 4: launch_nv<T, 4>(p, grid, stream); break;
      default: launch_nv<T, 8>(p, grid, stream); break;
    }
  });
  host::check_launch(name);
}

}  // namespace llmm::cuda_dense
