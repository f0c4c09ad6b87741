// fuzz_plan: the pure routers (plan_matmul, plan_tq2, plan_matmul_id_tq2) and tq2_workspace_bytes with any sizes
// (negative and huge too), dtypes, flags, forced routes and architectures (CPU; CUDA cc 7.0..9.0,
// any SM count). Properties come from the documented contracts in include/llmm/matmul.hpp and
// ternary.hpp and from src/core/dense/plan_matmul.cpp and src/core/ternary/gemm_tq2.cpp.
//
// tq2_workspace_bytes must also refuse what ternary.hpp says gemm_tq2 refuses (negative m,
// n < 1, k not a positive multiple of 128) for every route.
#include <algorithm>

#include "core/dense/dense_kernels.hpp"
#include "core/engine/tiled_sm90_plan.hpp"
#include "core/ternary/tq2_moe_stream_plan.hpp"
#include "fuzz_util.hpp"
#include "core/fp8/fp8_launch.hpp"
#include "llmm/fp8.hpp"
#include "llmm/matmul.hpp"
#include "llmm/ternary.hpp"
#include "llmm/ternary_moe.hpp"

using namespace llmm;
using fuzz::attempt;
using fuzz::u128;

namespace {

constexpr DenseRoute kDenseRoutes[] = {DenseRoute::Auto,     DenseRoute::Cpu,       DenseRoute::ZeroFill,
                                       DenseRoute::GemvWide, DenseRoute::CublasLt,  DenseRoute::TiledSm90};
constexpr Tq2Route kTq2Routes[] = {Tq2Route::Auto,     Tq2Route::Cpu,      Tq2Route::StreamV2,
                                   Tq2Route::StreamV4, Tq2Route::StreamV5, Tq2Route::Tiled,
                                   Tq2Route::DequantLt, Tq2Route::TiledSm90, Tq2Route::TiledSm90SplitK};

ArchInfo consume_arch(FuzzedDataProvider& in) {
  ArchInfo a;
  if (in.ConsumeBool()) return a;  // the CPU
  a.kind = DeviceKind::CUDA;
  a.name = "fuzz-gpu";
  a.cc_major = in.ConsumeIntegralInRange(7, 9);
  a.cc_minor = a.cc_major == 9 ? 0 : in.ConsumeIntegralInRange(0, 9);
  a.sm_count = in.ConsumeBool() ? in.ConsumeIntegralInRange(0, 264) : fuzz::edgy<int>(in);
  return a;
}

bool is_16bit_float(DType t) { return t == DType::F16 || t == DType::BF16; }

// ---------------------------------------------------------------------------------------------
void check_dense(FuzzedDataProvider& in) {
  MatmulDesc d;
  d.batch = fuzz::edgy<std::int64_t>(in), d.m = fuzz::edgy<std::int64_t>(in);
  d.n = fuzz::edgy<std::int64_t>(in), d.k = fuzz::edgy<std::int64_t>(in);
  d.dtype = fuzz::pick_dtype(in);
  d.transpose_a = in.ConsumeBool(), d.transpose_b = in.ConsumeBool();
  d.precision = in.ConsumeBool() ? Precision::Exact : Precision::Fast;
  d.a_vec16 = in.ConsumeBool(), d.b_vec16 = in.ConsumeBool();
  d.batches_disjoint = in.ConsumeBool();
  const ArchInfo arch = consume_arch(in);
  const DenseRoute force = in.PickValueInArray(kDenseRoutes);
  const bool cuda = arch.kind == DeviceKind::CUDA;
  const bool nonneg = d.batch >= 0 && d.m >= 0 && d.n >= 0 && d.k >= 0;
  const bool valid = nonneg && is_float(d.dtype);
  const auto desc = [&] {
    return std::string("m ") + std::to_string(d.m) + " n " + std::to_string(d.n) + " k " + std::to_string(d.k) + " batch " +
           std::to_string(d.batch) + " " + std::string(dtype_name(d.dtype)) + (cuda ? " cuda cc " : " cpu ") +
           std::to_string(arch.cc()) + " force " + route_name(force);
  };

  fuzz::Refusal why;
  auto p = attempt([&] { return plan_matmul(d, arch, force); }, &why);
  // Negative sizes are InvalidArgument, other dtypes Unsupported; Auto refuses nothing else.
  if (!nonneg) FUZZ_CHECK(!p && why.code == ErrorCode::InvalidArgument, "negative size not refused: ", desc());
  if (!valid) FUZZ_CHECK(!p, "non-float dtype planned: ", desc());
  if (!p) {
    FUZZ_CHECK(why.code == ErrorCode::Unsupported || why.code == ErrorCode::InvalidArgument, why.message);
    FUZZ_CHECK(force != DenseRoute::Auto || !valid, "Auto refused a valid problem: ", why.message, " (", desc(), ")");
    if (valid) FUZZ_CHECK(why.code == ErrorCode::Unsupported, "a forced route's refusal is Unsupported: ", why.message);
    return;
  }
  // Pure: the same answer again.
  auto again = plan_matmul(d, arch, force);
  FUZZ_CHECK(again.route == p->route && again.reason == p->reason && again.gemv_wide_vecs == p->gemv_wide_vecs &&
                 again.gemv_wide_k_lanes == p->gemv_wide_k_lanes && again.gemv_wide_grid_x == p->gemv_wide_grid_x &&
                 again.tiled_bn == p->tiled_bn && again.tiled_bm == p->tiled_bm,
             "plan_matmul is not deterministic: ", desc());
  FUZZ_CHECK(!p->reason.empty(), desc());
  const DenseRoute r = p->route;
  FUZZ_CHECK(r != DenseRoute::Auto, "a plan must name a route: ", desc());
  FUZZ_CHECK((r == DenseRoute::Cpu) == !cuda, "cpu route iff CPU arch, got ", route_name(r), ": ", desc());
  if (force != DenseRoute::Auto) FUZZ_CHECK(r == force && p->reason == "forced", "forced ", route_name(force), " gave ", route_name(r));
  // The kernels' documented gates (matmul.hpp enum comments; gemv_wide_config).
  const bool skinny_layout = !d.transpose_a && d.transpose_b && d.a_vec16 && d.b_vec16;
  if (r == DenseRoute::ZeroFill) FUZZ_CHECK(d.k == 0, desc());
  if (r == DenseRoute::GemvWide)
    FUZZ_CHECK(skinny_layout && is_float(d.dtype) && d.m >= 1 && d.m <= 16 && d.n > 1 && arch.cc_major >= 8, desc());
  if (r == DenseRoute::TiledSm90) {
    // f16/bf16, or f32 with Exact (3xTF32); the kernel's ints: sizes at most 2^31 - 129.
    const bool engine_dtype = is_16bit_float(d.dtype) || (d.dtype == DType::F32 && d.precision == Precision::Exact);
    constexpr std::int64_t kMax = 0x7fffffff - 128;
    FUZZ_CHECK(skinny_layout && engine_dtype && d.k >= 1 && d.batches_disjoint && arch.cc_major == 9 && arch.cc_minor == 0 &&
                   d.m <= kMax && d.n <= kMax && d.k <= kMax && d.batch <= kMax,
               desc());
  }
  if (r == DenseRoute::CublasLt) FUZZ_CHECK(d.k > 0, "cuBLASLt with k <= 0: ", desc());
  const bool gw = r == DenseRoute::GemvWide;
  FUZZ_CHECK(gw == (p->gemv_wide_vecs != 0) && gw == (p->gemv_wide_k_lanes != 0) && gw == (p->gemv_wide_grid_x != 0), desc());
  if (gw) {
    const int v = p->gemv_wide_vecs, kl = p->gemv_wide_k_lanes, g = p->gemv_wide_grid_x;
    FUZZ_CHECK((v == 1 || v == 2 || v == 4 || v == 8) && (kl == 32 || kl == 64 || kl == 128) && g >= 1 && g * v >= d.m, desc());
    const auto want = cuda_dense::gemv_wide_config(d.m, d.n, d.k, d.dtype, arch.cc_major, arch.sm_count);
    FUZZ_CHECK(want && cuda_dense::gemv_wide_config_of(v, kl, g) == *want,
               "the config the dispatcher launches from the plan is not gemv_wide_config's: ", desc());
  }
  // The tiled engine's tile travels in the plan (the dispatcher launches it): the planner's own
  // pick for a problem with outputs, nothing on any other route or an empty problem.
  if (r == DenseRoute::TiledSm90 && d.batch > 0 && d.m > 0 && d.n > 0) {
    const engine::TiledSm90Launch l = engine::tiled_sm90_dense_launch(d.dtype, d.batch, d.m, d.n, arch.sm_count);
    FUZZ_CHECK(p->tiled_bn == l.bn && p->tiled_bm == l.bm &&
                   engine::tiled_sm90_dense_launch_at(d.dtype, d.batch, d.m, d.n, arch.sm_count, p->tiled_bn, p->tiled_bm) == l,
               "the plan's tile is not tiled_sm90_dense_launch's: ", desc());
  } else {
    FUZZ_CHECK(p->tiled_bn == 0 && p->tiled_bm == 0, "a tiled_sm90 tile on route ", route_name(r), ": ", desc());
  }
  // Auto only picks a route that accepts the problem when forced.
  if (force == DenseRoute::Auto) {
    auto forced = attempt([&] { return plan_matmul(d, arch, r); }, &why);
    FUZZ_CHECK(forced.has_value(), "Auto chose ", route_name(r), " but forcing it is refused: ", why.message);
  }
}

// ---------------------------------------------------------------------------------------------
// plan_tq2: refuses (InvalidArgument) sizes no weight can have and non-float inputs; otherwise
// Auto follows the rule documented in ternary.hpp exactly and a forced route is taken or refused
// (Unsupported) by its documented limits.
void check_tq2_plan(FuzzedDataProvider& in) {
  const std::int64_t m = fuzz::edgy<std::int64_t>(in), n = fuzz::edgy<std::int64_t>(in);
  const std::int64_t k = in.ConsumeBool() ? 128 * in.ConsumeIntegralInRange<std::int64_t>(1, 1 << 20) : fuzz::edgy<std::int64_t>(in);
  const DType dt = fuzz::pick_dtype(in);
  const ArchInfo arch = consume_arch(in);
  const Tq2Route force = in.PickValueInArray(kTq2Routes);
  const bool cuda = arch.kind == DeviceKind::CUDA, sm80 = cuda && arch.cc_major >= 8;
  const bool valid = m >= 0 && n >= 1 && k >= 128 && k % 128 == 0 && is_float(dt);
  // tq2_stream_v4: sm_90 exactly, m <= 8, n < 2^31, and the whole K's activation beside a 3-stage
  // ring in shared memory: (4m + 1) columns of (k + 64) bytes, k / 2 bytes of coefficients and
  // 8 KB of partial sums per n8 tile (ceil(m / 2) tiles), four band slots of k / 4 bytes of
  // scales each, a ring of 3 8192-byte stages, 1 KB of barriers and 1 KB of alignment slack
  // (232448: the sm_90 limit). m = 0 is sized as m = 1.
  const bool sm90 = cuda && arch.cc_major == 9 && arch.cc_minor == 0;
  const std::int64_t m1 = m < 1 ? 1 : m;
  // tq2_tiled_sm90_splitk's K parts (n and k only): min(132 / ceil(n / 128), k-blocks / 16, 16),
  // evened out over the k-blocks (1 below 2); its units, tiles of 64 tokens x parts, < 2^31.
  std::int64_t split_parts = 1;
  bool split_units_ok = false;
  if (valid && n < (std::int64_t{1} << 31) && k < (std::int64_t{1} << 31)) {
    const std::int64_t tn = (n + 127) / 128, kb = (k + 63) / 64;
    const std::int64_t p = std::min<std::int64_t>({132 / tn, kb / 16, 16});
    if (p >= 2) split_parts = (kb + (kb + p - 1) / p - 1) / ((kb + p - 1) / p);
    split_units_ok = m1 <= 0x7fffffff && ((m1 + 63) / 64) * tn <= 0x7fffffff / split_parts;
  }
  const std::int64_t tiles = m1 <= 8 ? (m1 + 1) / 2 : 1;  // n8 tiles of four digit columns a token
  const bool v4_fits = valid && m <= 8 && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20) &&
                       (4 * m1 + 1) * (k + 64) + tiles * k / 2 + k + 2048 + 3 * 8192 + tiles * 8192 <= 232448;
  // tq2_stream_v5: the same image beside a 2-stage ring of 17408-byte stages (128 rows x 4 groups
  // of codes and scales), 1 KB of barriers, 1 KB of slack; no scale slots, no partial sums.
  const bool v5_fits = valid && m <= 8 && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20) &&
                       (4 * m1 + 1) * (k + 64) + tiles * k / 2 + 2048 + 2 * 17408 <= 232448;
  // v4 holds two blocks per SM when its image beside a 6-stage ring fits in half of 232448 less
  // 1 KB; else one (then Auto prefers v5 where K is in at most 4 parts; with two, at m <= 2 where
  // K is in at most 2).
  const bool v4_two_blocks = v4_fits && (4 * m1 + 1) * (k + 64) + tiles * k / 2 + k + 2048 + 6 * 8192 + tiles * 8192 <= 115200;
  // v5's K parts (n and k only): the fewest parts of a multiple of 4 groups, as even as possible,
  // with ceil(n / 128) x parts >= 212, else parts of 4 groups.
  std::int64_t v5_parts = 1, v5_part_groups = 4;
  if (valid && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20)) {
    const std::int64_t supers = (n + 127) / 128, groups = k / 128;
    for (std::int64_t p = 1;; ++p) {
      v5_part_groups = 4 * ((groups + 4 * p - 1) / (4 * p));
      v5_parts = (groups + v5_part_groups - 1) / v5_part_groups;
      if (supers * v5_parts >= 212 || v5_part_groups == 4) break;
    }
  }
  // v5 at m <= 8 also takes K in parts whose one part's image (part_groups x 128 + 64 bytes a
  // record column, 64 x part_groups bytes of coefficients an n8 tile) fits beside the ring.
  // Where that slice does not fit at m either (or K is in one part), the fewest parts, at least 2
  // and at least v5_parts, whose slice at m = 8 (33 columns, 4 tiles) fits beside 2 stages, or
  // parts of 4 groups: the parts v5 uses at m (v5_parts_m).
  const auto slice_fits = [&](std::int64_t mm, std::int64_t pg) {
    const std::int64_t t = mm <= 8 ? (mm + 1) / 2 : 1;
    return (4 * mm + 1) * (pg * 128 + 64) + t * pg * 64 + 2048 + 2 * 17408 <= 232448;
  };
  std::int64_t v5_parts_m = v5_parts, v5_pg_m = v5_part_groups;
  if (valid && m <= 8 && !v5_fits && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20) &&
      !(v5_parts > 1 && slice_fits(m1, v5_part_groups))) {
    const std::int64_t groups = k / 128;
    for (std::int64_t p = std::max<std::int64_t>(2, v5_parts);; ++p) {
      v5_pg_m = 4 * ((groups + 4 * p - 1) / (4 * p));
      v5_parts_m = (groups + v5_pg_m - 1) / v5_pg_m;
      if (v5_pg_m == 4 || slice_fits(8, v5_pg_m)) break;
    }
  }
  const bool v5_sliced = !v5_fits && valid && m <= 8 && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20) &&
                         v5_parts_m > 1 && slice_fits(m1, v5_pg_m);
  // v5 at m = 9..16 (wide): 6 n8 tiles to m = 12, else 8; always a slice: the fewest parts, at
  // least v5_parts, whose slice at m = 16 (65 columns, 8 tiles) fits beside 4 stages, or parts of
  // 4 groups; one part's slice holds all of K. Taken where that slice fits at m beside 2 stages.
  bool v5_wide = false;
  std::int64_t v5_wide_parts = 0;
  if (valid && m >= 9 && m <= 16 && n < (std::int64_t{1} << 31) && k <= (std::int64_t{1} << 20)) {
    const std::int64_t groups = k / 128, wt = m <= 12 ? 6 : 8;
    std::int64_t pg = 4, parts = 1;
    for (std::int64_t p = v5_parts;; ++p) {
      pg = 4 * ((groups + 4 * p - 1) / (4 * p));
      parts = (groups + pg - 1) / pg;
      const std::int64_t g = std::min(pg, groups);
      if (pg == 4 || 65 * (g * 128 + 64) + 8 * g * 64 + 2048 + 4 * 17408 <= 232448) break;
    }
    const std::int64_t g = parts == 1 ? groups : pg;
    v5_wide_parts = parts;
    v5_wide = (4 * m + 1) * (g * 128 + 64) + wt * g * 64 + 2048 + 2 * 17408 <= 232448;
  }
  const auto ctx = [&] {
    return std::string(" (m ") + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " " +
           std::string(dtype_name(dt)) + (cuda ? " cuda cc " + std::to_string(arch.cc()) : std::string(" cpu")) + ")";
  };

  fuzz::Refusal why;
  auto r = attempt([&] { return plan_tq2(m, n, k, dt, arch, force); }, &why);
  if (!valid) {
    FUZZ_CHECK(!r && why.code == ErrorCode::InvalidArgument, "plan_tq2 took invalid sizes or dtype", ctx());
    return;
  }
  // plan_gemm_tq2: the same answer (route or refusal) with a reason.
  fuzz::Refusal why_plan;
  auto detailed = attempt([&] { return plan_gemm_tq2(m, n, k, dt, arch, force); }, &why_plan);
  FUZZ_CHECK(detailed.has_value() == r.has_value() && (!r || (detailed->route == *r && !detailed->reason.empty())) &&
                 (r || why_plan.message == why.message),
             "plan_gemm_tq2 differs from plan_tq2", ctx());
  if (force == Tq2Route::Auto && cuda && !sm80) {  // no kernel is built for it: refused
    FUZZ_CHECK(!r && why.code == ErrorCode::Unsupported, "plan_tq2 Auto before sm_80 did not refuse", ctx());
    return;
  }
  if (force == Tq2Route::Auto) {
    FUZZ_CHECK(r.has_value(), "plan_tq2 Auto refused: ", why.message);
    u128 macs = 1;  // saturating at 2^27: each factor < 2^63
    for (std::int64_t x : {m, n, k}) macs = std::min<u128>(macs * static_cast<u128>(x), u128{1} << 27);
    // The Hopper engine for 16-bit prefill whose tiles fill the SMs: the engine takes the sizes
    // (m, k < 2^31, n <= 2^30 - 128, tiles at the narrowest width < 2^31), and the width with the
    // fewest waves x (bn + 192) gives tiles for >= 3/4 of the SMs in waves >= 80% full.
    bool engine = sm90 && is_16bit_float(dt) && m > 16 && m < (std::int64_t{1} << 31) &&
                  k < (std::int64_t{1} << 31) && n <= (std::int64_t{1} << 30) - 128;
    if (engine) engine = (m + 63) / 64 <= 0x7fffffff / ((n + 127) / 128);
    bool engine_fills = false;
    if (engine) {
      const std::int64_t sms = arch.sm_count > 0 ? arch.sm_count : 132;
      std::int64_t best_cost = -1, best_tiles = 0;
      for (std::int64_t bn : {256, 128, 64}) {
        const std::int64_t t = ((m + bn - 1) / bn) * ((n + 127) / 128), cost = ((t + sms - 1) / sms) * (bn + 192);
        if (best_cost < 0 || cost < best_cost) best_cost = cost, best_tiles = t;
      }
      const std::int64_t waves = (best_tiles + sms - 1) / sms;
      engine_fills = 4 * best_tiles >= 3 * sms && 10 * best_tiles >= 8 * waves * sms;
    }
    // Before it, K in parts (split) up to m = 128 where the parts' units fill the SMs the same way.
    const bool split = engine && m <= 128 && split_parts > 1 && [&] {
      const std::int64_t sms = arch.sm_count > 0 ? arch.sm_count : 132;
      std::int64_t best_cost = -1, best_units = 0;
      for (std::int64_t bn : {256, 128, 64}) {  // widths planned for 132 SMs
        const std::int64_t u = ((m + bn - 1) / bn) * ((n + 127) / 128) * split_parts, cost = ((u + 131) / 132) * (bn + 192);
        if (best_cost < 0 || cost < best_cost) best_cost = cost, best_units = u;
      }
      const std::int64_t waves = (best_units + sms - 1) / sms;
      return split_units_ok && 4 * best_units >= 3 * sms && 10 * best_units >= 8 * waves * sms;
    }();
    engine = engine && engine_fills;
    const Tq2Route want = !cuda ? Tq2Route::Cpu
                          : m <= 8 && sm90 && v5_fits && (n + 127) / 128 >= 212 ? Tq2Route::StreamV5
                          : sm90 && !v4_fits && v5_sliced && v5_parts_m <= 16 ? Tq2Route::StreamV5
                          : (m <= 4 || (m <= 8 && n <= 4096)) && sm90 && v4_fits
                              ? ((v5_fits || v5_sliced) && (v4_two_blocks ? m <= 2 && v5_parts_m <= 2 && n * k >= (std::int64_t{1} << 25) : v5_parts_m <= 4) ? Tq2Route::StreamV5
                                                                                                    : Tq2Route::StreamV4)
                          : sm90 && (v5_fits || v5_sliced) && v5_parts_m <= 16 ? Tq2Route::StreamV5
                          : sm90 && v5_wide && v5_wide_parts <= 16 &&
                                    (k >= 12288 || ((n + 127) / 128 < 212 && n * k >= (std::int64_t{1} << 24)))
                              ? Tq2Route::StreamV5
                          : m <= 16 ? Tq2Route::StreamV2
                          : split ? Tq2Route::TiledSm90SplitK
                          : engine ? Tq2Route::TiledSm90
                          : macs >= (u128{1} << 27) ? Tq2Route::DequantLt
                                                    : Tq2Route::Tiled;
    FUZZ_CHECK(*r == want, "plan_tq2 chose ", tq2_route_name(*r), ", the documented rule says ", tq2_route_name(want), ctx());
    auto forced = attempt([&] { return plan_tq2(m, n, k, dt, arch, *r); }, &why);
    FUZZ_CHECK(forced && *forced == *r, "Auto chose ", tq2_route_name(*r), " but forcing it is refused: ", why.message);
    return;
  }
  bool accepts = cuda != (force == Tq2Route::Cpu);
  if (force != Tq2Route::Cpu) accepts = accepts && sm80;  // every CUDA kernel is built for sm_80+
  if (force == Tq2Route::StreamV2) accepts = accepts && m <= 16;
  if (force == Tq2Route::StreamV4) accepts = accepts && sm90 && v4_fits;
  if (force == Tq2Route::StreamV5) accepts = accepts && sm90 && (v5_fits || v5_sliced || v5_wide);
  if (force == Tq2Route::TiledSm90 || force == Tq2Route::TiledSm90SplitK) {
    // The tiled engine: sm_90 exactly, m, n, k below 2^31 and at most 2^31 - 1 tiles of 64 x 128
    // (m = 0 counted as 1); the input's dtype is checked with precision by gemm_tq2 itself.
    // Split: also at most 2^31 - 1 of those tiles times the K parts.
    constexpr std::int64_t kI32 = 0x7fffffff;
    const std::int64_t tm = m1 / 64 + (m1 % 64 != 0), tn = n / 128 + (n % 128 != 0);
    accepts = accepts && sm90 && m1 <= kI32 && n <= (std::int64_t{1} << 30) - 128 && k <= kI32 && tm <= kI32 / tn;
    if (force == Tq2Route::TiledSm90SplitK) accepts = accepts && split_units_ok;
  }
  FUZZ_CHECK(r.has_value() == accepts, "forced ", tq2_route_name(force), r ? " accepted" : " refused", ctx(), " ", why.message);
  if (r) FUZZ_CHECK(*r == force, "forced ", tq2_route_name(force), " returned ", tq2_route_name(*r));
  else FUZZ_CHECK(why.code == ErrorCode::Unsupported, why.message);
}

