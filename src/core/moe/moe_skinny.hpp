// skinny_mma over a stack of experts: matmul_id's grouped route with grouped kernel SkinnyMma
// (decode). The streaming engine's tensor-core kernel (src/cuda/engine/stream/) with the expert
// row map: tiles are (group of routed rows of one expert, 16 or 32 of its weight rows), the
// group's routed rows are the tile's vectors (up to 8 or 16, gathered by index), so each active
// expert's weights stream once for all of its tokens. No map kernel and no host sync: every
// block sorts the m * top_k <= 256 routed rows itself (one a thread) before its first copy.
// Host-side facts (pure, no CUDA headers): which calls it takes, its configuration, its name,
// and the sort's per-row steps, which the kernel runs and CPU tests check.
//
// The sort (every block, identical): routed row r of expert e (kSkinnyMoeNone for an id out of
// range) gets the key e << 8 | r; a row's place in the sorted list is the number of keys below
// its own (keys are distinct), so expert e's rows come out in increasing r: the stable
// counting sort moe_map writes, without atomics or tables per expert. Each expert's rows are
// cut into groups of `group_rows` (8 or 16: a tile's vectors); a row whose place among
// its expert's rows is a multiple of group_rows starts a group, and a group's index is the
// number of group-starting keys below its key. Rows of out-of-range ids sort last and start no
// group; their output rows are zeroed by the grid (a warp a row).
#pragma once
#include <cstdint>
#include <string>

#include "core/dense/skinny_mma.hpp"
#include "core/moe/moe_args.hpp"
#include "llmm/context.hpp"

