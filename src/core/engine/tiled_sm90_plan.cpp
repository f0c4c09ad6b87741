#include "core/engine/tiled_sm90_plan.hpp"

#include <algorithm>

#include "core/vec16.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"

namespace llmm::engine {
namespace {

constexpr int kDefaultSms = 132;
constexpr std::int64_t kMaxTiles = 0x7fffffff;
constexpr std::int64_t kMaxTq2Rows = (std::int64_t{1} << 30) - 128;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }

int smem_for(int bn, int extra) { return tiled_sm90_shape(bn).fixed_smem_bytes() + extra; }

bool is16(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace

bool tiled_sm90_arch_ok(const ArchInfo& arch) noexcept {
  return arch.kind == DeviceKind::CUDA && arch.cc_major == 9 && arch.cc_minor == 0;
}

std::string tiled_sm90_dense_refusal(const MatmulDesc& d, const ArchInfo& arch) {
  if (!tiled_sm90_arch_ok(arch)) return "the Hopper tiled engine is built for sm_90a only";
  if (!is16(d.dtype) && d.dtype != DType::F32) return "needs f16, bf16 or f32";
  if (d.dtype == DType::F32 && d.precision != Precision::Exact)
    return "f32 runs as 3xTF32 (Precision::Exact) only; Fast f32 takes cuBLASLt's TF32";
  if (d.transpose_a || !d.transpose_b) return "needs x[M, K] . w[N, K]^T (transpose_b, not transpose_a)";
  if (!d.a_vec16 || !d.b_vec16) return "needs 16-byte aligned pointers and strides";
  if (!d.batches_disjoint) return "needs batched inputs whose batch entries do not overlap";
  if (d.k < 1) return "needs k >= 1";
  // The kernel's sizes, tile coordinates and TMA coordinates are ints, a tile's last row or
  // k-block up to 127 past a size.
  constexpr std::int64_t kMaxSize = kMaxTiles - 128;
  if (d.m > kMaxSize || d.n > kMaxSize || d.k > kMaxSize || d.batch > kMaxSize)
    return "needs m, n, k and batch at most 2^31 - 129";
  const std::int64_t tok_tiles = ceil_div(d.m, 64), feat_tiles = ceil_div(d.n, kTiledBM);  // at the narrowest tile
  if (tok_tiles > kMaxTiles || feat_tiles > kMaxTiles || (d.batch > 0 && tok_tiles * feat_tiles > kMaxTiles / d.batch))
    return "more than 2^31 - 1 tiles";
  return "";
}

namespace {

// The launch at tile width bn and bm weight rows: its tiles, the grid (the SMs, or fewer
// tiles), the 16-bit ring (tall: tiled_sm90_tall_shape).
TiledSm90Launch launch_at(std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count, int bn, int bm = kTiledBM) {
  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSms;
  TiledSm90Launch l;
  l.bn = bn, l.bm = bm;
  l.tiles = batch * ceil_div(m, bn) * ceil_div(n, bm);
  l.smem_bytes = bm == kTiledTallBM ? tiled_sm90_tall_shape(bn).fixed_smem_bytes() : smem_for(bn, 0);
  l.grid = static_cast<int>(std::max<std::int64_t>(1, std::min(l.tiles, sms)));
  return l;
}

struct Tile {
  int bn = 0, bm = kTiledBM;
  std::int64_t cost = -1;  // waves x a stage's cost, -1: none yet
};

// Of `widths` at bm rows, the tile with the fewest waves x per-stage cost, a stage costing
// `bn x bm / 128 + fixed` (fixed: the part of a stage that does not scale with the tokens, in
// 128-row token columns), if cheaper than `best` (widest first: the first of equal cost wins).
template <std::size_t N>
Tile pick_width(std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count, std::int64_t fixed, const int (&widths)[N],
                int bm = kTiledBM, Tile best = {}) {
  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSms;
  for (int bn : widths) {
    const std::int64_t tiles = batch * ceil_div(m, bn) * ceil_div(n, bm);
    const std::int64_t cost = ceil_div(tiles, sms) * (bn * (bm / kTiledBM) + fixed);
    if (best.cost < 0 || cost < best.cost) best = Tile{bn, bm, cost};
  }
  return best;
}

template <std::size_t N>
bool has(const int (&widths)[N], int bn) {
  return std::find(std::begin(widths), std::end(widths), bn) != std::end(widths);
}

}  // namespace

TiledSm90Launch tiled_sm90_dense_launch(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count) {
  if (dtype == DType::F32)
    return tiled_sm90_dense_launch_at(dtype, batch, m, n, sm_count, pick_width(batch, m, n, sm_count, 32, kTiledF32Widths).bn);
  const Tile wide = pick_width(batch, m, n, sm_count, 32, kTiledDenseWidths);
  const Tile t = pick_width(batch, m, n, sm_count, 32, kTiledTallWidths, kTiledTallBM, wide);
  return tiled_sm90_dense_launch_at(dtype, batch, m, n, sm_count, t.bn, t.bm);
}

TiledSm90Launch tiled_sm90_dense_launch_at(DType dtype, std::int64_t batch, std::int64_t m, std::int64_t n, int sm_count,
                                           int bn, int bm) {
  const bool f32 = dtype == DType::F32;
  const bool known = bm == kTiledBM ? (f32 ? has(kTiledF32Widths, bn) : has(kTiledDenseWidths, bn))
                                    : bm == kTiledTallBM && !f32 && has(kTiledTallWidths, bn);
  if (!known)
    fail(ErrorCode::InvalidArgument, "tiled_sm90_dense_launch_at: no ", dtype_name(dtype), " instance with bn ", bn, " and bm ", bm);
  TiledSm90Launch l = launch_at(batch, m, n, sm_count, bn, bm);
  if (f32) l.smem_bytes = tiled_sm90_f32_shape(bn).fixed_smem_bytes();
  return l;
}

bool tiled_sm90_dense_f32_preferred(const MatmulDesc& d, const ArchInfo& arch) {
  if (d.dtype != DType::F32 || d.precision != Precision::Exact || !tiled_sm90_dense_refusal(d, arch).empty()) return false;
  const std::int64_t sms = arch.sm_count > 0 ? arch.sm_count : kDefaultSms;
  return 2 * tiled_sm90_dense_launch(d.dtype, d.batch, d.m, d.n, arch.sm_count).tiles >= sms;
}

std::string tiled_sm90_dense_kernel_name(DType dtype, int bn, int bm) {
  const std::string dt = dtype == DType::F32 ? "f32_3xtf32" : std::string(dtype_name(dtype));
  return "tiled_sm90_dense_" + dt + (bm == kTiledBM ? "" : "_bm" + std::to_string(bm)) + "_bn" + std::to_string(bn);
}

TiledSm90Launch tiled_sm90_dense_w8a8_launch(std::int64_t m, std::int64_t n, int sm_count) {
  TiledSm90Launch l = launch_at(1, m, n, sm_count, 128);
  l.smem_bytes = tiled_sm90_w8a8_shape(128).fixed_smem_bytes();
  l.w8a8 = true;
  return l;
}

std::string tiled_sm90_dense_w8a8_kernel_name(DType out) {
  return "tiled_sm90_dense_w8a8_" + std::string(dtype_name(out)) + "_bn128";
}

std::string tiled_sm90_moe_refusal(const cuda_moe::MoeArgs& g, const ArchInfo& arch) {
  if (!tiled_sm90_arch_ok(arch)) return "the Hopper tiled engine is built for sm_90a only";
  const bool fp8 = g.w_dtype == DType::F8E4M3;
  if (fp8) {
    // The codes are scaled into bf16 boxes: an f16 input would need them in f16, whose range a
    // code times its scale can leave (moe_grouped stages both in bf16 instead).
    if (g.in_dtype != DType::BF16) return "needs a bf16 input with FP8 weights";
    if (!g.w_scales || g.w_scale_kind < 0 || g.w_scale_kind > 2) return "needs the FP8 weights' scales";
    if (g.k < 1 || g.k % 16 != 0) return "needs k a multiple of 16 with FP8 weights (16-byte code rows)";
    if (g.expert_stride % 16 != 0) return "needs an expert stride a multiple of 16 codes";
  } else {
    if (!is16(g.w_dtype) || g.in_dtype != g.w_dtype) return "needs f16 or bf16 weights and an input of the same dtype";
    if (g.k < 1 || g.k % 8 != 0) return "needs k a multiple of 8";
  }
  if (g.out_dtype != DType::F32 && g.out_dtype != g.in_dtype) return "needs an f32 or input-dtype output";
  if (g.n < 1 || g.n > 0x7fffffff || g.k > 0x7fffffff) return "needs 1 <= n, k < 2^31";
  if (g.n_experts < 1 || g.n_experts > 1024) return "needs 1..1024 experts";
  if (!detail::aligned16(g.w) || g.expert_stride % 8 != 0) return "needs 16-byte aligned weights and expert stride";
  if (!detail::aligned16(g.in) || g.in_token_stride % 8 != 0 || g.in_slot_stride % 8 != 0)
    return "needs a 16-byte aligned input and input strides";
  if (!g.counts || !g.rows) return "needs the grouped route's scratch";
  const std::int64_t routed = g.m * g.top_k;
  // The kernel keeps row positions and TMA row coordinates in 32-bit ints.
  if (routed > kMaxTiles) return "more than 2^31 - 1 routed rows";
  const std::int64_t row_tiles = ceil_div(routed, 64) + g.n_experts;
  if (row_tiles > kMaxTiles / ceil_div(g.n, kTiledBM)) return "more than 2^31 tiles";
  return "";
}

TiledSm90Launch tiled_sm90_moe_launch(const cuda_moe::MoeArgs& g, int sm_count) {
  const std::int64_t routed = g.m * g.top_k;
  const std::int64_t active = std::max<std::int64_t>(1, std::min<std::int64_t>(g.n_experts, routed));
  TiledSm90Launch l;
  l.bn = 256;  // wide tiles; the kernel gives an expert with few rows narrow tiles of kTiledNarrowBN
  l.tiles = (ceil_div(routed, kTiledNarrowBN) + std::min<std::int64_t>(g.n_experts, active)) * ceil_div(g.n, kTiledBM);
  const int extra = tiled_sm90_moe_extra_bytes(l.bn, static_cast<int>(g.n_experts));
  l.smem_bytes = g.w_dtype == DType::F8E4M3 ? tiled_sm90_fp8_shape(l.bn).fixed_smem_bytes() + extra : smem_for(l.bn, extra);
  l.grid = sm_count > 0 ? sm_count : kDefaultSms;
  l.staged = g.staged != nullptr && g.staged_bytes / (g.k * 2) >= routed;
  l.pdl = routed <= kTiledMoePdlMaxRows;
  return l;
}

std::string tiled_sm90_moe_fused_refusal(const cuda_moe::MoeArgs& g) {
  if (g.w_dtype == DType::F8E4M3) return "FP8 weights run on staged rows only";
  if (g.m * g.top_k > kTiledMoeFusedMaxRows)
    return "more than " + std::to_string(kTiledMoeFusedMaxRows) + " routed rows (m * top_k = " + std::to_string(g.m * g.top_k) +
           ")";
  // Its input rows come by TMA boxes of a 3D map over the input (fused_rows_map): map strides
  // below 2^40 bytes (a span no allocation reaches; checked all the same).
  constexpr std::int64_t kMapStride = std::int64_t{1} << 39;  // elements of 2 bytes
  if ((g.top_k > 1 && g.in_slot_stride >= kMapStride) || (g.m > 1 && g.in_token_stride >= kMapStride))
    return "an input stride of 2^40 bytes or more (token " + std::to_string(g.in_token_stride) + ", slot " +
           std::to_string(g.in_slot_stride) + " elements)";
  // The kernel zeroes an out-of-range row as n * (output size) / 2 16-bit words in an int.
  if (g.n * static_cast<std::int64_t>(dtype_size(g.out_dtype)) / 2 > kMaxTiles)
    return "an output row of more than 2^31 - 1 16-bit words (n " + std::to_string(g.n) + ", " +
           std::string(dtype_name(g.out_dtype)) + ")";
  return "";
}

bool tiled_sm90_moe_fused_preferred(const cuda_moe::MoeArgs& g) {
  return g.m <= kTiledMoeFusedAutoMaxTokens && tiled_sm90_moe_fused_refusal(g).empty();
}

TiledSm90Launch tiled_sm90_moe_fused_launch(const cuda_moe::MoeArgs& g, int sm_count) {
  if (const std::string why = tiled_sm90_moe_fused_refusal(g); !why.empty())
    fail(ErrorCode::Internal, "tiled_sm90_moe_fused_launch: ", why);
  TiledSm90Launch l = tiled_sm90_moe_launch(g, sm_count);
  l.smem_bytes = smem_for(l.bn, tiled_sm90_moe_fused_extra_bytes(l.bn, static_cast<int>(g.n_experts), static_cast<int>(g.m * g.top_k)));
  l.staged = false, l.pdl = false, l.fused = true;
  return l;
}

std::string tiled_sm90_moe_kernel_name(const cuda_moe::MoeArgs& g, const TiledSm90Launch& l) {
  return "tiled_sm90_moe_" + std::string(dtype_name(g.w_dtype)) + "_" + std::string(dtype_name(g.in_dtype)) + "_" +
         std::string(dtype_name(g.out_dtype)) + "_bn" + std::to_string(l.bn) + "x" + std::to_string(kTiledNarrowBN) +
         (l.fused ? "_fused" : l.staged ? "_staged" : "") + (g.out_sorted ? "_sorted" : "");
}

std::string tiled_sm90_tq2_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out, bool exact,
                                   const ArchInfo& arch) {
  if (!tiled_sm90_arch_ok(arch)) return "the Hopper tiled engine is built for sm_90a only";
  return tiled_sm90_tq2_shape_refusal(m, n, k, in, out, exact);
}

std::string tiled_sm90_tq2_shape_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out,
                                         bool exact) {
  if (!is_float(in)) return "needs an f32, f16 or bf16 input";
  if (in == DType::F32 && exact) return "f32 Exact is not on the engine yet (it needs the activation's second f16 part)";
  if (out != DType::F32 && out != in) return "needs an f32 or input-dtype output";
  if (k < 128 || k % 128 != 0) return "needs k a positive multiple of 128";
  if (m < 1 || n < 1 || n > kMaxTiles || k > kMaxTiles || m > kMaxTiles) return "needs 1 <= m, n, k < 2^31";
  if (n > kMaxTq2Rows) return "needs n <= 2^30 - 128 (the scale copy addresses a row's scales by byte offset)";
  if (ceil_div(m, 64) > kMaxTiles / ceil_div(n, kTiledBM)) return "more than 2^31 - 1 tiles";
  return "";
}

