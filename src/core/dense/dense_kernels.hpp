// Host-side facts about the dense CUDA kernels: which shapes and layouts each kernel takes, the
// configuration a launch uses, and the kernel name it reports. Pure functions of their
// arguments (pointer values included), no CUDA headers: the router and CPU-only tests use them,
// and the launchers in src/cuda/dense call the same functions, so a name or a configuration
// computed here is exactly what a launch uses.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dense/dense_args.hpp"
#include "llmm/dtype.hpp"

namespace llmm::cuda_dense {

// Elements per 16-byte vector load: 4 for f32, 8 for f16/bf16 (0 for non-float types).
int vec16_elems(DType t) noexcept;

// ---------------------------------------------------------------------------------------------
// gemv_wide: y[v, j] = sum_l x[v, l] * w[j, l] for a few vectors v (x = a, w = b transposed).

// Weight rows each warp streams at once, for all vectors of a pass (fixed by the kernel).
inline constexpr int kGemvWideRowsPerWarp = 4;
// Most vectors one block holds in registers in one pass (the largest instantiation).
inline constexpr int kGemvWideMaxVecsPerPass = 8;
// Largest M routed to gemv_wide: two passes of 8. Above that a tensor-core tile wastes little.
inline constexpr int kGemvWideMaxM = 16;

struct GemvWideConfig {
  int vecs_per_block = 0;  // vectors per pass, a kernel template value: 1, 2, 4 or 8
  int passes = 0;          // ceil(m / vecs_per_block): 1 or 2
  int k_lanes = 0;         // threads splitting K for one group of weight rows: 32, 64 or 128
  int grid_x = 0;          // blocks per weight row block, one per pass (< passes: blocks loop)
  int rows_per_block = 0;  // weight rows one 128-thread block covers

  friend bool operator==(const GemvWideConfig&, const GemvWideConfig&) = default;
};

// The CUDA port of mlx's gemv_wide gate. nullopt when the shape belongs elsewhere:
// m outside 1..16, n <= 1, k not a multiple of one 16-byte vector of `dtype`,
// dtype not f32/f16/bf16, or cc_major 1..7 (the kernels are built for sm_80+; 0 = unknown).
// sm_count (0 = unknown, taken as 132) decides how finely K is split to fill the device.
std::optional<GemvWideConfig> gemv_wide_config(std::int64_t m, std::int64_t n, std::int64_t k,
                                               DType dtype, int cc_major, int sm_count = 0);

// The configuration a DensePlan's gemv_wide fields name (vectors a pass, K lanes, grid_x = the
// passes): what the dispatcher launches, equal to gemv_wide_config's for the planned shape
// (tested). Values outside the kernel's set are the launcher's to refuse.
GemvWideConfig gemv_wide_config_of(int vecs_per_block, int k_lanes, int grid_x);

// Layout and alignment gemv_wide needs beyond its shape gate: x = a row-major (not transposed),
// w = b transposed ([n, k] rows), both K-contiguous, with 16-byte aligned base pointers, row
// strides and batch strides (a batch stride of 0 is fine); c rows of stride c_ld.
bool gemv_wide_supports(const DenseArgs& args);

// ---------------------------------------------------------------------------------------------
// Kernel names, as the launchers report them (Context::check_launchable / note_launch).
//   zero_fill_<dt> (k == 0, a memset)           e.g. zero_fill_bf16
//   gemv_wide_<dt>_v<vecs>_kl<k_lanes>           e.g. gemv_wide_bf16_v8_kl128
std::string zero_fill_name(const DenseArgs& args);
std::string gemv_wide_kernel_name(const DenseArgs& args, const GemvWideConfig& config);

}  // namespace llmm::cuda_dense