// ---------------------------------------------------------------------------------------------
// tq2_workspace_bytes: 0 for routes without scratch; staged v2 holds the activation (>= m*k
// f16); DequantLt 256-byte sections holding at least one f16 weight row and the activation's f16
// parts; Auto the larger of the two. Refused only with llmm::Error, never for valid sizes.
void check_workspace(FuzzedDataProvider& in) {
  const bool small = in.ConsumeBool();  // valid, moderate sizes: must never be refused
  std::int64_t m, n, k, chunk;
  if (small) {
    m = in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 20), n = in.ConsumeIntegralInRange<std::int64_t>(1, 1 << 20);
    k = 128 * in.ConsumeIntegralInRange<std::int64_t>(1, 1 << 12), chunk = in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 20);
  } else {
    m = fuzz::edgy<std::int64_t>(in), n = fuzz::edgy<std::int64_t>(in), k = fuzz::edgy<std::int64_t>(in);
    chunk = fuzz::edgy<std::int64_t>(in);
  }
  const DType in_dt = small ? in.PickValueInArray({DType::F32, DType::F16, DType::BF16}) : fuzz::pick_dtype(in);
  const DType out_dt = small ? (in.ConsumeBool() ? DType::F32 : in_dt) : fuzz::pick_dtype(in);
  Tq2Options o;
  o.precision = in.ConsumeBool() ? Precision::Exact : Precision::Fast;
  o.dequant_chunk_rows = chunk;
  const auto ws = [&](Tq2Route r, fuzz::Refusal* why = nullptr) {
    Tq2Options x = o;
    x.force_route = r;
    return attempt([&] { return tq2_workspace_bytes(m, n, k, in_dt, out_dt, x); }, why);
  };
  const auto ctx = [&] {
    return std::string(" (m ") + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " " +
           std::string(dtype_name(in_dt)) + "->" + std::string(dtype_name(out_dt)) + " chunk " + std::to_string(chunk) + ")";
  };

  for (Tq2Route r : kTq2Routes) {
    fuzz::Refusal why;
    auto b = ws(r, &why);
    // The tiled engine takes no f32 Exact (it would need the activation's second f16 part).
    const bool f32_exact = in_dt == DType::F32 && o.precision == Precision::Exact;
    const bool engine_route = r == Tq2Route::TiledSm90 || r == Tq2Route::TiledSm90SplitK;
    if (!b && engine_route && f32_exact) {
      // Invalid sizes are refused first (InvalidArgument); valid ones for the precision.
      FUZZ_CHECK(why.code == ErrorCode::Unsupported || why.code == ErrorCode::InvalidArgument, why.message);
      if (small) FUZZ_CHECK(why.code == ErrorCode::Unsupported, "f32 Exact refused as ", why.message, ctx());
    } else if (!b) {
      FUZZ_CHECK(!small, "valid sizes refused for ", tq2_route_name(r), ": ", why.message, ctx());
      FUZZ_CHECK(why.code == ErrorCode::InvalidArgument || why.code == ErrorCode::Unsupported, why.message);
    } else if (m < 0 || n < 1 || k < 128 || k % 128 != 0) {
      FUZZ_CHECK(false, "tq2_workspace_bytes gave ", *b, " for sizes gemm_tq2 refuses, route ", tq2_route_name(r), ctx());
    } else if (m == 0) {
      FUZZ_CHECK(*b == 0, "m == 0 launches nothing but needs ", *b, " bytes", ctx());
    } else if (r == Tq2Route::StreamV2) {
      const bool staged = m >= 3 && m <= 16 && k >= 128;
      FUZZ_CHECK((*b > 0) == staged, "staged v2 workspace ", *b, ctx());
      const u128 k_blocks = static_cast<u128>(k);
      if (staged) FUZZ_CHECK(*b >= static_cast<u128>(m) * k_blocks * 2, "staged v2 workspace ", *b,
                             " cannot hold the f16 activation", ctx());
    } else if (r == Tq2Route::DequantLt) {
      const u128 parts = in_dt == DType::F32 ? (o.precision == Precision::Exact ? 2 : 1) : in_dt == DType::BF16 ? 1 : 0;
      // The f16 parts of the activation, a float a row (its scale) when scaled, a weight row.
      FUZZ_CHECK(*b % 256 == 0 &&
                     *b >= parts * static_cast<u128>(m) * static_cast<u128>(k) * 2 + (parts > 0 ? static_cast<u128>(m) * 4 : 0) +
                               static_cast<u128>(k) * 2,
                 "dequant_lt workspace ", *b, ctx());
    } else if (engine_route) {
      // The activation's f16 copy after a float a row (its scale; bf16, f32 Fast); none for f16.
      // Split with K in parts: also an f32 slot of every output element per part.
      const u128 copy = static_cast<u128>(m) * static_cast<u128>(k) * 2;
      FUZZ_CHECK(!f32_exact, "tiled_sm90 workspace given for f32 Exact, which the engine refuses", ctx());
      const u128 tn = static_cast<u128>((n + 127) / 128), kb = static_cast<u128>(k / 64);
      u128 parts = std::min<u128>({132 / tn, kb / 16, 16});
      if (parts >= 2) parts = (kb + (kb + parts - 1) / parts - 1) / ((kb + parts - 1) / parts);
      const u128 slots = r == Tq2Route::TiledSm90SplitK && parts >= 2 ? static_cast<u128>(m) * static_cast<u128>(n) * parts * 4 : 0;
      const u128 scaled = in_dt == DType::F16 ? 0 : copy + 4 * static_cast<u128>(m);
      FUZZ_CHECK(*b % 256 == 0 && *b >= scaled + slots && ((scaled + slots == 0) == (*b == 0)), tq2_route_name(r),
                 " workspace ", *b, ctx());
    } else if (r == Tq2Route::StreamV4) {
      // The staged image: 4m + 1 record columns of k + 64 bytes (m <= 8 where it fits, else 0).
      if (*b > 0) FUZZ_CHECK(m >= 1 && m <= 8 && *b >= static_cast<u128>(4 * m + 1) * static_cast<u128>(k + 64),
                             "v4 workspace ", *b, ctx());
    } else if (r == Tq2Route::StreamV5) {
      // The image, a counter per 16 rows, and f32 partials when K is cut in parts.
      if (*b > 0)
        FUZZ_CHECK(m >= 1 && m <= 16 && *b >= static_cast<u128>(4 * m + 1) * static_cast<u128>(k + 64) + 4 * ((n + 15) / 16),
                   "v5 workspace ", *b, ctx());
    } else if (r != Tq2Route::Auto) {
      FUZZ_CHECK(*b == 0, tq2_route_name(r), " needs no workspace but got ", *b, ctx());
    } else {
      auto v2 = ws(Tq2Route::StreamV2), v4 = ws(Tq2Route::StreamV4), v5 = ws(Tq2Route::StreamV5), lt = ws(Tq2Route::DequantLt);
      // Auto may take the split route for a 16-bit input at m <= 128 wherever it runs.
      std::optional<std::size_t> sk;
      if ((in_dt == DType::F16 || in_dt == DType::BF16) && m <= 128) sk = ws(Tq2Route::TiledSm90SplitK);
      FUZZ_CHECK(v2 && v4 && v5 && lt && *b == std::max({*v2, *v4, *v5, *lt, sk.value_or(0)}), "Auto workspace ", *b, " is not the largest of v2 ",
                 v2 ? std::to_string(*v2) : "refused", ", v4 ", v4 ? std::to_string(*v4) : "refused", ", v5 ",
                 v5 ? std::to_string(*v5) : "refused", " and dequant_lt ",
                 lt ? std::to_string(*lt) : "refused", ctx());
    }
  }
}