TiledSm90Launch tiled_sm90_tq2_launch(std::int64_t m, std::int64_t n, int sm_count) {
  // Measured on the H200 (docs/performance.md, "Ternary prefill on the engine", v8): a stage
  // costs ~0.39 us + 0.002 us a token column, the decode of the 128 x 64 weights being the fixed
  // part: ~192 columns' worth, which favours wide tiles more than the dense launch does.
  TiledSm90Launch l = launch_at(1, m, n, sm_count, pick_width(1, m, n, sm_count, 192, kTiledWidths3).bn);
  l.smem_bytes = tiled_sm90_tq2_shape(l.bn).fixed_smem_bytes();
  return l;
}

bool tiled_sm90_tq2_preferred(std::int64_t m, std::int64_t n, int sm_count) {
  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSms;
  const TiledSm90Launch l = tiled_sm90_tq2_launch(m, n, sm_count);
  const std::int64_t waves = ceil_div(l.tiles, sms);
  return 4 * l.tiles >= 3 * sms && 10 * l.tiles >= 8 * waves * sms;
}

std::string tiled_sm90_tq2_moe_refusal(const MatmulIdParams& p, const ArchInfo& arch) {
  if (!tiled_sm90_arch_ok(arch)) return "the Hopper tiled engine is built for sm_90a only";
  if (p.input_dtype != DType::F16 && p.input_dtype != DType::BF16)
    return "needs an f16 or bf16 input (f32 takes tq2_moe_naive: the engine would round it to f16)";
  if (p.output_dtype != DType::F32 && p.output_dtype != p.input_dtype) return "needs an f32 or input-dtype output";
  if (p.k < 128 || p.k % 128 != 0) return "needs k a positive multiple of 128";
  if (p.n < 1) return "needs n >= 1";
  if (p.n_experts < 1 || p.n_experts > 1024) return "needs 1..1024 experts";
  // In 64 bits: u32 sizes (n + 7 would wrap in 32, m * top_k overflow a signed 64-bit product).
  if (static_cast<std::int64_t>(p.n_experts) * ((static_cast<std::int64_t>(p.n) + 7) / 8 * 8) > kMaxTq2Rows)
    return "needs n_experts * n (rounded up to 8) <= 2^30 - 128 (the scale copy addresses a row's scales by byte offset)";
  const std::uint64_t routed_u = static_cast<std::uint64_t>(p.m) * p.top_k;
  if (routed_u > static_cast<std::uint64_t>(kMaxTiles)) return "more than 2^31 - 1 routed rows";
  const std::int64_t routed = static_cast<std::int64_t>(routed_u);
  const std::int64_t row_tiles = ceil_div(routed, kTiledNarrowBN) + p.n_experts;
  if (row_tiles > kMaxTiles / ceil_div(p.n, kTiledBM)) return "more than 2^31 tiles";
  return "";
}

