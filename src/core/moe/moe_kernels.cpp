#include "core/moe/moe_kernels.hpp"

#include <algorithm>

#include "core/vec16.hpp"

namespace llmm::cuda_moe {
namespace {

using detail::aligned16;
using detail::bytes16;

bool w_vec16(const MoeArgs& a) {
  return aligned16(a.w) && bytes16(a.k, a.w_dtype) && bytes16(a.expert_stride, a.w_dtype);
}

bool in_vec16(const MoeArgs& a) {
  return aligned16(a.in) && bytes16(a.in_token_stride, a.in_dtype) &&
         bytes16(a.in_slot_stride, a.in_dtype);
}

std::string dtypes_tag(const MoeArgs& a) {
  std::string s(dtype_name(a.w_dtype));
  s += '_';
  s += dtype_name(a.in_dtype);
  s += '_';
  s += dtype_name(a.out_dtype);
  return s;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool moe_dtypes_supported(DType w, DType in, DType out) noexcept {
  if (w == DType::F8E4M3) return is_float(in) && (out == DType::F32 || out == in);  // FP8 codes: any float input
  if (!is_float(w)) return false;
  if (in != DType::F32 && in != w) return false;
  return out == DType::F32 || out == in;
}

bool moe_dtypes_supported(const MoeArgs& a) noexcept {
  return moe_dtypes_supported(a.w_dtype, a.in_dtype, a.out_dtype);
}

bool moe_direct_vec16(const MoeArgs& a) noexcept {
  if (!(is_float(a.w_dtype) || a.w_dtype == DType::F8E4M3) || !is_float(a.in_dtype)) return false;
  return w_vec16(a) && in_vec16(a);
}

std::int64_t moe_direct_tiles(const MoeArgs& a) noexcept {
  if (a.m <= 0 || a.top_k <= 0 || a.n <= 0) return 0;
  switch (a.fusion.epi) {
    case MoeDirectEpi::Activate:
      if (a.fusion.gated) return a.m * a.top_k * ceil_div(a.n / 2, kMoeDirectThreads / 32);
      break;
    case MoeDirectEpi::SlotSum:
      return a.m * ceil_div(ceil_div(a.n, kMoeDirectRowsPerWarp), moe_direct_slotsum_pairs(a.top_k));
    case MoeDirectEpi::Plain: break;
  }
  return a.m * a.top_k * ceil_div(a.n, kMoeDirectColsPerBlock);
}

bool moe_direct_fusion_supported(const MoeArgs& a) noexcept {
  if (!moe_direct_vec16(a)) return false;
  if (a.fusion.epi == MoeDirectEpi::SlotSum) return a.top_k <= kMoeDirectSlotSumMaxTopK && a.fusion.tw != nullptr;
  if (a.fusion.epi == MoeDirectEpi::Activate)
    return !a.fusion.gated || a.n % 2 == 0;
  return true;
}

std::string moe_direct_kernel_name(const MoeArgs& a) {
  std::string s = "moe_direct_" + dtypes_tag(a) + (moe_direct_vec16(a) ? "_v16" : "_scalar");
  if (a.fusion.epi == MoeDirectEpi::Activate)
    s += std::string("_act_") + moe_activation_name(a.fusion.activation) + (a.fusion.gated ? "" : "_no_mul");
  else if (a.fusion.epi == MoeDirectEpi::SlotSum)
    s += "_slotsum";
  return s;
}

int moe_map_max_experts() noexcept { return kMoeMapMaxExperts; }

std::int64_t moe_map_zero_blocks(const MoeArgs& a) noexcept {
  if (a.m <= 0 || a.top_k <= 0 || a.n <= 0 || a.out_sorted) return 0;  // a sorted output has no row of an out-of-range id
  return std::min<std::int64_t>(ceil_div(a.m * a.top_k, kMoeMapThreads / 32), kMoeMapMaxZeroBlocks);
}

MoeMapGrid moe_map_grid(const MoeArgs& a) noexcept {
  const std::int64_t routed = a.m * a.top_k;
  if (a.m <= 0 || a.top_k <= 0) return {};
  std::int64_t blocks = 1;
  if (a.block_counts != nullptr && a.n_experts >= 1 && routed > kMoeMapIdsPerBlock)
    blocks = std::min({ceil_div(routed, kMoeMapIdsPerBlock), static_cast<std::int64_t>(kMoeMapMaxSortBlocks),
                       a.block_count_words / a.n_experts});
  if (blocks < 2) return {1, routed};
  const std::int64_t chunk = ceil_div(routed, blocks);
  return {ceil_div(routed, chunk), chunk};  // no empty last chunk
}

std::vector<std::string> moe_map_kernel_names(const MoeArgs& a) {
  if (moe_map_grid(a).blocks > 1) return {"moe_map_count", "moe_map_sort"};
  return {"moe_map_sort"};
}
std::string moe_stage_rows_kernel_name(const MoeArgs& a) { return "moe_stage_rows_" + std::string(dtype_name(a.in_dtype)); }

const char* moe_grouped_math_name(MoeGroupedMath m) noexcept {
  switch (m) {
    case MoeGroupedMath::F16: return "f16";
    case MoeGroupedMath::BF16: return "bf16";
    case MoeGroupedMath::TF32: return "tf32";
    case MoeGroupedMath::TF32x2: return "2xtf32";
    case MoeGroupedMath::TF32x3: return "3xtf32";
  }
  return "?";
}

MoeGroupedConfig moe_grouped_config(const MoeArgs& a) noexcept {
  MoeGroupedConfig c;
  if (a.w_dtype == DType::F8E4M3) {
    c.math = MoeGroupedMath::BF16;  // decoded weights and the input rounded once to bf16
  } else if (a.w_dtype == DType::F32) {
    c.math = a.exact ? MoeGroupedMath::TF32x3 : MoeGroupedMath::TF32;
  } else if (a.in_dtype == a.w_dtype) {
    c.math = a.w_dtype == DType::F16 ? MoeGroupedMath::F16 : MoeGroupedMath::BF16;
  } else if (a.w_dtype == DType::BF16) {  // f32 input
    c.math = a.exact ? MoeGroupedMath::TF32x2 : MoeGroupedMath::BF16;
  } else {  // f16 weights, f32 input: rounding the input to f16 could overflow; tf32 cannot
    c.math = a.exact ? MoeGroupedMath::TF32x2 : MoeGroupedMath::TF32;
  }
  c.bk = (c.math == MoeGroupedMath::F16 || c.math == MoeGroupedMath::BF16) ? 32 : 16;
  c.in_vec = is_float(a.in_dtype) && in_vec16(a);
  c.w_vec = (is_float(a.w_dtype) || a.w_dtype == DType::F8E4M3) && w_vec16(a);
  return c;
}

std::int64_t moe_grouped_row_slots(const MoeArgs& a) noexcept {
  if (a.m <= 0 || a.top_k <= 0 || a.n_experts <= 0) return 0;
  const std::int64_t routed = a.m * a.top_k;
  return ceil_div(routed, kMoeGroupedBM) + std::min(a.n_experts, routed);
}

std::int64_t moe_grouped_col_tiles(const MoeArgs& a) noexcept {
  return a.n <= 0 ? 0 : ceil_div(a.n, kMoeGroupedBN);
}

std::string moe_grouped_kernel_name(const MoeArgs& a) {
  const MoeGroupedConfig c = moe_grouped_config(a);
  return "moe_grouped_" + dtypes_tag(a) + "_" + moe_grouped_math_name(c.math) + "_" +
         std::to_string(c.bm) + "x" + std::to_string(c.bn) + "x" + std::to_string(c.bk);
}

}  // namespace llmm::cuda_moe
