// skinny_mma over expert stacks (matmul_id's SkinnyMma grouped kernel), host side: the block
// sort's steps (the functions the kernel runs, one routed row a thread, emulated here thread by
// thread with the kernel's barriers as phases) against a std::stable_sort by expert, the group
// bounds the planner assumes, its configuration, the plan and every refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/moe/moe_plan.hpp"
#include "core/moe/moe_skinny.hpp"
#include "llmm/error.hpp"
#include "support/expect_error.hpp"

namespace llmm::cuda_moe {
namespace {

using test::expect_error;

struct Group {
  std::uint32_t expert;
  int start, rows;
  friend bool operator==(const Group&, const Group&) = default;
};
struct Sorted {
  std::vector<std::uint32_t> rows;  // routed rows in sorted order
  std::vector<Group> groups;
  int none = 0;  // rows of out-of-range ids
};

// The kernel's prologue (SkinnyExpertRows::prologue), thread by thread: expert[r] is the id's
// expert or kSkinnyMoeNone. The key table is padded to a multiple of 4 with kSkinnyMoePad and
// every loop runs over the padded table, as the kernel's 4-key loads do.
Sorted kernel_sort(const std::vector<std::uint32_t>& expert, int group_rows) {
  const int routed = static_cast<int>(expert.size()), padded = (routed + 3) & ~3;
  std::vector<std::uint32_t> keys(padded, kSkinnyMoePad), sorted(routed, 0xdeadu), gexp(routed, 0xdeadu),
      gpos(routed, 0xdeadu);
  for (int t = 0; t < routed; ++t) keys[t] = skinny_moe_key(expert[t], t);
  std::vector<SkinnyMoeRank> rk(routed);
  std::vector<bool> head(routed);
  for (int t = 0; t < routed; ++t) {  // after the first barrier
    rk[t] = skinny_moe_rank(keys.data(), padded, keys[t]);
    sorted[rk[t].position] = static_cast<std::uint32_t>(t);
    head[t] = skinny_moe_starts_group(keys[t], rk[t], group_rows);
  }
  std::vector<std::uint32_t> key0 = keys;  // each thread's own key, unmarked
  for (int t = 0; t < routed; ++t)
    if (head[t]) keys[t] = key0[t] | kSkinnyMoeHead;
  const int groups = static_cast<int>(std::count(head.begin(), head.end(), true));
  for (int t = 0; t < routed; ++t)
    if (head[t]) {
      const int gi = skinny_moe_group_index(keys.data(), padded, key0[t]);
      EXPECT_LT(gi, groups);
      gexp[gi] = skinny_moe_expert(key0[t]);
      gpos[gi] = skinny_moe_group_pos(rk[t].position, std::min(group_rows, rk[t].total - rk[t].before));
    }
  Sorted s;
  s.rows = sorted;
  for (int i = 0; i < groups; ++i) s.groups.push_back({gexp[i], skinny_moe_group_start(gpos[i]), skinny_moe_group_rows(gpos[i])});
  for (std::uint32_t e : expert) s.none += e == kSkinnyMoeNone;
  return s;
}

// The same from a stable sort: experts in order, rows in increasing r, groups of group_rows.
Sorted reference_sort(const std::vector<std::uint32_t>& expert, int group_rows) {
  Sorted s;
  for (std::uint32_t r = 0; r < expert.size(); ++r) s.rows.push_back(r);
  std::stable_sort(s.rows.begin(), s.rows.end(), [&](std::uint32_t a, std::uint32_t b) { return expert[a] < expert[b]; });
  for (std::size_t i = 0; i < s.rows.size();) {
    const std::uint32_t e = expert[s.rows[i]];
    std::size_t j = i;
    while (j < s.rows.size() && expert[s.rows[j]] == e) ++j;
    if (e != kSkinnyMoeNone)
      for (std::size_t g = i; g < j; g += group_rows)
        s.groups.push_back({e, static_cast<int>(g), static_cast<int>(std::min<std::size_t>(group_rows, j - g))});
    else s.none = static_cast<int>(j - i);
    i = j;
  }
  return s;
}

TEST(MoeSkinny, BlockSortIsTheStableSortByExpertInGroups) {
  std::mt19937_64 rng(7);
  int cases = 0;
  for (int routed : {1, 2, 7, 8, 9, 16, 17, 64, 100, 128, 255, 256})
    for (std::uint32_t experts : {1u, 3u, 8u, 128u, 1024u})
      for (int group_rows : {8, 16})
        for (int style = 0; style < 3; ++style) {  // uniform, all on few experts, a fifth out of range
          std::vector<std::uint32_t> expert(routed);
          for (int r = 0; r < routed; ++r) {
            std::uint32_t e = static_cast<std::uint32_t>(rng() % experts);
            if (style == 1) e = static_cast<std::uint32_t>(rng() % std::min(experts, 3u));
            if (style == 2 && rng() % 5 == 0) e = kSkinnyMoeNone;
            expert[r] = e;
          }
          const Sorted got = kernel_sort(expert, group_rows), want = reference_sort(expert, group_rows);
          ASSERT_EQ(got.rows, want.rows) << routed << " rows, " << experts << " experts, style " << style;
          ASSERT_EQ(got.groups, want.groups) << routed << " rows, " << experts << " experts, style " << style;
          ASSERT_EQ(got.none, want.none);
          // Rows of out-of-range ids sort last, and every in-range row is in exactly one group.
          std::vector<int> seen(routed, 0);
          for (const Group& g : got.groups)
            for (int i = g.start; i < g.start + g.rows; ++i) ++seen[got.rows[i]];
          for (int r = 0; r < routed; ++r) EXPECT_EQ(seen[r], expert[r] == kSkinnyMoeNone ? 0 : 1) << r;
          for (int i = routed - got.none; i < routed; ++i) EXPECT_EQ(expert[got.rows[i]], kSkinnyMoeNone);
          // The planner's bounds hold for any ids.
          MoeArgs a;
          a.m = routed, a.top_k = 1, a.n_experts = experts;
          const SkinnyMoeGroups b = skinny_mma_moe_groups(a, group_rows / 8);
          if (got.none == 0) EXPECT_GE(static_cast<std::int64_t>(got.groups.size()), b.lo);
          EXPECT_LE(static_cast<std::int64_t>(got.groups.size()), b.hi) << routed << " rows, " << experts << " experts";
          ++cases;
        }
  EXPECT_EQ(cases, 12 * 5 * 2 * 3);
}

// The same with every token's top_k ids distinct (what the bench's routings give): hot routing
// (all tokens on the same experts) makes top_k full groups at m = group rows.
TEST(MoeSkinny, HotRoutingGivesTopKGroups) {
  std::vector<std::uint32_t> expert;
  const std::uint32_t hot[8] = {5, 90, 17, 3, 64, 120, 33, 8};
  for (int t = 0; t < 16; ++t)
    for (std::uint32_t e : hot) expert.push_back(e);
  const Sorted s = kernel_sort(expert, 16);
  ASSERT_EQ(s.groups.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(s.groups[i].rows, 16);
    EXPECT_EQ(s.groups[i].start, static_cast<int>(16 * i));
    for (int j = 0; j < 16; ++j) EXPECT_EQ(expert[s.rows[16 * i + j]], s.groups[i].expert);
  }
}

const void* addr(std::uintptr_t v) { return reinterpret_cast<const void*>(v); }
ArchInfo h200() {
  ArchInfo a;
  a.kind = DeviceKind::CUDA, a.cc_major = 9, a.cc_minor = 0, a.sm_count = 132;
  return a;
}
MoeArgs decode(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t top_k = 8, std::int64_t e = 128) {
  MoeArgs a;
  a.m = m, a.n = n, a.k = k, a.top_k = top_k, a.n_experts = e;
  a.w_dtype = DType::BF16, a.w = addr(0x100000), a.expert_stride = n * k;
  a.in_dtype = DType::BF16, a.in = addr(0x20000000), a.in_token_stride = k;
  a.ids = addr(0x30000000);
  a.out_dtype = DType::BF16, a.out = const_cast<void*>(addr(0x40000000));
  return a;
}

TEST(MoeSkinny, ConfigIsAValidGridForEveryShape) {
  for (std::int64_t m : {1, 2, 4, 8, 9, 16, 32})
    for (std::int64_t n : {7, 768, 1536, 2048, 4096, 14336})
      for (std::int64_t k : {8, 64, 768, 2048, 7168})
        for (int cc : {8, 9})
          for (int sms : {0, 108, 132}) {
            const MoeArgs g = decode(m, n, k);
            const cuda_dense::SkinnyMmaConfig c = skinny_mma_moe_config(g, cc, sms);
            const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
            EXPECT_EQ(c.n_tiles, m <= 8 ? 1 : 2) << what;
            EXPECT_TRUE(c.row_tiles == 1 || c.row_tiles == 2) << what;
            EXPECT_TRUE(c.cluster == 1 || c.cluster == 2 || c.cluster == 4) << what;
            if (c.cluster > 1) {
              EXPECT_EQ(cc, 9) << what;  // clusters on sm_90 only
              EXPECT_GE((k + 31) / 32, 8 * c.cluster) << what;  // every warp of a rank a chunk
            }
            EXPECT_FALSE(c.x_image) << what;
            EXPECT_GE(c.blocks, c.cluster) << what;
            EXPECT_EQ(c.blocks % c.cluster, 0) << what;
            EXPECT_LE(c.blocks, 2 * (sms ? sms : 132)) << what;
            const std::int64_t tiles_hi = (n + 16 * c.row_tiles - 1) / (16 * c.row_tiles) * skinny_mma_moe_groups(g, c.n_tiles).hi;
            EXPECT_LE(c.blocks / c.cluster, tiles_hi) << what;  // no cluster without a tile at the most groups
            EXPECT_LE(cuda_dense::skinny_mma_smem(c.n_tiles, c.row_tiles, c.cluster, false, kSkinnyMoeMapBytes).bytes,
                      cuda_dense::kSkinnyMmaSmemLimit);
          }
}

// The suite's Qwen3-30B-A3B decode shapes on an H200: the configs the bench rows will name.
TEST(MoeSkinny, ConfigOnTheSuiteShapes) {
  const cuda_dense::SkinnyMmaConfig gate_up = skinny_mma_moe_config(decode(16, 1536, 2048), 9, 132);
  EXPECT_EQ(skinny_mma_moe_kernel_name(decode(16, 1536, 2048), gate_up), "skinny_mma_moe_bf16_bf16_n16_r32_c4");
  EXPECT_EQ(gate_up.blocks, 264);
  const cuda_dense::SkinnyMmaConfig down = skinny_mma_moe_config(decode(16, 2048, 768), 9, 132);
  EXPECT_EQ(skinny_mma_moe_kernel_name(decode(16, 2048, 768), down), "skinny_mma_moe_bf16_bf16_n16_r32_c2");
  const cuda_dense::SkinnyMmaConfig one = skinny_mma_moe_config(decode(1, 1536, 2048), 9, 132);
  EXPECT_EQ(one.n_tiles, 1);
  // Groups at m 1, top_k 8: at least one (all ids on one expert), at most 8.
  EXPECT_EQ(skinny_mma_moe_groups(decode(1, 1536, 2048), 1).lo, 1);
  EXPECT_EQ(skinny_mma_moe_groups(decode(1, 1536, 2048), 1).hi, 8);
  EXPECT_EQ(skinny_mma_moe_groups(decode(16, 1536, 2048), 2).lo, 8);
  EXPECT_EQ(skinny_mma_moe_groups(decode(16, 1536, 2048), 2).hi, 128);
}

// Batch invariance within the route: a routed row's K order depends on the cluster alone, so the
// cluster is the layer's (n, k, top_k, experts, device), the same at every m the kernel takes.
TEST(MoeSkinny, ClusterDoesNotDependOnM) {
  int layers = 0, clustered = 0;
  for (std::int64_t top_k : {1, 2, 6, 8})
    for (std::int64_t n : {7, 96, 768, 1536, 2048, 4096, 14336})
      for (std::int64_t k : {8, 264, 768, 2048, 2056, 4096, 7168})
        for (int cc : {8, 9})
          for (int sms : {0, 78, 132}) {
            const int c = skinny_mma_moe_cluster(decode(1, n, k, top_k), cc, sms);
            for (std::int64_t m = 1; m * top_k <= kSkinnyMoeMaxRows; ++m)
              ASSERT_EQ(skinny_mma_moe_config(decode(m, n, k, top_k), cc, sms).cluster, c)
                  << "m " << m << " n " << n << " k " << k << " top_k " << top_k << " cc " << cc << " sms " << sms;
            ++layers;
            clustered += c > 1;
          }
  EXPECT_EQ(layers, 4 * 7 * 7 * 2 * 3);
  EXPECT_GT(clustered, 0);  // not trivially constant: some layers split K
  // The suite's layers on an H200.
  EXPECT_EQ(skinny_mma_moe_cluster(decode(1, 1536, 2048), 9, 132), 4);
  EXPECT_EQ(skinny_mma_moe_cluster(decode(1, 2048, 768), 9, 132), 2);
  EXPECT_EQ(skinny_mma_moe_cluster(decode(1, 1536, 2048), 8, 132), 1);  // no clusters before sm_90
}

TEST(MoeSkinny, RefusalsNameTheReason) {
  const MoeArgs ok = decode(16, 1536, 2048);
  EXPECT_EQ(skinny_mma_moe_refusal(ok, h200()), "");
  struct Bad { const char* why; MoeArgs g; ArchInfo arch = h200(); };
  std::vector<Bad> bad;
  {
    Bad b{"sm_80 or later", ok};
    b.arch.cc_major = 7;
    bad.push_back(b);
  }
  {
    Bad b{"f16 or bf16 weights", ok};
    b.g.w_dtype = DType::F32, b.g.in_dtype = DType::F32, b.g.out_dtype = DType::F32;
    bad.push_back(b);
  }
  {
    Bad b{"input of the weights' dtype", ok};
    b.g.in_dtype = DType::F32, b.g.out_dtype = DType::F32;
    bad.push_back(b);
  }
  {
    Bad b{"k a multiple of 8", ok};
    b.g.k = 36, b.g.expert_stride = 1536 * 40, b.g.in_token_stride = 40;
    bad.push_back(b);
  }
  {
    Bad b{"at most 256 routed rows (m x top_k), got 33 x 8", ok};
    b.g.m = 33;
    bad.push_back(b);
  }
  {
    Bad b{"n of at most 134217711", ok};  // the kernel's 32-bit tile count (256 groups of 16-row tiles)
    b.g.n = 134217712;
    bad.push_back(b);
  }
  {
    Bad b{"k of at most 1073741824", ok};
    b.g.k = (std::int64_t{1} << 30) + 8;
    bad.push_back(b);
  }
  {
    Bad b{"16-byte aligned weights", ok};
    b.g.expert_stride += 4;
    bad.push_back(b);
  }
  {
    Bad b{"16-byte aligned weights", ok};
    b.g.w = addr(0x100008);
    bad.push_back(b);
  }
  {
    Bad b{"16-byte aligned input rows", ok};
    b.g.in_token_stride = 2052;
    bad.push_back(b);
  }
  {
    Bad b{"16-byte aligned input rows", ok};
    b.g.in_slot_stride = 4;
    bad.push_back(b);
  }
  for (const Bad& b : bad) {
    const std::string why = skinny_mma_moe_refusal(b.g, b.arch);
    EXPECT_NE(why.find(b.why), std::string::npos) << "'" << why << "' should say '" << b.why << "'";
    expect_error([&] { plan_matmul_id_cuda(b.g, MatmulIdRoute::GroupedPrefill, b.arch, MatmulIdGroupedKernel::SkinnyMma); },
                 ErrorCode::Unsupported, std::string("grouped kernel skinny_mma cannot run"));
  }
  // m x top_k = 256 is the most it takes.
  MoeArgs most = ok;
  most.m = 32;
  EXPECT_EQ(skinny_mma_moe_refusal(most, h200()), "");
  most.n = 134217711;  // the largest n (sizes only: nothing is read)
  EXPECT_EQ(skinny_mma_moe_refusal(most, h200()), "");
}

TEST(MoeSkinny, PlanIsOneKernelByNameOnly) {
  const MoeArgs g = decode(16, 1536, 2048);
  const MoePlan p = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::SkinnyMma);
  EXPECT_TRUE(p.skinny);
  EXPECT_FALSE(p.engine || p.fused || p.staged);
  EXPECT_EQ(p.kernels, std::vector<std::string>{skinny_mma_moe_kernel_name(g, p.skinny_config)});
  EXPECT_EQ(p.skinny_config, skinny_mma_moe_config(g, 9, 132));
  EXPECT_NE(p.reason.find("asked for by name"), std::string::npos) << p.reason;
  // Auto never takes it (not measured yet), at any m it could take.
  for (std::int64_t m : {1, 4, 16, 32}) {
    MoeArgs a = decode(m, 1536, 2048);
    a.counts = static_cast<std::uint32_t*>(const_cast<void*>(addr(0x50000000)));
    a.rows = static_cast<std::uint32_t*>(const_cast<void*>(addr(0x50001000)));
    a.row_capacity = m * 8;
    EXPECT_FALSE(plan_matmul_id_cuda(a, MatmulIdRoute::GroupedPrefill, h200(), MatmulIdGroupedKernel::Auto).skinny) << m;
  }
  // sm_80: no clusters.
  ArchInfo a100 = h200();
  a100.cc_major = 8, a100.sm_count = 108;
  const MoePlan q = plan_matmul_id_cuda(g, MatmulIdRoute::GroupedPrefill, a100, MatmulIdGroupedKernel::SkinnyMma);
  EXPECT_EQ(q.skinny_config.cluster, 1);
  EXPECT_LE(q.skinny_config.blocks, 216);
}

}  // namespace
}  // namespace llmm::cuda_moe