TiledSm90Launch tiled_sm90_tq2_moe_launch(const cuda_moe::MoeArgs& g, int sm_count) {
  TiledSm90Launch l = tiled_sm90_moe_launch(g, sm_count);
  l.smem_bytes = tiled_sm90_tq2_shape(l.bn).fixed_smem_bytes() + tiled_sm90_moe_extra_bytes(l.bn, static_cast<int>(g.n_experts));
  l.staged = true;
  return l;
}

std::string tiled_sm90_tq2_moe_kernel_name(DType out) {
  return "tiled_sm90_tq2_moe_f16_" + std::string(dtype_name(out)) + "_bn256x" + std::to_string(kTiledNarrowBN) + "_staged";
}

std::string tiled_sm90_tq2_kernel_name(DType out, int bn, int parts) {
  return "tiled_sm90_tq2_f16_" + std::string(dtype_name(out)) + "_bn" + std::to_string(bn) +
         (parts > 1 ? "_k" + std::to_string(parts) : "");
}

int tiled_sm90_tq2_split_parts(std::int64_t n, std::int64_t k) {
  const std::int64_t sms = kDefaultSms;
  const std::int64_t kblocks = ceil_div(k, kTiledBK);
  std::int64_t parts = std::min<std::int64_t>({sms / ceil_div(n, kTiledBM), kblocks / 16, 16});
  if (parts < 2) return 1;
  return static_cast<int>(ceil_div(kblocks, ceil_div(kblocks, parts)));  // no empty part
}

