#include "core/ternary/tq2_moe_stream_plan.hpp"

#include <algorithm>

#include "core/moe/matmul_id_checks.hpp"

namespace llmm::cuda_ternary {
namespace {

constexpr std::int64_t kMaxRouted = 65536;                          // a decode route
constexpr std::int64_t kMaxStackRows = (std::int64_t{1} << 30) - 128;  // tensor-map coordinates stay in int32
std::int64_t r16(std::int64_t b) { return (b + 15) / 16 * 16; }
// n_experts * n (rounded up to 8) <= kMaxStackRows, without overflow for any u32 sizes.
bool stack_fits(std::int64_t n, std::int64_t n_experts) {
  return n >= 1 && n_experts >= 1 && (n + 7) / 8 * 8 <= kMaxStackRows / n_experts;
}

}  // namespace

Tq2MoeStreamRows tq2_moe_stream_block_rows(const Tq2MoeStreamConfig& c, std::int64_t top_k, bool slotted, int block) noexcept {
  const std::int64_t i0 = c.items * block / c.grid, i1 = c.items * (block + 1) / c.grid;
  if (i1 <= i0) return {};
  const std::int64_t per_row = c.bands * c.parts.parts;
  std::int64_t first = i0 / per_row, last = (i1 - 1) / per_row;  // routed rows
  if (!slotted) first /= top_k, last /= top_k;                   // a token's slots share its row
  return {first, last - first + 1};
}

std::optional<Tq2MoeStreamConfig> tq2_moe_stream_config(std::int64_t m, std::int64_t top_k, std::int64_t n, std::int64_t k,
                                                        std::int64_t n_experts, bool slotted, int sm_count) noexcept {
  if (m < 1 || top_k < 1 || n < 1 || n_experts < 1 || k < kTq2Group || k % kTq2Group != 0 || k > (std::int64_t{1} << 20))
    return std::nullopt;
  if (m > kMaxRouted || top_k > kMaxRouted || m * top_k > kMaxRouted || !stack_fits(n, n_experts)) return std::nullopt;
  Tq2MoeStreamConfig c;
  const std::int64_t groups = k / kTq2Group;
  c.routed = m * top_k;
  c.bands = (n + kTq2V5Rows - 1) / kTq2V5Rows;
  c.parts = tq2_stream_v5_parts(c.bands * kTq2V5Rows * top_k, k, kTq2MoeStreamTargetItems);  // n, k and top_k: not m
  c.items = c.routed * c.bands * c.parts.parts;
  c.image_rows = slotted ? c.routed : m;
  c.col_stride = static_cast<int>(groups * 128 + 64);  // v4/v5's record columns
  c.row_bytes = static_cast<int>(groups * 8 * 8 + 5 * static_cast<std::int64_t>(c.col_stride));
  c.image_smem = 1024;  // after the mbarriers; the ring goes first, the rows after it
  const std::int64_t sms = sm_count > 0 ? std::min(sm_count, 1 << 16) : 132;
  const std::int64_t per_row = c.bands * c.parts.parts;
  const int half = static_cast<int>(kTq2V4SmemOptin / 2) - 1024;
  for (int bps = 2; bps >= 1; --bps) {
    // Items for at most one block an SM: one block an SM, with the deeper ring. Two that may fit
    // let the block scheduler pair blocks on an SM while others idle (session 16: gate_up m = 1,
    // 96 blocks, ran 6.94 us while its 98 registers kept one block an SM, 8.26 at 96 registers).
    if (bps == 2 && c.items <= sms) continue;
    c.blocks_per_sm = bps;
    c.grid = static_cast<int>(std::min<std::int64_t>(c.items, sms * bps));
    // A block's items span at most (ipb - 1) / per_row + 2 routed rows (ipb: its most items), and
    // those at most (span - 1) / top_k + 2 tokens; never more rows than there are.
    const std::int64_t ipb = (c.items + c.grid - 1) / c.grid, span = std::min(c.routed, (ipb - 1) / per_row + 2);
    const std::int64_t cap = slotted ? span : std::min(m, (span - 1) / top_k + 2);
    c.rows_cap = static_cast<int>(cap);
    const std::int64_t limit = bps == 2 ? half : kTq2V4SmemOptin;
    auto total = [&](int stages) { return 1024 + 1024 + std::int64_t{stages} * kTq2V5StageBytes + cap * c.row_bytes; };
    if (total(kTq2V5MinStages) > limit) continue;
    c.stages = kTq2V5MinStages;
    for (int s = kTq2V5MaxStages; s > kTq2V5MinStages; --s)
      if (total(s) <= limit) {
        c.stages = s;
        break;
      }
    c.image_smem = 1024 + c.stages * kTq2V5StageBytes;
    c.overlap = c.grid <= sms;
    c.smem_bytes = static_cast<int>(total(c.stages));
    // In the block where it measured faster (session 11, A/B in one run on the H200, Qwen3-30B
    // f16): K whole and either one conversion item a consumer warp per row (k <= 1024: down,
    // k 768, 5-9% faster at m = 1..16) or at least 4 items a block to amortize it over (gate_up,
    // k 2048, m = 16: 3.6% faster). gate_up at m = 1 and 4 (one or two items a block, two
    // conversions a warp on the consumers' path) ran 2.7-3.5% slower in the block: staged there.
    const std::int64_t items_per_block = (c.items + c.grid - 1) / c.grid;
    c.stage_in_block = c.parts.parts == 1 && (groups <= kTq2V5Consumers || items_per_block >= 4);
    if (c.stage_in_block) return c;  // no workspace
    const std::int64_t image = c.image_rows * c.row_bytes;  // a multiple of 16
    c.counters_off = static_cast<std::size_t>(image);
    const std::int64_t counters = c.parts.parts > 1 ? r16(c.routed * ((n + 15) / 16) * 4) : 0;
    c.partials_off = static_cast<std::size_t>(image + counters);
    const std::int64_t partials = c.parts.parts > 1 ? std::int64_t{c.parts.parts} * c.routed * n * 4 : 0;
    c.workspace_bytes = static_cast<std::size_t>(image + counters + partials);
    return c;
  }
  return std::nullopt;
}

std::string tq2_moe_stream_refusal(const MatmulIdParams& p, const ArchInfo& arch) {
  if (!(arch.kind == DeviceKind::CUDA && arch.cc_major == 9 && arch.cc_minor == 0))
    return "the sm_90 streaming engine is built for sm_90a only";
  if (p.input_dtype != DType::F32 && p.input_dtype != DType::F16 && p.input_dtype != DType::BF16)
    return "needs an f32, f16 or bf16 input";
  if (p.output_dtype != DType::F32 && p.output_dtype != p.input_dtype) return "needs an f32 or input-dtype output";
  if (p.k < kTq2Group || p.k % kTq2Group != 0) return "needs k a positive multiple of 128";
  if (p.n < 1) return "needs n >= 1";
  if (p.n_experts < 1) return "needs at least one expert";
  if (static_cast<std::uint64_t>(p.m) * p.top_k > static_cast<std::uint64_t>(kMaxRouted))
    return "takes at most 65536 routed rows (m x top_k): a decode route";
  if (!stack_fits(p.n, p.n_experts))
    return "needs n_experts * n (rounded up to 8) <= 2^30 - 128";
  const bool slotted = detail::matmul_id_input_strides(p).slot != 0;
  if (!tq2_moe_stream_config(p.m, p.top_k, p.n, p.k, p.n_experts, slotted, arch.sm_count))
    return "the activation rows a block needs do not fit in shared memory (k " + std::to_string(p.k) + ")";
  return "";
}

std::string tq2_moe_stream_stage_kernel_name(DType in) { return "tq2_moe_stage_" + std::string(dtype_name(in)) + "_i8x4"; }

std::string tq2_moe_stream_kernel_name(const Tq2MoeStreamConfig& c, DType in, DType out) {
  return "tq2_moe_stream_sm90_" + std::string(dtype_name(in)) + "_" + std::string(dtype_name(out)) + "_i8x4_s" +
         std::to_string(c.stages) + "_b" + std::to_string(c.blocks_per_sm) + "_p" + std::to_string(c.parts.parts) +
         (c.overlap ? "_ilp" : "") + (c.stage_in_block ? "_inblock" : "");
}

}  // namespace llmm::cuda_ternary