// plan_matmul_id_tq2: Auto never refuses (cpu on CPU contexts; the engine exactly where
// ternary_moe.hpp says it takes the call, else the reference kernel); a forced route is accepted
// exactly where Auto's conditions for it hold, else refused with Unsupported.
void check_tq2_moe_plan(FuzzedDataProvider& in) {
  MatmulIdParams p;
  p.m = in.ConsumeIntegral<std::uint32_t>(), p.top_k = in.ConsumeIntegral<std::uint32_t>();
  p.n = in.ConsumeIntegral<std::uint32_t>();
  p.k = in.ConsumeBool() ? 128 * in.ConsumeIntegralInRange<std::uint32_t>(0, 1 << 16) : in.ConsumeIntegral<std::uint32_t>();
  p.n_experts = in.ConsumeIntegral<std::uint32_t>();
  p.input_dtype = fuzz::pick_dtype(in), p.output_dtype = fuzz::pick_dtype(in);
  const bool input_ok = in.ConsumeBool(), staging_ok = in.ConsumeBool();
  const ArchInfo arch = consume_arch(in);
  constexpr Tq2MoeRoute kRoutes[] = {Tq2MoeRoute::Auto, Tq2MoeRoute::Cpu, Tq2MoeRoute::Naive, Tq2MoeRoute::GroupedSm90,
                                     Tq2MoeRoute::StreamSm90};
  const Tq2MoeRoute force = in.PickValueInArray(kRoutes);
  const bool cuda = arch.kind == DeviceKind::CUDA, sm90 = cuda && arch.cc_major == 9 && arch.cc_minor == 0;
  const std::uint64_t routed = static_cast<std::uint64_t>(p.m) * p.top_k, n8 = (static_cast<std::uint64_t>(p.n) + 7) / 8 * 8;
  bool engine = sm90 && (p.input_dtype == DType::F16 || p.input_dtype == DType::BF16) &&
                (p.output_dtype == DType::F32 || p.output_dtype == p.input_dtype) &&
                p.k >= 128 && p.k % 128 == 0 && p.n >= 1 && p.n_experts >= 1 && p.n_experts <= 1024 &&
                p.n_experts * n8 <= (std::uint64_t{1} << 30) - 128 && routed <= 0x7fffffff;
  if (engine) engine = (routed + 63) / 64 + p.n_experts <= 0x7fffffff / ((p.n + 127) / 128);
  // The streaming route: any float input, f32 or input-dtype output, k a multiple of 128 up to
  // 2^20, at most 65536 routed rows, and the block's activation rows in shared memory (the
  // config's own answer: this checks that the planner follows it and the rest of the rule).
  const bool float_in = p.input_dtype == DType::F32 || p.input_dtype == DType::F16 || p.input_dtype == DType::BF16;
  const bool stream = sm90 && float_in && (p.output_dtype == DType::F32 || p.output_dtype == p.input_dtype) && p.k >= 128 &&
                      p.k % 128 == 0 && p.k <= (1u << 20) && p.n >= 1 && p.n_experts >= 1 && routed <= 65536 &&
                      p.n_experts * n8 <= (std::uint64_t{1} << 30) - 128 &&
                      cuda_ternary::tq2_moe_stream_config(p.m, p.top_k, p.n, p.k, p.n_experts, false, arch.sm_count).has_value();
  const auto ctx = [&] {
    return " (m " + std::to_string(p.m) + " top_k " + std::to_string(p.top_k) + " n " + std::to_string(p.n) + " k " +
           std::to_string(p.k) + " E " + std::to_string(p.n_experts) + " " + std::string(dtype_name(p.input_dtype)) +
           " -> " + std::string(dtype_name(p.output_dtype)) + (input_ok ? " input_ok" : "") + (staging_ok ? " staging_ok" : "") +
           (cuda ? " cuda cc " + std::to_string(arch.cc()) : std::string(" cpu")) + ")";
  };
  fuzz::Refusal why;
  auto r = attempt([&] { return plan_matmul_id_tq2(p, arch, input_ok, staging_ok, force); }, &why);
  if (force == Tq2MoeRoute::Auto) {
    FUZZ_CHECK(r.has_value(), "plan_matmul_id_tq2 Auto refused: ", why.message, ctx());
    const Tq2MoeRoute want = !cuda                                 ? Tq2MoeRoute::Cpu
                             : stream && p.m <= 64                 ? Tq2MoeRoute::StreamSm90
                             : engine && input_ok && staging_ok    ? Tq2MoeRoute::GroupedSm90
                                                                   : Tq2MoeRoute::Naive;
    FUZZ_CHECK(*r == want, "plan_matmul_id_tq2 chose ", tq2_moe_route_name(*r), ", the documented rule says ",
               tq2_moe_route_name(want), ctx());
    return;
  }
  const bool accepts = force == Tq2MoeRoute::Cpu          ? !cuda
                       : force == Tq2MoeRoute::Naive      ? cuda
                       : force == Tq2MoeRoute::StreamSm90 ? stream
                                                          : cuda && engine && input_ok && staging_ok;
  FUZZ_CHECK(accepts == r.has_value(), "forced ", tq2_moe_route_name(force), accepts ? " refused: " : " accepted",
             accepts ? why.message : std::string(), ctx());
  if (r) FUZZ_CHECK(*r == force, "forced ", tq2_moe_route_name(force), " became ", tq2_moe_route_name(*r), ctx());
  else FUZZ_CHECK(why.code == ErrorCode::Unsupported, "refusal code ", static_cast<int>(why.code), ctx());
}

}  // namespace