TiledSm90Launch tiled_sm90_tq2_split_launch(std::int64_t m, std::int64_t n, std::int64_t k, int sm_count) {
  const std::int64_t sms = kDefaultSms;  // the plan's SMs; the grid's are sm_count's
  const int parts = tiled_sm90_tq2_split_parts(n, k);
  const std::int64_t kblocks = ceil_div(k, kTiledBK);
  TiledSm90Launch best;
  std::int64_t best_cost = -1;
  for (int bn : {256, 128, 64}) {  // as tiled_sm90_tq2_launch, over the units
    const std::int64_t tiles = ceil_div(m, bn) * ceil_div(n, kTiledBM);
    const std::int64_t cost = ceil_div(tiles * parts, sms) * (bn + 192);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best.bn = bn, best.tiles = tiles;
  }
  best.parts = parts;
  best.kb_per_part = static_cast<int>(ceil_div(kblocks, parts));
  best.smem_bytes = tiled_sm90_tq2_shape(best.bn).fixed_smem_bytes();
  best.grid = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(best.tiles * parts, sm_count > 0 ? sm_count : sms)));
  return best;
}

std::string tiled_sm90_tq2_split_refusal(std::int64_t m, std::int64_t n, std::int64_t k, DType in, DType out,
                                         bool exact) {
  std::string why = tiled_sm90_tq2_shape_refusal(m, n, k, in, out, exact);
  if (!why.empty()) return why;
  if (ceil_div(m, 64) * ceil_div(n, kTiledBM) > kMaxTiles / tiled_sm90_tq2_split_parts(n, k))
    return "more than 2^31 - 1 work units (tiles x K parts)";
  return "";
}

