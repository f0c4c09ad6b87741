#include "core/moe/moe_skinny.hpp"

#include <cmath>
#include <cstdint>

#include "core/moe/moe_kernels.hpp"

namespace llmm::cuda_moe {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string skinny_mma_moe_refusal(const MoeArgs& g, const ArchInfo& arch) {
  if (arch.cc_major != 0 && arch.cc_major < 8) return "needs sm_80 or later";
  if (g.w_dtype != DType::F16 && g.w_dtype != DType::BF16) return "needs f16 or bf16 weights";
  if (g.in_dtype != g.w_dtype) return "needs an input of the weights' dtype";
  if (!moe_dtypes_supported(g)) return "needs an output of f32 or the input's dtype";
  if (g.n < 1 || g.k < 1 || g.m < 1 || g.top_k < 1) return "needs n, k, m and top_k of at least 1";
  if (g.k % 8 != 0) return "needs k a multiple of 8 (16-byte rows)";
  if (g.m > kSkinnyMoeMaxRows || g.top_k > kSkinnyMoeMaxRows || g.m * g.top_k > kSkinnyMoeMaxRows)
    return "takes at most " + std::to_string(kSkinnyMoeMaxRows) + " routed rows (m x top_k), got " + std::to_string(g.m) +
           " x " + std::to_string(g.top_k);
  if (g.n_experts < 1 || g.n_experts >= static_cast<std::int64_t>(kSkinnyMoeNone)) return "needs 1 to 8388606 experts";
  // 16-bit elements: a stride that is a multiple of 8 elements keeps every row 16-byte aligned.
  if (!aligned16(g.w) || g.expert_stride % 8 != 0) return "needs 16-byte aligned weights and expert stride";
  if (!aligned16(g.in) || g.in_token_stride % 8 != 0 || g.in_slot_stride % 8 != 0)
    return "needs 16-byte aligned input rows (base and strides)";
  return {};
}

SkinnyMoeGroups skinny_mma_moe_groups(const MoeArgs& g, int n_tiles) {
  const std::int64_t routed = g.m * g.top_k, rows = 8 * n_tiles;
  const std::int64_t active = routed < g.n_experts ? routed : g.n_experts;
  SkinnyMoeGroups s;
  s.lo = (routed + rows - 1) / rows;
  s.hi = routed / rows + active;
  if (s.hi > routed) s.hi = routed;
  if (s.lo < 1) s.lo = 1;
  if (s.hi < s.lo) s.hi = s.lo;
  return s;
}

namespace {

// The split's arithmetic for one call shape (m is the only field that varies below).
struct MoeSplit {
  std::int64_t slots = 0, chunks = 0;
  int cc_major = 0;
  bool usable(int c) const { return c == 1 || (cc_major >= 9 && chunks >= 8 * c); }
};

MoeSplit moe_split(const MoeArgs& g, int cc_major, int sm_count) {
  MoeSplit s;
  const std::int64_t sms = sm_count <= 0 ? 132 : sm_count > 65536 ? 65536 : sm_count;
  s.slots = 2 * sms;
  s.chunks = g.k / 32 + (g.k % 32 != 0);
  s.cc_major = cc_major;
  return s;
}

int moe_n_tiles(std::int64_t m) { return m <= 8 ? 1 : 2; }

// The busiest block's weight bytes (16-row tiles of all of K) for `p` groups under (rt, c).
double moe_cost(const MoeArgs& g, const MoeSplit& s, double p, int rt, int c) {
  const double tiles = static_cast<double>(g.n / (16 * rt) + (g.n % (16 * rt) != 0)) * p;
  return std::ceil(tiles / static_cast<double>(s.slots / c)) * rt / c;
}

// For each end of the group count at g.m, the best cost of any usable (rt, c); and (rt, c)'s
// worse ratio to it over the two ends.
struct MoeEnds {
  double p[2] = {0.0, 0.0}, best[2] = {0.0, 0.0};
};
MoeEnds moe_ends(const MoeArgs& g, const MoeSplit& s) {
  MoeEnds e;
  const SkinnyMoeGroups groups = skinny_mma_moe_groups(g, moe_n_tiles(g.m));
  e.p[0] = static_cast<double>(groups.lo), e.p[1] = static_cast<double>(groups.hi);
  for (int i = 0; i < 2; ++i) {
    bool any = false;
    for (int rt : {2, 1})
      for (int c : {1, 2, 4})
        if (s.usable(c) && (!any || moe_cost(g, s, e.p[i], rt, c) < e.best[i])) e.best[i] = moe_cost(g, s, e.p[i], rt, c), any = true;
  }
  return e;
}
double moe_ratio(const MoeArgs& g, const MoeSplit& s, const MoeEnds& e, int rt, int c) {
  const double lo = moe_cost(g, s, e.p[0], rt, c) / e.best[0], hi = moe_cost(g, s, e.p[1], rt, c) / e.best[1];
  return lo > hi ? lo : hi;
}

}  // namespace

int skinny_mma_moe_cluster(const MoeArgs& g, int cc_major, int sm_count) {
  const MoeSplit s = moe_split(g, cc_major, sm_count);
  const std::int64_t m_max = g.top_k >= 1 && g.top_k <= kSkinnyMoeMaxRows ? kSkinnyMoeMaxRows / g.top_k : 1;
  int best_c = 0;
  double best_worst = 0.0;
  for (int c : {1, 2, 4}) {
    if (!s.usable(c)) continue;
    double worst = 0.0;  // over every m the kernel takes for this layer: its best tile rows' ratio
    for (std::int64_t m = 1; m <= m_max; ++m) {
      MoeArgs at = g;
      at.m = m;
      const MoeEnds e = moe_ends(at, s);
      const double r2 = moe_ratio(at, s, e, 2, c), r1 = moe_ratio(at, s, e, 1, c);
      const double r = r2 < r1 ? r2 : r1;
      if (r > worst) worst = r;
    }
    // A larger cluster (more DSMEM rounds) must win by more than 1%.
    if (best_c == 0 || worst < best_worst * 0.99) best_c = c, best_worst = worst;
  }
  return best_c;
}

cuda_dense::SkinnyMmaConfig skinny_mma_moe_config(const MoeArgs& g, int cc_major, int sm_count) {
  cuda_dense::SkinnyMmaConfig best;
  best.n_tiles = moe_n_tiles(g.m);
  best.cluster = skinny_mma_moe_cluster(g, cc_major, sm_count);
  const MoeSplit s = moe_split(g, cc_major, sm_count);
  const MoeEnds e = moe_ends(g, s);
  const SkinnyMoeGroups groups = skinny_mma_moe_groups(g, best.n_tiles);
  const int c = best.cluster;
  double best_ratio = 0.0;
  for (int rt : {2, 1}) {  // 16-row tiles (twice the vector copies a weight byte) must win by > 1%
    const double ratio = moe_ratio(g, s, e, rt, c);
    if (best.blocks == 0 || ratio < best_ratio * 0.99) {
      best_ratio = ratio;
      best.row_tiles = rt;
      const double most = static_cast<double>(g.n / (16 * rt) + (g.n % (16 * rt) != 0)) * static_cast<double>(groups.hi);
      const double clusters = static_cast<double>(s.slots / c);
      best.blocks = static_cast<int>(c * (most < clusters ? most : clusters));
    }
  }
  best.x_image = false;
  return best;
}

std::string skinny_mma_moe_kernel_name(const MoeArgs& g, const cuda_dense::SkinnyMmaConfig& c) {
  return "skinny_mma_moe_" + std::string(dtype_name(g.w_dtype)) + "_" + std::string(dtype_name(g.out_dtype)) + "_n" +
         std::to_string(8 * c.n_tiles) + "_r" + std::to_string(16 * c.row_tiles) + "_c" + std::to_string(c.cluster);
}

}  // namespace llmm::cuda_moe