namespace llmm::cuda_moe {

inline constexpr int kSkinnyMoeMaxRows = 256;           // routed rows m * top_k: one a thread of the block's sort
inline constexpr std::uint32_t kSkinnyMoeNone = 0x7fffffu;  // the sort's expert of an out-of-range id (after every expert)
inline constexpr std::uint32_t kSkinnyMoeHead = 0x80000000u;  // a key's mark: its row starts a group
// The block's tables: keys, the sorted rows, each group's expert and position word, u32 each.
inline constexpr int kSkinnyMoeMapBytes = 4 * kSkinnyMoeMaxRows * 4;
static_assert(cuda_dense::skinny_mma_smem(2, 2, 4, false, kSkinnyMoeMapBytes).bytes <= cuda_dense::kSkinnyMmaSmemLimit);

constexpr std::uint32_t skinny_moe_key(std::uint32_t expert_or_none, int r) {
  return expert_or_none << 8 | static_cast<std::uint32_t>(r);
}
constexpr std::uint32_t skinny_moe_expert(std::uint32_t key) { return (key & ~kSkinnyMoeHead) >> 8; }

struct SkinnyMoeRank {
  int position = 0;  // keys below this one: the row's place in the sorted list
  int before = 0;    // rows of the same expert before it (its place among them)
  int total = 0;     // rows of its expert
};
// A key that pads the table to a multiple of 4 (the kernel reads 4 keys a load): it is below no
// key, of no expert and never a group's head below one (all of its bits set).
inline constexpr std::uint32_t kSkinnyMoePad = 0xffffffffu;
// One key kj of the table seen from row `key` (before any group mark is set).
constexpr void skinny_moe_rank_step(SkinnyMoeRank& rk, std::uint32_t kj, std::uint32_t key) {
  const bool below = kj < key, same = (kj >> 8) == (key >> 8);
  rk.position += below;
  rk.before += below && same;
  rk.total += same;
}
// One routed row's rank from the block's `routed` keys (pads included or not).
constexpr SkinnyMoeRank skinny_moe_rank(const std::uint32_t* keys, int routed, std::uint32_t key) {
  SkinnyMoeRank rk;
  for (int j = 0; j < routed; ++j) skinny_moe_rank_step(rk, keys[j], key);
  return rk;
}
// Whether the row starts a group of group_rows rows of its expert (never for an out-of-range id).
constexpr bool skinny_moe_starts_group(std::uint32_t key, const SkinnyMoeRank& rk, int group_rows) {
  return skinny_moe_expert(key) != kSkinnyMoeNone && rk.before % group_rows == 0;
}
// Whether key kj (of the marked table) is a group's head below the head `key`.
constexpr bool skinny_moe_head_below(std::uint32_t kj, std::uint32_t key) {
  return (kj & kSkinnyMoeHead) != 0 && (kj & ~kSkinnyMoeHead) < (key & ~kSkinnyMoeHead);
}
// A group-starting row's group index: the marked keys below its own (after the marks are set).
constexpr int skinny_moe_group_index(const std::uint32_t* keys, int routed, std::uint32_t key) {
  int i = 0;
  for (int j = 0; j < routed; ++j) i += skinny_moe_head_below(keys[j], key);
  return i;
}
// A group's position word: its first place in the sorted list, and its rows (<= group_rows).
constexpr std::uint32_t skinny_moe_group_pos(int start, int rows) {
  return static_cast<std::uint32_t>(start) | static_cast<std::uint32_t>(rows) << 16;
}
constexpr int skinny_moe_group_start(std::uint32_t pos) { return static_cast<int>(pos & 0xffffu); }
constexpr int skinny_moe_group_rows(std::uint32_t pos) { return static_cast<int>(pos >> 16); }

// Why the kernel cannot take the call, or "" (16-bit weights and an input of their dtype, f32 or
// that dtype out, k % 8 == 0, m * top_k <= 256, 16-byte aligned weights, experts and input rows,
// sm_80 or later).
std::string skinny_mma_moe_refusal(const MoeArgs& g, const ArchInfo& arch);

// The groups a call may have (the host cannot see the ids): at least ceil(routed / group_rows)
// (all rows on one expert), at most min(routed, routed / group_rows + min(experts, routed)).
struct SkinnyMoeGroups {
  std::int64_t lo = 0, hi = 0;
};
SkinnyMoeGroups skinny_mma_moe_groups(const MoeArgs& g, int n_tiles);

// The cluster (blocks splitting K) for a layer: a function of n, k, top_k, experts, arch and SM
// count, never of m, because a routed row's K order depends on the cluster alone (the tile rows
// and vectors a tile do not change it): so a row's output is bitwise the same at every m, as the
// contract asks within a route. The choice: the smallest, over the usable clusters (1; 2 and 4 on
// sm_90 with >= 8 K chunks a rank), of the worst ratio of the busiest block to the best split over
// every m the kernel takes (1 .. 256 / top_k) and both ends of its group count; a larger cluster
// must win by more than 1%.
int skinny_mma_moe_cluster(const MoeArgs& g, int cc_major, int sm_count);

// Configuration of a call it takes: n8 tiles of vectors by m (1 to m = 8, else 2: a token's
// distinct ids give an expert at most m rows), the layer's cluster (above), and the tile rows
// whose busiest block is closest to the best split at both ends of skinny_mma_moe_groups (the
// smaller worst ratio; 16-row tiles must improve on 32 by more than 1%). The busiest block's cost
// is dense's: ceil(tiles / clusters) x rows a tile / cluster. blocks: two a SM (a multiple of the
// cluster), at most cluster x the most tiles. Never an image (each group has its own vectors).
cuda_dense::SkinnyMmaConfig skinny_mma_moe_config(const MoeArgs& g, int cc_major, int sm_count);

// skinny_mma_moe_<w>_<out>_n<8|16>_r<16|32>_c<1|2|4>, e.g. skinny_mma_moe_bf16_bf16_n16_r16_c2
std::string skinny_mma_moe_kernel_name(const MoeArgs& g, const cuda_dense::SkinnyMmaConfig& c);

// Launcher (src/cuda/engine/instances/moe_skinny_mma.cu): the call must be one the refusal
// accepts (ErrorCode::Internal otherwise), ErrorCode::Cuda if the launch fails. Writes every
// output row: its sums, or zeros for an out-of-range id.
void launch_skinny_mma_moe(const MoeArgs& g, const cuda_dense::SkinnyMmaConfig& c, StreamHandle stream);

}  // namespace llmm::cuda_moe
