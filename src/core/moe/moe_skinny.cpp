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
  // The kernel's 32-bit counts: n, k <= 2^30 and all 16-row tiles of 256 groups < 2^31.
  constexpr std::int64_t kMaxN = 16 * (cuda_dense::kSkinnyMmaMaxTiles / kSkinnyMoeMaxRows - 1) + 15;
  if (g.n > kMaxN || g.k > cuda_dense::kSkinnyMmaMaxDim)
    return "takes n of at most " + std::to_string(kMaxN) + " and k of at most " + std::to_string(cuda_dense::kSkinnyMmaMaxDim) +
           " (32-bit tile counts), got n " + std::to_string(g.n) + ", k " + std::to_string(g.k);
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

constexpr int kMoeClusters[3] = {1, 2, 4};

// The split's arithmetic for a layer (m is the only field that varies below).
struct MoeSplit {
  std::int64_t slots = 0, chunks = 0;
  std::int64_t tiles_n[2] = {0, 0};  // weight-row tiles of one expert at 16 and 32 rows a tile
  int cc_major = 0;
  bool usable(int c) const { return c == 1 || (cc_major >= 9 && chunks >= 8 * c); }
};

MoeSplit moe_split(const MoeArgs& g, int cc_major, int sm_count) {
  MoeSplit s;
  const std::int64_t sms = sm_count <= 0 ? 132 : sm_count > 65536 ? 65536 : sm_count;
  s.slots = 2 * sms;
  s.chunks = g.k / 32 + (g.k % 32 != 0);
  for (int rt : {1, 2}) s.tiles_n[rt - 1] = g.n / (16 * rt) + (g.n % (16 * rt) != 0);
  s.cc_major = cc_major;
  return s;
}

int moe_n_tiles(std::int64_t m) { return m <= 8 ? 1 : 2; }

// At one m, for both ends of its group count: the busiest block's weight bytes (16-row tiles of
// all of K: ceil(tiles / clusters) x rows a tile / cluster) under every (rt, c), and the best
// usable one; ratio(rt, c) is (rt, c)'s worse ratio to the best over the two ends.
struct MoeEnds {
  double cost[2][2][3] = {};  // [end][rt - 1][cluster index]
  double best[2] = {0.0, 0.0};
  double ratio(int rt, int ci) const {
    const double lo = cost[0][rt - 1][ci] / best[0], hi = cost[1][rt - 1][ci] / best[1];
    return lo > hi ? lo : hi;
  }
};
MoeEnds moe_ends(const MoeArgs& g, const MoeSplit& s) {
  MoeEnds e;
  const SkinnyMoeGroups groups = skinny_mma_moe_groups(g, moe_n_tiles(g.m));
  for (int end = 0; end < 2; ++end) {
    const double p = static_cast<double>(end == 0 ? groups.lo : groups.hi);
    bool any = false;
    for (int rt : {2, 1})
      for (int ci = 0; ci < 3; ++ci) {
        const int c = kMoeClusters[ci];
        const double cost = std::ceil(static_cast<double>(s.tiles_n[rt - 1]) * p / static_cast<double>(s.slots / c)) * rt / c;
        e.cost[end][rt - 1][ci] = cost;
        if (s.usable(c) && (!any || cost < e.best[end])) e.best[end] = cost, any = true;
      }
  }
  return e;
}

}  // namespace

int skinny_mma_moe_cluster(const MoeArgs& g, int cc_major, int sm_count) {
  const MoeSplit s = moe_split(g, cc_major, sm_count);
  const std::int64_t m_max = g.top_k >= 1 && g.top_k <= kSkinnyMoeMaxRows ? kSkinnyMoeMaxRows / g.top_k : 1;
  double worst[3] = {0.0, 0.0, 0.0};  // per cluster, over every m the kernel takes for this layer
  for (std::int64_t m = 1; m <= m_max; ++m) {
    MoeArgs at = g;
    at.m = m;
    const MoeEnds e = moe_ends(at, s);  // once an m: its group counts' costs
    for (int ci = 0; ci < 3; ++ci) {
      const double r2 = e.ratio(2, ci), r1 = e.ratio(1, ci);
      const double r = r2 < r1 ? r2 : r1;  // the cluster's best tile rows at this m
      if (r > worst[ci]) worst[ci] = r;
    }
  }
  // The smallest worst ratio; a larger cluster (more DSMEM rounds) must win by more than 1%.
  int best = 0;
  for (int ci = 1; ci < 3; ++ci)
    if (s.usable(kMoeClusters[ci]) && worst[ci] < worst[best] * 0.99) best = ci;
  return kMoeClusters[best];
}

cuda_dense::SkinnyMmaConfig skinny_mma_moe_config(const MoeArgs& g, int cc_major, int sm_count) {
  cuda_dense::SkinnyMmaConfig best;
  best.n_tiles = moe_n_tiles(g.m);
  best.cluster = skinny_mma_moe_cluster(g, cc_major, sm_count);
  const MoeSplit s = moe_split(g, cc_major, sm_count);
  const MoeEnds e = moe_ends(g, s);
  const std::int64_t groups_hi = skinny_mma_moe_groups(g, best.n_tiles).hi;
  const int c = best.cluster, ci = c == 1 ? 0 : c == 2 ? 1 : 2;
  double best_ratio = 0.0;
  for (int rt : {2, 1}) {  // 16-row tiles (twice the vector copies a weight byte) must win by > 1%
    const double ratio = e.ratio(rt, ci);
    if (best.blocks == 0 || ratio < best_ratio * 0.99) {
      best_ratio = ratio;
      best.row_tiles = rt;
      const double most = static_cast<double>(s.tiles_n[rt - 1]) * static_cast<double>(groups_hi);
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