// plan_matmul_fp8 (include/llmm/fp8.hpp): negative sizes refused (InvalidArgument); Auto never
// refuses otherwise, except a workspace whose size overflows (InvalidArgument) and x given in
// e4m3 on a GPU that tiled_sm90 cannot serve (Unsupported); a forced route's refusal is
// Unsupported; the planned route keeps its gates (stream / stream_mma: m 1..16, k % 16, aligned,
// sm_90, 16-bit x for stream_mma; cublaslt: Fast, k % 16, aligned, served, sm_90; tiled_sm90: Fast,
// k % 16, aligned, sm_90, sizes below 2^31 - 256, and for e4m3 x its TMA layout and no
// workspace; e4m3 x: only tiled_sm90 or the CPU; the CPU on a CPU arch); the workspace holds the
// route's layout; the answer is deterministic.
void check_fp8_plan(FuzzedDataProvider& in) {
  MatmulFp8Desc d;
  d.m = fuzz::edgy<std::int64_t>(in), d.n = fuzz::edgy<std::int64_t>(in), d.k = fuzz::edgy<std::int64_t>(in);
  d.x_dtype = fuzz::pick_dtype(in);
  d.kind = in.PickValueInArray({Fp8ScaleKind::Tensor, Fp8ScaleKind::Channel, Fp8ScaleKind::Block128});
  d.precision = in.ConsumeBool() ? Precision::Exact : Precision::Fast;
  d.stream_aligned = in.ConsumeBool(), d.lt_aligned = in.ConsumeBool(), d.lt_served = in.ConsumeBool();
  const ArchInfo arch = consume_arch(in);
  const Fp8Route force = in.PickValueInArray({Fp8Route::Auto, Fp8Route::Cpu, Fp8Route::Stream, Fp8Route::StreamMma,
                                              Fp8Route::CublasLt, Fp8Route::DequantLt, Fp8Route::TiledSm90});
  d.x_e4m3 = in.ConsumeBool(), d.x_tma_aligned = in.ConsumeBool();
  const bool cuda = arch.kind == DeviceKind::CUDA, sm90 = cuda && arch.cc_major == 9 && arch.cc_minor == 0;
  const bool nonneg = d.m >= 0 && d.n >= 0 && d.k >= 0;
  const auto desc = [&] {
    return std::string("m ") + std::to_string(d.m) + " n " + std::to_string(d.n) + " k " + std::to_string(d.k) + " " +
           std::string(dtype_name(d.x_dtype)) + " " + fp8_scale_kind_name(d.kind) + (cuda ? " cuda cc " : " cpu ") +
           std::to_string(arch.cc()) + " force " + fp8_route_name(force) + (d.x_e4m3 ? " x e4m3" : "");
  };
  fuzz::Refusal why;
  auto p = attempt([&] { return plan_matmul_fp8(d, arch, force); }, &why);
  if (!nonneg) FUZZ_CHECK(!p && why.code == ErrorCode::InvalidArgument, "negative size not refused: ", desc());
  if (!p) {
    FUZZ_CHECK(why.code == ErrorCode::Unsupported || why.code == ErrorCode::InvalidArgument, why.message);
    if (force == Fp8Route::Auto && nonneg && !(d.x_e4m3 && cuda))
      FUZZ_CHECK(why.code == ErrorCode::InvalidArgument && (why.message.find("overflows") != std::string::npos ||
                                                           why.message.find("does not fit") != std::string::npos),
                 "Auto refused a valid problem: ", why.message, " (", desc(), ")");
    if (force == Fp8Route::Auto && nonneg && d.x_e4m3 && cuda)
      FUZZ_CHECK(why.code == ErrorCode::Unsupported, "e4m3 x refused with the wrong code: ", why.message, " (", desc(), ")");
    return;
  }
  auto again = plan_matmul_fp8(d, arch, force);
  FUZZ_CHECK(again.route == p->route && again.reason == p->reason && again.workspace_bytes == p->workspace_bytes &&
                 again.gemv_vecs == p->gemv_vecs && again.gemv_k_lanes == p->gemv_k_lanes &&
                 again.gemv_grid_x == p->gemv_grid_x && again.mma_k_warps == p->mma_k_warps,
             "plan_matmul_fp8 is not deterministic: ", desc());
  if (force != Fp8Route::Auto) FUZZ_CHECK(p->route == force, "a forced route was not taken: ", desc());
  FUZZ_CHECK((p->route == Fp8Route::Cpu) == !cuda, "the CPU route iff a CPU arch: ", desc());
  FUZZ_CHECK(!d.x_e4m3 || p->route == Fp8Route::Cpu || p->route == Fp8Route::TiledSm90,
             "e4m3 x on a route that reads 16/32-bit x: ", desc());
  const bool streamable = d.m >= 1 && d.m <= 16 && d.k % 16 == 0 && d.stream_aligned && sm90;
  switch (p->route) {
    case Fp8Route::Stream:
      FUZZ_CHECK(streamable, "stream planned outside its gates: ", desc());
      FUZZ_CHECK(p->gemv_grid_x >= 1 && p->gemv_grid_x * p->gemv_vecs >= d.m &&
                     (p->gemv_vecs == 1 || p->gemv_vecs == 2 || p->gemv_vecs == 4 || p->gemv_vecs == 8) &&
                     (d.x_dtype != DType::F32 || p->gemv_vecs <= 4) &&
                     (p->gemv_k_lanes == 32 || p->gemv_k_lanes == 64 || p->gemv_k_lanes == 128),
                 "stream configuration: ", desc());
      FUZZ_CHECK(p->workspace_bytes == 0, "stream with a workspace: ", desc());
      break;
    case Fp8Route::StreamMma:
      FUZZ_CHECK(streamable && (d.x_dtype == DType::F16 || d.x_dtype == DType::BF16), "stream_mma outside its gates: ",
                 desc());
      FUZZ_CHECK(p->mma_k_warps == 1 || p->mma_k_warps == 2 || p->mma_k_warps == 4 || p->mma_k_warps == 8,
                 "stream_mma configuration: ", desc());
      break;
    case Fp8Route::CublasLt: {
      FUZZ_CHECK(sm90 && d.precision == Precision::Fast && d.k >= 16 && d.k % 16 == 0 && d.lt_aligned && d.lt_served,
                 "cublaslt planned outside its gates: ", desc());
      const auto lay = detail::fp8_workspace_layout(Fp8Route::CublasLt, d.m, d.n, d.k, d.kind, d.x_dtype);
      FUZZ_CHECK(lay.lt_m >= d.m && (d.kind != Fp8ScaleKind::Block128 || lay.lt_m % 4 == 0) && lay.lt_m - d.m < 4,
                 "cublaslt's padded rows: ", desc());
      FUZZ_CHECK(p->workspace_bytes == lay.total &&
                     static_cast<u128>(lay.total) >= static_cast<u128>(lay.lt_m) * static_cast<u128>(d.k),
                 "cublaslt workspace: ", desc());
      break;
    }
    case Fp8Route::TiledSm90: {
      constexpr std::int64_t kMax = 0x7fffffff - 256;
      FUZZ_CHECK(sm90 && d.precision == Precision::Fast && d.k >= 16 && d.k % 16 == 0 && d.lt_aligned && d.m <= kMax &&
                     d.n <= kMax && d.k <= kMax && (!d.x_e4m3 || d.x_tma_aligned),
                 "tiled_sm90 planned outside its gates: ", desc());
      if (d.x_e4m3) {
        FUZZ_CHECK(p->workspace_bytes == 0, "tiled_sm90 on e4m3 x with a workspace: ", desc());
      } else {
        const auto lay = detail::fp8_workspace_layout(Fp8Route::TiledSm90, d.m, d.n, d.k, d.kind, d.x_dtype);
        FUZZ_CHECK(p->workspace_bytes == lay.total && lay.lt_m >= d.m && lay.lt_m % 4 == 0 &&
                       static_cast<u128>(lay.total) >= static_cast<u128>(lay.lt_m) * static_cast<u128>(d.k),
                   "tiled_sm90 workspace: ", desc());
      }
      break;
    }
    case Fp8Route::DequantLt:
      FUZZ_CHECK(cuda, "dequant_lt on a CPU arch: ", desc());
      FUZZ_CHECK(static_cast<u128>(p->workspace_bytes) >=
                     static_cast<u128>(d.n) * static_cast<u128>(d.k) * static_cast<u128>(dtype_size(d.x_dtype)),
                 "dequant_lt's image does not fit: ", desc());
      break;
    default: break;
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0: check_dense(in); break;
    case 1: check_tq2_plan(in); break;
    case 2: check_tq2_moe_plan(in); break;
    case 3: check_fp8_plan(in); break;
    default: check_workspace(in); break;
  }
  return 0;
}
