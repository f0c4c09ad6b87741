#include "core/ternary/tq2_kernels.hpp"

#include "core/vec16.hpp"

#include <cstddef>

namespace llmm::cuda_ternary {
namespace {

std::string dname(DType t) { return std::string(dtype_name(t)); }

std::string math_name(DType in, int splits) {
  if (in == DType::F16) return "f16";
  if (in == DType::BF16) return "bf16";
  return "bf16x" + std::to_string(splits);
}

std::string prefix(const char* kernel, const Tq2Args& a) {
  return std::string(kernel) + "_" + dname(a.in_dtype) + "_" + dname(a.out_dtype);
}

}  // namespace

bool tq2_args_ok(const Tq2Args& a) noexcept {
  if (a.m < 1 || a.n < 1 || a.k < kTq2Group || a.k % kTq2Group != 0) return false;
  if (!is_float(a.in_dtype)) return false;
  if (a.out_dtype != DType::F32 && a.out_dtype != a.in_dtype) return false;
  if (a.in_ld < a.k || a.out_ld < a.n) return false;
  return a.codes != nullptr && a.scales != nullptr && a.in != nullptr && a.out != nullptr;
}

int tq2_tiled_splits(const Tq2Args& a) noexcept {
  return a.in_dtype == DType::F32 && a.exact ? 2 : 1;
}

bool tq2_input_vec16(const Tq2Args& a) noexcept {
  return is_float(a.in_dtype) && detail::aligned16(a.in) && detail::bytes16(a.in_ld, a.in_dtype);
}

bool tq2_codes_vec16(const Tq2Args& a) noexcept {
  return detail::aligned16(a.codes) && (a.k / 4) % 16 == 0;
}


// Codes must allow 16-byte loads (the cache's buffers always do).
bool tq2_stream_v2_supports(const Tq2Args& a) noexcept {
  return tq2_args_ok(a) && a.m <= kTq2StreamMaxM && tq2_codes_vec16(a);
}

int tq2_stream_v2_splits(std::int64_t m, DType in_dtype, bool exact) noexcept {
  if (in_dtype != DType::F32 || !exact) return 1;
  return m * 3 <= 8 ? 3 : 2;  // a third part is free while the columns fit one n8 tile
}

int tq2_stream_v2_splits(const Tq2Args& a) noexcept { return tq2_stream_v2_splits(a.m, a.in_dtype, a.exact); }

namespace {

// Block shape and shared memory of the decode kernels v2 and v3 (tq2_stream_skeleton.cuh):
// most rows per block (the activation conversion is paid once per block) while the grid still
// gives every SM about 1.5 blocks; K in chunks that fit the budget. Shared memory: the warps'
// code rings [8][stages][512 B], partial sums [8][16][8 * n_tiles] f32, per group and n8-tile
// column a float2 coefficient, the block's scales [16 * row_tiles][group] f16 (16-byte padded),
// and cols + 1 columns (the last stays zero) of rec_bytes per group plus col_pad.
Tq2StreamV2Config stream_layout(const Tq2Args& a, int splits, int rec_bytes, int col_pad, int sm_count) {
  Tq2StreamV2Config c;
  c.splits = splits;
  const int cols = static_cast<int>(a.m) * splits;
  c.n_tiles = (cols + 7) / 8;
  const std::int64_t sms = sm_count > 0 ? sm_count : 132;
  c.row_tiles = 1;
  for (int rt : {8, 4, 2}) {
    if ((a.n + 16 * rt - 1) / (16 * rt) >= (3 * sms) / 2) {
      c.row_tiles = rt;
      break;
    }
  }
  const int ring = 8 * kTq2StreamStages * 512;
  const int red = 8 * 16 * 8 * c.n_tiles * 4;
  const int per_group = (cols + 1) * rec_bytes + 8 * c.n_tiles * 8 + 16 * c.row_tiles * 2;
  const std::int64_t groups = a.k / kTq2Group;
  const int fit = (kTq2V2SmemBudget - ring - red - 16 - col_pad * (cols + 1)) / per_group;
  c.chunk_groups = static_cast<int>(groups < fit ? groups : fit);
  const int scales = (16 * c.row_tiles * c.chunk_groups * 2 + 15) & ~15;
  c.smem_bytes = ring + red + c.chunk_groups * 8 * c.n_tiles * 8 + scales +
                 (cols + 1) * (c.chunk_groups * rec_bytes + col_pad);
  return c;
}

}  // namespace

std::optional<Tq2StreamV2Config> tq2_stream_v2_config(const Tq2Args& a, int sm_count) noexcept {
  if (!tq2_stream_v2_supports(a)) return std::nullopt;
  Tq2StreamV2Config c = stream_layout(a, tq2_stream_v2_splits(a), 256, 16, sm_count);  // f16 records: 256 B a group
  c.staged = a.m >= 3;
  return c;
}

std::size_t tq2_stream_v2_stage_bytes(std::int64_t m, std::int64_t k, DType in_dtype, bool exact) noexcept {
  if (m < 3 || m > kTq2StreamMaxM || k < kTq2Group) return 0;
  const std::int64_t splits = tq2_stream_v2_splits(m, in_dtype, exact);
  const std::int64_t n_tiles = (m * splits + 7) / 8;
  const auto groups = static_cast<std::size_t>(k / kTq2Group);
  return static_cast<std::size_t>(m * splits) * groups * 256 + groups * 8 * static_cast<std::size_t>(n_tiles) * 8;
}

std::size_t tq2_stream_v2_stage_bytes(const Tq2Args& a) noexcept {
  const auto c = tq2_stream_v2_config(a);
  if (!c || !c->staged) return 0;
  return tq2_stream_v2_stage_bytes(a.m, a.k, a.in_dtype, a.exact);
}

std::string tq2_stream_v2_stage_kernel_name(const Tq2Args& a) {
  const auto c = tq2_stream_v2_config(a);
  if (!c || !c->staged) return {};
  return "tq2_stage_v2_" + dname(a.in_dtype) + "_f16x" + std::to_string(c->splits) + "_n" + std::to_string(8 * c->n_tiles);
}

std::string tq2_stream_v2_kernel_name(const Tq2Args& a, int sm_count) {
  const auto c = tq2_stream_v2_config(a, sm_count);
  if (!c) return {};
  return prefix("tq2_stream_v2", a) + "_f16x" + std::to_string(c->splits) + "_n" + std::to_string(8 * c->n_tiles) +
         "_r" + std::to_string(16 * c->row_tiles) + (c->staged ? "_staged" : "");
}

Tq2StreamV4Smem tq2_stream_v4_smem(std::int64_t m, std::int64_t k, int stages) noexcept {
  Tq2StreamV4Smem s;
  if (m < 1 || m > kTq2V4MaxM || k < kTq2Group || k > (std::int64_t{1} << 20) || stages < 1 ||
      stages > kTq2V4MaxStages) {
    s.total = -1;  // (and every product below stays small)
    return s;
  }
  const std::int64_t groups = k / kTq2Group, cols = m * 4;  // EngineI8Masked: four digit columns a token
  const std::int64_t n_tiles = (cols + 7) / 8;
  const std::int64_t col_stride = groups * 128 + 64;          // 128-byte records, 64 bytes of padding
  // Offsets from the dynamic shared memory base rounded up to 1024 (the swizzled copies need
  // 1024-byte aligned targets; the base itself is only guaranteed 16): the mbarriers (full/empty
  // per stage and per band slot) in the first 1024 bytes, then the ring. `total` adds the 1024
  // bytes of slack the rounding may take.
  const std::int64_t bars = 1024;
  const std::int64_t ring = static_cast<std::int64_t>(stages) * kTq2V4StageBytes;
  const std::int64_t scales = kTq2V4ScaleSlots * 16 * groups * 2;  // band slots of 16 rows x k/128 f16
  const std::int64_t red = 2 * kTq2V4Consumers * 16 * 8 * n_tiles * 4;  // double-buffered per-warp partials
  const std::int64_t coef = groups * 8 * n_tiles * 8;
  const std::int64_t xs = (cols + 1) * col_stride;
  const std::int64_t total = 1024 + bars + ring + scales + red + coef + xs;
  if (total > kTq2V4SmemOptin) {
    s.total = -1;
    return s;
  }
  s.bars = 0;
  s.ring = static_cast<int>(bars);
  s.scales = static_cast<int>(bars + ring);
  s.red = static_cast<int>(bars + ring + scales);
  s.coef = static_cast<int>(bars + ring + scales + red);
  s.xs = static_cast<int>(bars + ring + scales + red + coef);
  s.total = static_cast<int>(total);
  s.col_stride = static_cast<int>(col_stride);
  return s;
}

bool tq2_stream_v4_supports(const Tq2Args& a) noexcept {
  return tq2_args_ok(a) && a.m <= kTq2V4MaxM && a.n < (std::int64_t{1} << 31) && tq2_codes_vec16(a) &&
         detail::aligned16(a.scales) && tq2_stream_v4_smem(a.m, a.k, kTq2V4MinStages).total > 0;
}

bool tq2_stream_v4_two_blocks(std::int64_t m, std::int64_t k) noexcept {
  const int full_ring = tq2_stream_v4_smem(m, k, kTq2V4MaxStages).total;
  return full_ring > 0 && full_ring <= static_cast<int>(kTq2V4SmemOptin / 2) - 1024;
}

std::optional<Tq2StreamV4Config> tq2_stream_v4_config(const Tq2Args& a, int sm_count) noexcept {
  if (!tq2_stream_v4_supports(a)) return std::nullopt;
  Tq2StreamV4Config c;
  c.n_tiles = static_cast<int>((4 * a.m + 7) / 8);
  // Two blocks per SM with the full ring where they fit (16 consumer warps hide more latency),
  // else one block with the deepest ring that fits (at most 6 stages: 48 KB in flight).
  if (tq2_stream_v4_two_blocks(a.m, a.k)) {
    c.blocks_per_sm = 2, c.stages = kTq2V4MaxStages;
  } else {
    c.blocks_per_sm = 1, c.stages = kTq2V4MinStages;
    for (int s = kTq2V4MaxStages; s > kTq2V4MinStages; --s)
      if (tq2_stream_v4_smem(a.m, a.k, s).total > 0) {
        c.stages = s;
        break;
      }
  }
  c.smem_bytes = tq2_stream_v4_smem(a.m, a.k, c.stages).total;
  c.stage_in_block = tq2_stream_in_block(a.m, 1, a.stream_image);
  const std::int64_t sms = sm_count > 0 ? sm_count : 132;
  const std::int64_t bands = (a.n + 15) / 16;
  const std::int64_t slots = sms * c.blocks_per_sm;
  c.grid = static_cast<int>(bands < slots ? bands : slots);
  return c;
}

std::size_t tq2_stream_v4_stage_bytes(std::int64_t m, std::int64_t k) noexcept {
  const Tq2StreamV4Smem s = tq2_stream_v4_smem(m, k, kTq2V4MinStages);
  if (s.total < 0) return 0;
  return static_cast<std::size_t>(s.xs - s.coef) + static_cast<std::size_t>(4 * m + 1) * static_cast<std::size_t>(s.col_stride);
}

bool tq2_stream_in_block(std::int64_t m, int parts, Tq2StreamImage image) noexcept {
  return image == Tq2StreamImage::InBlock && parts == 1 && m <= kTq2StreamInBlockMaxM;
}

std::string tq2_stream_image_refusal(const Tq2Args& a, bool v5) {
  if (a.stream_image != Tq2StreamImage::InBlock) return {};
  if (a.m > kTq2StreamInBlockMaxM)
    return "stream_image in_block is built for m <= " + std::to_string(kTq2StreamInBlockMaxM) + ", got m " + std::to_string(a.m);
  const int parts = v5 && a.n >= 1 && a.k >= kTq2Group ? tq2_stream_v5_parts_for(a.m, a.n, a.k).parts : 1;
  if (parts == 1) return {};
  return "stream_image in_block needs K whole in every item, but n " + std::to_string(a.n) + ", k " + std::to_string(a.k) +
         " cut K into " + std::to_string(parts) + " parts (their counters need the staging kernel)";
}

std::string tq2_stream_v4_stage_kernel_name(const Tq2Args& a) {
  if (!tq2_stream_v4_supports(a)) return {};
  if (tq2_stream_in_block(a.m, 1, a.stream_image)) return {};
  return "tq2_stage_v4_" + dname(a.in_dtype) + "_i8x4";
}

std::string tq2_stream_v4_kernel_name(const Tq2Args& a, int sm_count) {
  const auto c = tq2_stream_v4_config(a, sm_count);
  if (!c) return {};
  return prefix("tq2_stream_v4", a) + "_i8x4_n" + std::to_string(8 * c->n_tiles) + "_s" + std::to_string(c->stages) + "_b" +
         std::to_string(c->blocks_per_sm) + (c->stage_in_block ? "_inblock" : "");
}

namespace {
// K's groups cut into about p parts of a multiple of kTq2V5StageGroups groups, as even as possible.
Tq2StreamV5Parts even_v5_parts(std::int64_t groups, std::int64_t p) noexcept {
  constexpr std::int64_t G = kTq2V5StageGroups;
  const std::int64_t pg = G * ((groups + G * p - 1) / (G * p));
  return {static_cast<int>((groups + pg - 1) / pg), static_cast<int>(pg)};
}
}  // namespace

Tq2StreamV5Parts tq2_stream_v5_parts(std::int64_t n, std::int64_t k, std::int64_t target) noexcept {
  const std::int64_t supers = (n + kTq2V5Rows - 1) / kTq2V5Rows, groups = k / kTq2Group;
  for (std::int64_t p = 1;; ++p) {
    const Tq2StreamV5Parts e = even_v5_parts(groups, p);
    if (supers * e.parts >= target || e.part_groups == kTq2V5StageGroups) return e;
  }
}

Tq2StreamV5Parts tq2_stream_v5_parts_for(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  const Tq2StreamV5Parts narrow = tq2_stream_v5_parts(n, k);
  const std::int64_t groups = k / kTq2Group;
  if (groups < 1 || m < 1) return narrow;
  if (m <= kTq2V5NarrowMaxM) {
    // Where neither the whole image nor narrow's slice fits at m (long K at m up to 8: Llama-70B
    // up at m >= 6, down at m >= 7), the fewest parts, at least 2 and at least narrow's, whose
    // slice at m = 8 fits beside 2 stages: a function of n and k on that range of m (whole and
    // slice both need more room as m grows, so the range is m0..8).
    if (tq2_stream_v5_smem(m, k, kTq2V5MinStages).total > 0 ||
        (narrow.parts > 1 && tq2_stream_v5_smem(m, k, kTq2V5MinStages, narrow.part_groups).total > 0))
      return narrow;
    for (std::int64_t p = narrow.parts > 2 ? narrow.parts : 2;; ++p) {
      const Tq2StreamV5Parts e = even_v5_parts(groups, p);
      if (e.part_groups <= kTq2V5StageGroups ||
          tq2_stream_v5_smem(kTq2V5NarrowMaxM, k, kTq2V5MinStages, e.part_groups).total > 0)
        return e;
    }
  }
  for (std::int64_t p = narrow.parts;; ++p) {
    Tq2StreamV5Parts e = even_v5_parts(groups, p);
    if (e.parts == 1) e.part_groups = static_cast<int>(groups);  // one part: the slice is all of K (< 4 groups too)
    if (e.part_groups <= kTq2V5StageGroups || tq2_stream_v5_smem(kTq2V5MaxM, k, kTq2V5WideStages, e.part_groups).total > 0)
      return e;
  }
}

int tq2_stream_v5_n_tiles(std::int64_t m) noexcept {
  if (m <= kTq2V5NarrowMaxM) return static_cast<int>((4 * m + 7) / 8);
  return m <= 12 ? 6 : 8;
}

Tq2StreamV5Smem tq2_stream_v5_smem(std::int64_t m, std::int64_t k, int stages, int image_groups) noexcept {
  Tq2StreamV5Smem s;
  if (m < 1 || m > kTq2V5MaxM || k < kTq2Group || k > (std::int64_t{1} << 20) || stages < kTq2V5MinStages ||
      stages > kTq2V5MaxStages || image_groups < 0 || image_groups > k / kTq2Group) {
    s.total = -1;
    return s;
  }
  const std::int64_t groups = image_groups > 0 ? image_groups : k / kTq2Group, cols = m * 4, n_tiles = tq2_stream_v5_n_tiles(m);
  const std::int64_t col_stride = groups * 128 + 64;  // v4's image: 128-byte records, 64 bytes of padding
  const std::int64_t ring = 1024;                     // after the mbarriers
  const std::int64_t coef = ring + static_cast<std::int64_t>(stages) * kTq2V5StageBytes;
  const std::int64_t xs = coef + groups * 8 * n_tiles * 8;
  const std::int64_t total = 1024 + xs + (cols + 1) * col_stride;
  if (total > kTq2V4SmemOptin) {
    s.total = -1;
    return s;
  }
  s.ring = static_cast<int>(ring), s.coef = static_cast<int>(coef), s.xs = static_cast<int>(xs);
  s.total = static_cast<int>(total), s.col_stride = static_cast<int>(col_stride);
  return s;
}

Tq2StreamV5ImagePlan tq2_stream_v5_image_plan(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  Tq2StreamV5ImagePlan ip;
  if (n < 1 || m < 1 || m > kTq2V5MaxM || k < kTq2Group || k > (std::int64_t{1} << 20)) return ip;
  if (m > kTq2V5NarrowMaxM) {  // wide: always a slice, even of one part
    const Tq2StreamV5Parts parts = tq2_stream_v5_parts_for(m, n, k);
    if (tq2_stream_v5_smem(m, k, kTq2V5MinStages, parts.part_groups).total > 0) ip.sliced = true, ip.image_groups = parts.part_groups;
    return ip;
  }
  if (tq2_stream_v5_smem(m, k, kTq2V5MinStages).total > 0) {
    ip.image_groups = static_cast<int>(k / kTq2Group);
    return ip;
  }
  const Tq2StreamV5Parts parts = tq2_stream_v5_parts_for(m, n, k);  // narrow's, or more where its slice does not fit
  if (m <= kTq2V5SlicedMaxM && parts.parts > 1 && tq2_stream_v5_smem(m, k, kTq2V5MinStages, parts.part_groups).total > 0)
    ip.sliced = true, ip.image_groups = parts.part_groups;
  return ip;
}

std::int64_t tq2_stream_v5_image_bytes(std::int64_t m, std::int64_t k, int image_groups) noexcept {
  const Tq2StreamV5Smem s = tq2_stream_v5_smem(m, k, kTq2V5MinStages, image_groups);
  if (s.total < 0) return 0;
  return static_cast<std::int64_t>(s.xs - s.coef) + (4 * m + 1) * static_cast<std::int64_t>(s.col_stride);
}

bool tq2_stream_v5_supports(const Tq2Args& a) noexcept {
  return tq2_args_ok(a) && a.m <= kTq2V5MaxM && a.n < (std::int64_t{1} << 31) && tq2_codes_vec16(a) && a.scales_t &&
         detail::aligned16(a.scales_t) && a.scales_t_ld >= a.n && a.scales_t_ld % 8 == 0 &&
         tq2_stream_v5_image_plan(a.m, a.n, a.k).image_groups > 0;
}

std::optional<Tq2StreamV5Config> tq2_stream_v5_config(const Tq2Args& a, int sm_count) noexcept {
  if (!tq2_stream_v5_supports(a)) return std::nullopt;
  Tq2StreamV5Config c;
  c.n_tiles = tq2_stream_v5_n_tiles(a.m);
  const Tq2StreamV5ImagePlan ip = tq2_stream_v5_image_plan(a.m, a.n, a.k);
  const int ig = ip.sliced ? ip.image_groups : 0;
  c.sliced = ip.sliced;
  // Two blocks per SM with the deepest ring that fits in half the SM, else one block.
  const int half = static_cast<int>(kTq2V4SmemOptin / 2) - 1024;
  // Registers: two 288-thread blocks fit an SM at <= 96 a thread (18 warps put 5 on one of the
  // four schedulers' 16 K registers: <= 102, allocated in 8s). ptxas (session 18, warp pairs at
  // NT <= 4, NT <= 3 capped at 96 in tq2_ring_sm90.cuh): NT 1 83-92, NT 2 90-95, NT 3 96; NT 4
  // 141 (whole) / 157 (sliced), NT 6 / 8 141 / 168: those run one block (NT 3 sliced too).
  // (Session 15 said 112 here: NT 4 whole then planned two blocks of which one fit;
  // Tq2Gpu.StreamV5ConfigBlocksFit asks the occupancy API.)
  const bool two_fit = c.n_tiles <= 2 || (c.n_tiles == 3 && !ip.sliced);
  c.blocks_per_sm = two_fit && tq2_stream_v5_smem(a.m, a.k, kTq2V5MinStages, ig).total <= half ? 2 : 1;
  const int limit = c.blocks_per_sm == 2 ? half : static_cast<int>(kTq2V4SmemOptin);
  c.stages = kTq2V5MinStages;
  for (int s = kTq2V5MaxStages; s > kTq2V5MinStages; --s) {
    const int t = tq2_stream_v5_smem(a.m, a.k, s, ig).total;
    if (t > 0 && t <= limit) {
      c.stages = s;
      break;
    }
  }
  c.smem_bytes = tq2_stream_v5_smem(a.m, a.k, c.stages, ig).total;
  c.parts = tq2_stream_v5_parts_for(a.m, a.n, a.k);
  c.items = (a.n + kTq2V5Rows - 1) / kTq2V5Rows * c.parts.parts;
  c.stage_in_block = tq2_stream_in_block(a.m, c.parts.parts, a.stream_image);
  const std::int64_t slots = static_cast<std::int64_t>(sm_count > 0 ? sm_count : 132) * c.blocks_per_sm;
  c.grid = static_cast<int>(c.items < slots ? c.items : slots);
  return c;
}

std::size_t tq2_stream_v5_workspace_bytes(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  if (n < 1 || n >= (std::int64_t{1} << 31)) return 0;
  const Tq2StreamV5ImagePlan ip = tq2_stream_v5_image_plan(m, n, k);
  if (ip.image_groups == 0) return 0;
  auto r16 = [](std::int64_t b) { return (b + 15) / 16 * 16; };
  const Tq2StreamV5Parts p = tq2_stream_v5_parts_for(m, n, k);
  // Sliced: one slice a part (each a multiple of 16 bytes: bulk-copy sources stay aligned).
  const std::int64_t image = tq2_stream_v5_image_bytes(m, k, ip.image_groups) * (ip.sliced ? p.parts : 1);
  const std::int64_t counters = r16((n + 15) / 16 * 4);
  const std::int64_t partials = p.parts > 1 ? static_cast<std::int64_t>(p.parts) * m * n * 4 : 0;
  return static_cast<std::size_t>(r16(image) + counters + partials);
}

std::string tq2_stream_v5_stage_kernel_name(const Tq2Args& a) {
  if (!tq2_stream_v5_supports(a)) return {};
  if (tq2_stream_in_block(a.m, tq2_stream_v5_parts_for(a.m, a.n, a.k).parts, a.stream_image)) return {};
  return "tq2_stage_v5_" + dname(a.in_dtype) + "_i8x4";
}

std::string tq2_stream_v5_kernel_name(const Tq2Args& a, int sm_count) {
  const auto c = tq2_stream_v5_config(a, sm_count);
  if (!c) return {};
  return prefix("tq2_stream_v5", a) + "_i8x4_n" + std::to_string(8 * c->n_tiles) + "_s" + std::to_string(c->stages) + "_b" +
         std::to_string(c->blocks_per_sm) + "_p" + std::to_string(c->parts.parts) +
         (c->sliced ? "_sliced" : c->stage_in_block ? "_inblock" : "");
}

int tq2_tiled_smem_bytes(DType in_dtype, int splits) noexcept {
  constexpr int BM = kTq2TiledBM, BN = kTq2TiledBN, BK = kTq2TiledBK, S = kTq2TiledStages;
  constexpr int LD16 = BK + 8;                 // padded 16-bit rows (ldmatrix without conflicts)
  const int codes = S * BN * (BK / 4);         // code bytes ring
  const int b16 = BN * LD16 * 2;               // decoded weight tile
  if (in_dtype == DType::F32) {
    const int raw = S * BM * BK * 4;           // f32 input ring
    const int a16 = splits * BM * LD16 * 2;    // converted hi (+ lo) tiles
    return raw + codes + a16 + b16;
  }
  return S * BM * LD16 * 2 + codes + b16;      // 16-bit input ring read directly
}

bool tq2_tiled_supports(const Tq2Args& a) noexcept { return tq2_args_ok(a); }

std::string tq2_tiled_kernel_name(const Tq2Args& a) {
  if (!tq2_tiled_supports(a)) return {};
  return prefix("tq2_tiled", a) + "_" + math_name(a.in_dtype, tq2_tiled_splits(a));
}

}  // namespace llmm::cuda_ternary