std::uint64_t tiled_sm90_tq2_split_slot_bytes(const TiledSm90Launch& l) {
  if (l.parts < 2) return 0;
  constexpr const char* kWhat = "tiled_sm90 split slots";
  const std::uint64_t units = checked_mul(to_u64(l.tiles, kWhat), to_u64(l.parts, kWhat), kWhat);
  return checked_mul(units, checked_mul(512u, to_u64(l.bn, kWhat), kWhat), kWhat);  // 2 x 64 x bn floats
}

std::uint64_t tiled_sm90_tq2_split_counter_bytes(const TiledSm90Launch& l) {
  return l.parts < 2 ? 0 : static_cast<std::uint64_t>(l.tiles) * 2u * 4u;
}

bool tiled_sm90_tq2_split_preferred(std::int64_t m, std::int64_t n, std::int64_t k, int sm_count) {
  const std::int64_t sms = sm_count > 0 ? sm_count : kDefaultSms;
  const TiledSm90Launch l = tiled_sm90_tq2_split_launch(m, n, k, sm_count);
  if (l.parts < 2 || m > kTiledSm90Tq2SplitMaxM) return false;
  const std::int64_t units = l.tiles * l.parts, waves = ceil_div(units, sms);
  return 4 * units >= 3 * sms && 10 * units >= 8 * waves * sms;
}

}  // namespace llmm::engine
