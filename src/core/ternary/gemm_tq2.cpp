// gemm_tq2: validate, plan, then the CPU reference or the CUDA dispatcher; and the seed's
// host-I/O form through the context's grow-only pool.
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/engine/tiled_sm90_plan.hpp"
#include "core/log.hpp"
#include "core/ranges.hpp"
#include "core/runtime.hpp"
#include "core/ternary/tq2_dispatch.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "core/ternary/tq2_workspace.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/reference.hpp"
#include "llmm/ternary.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "gemm_tq2";

// W[n, k] as f32 from a host-resident SoA weight (CPU contexts).
std::vector<float> decode_host(const TernaryWeight& w) {
  std::vector<float> out(static_cast<std::size_t>(w.n() * w.k()));
  const std::int64_t bpr = w.k() / kTq2BlockWeights;
  for (std::int64_t r = 0; r < w.n(); ++r)
    for (std::int64_t l = 0; l < w.k(); ++l) {
      int code = (w.codes()[r * (w.k() / 4) + l / 4] >> (2 * (l % 4))) & 3;
      float d = f16_bits_to_f32(w.scales()[r * bpr + l / kTq2BlockWeights]);
      out[static_cast<std::size_t>(r * w.k() + l)] = static_cast<float>(code - 1) * d;
    }
  return out;
}

void check_handle(const Context& ctx, const WeightHandle& w) {
  if (!w) fail(ErrorCode::InvalidArgument, kOp, ": null weight handle");
  if (w->experts() != 1)
    fail(ErrorCode::InvalidArgument, kOp, ": weight ", w->key(), " is a stack of ", w->experts(), " experts of [", w->n(),
         ", ", w->k(), "]: use matmul_id_tq2");
  if (w->device() != ctx.kind() || (ctx.is_cuda() && w->device_index() != ctx.arch().device_index))
    fail(ErrorCode::InvalidArgument, kOp, ": weight ", w->key(), " lives on ", w->device() == DeviceKind::CUDA ? "cuda" : "cpu",
         " but the context is ", ctx.is_cuda() ? "cuda" : "cpu");
}

struct Checked {
  cuda_ternary::Tq2Args args;
  Tq2Route route = Tq2Route::Cpu;
  std::string reason;  // plan_gemm_tq2's, or why validate changed the route
};

Checked validate(const Context& ctx, const WeightHandle& w, const View& in, const View& out, const Tq2Options& o) {
  check_handle(ctx, w);
  validate_view(in, kOp, "in");
  validate_view(out, kOp, "out");
  for (const auto& [v, name] : {std::pair{&in, "in"}, std::pair{&out, "out"}}) {
    if (v->rank != 2) fail(ErrorCode::InvalidArgument, kOp, ": ", name, " must be rank 2, got ", v->describe());
    if (v->device != ctx.kind() || (ctx.is_cuda() && v->device_index != ctx.arch().device_index))
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v->describe(), " but the context is ",
           ctx.is_cuda() ? "cuda" : "cpu");
    if (v->empty()) continue;  // m == 0: no element, the strides are never used
    if (v->dim(1) > 1 && v->stride(1) != 1)
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " innermost stride is ", v->stride(1), ", must be 1: ", v->describe());
    if (v->dim(0) > 1 && v->stride(0) < v->dim(1))
      fail(ErrorCode::InvalidArgument, kOp, ": ", name, " row stride ", v->stride(0), " is smaller than its row of ",
           v->dim(1), ": ", v->describe());
  }
  if (!is_float(in.dtype)) fail(ErrorCode::Unsupported, kOp, ": input dtype ", dtype_name(in.dtype), " (f32, f16, bf16)");
  if (out.dtype != DType::F32 && out.dtype != in.dtype)
    fail(ErrorCode::Unsupported, kOp, ": output dtype ", dtype_name(out.dtype), " must be f32 or the input's (",
         dtype_name(in.dtype), ")");
  const std::int64_t m = in.dim(0);
  if (in.dim(1) != w->k())
    fail(ErrorCode::InvalidArgument, kOp, ": in is [", m, ", ", in.dim(1), "] but weight ", w->key(), " has k = ", w->k());
  if (out.dim(0) != m || out.dim(1) != w->n())
    fail(ErrorCode::InvalidArgument, kOp, ": out must be [", m, ", ", w->n(), "], got ", out.describe());
  if (m > INT_MAX) fail(ErrorCode::Unsupported, kOp, ": m ", m, " exceeds 2^31 - 1");
  if (overlaps(in, out)) fail(ErrorCode::InvalidArgument, kOp, ": out overlaps in");
  Checked c;
  c.args.codes = w->codes(), c.args.scales = w->scales();
  c.args.scales_t = w->scales_t(), c.args.scales_t_ld = w->scales_t_ld();
  c.args.m = m, c.args.n = w->n(), c.args.k = w->k();
  c.args.in = in.data, c.args.in_dtype = in.dtype, c.args.in_ld = m > 1 ? in.stride(0) : w->k();
  c.args.out = out.data, c.args.out_dtype = out.dtype, c.args.out_ld = m > 1 ? out.stride(0) : w->n();
  c.args.exact = o.precision == Precision::Exact;
  if (o.dequant_chunk_rows < 0)
    fail(ErrorCode::InvalidArgument, kOp, ": dequant_chunk_rows ", o.dequant_chunk_rows, " is negative");
  if (!o.workspace && o.workspace_bytes > 0)
    fail(ErrorCode::InvalidArgument, kOp, ": workspace_bytes ", o.workspace_bytes, " given with a null workspace");
  c.args.workspace = o.workspace, c.args.workspace_bytes = o.workspace_bytes;
  c.args.chunk_rows = o.dequant_chunk_rows;
  c.args.stream_image = o.stream_image;
  const Tq2Plan plan = plan_gemm_tq2(m, w->n(), w->k(), in.dtype, ctx.arch(), o.force_route);
  c.route = plan.route, c.reason = plan.reason;
  // The engine reads an f16 input by TMA (16-byte aligned base, row stride a multiple of 8): the
  // router sends any other f16 input to DequantLt rather than refuse it (forced, it is refused).
  const bool engine = c.route == Tq2Route::TiledSm90 || c.route == Tq2Route::TiledSm90SplitK;
  if (engine && o.force_route == Tq2Route::Auto && in.dtype == DType::F16 &&
      (reinterpret_cast<std::uintptr_t>(in.data) % 16 != 0 || c.args.in_ld % 8 != 0)) {
    c.route = Tq2Route::DequantLt;
    c.reason = "an f16 input the engine's TMA cannot read (base not 16-byte aligned or row stride not a multiple of 8): DequantLt";
  }
  if (o.rotation_block != 0 || o.rotation_signs) {
    const int b = o.rotation_block;
    if (b < 2 || (b & (b - 1)) != 0 || w->k() % b != 0)
      fail(ErrorCode::InvalidArgument, kOp, ": rotation_block ", b, " must be a power of two >= 2 dividing k = ", w->k());
    if (!o.rotation_signs)
      fail(ErrorCode::InvalidArgument, kOp, ": rotation_block ", b, " given with null rotation_signs");
    // The stage kernel's rotation (v4, v5) is written but has not run on a GPU yet: CUDA refuses.
    if (ctx.is_cuda())
      fail(ErrorCode::Unsupported, kOp, ": the Hadamard rotation inside the CUDA kernels is not enabled yet (route ",
           tq2_route_name(c.route), ", m: ", m, ", n: ", w->n(), ", k: ", w->k(),
           "): rotate x first (llmm.HadamardRotation) and call without the rotation");
    c.args.rot_signs = o.rotation_signs, c.args.rot_block = b;
  }
  if (c.route == Tq2Route::StreamV4 || c.route == Tq2Route::StreamV5)
    if (const std::string why = cuda_ternary::tq2_stream_image_refusal(c.args, c.route == Tq2Route::StreamV5); !why.empty())
      fail(ErrorCode::Unsupported, kOp, ": route ", tq2_route_name(c.route), " cannot run (m: ", m, ", n: ", w->n(), ", k: ", w->k(),
           "): ", why);
  if (c.route == Tq2Route::TiledSm90 || c.route == Tq2Route::TiledSm90SplitK) {
    std::string why = engine::tiled_sm90_tq2_refusal(m, w->n(), w->k(), in.dtype, out.dtype, c.args.exact, ctx.arch());
    if (why.empty() && c.route == Tq2Route::TiledSm90SplitK)
      why = engine::tiled_sm90_tq2_split_refusal(m, w->n(), w->k(), in.dtype, out.dtype, c.args.exact);
    if (!why.empty())
      fail(ErrorCode::Unsupported, kOp, ": route ", tq2_route_name(c.route), " cannot run (m: ", m, ", n: ", w->n(),
           ", k: ", w->k(), ", ", dtype_name(in.dtype), " -> ", dtype_name(out.dtype), c.args.exact ? ", exact" : ", fast",
           "): ", why);
  }
  return c;
}

float input_at(const void* p, DType t, std::int64_t i) {
  if (t == DType::F16) return f16_bits_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  if (t == DType::BF16) return bf16_bits_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];  // validate() admits f32, f16 and bf16 only
}

// x [m, k] rotated: H (s * x) in blocks of g.rot_block, in float64, rounded to f32 once.
std::vector<float> rotate_host(const cuda_ternary::Tq2Args& g) {
  const std::int64_t b = g.rot_block;
  std::vector<float> out(static_cast<std::size_t>(g.m * g.k));
  std::vector<double> v(static_cast<std::size_t>(b));
  const double scale = 1.0 / std::sqrt(static_cast<double>(b));
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t l0 = 0; l0 < g.k; l0 += b) {
      for (std::int64_t j = 0; j < b; ++j)
        v[static_cast<std::size_t>(j)] = static_cast<double>(input_at(g.in, g.in_dtype, i * g.in_ld + l0 + j)) *
                                         static_cast<double>(g.rot_signs[l0 + j]);
      for (std::int64_t h = 1; h < b; h *= 2)  // Sylvester's butterflies: H_b = H_2 (x) ... (x) H_2
        for (std::int64_t j = 0; j < b; ++j)
          if ((j & h) == 0) {
            const double x = v[static_cast<std::size_t>(j)], y = v[static_cast<std::size_t>(j + h)];
            v[static_cast<std::size_t>(j)] = x + y, v[static_cast<std::size_t>(j + h)] = x - y;
          }
      for (std::int64_t j = 0; j < b; ++j)
        out[static_cast<std::size_t>(i * g.k + l0 + j)] = static_cast<float>(v[static_cast<std::size_t>(j)] * scale);
    }
  return out;
}

Receipt run_cpu(Context& ctx, const TernaryWeight& w, const cuda_ternary::Tq2Args& g) {
  ctx.check_launchable("cpu_reference_tq2");
  std::vector<float> wf = decode_host(w);
  std::vector<float> rotated = g.rot_block ? rotate_host(g) : std::vector<float>{};
  const View x = g.rot_block ? View::contiguous(rotated.data(), DType::F32, {1, g.m, g.k})
                             : View::strided(const_cast<void*>(g.in), g.in_dtype, {1, g.m, g.k}, {0, g.in_ld, 1});
  cpu::MatmulProblem p{x, View::contiguous(wf.data(), DType::F32, {1, g.n, g.k}), false, true};
  cpu::matmul(p, View::strided(g.out, g.out_dtype, {1, g.m, g.n}, {0, g.out_ld, 1}), ctx.arch().cpu_threads);
  ctx.note_launch("cpu_reference_tq2", [&] { return detail::tq2_ranges(g); });
  return Receipt{tq2_route_name(Tq2Route::Cpu), "cpu_reference_tq2", 1};
}

// LLMM_LOG's line for a call (only when log_level() > 0).
Receipt logged(const Checked& c, Receipt r) {
  if (log_level() > 0) {
    const cuda_ternary::Tq2Args& g = c.args;
    detail::log_call(kOp,
                     "m " + std::to_string(g.m) + " n " + std::to_string(g.n) + " k " + std::to_string(g.k) + " in " +
                         std::string(dtype_name(g.in_dtype)) + " out " + std::string(dtype_name(g.out_dtype)) +
                         (g.exact ? " exact" : " fast"),
                     r, c.reason);
  }
  return r;
}

}  // namespace

const char* tq2_route_name(Tq2Route r) noexcept {
  switch (r) {
    case Tq2Route::Auto: return "auto";
    case Tq2Route::Cpu: return "cpu";
    case Tq2Route::StreamV2: return "tq2_stream_v2";
    case Tq2Route::StreamV4: return "tq2_stream_v4";
    case Tq2Route::StreamV5: return "tq2_stream_v5";
    case Tq2Route::Tiled: return "tq2_tiled";
    case Tq2Route::DequantLt: return "tq2_dequant_lt";
    case Tq2Route::TiledSm90: return "tq2_tiled_sm90";
    case Tq2Route::TiledSm90SplitK: return "tq2_tiled_sm90_splitk";
  }
  return "?";
}

Tq2Plan plan_gemm_tq2(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, const ArchInfo& arch, Tq2Route force) {
  const auto plan = [](Tq2Route r, const char* why) { return Tq2Plan{r, why}; };
  if (m < 0 || n < 1 || k < kTq2BlockWeights || k % kTq2BlockWeights != 0)
    fail(ErrorCode::InvalidArgument, "plan_tq2: needs m >= 0, n >= 1 and k a positive multiple of 128, got m ", m, ", n ",
         n, ", k ", k);
  if (!is_float(in_dtype))
    fail(ErrorCode::InvalidArgument, "plan_tq2: the input dtype must be f32, f16 or bf16, got ", dtype_name(in_dtype));
  const bool cuda = arch.kind == DeviceKind::CUDA;
  if (force != Tq2Route::Auto) {
    const char* why = nullptr;
    if (force == Tq2Route::Cpu && cuda) why = "the cpu route runs on CPU contexts only";
    if (force != Tq2Route::Cpu && !cuda) why = "needs a CUDA context";
    if (force != Tq2Route::Cpu && cuda && arch.cc_major < 8) why = "needs sm_80 or newer (llmm's CUDA kernels are built for it)";
    if (force == Tq2Route::StreamV2 && cuda && m > 16) why = "the streaming kernels take m <= 16";
    if (force == Tq2Route::StreamV4 && cuda) {
      if (arch.cc_major != 9 || arch.cc_minor != 0) why = "the sm_90 streaming engine is built for sm_90a only";
      else if (m > cuda_ternary::kTq2V4MaxM) why = "the sm_90 streaming engine's int8 decoder takes m <= 8";
      else if (n >= (std::int64_t{1} << 31)) why = "the sm_90 streaming engine's tensor maps take n < 2^31";
      else if (cuda_ternary::tq2_stream_v4_smem(m < 1 ? 1 : m, k, cuda_ternary::kTq2V4MinStages).total < 0)
        why = "the whole K's activation does not fit in shared memory beside the ring";
    }
    if (force == Tq2Route::StreamV5 && cuda) {
      if (arch.cc_major != 9 || arch.cc_minor != 0) why = "the sm_90 streaming engine is built for sm_90a only";
      else if (m > cuda_ternary::kTq2V5MaxM) why = "tq2_stream_v5's int8 decoder takes m <= 16";
      else if (n >= (std::int64_t{1} << 31)) why = "the sm_90 streaming engine's tensor maps take n < 2^31";
      else if (cuda_ternary::tq2_stream_v5_image_plan(m < 1 ? 1 : m, n, k).image_groups == 0)
        why = "the activation does not fit in shared memory beside the ring, neither whole nor one part of K at a time";
    }
    std::string engine_why;
    if ((force == Tq2Route::TiledSm90 || force == Tq2Route::TiledSm90SplitK) && cuda) {
      // Precision is not known here: the engine's f32 Exact refusal comes from validate().
      engine_why = engine::tiled_sm90_tq2_refusal(m < 1 ? 1 : m, n, k, in_dtype, in_dtype, false, arch);
      if (engine_why.empty() && force == Tq2Route::TiledSm90SplitK)
        engine_why = engine::tiled_sm90_tq2_split_refusal(m < 1 ? 1 : m, n, k, in_dtype, in_dtype, false);
      if (!engine_why.empty()) why = engine_why.c_str();
    }
    if (why)
      fail(ErrorCode::Unsupported, "gemm_tq2: route ", tq2_route_name(force), " cannot run (m: ", m, ", n: ", n, ", k: ",
           k, ", ", dtype_name(in_dtype), "): ", why);
    return plan(force, "forced");
  }
  if (!cuda) return plan(Tq2Route::Cpu, "CPU context: float64 reference backend");
  if (arch.cc_major < 8)
    fail(ErrorCode::Unsupported, "gemm_tq2: needs an sm_80 or newer GPU (llmm's CUDA kernels are built for sm_80 and sm_90), got sm_",
         arch.cc());
  // Decode (measured, docs/performance.md "Decode v4"): the sm_90 streaming engine to m = 4 where
  // its activation fits (1.1-3.5x the retired int8 kernel v3 at m <= 2, 1.1-1.8x v2 at m = 4; at
  // m = 8 it lost to v2 on the large-N shapes), else v2 (staged from m = 3) to 16. v3 was retired
  // (issue 47): on sm_90 Auto sent it only shapes with n <= ~1000 and k >= ~26k, which v2 takes.
  const bool sm90 = arch.cc_major == 9 && arch.cc_minor == 0;
  // v5 where K stays whole (at least kTq2V5TargetItems super-bands of 128 rows), m <= 8: 1.09-1.61x
  // v4 at m <= 4 and 1.42x v2 at m = 8 on 27648x3072, 1.17-1.26x v4 on 28672x8192; where K is
  // cut into parts it lost to v4 (0.58-1.0x; docs/performance.md "Decode v5").
  if (m <= 8 && sm90 && n < (std::int64_t{1} << 31) && (n + cuda_ternary::kTq2V5Rows - 1) / cuda_ternary::kTq2V5Rows >= cuda_ternary::kTq2V5TargetItems &&
      cuda_ternary::tq2_stream_v5_smem(m < 1 ? 1 : m, k, cuda_ternary::kTq2V5MinStages).total > 0)
    return plan(Tq2Route::StreamV5, "decode m <= 8 on sm_90, K whole in every super-band of 128 rows and enough of them to fill the SMs: v5");
  // Long K where neither v4's nor v5's whole image fits: v5 with the image one part of K at a time.
  // Measured (session 15 run 1): Llama-70B down (4 parts) m = 2 24.9 us (was v3 76.8), m = 4 34.0
  // (was v2 62.8); Llama-8B down m = 4 (7 parts) 16.9 us against v2's 26.1; session 16 run 1 at
  // m = 8: Llama-8B down (7 parts) 21.0 against v2's 40.6, BitNet-2B down (14 parts) 20.6 against
  // 22.7.
  const std::int64_t mm = m < 1 ? 1 : m;
  const bool v5_runs = sm90 && m <= 8 && n < (std::int64_t{1} << 31) && cuda_ternary::tq2_stream_v5_image_plan(mm, n, k).image_groups > 0 &&
                       cuda_ternary::tq2_stream_v5_parts_for(mm, n, k).parts <= cuda_ternary::kTq2V5MaxAutoParts;
  if (v5_runs && cuda_ternary::tq2_stream_v4_smem(mm, k, cuda_ternary::kTq2V4MinStages).total < 0 &&
      cuda_ternary::tq2_stream_v5_image_plan(mm, n, k).sliced)
    return plan(Tq2Route::StreamV5, "decode m <= 8 on sm_90 at a K too long for v4's image: v5, the image one part of K at a time");
  // v4 also takes m = 5..8 on small N (n <= 4096): 1.27-1.28x v2 at m = 8 on 3072x3072 and
  // 3840x2560, where it lost at 13824 and 14336 rows (0.77-0.94x; session 9 run 5, the
  // bench-summary router audit); session 16 run 1 at m = 8: v4 9.5 / 9.3 us against v5's 11.3 / 10.9
  // and v2's 12.0 / 11.5 on those two.
  if (m <= 4 || (m <= 8 && n <= 4096 && sm90)) {
    const bool fits = n < (std::int64_t{1} << 31) && cuda_ternary::tq2_stream_v4_smem(mm, k, cuda_ternary::kTq2V4MinStages).total > 0;
    // Where v4 holds one block per SM (long K, or m = 3..4), v5 with K in at most 4 parts: 1.04-1.12x
    // v4 on the three such shapes measured (Llama-70B down m = 1, 4 parts: 23.7 vs 26.5 us; Llama-8B
    // up and BitNet-2B gate_up at m = 4, 2 parts), while with 5 or more parts it lost on every
    // measured shape, 1.3-2.3x (H200, session 14, the bench's _vs_v5 rows).
    // Where v4 holds two blocks, at m <= 2 v5 with K in at most 2 parts: session 18 run 4's A/B
    // rows (after v5's conflict-free loads and warp pairs), Llama-8B up m = 1 9.41 vs 9.86 us,
    // BitNet-2B gate_up m = 1 7.73 vs 8.74 (session 19 again: 9.38 vs 9.82, 7.70 vs 8.67); only
    // from 2^25 weights (kTq2V5TwoBlockMinWeights): nothing smaller was measured.
    const bool v4_two = cuda_ternary::tq2_stream_v4_two_blocks(mm, k);
    if (sm90 && fits && n < (std::int64_t{1} << 31) && cuda_ternary::tq2_stream_v5_image_plan(mm, n, k).image_groups > 0) {
      const int v5_parts = cuda_ternary::tq2_stream_v5_parts_for(mm, n, k).parts;
      if (v4_two ? m <= 2 && v5_parts <= 2 && n * k >= cuda_ternary::kTq2V5TwoBlockMinWeights : v5_parts <= 4)
        return plan(Tq2Route::StreamV5, v4_two ? "decode m <= 2 on sm_90, >= 2^25 weights, K in <= 2 parts: v5 (measured ahead of v4 there)"
                                             : "decode on sm_90 where v4 holds one block a SM, K in <= 4 parts: v5 (measured ahead of v4 there)");
    }
    if (sm90 && fits) return plan(Tq2Route::StreamV4, "decode m <= 4 (m <= 8 at n <= 4096) on sm_90 where the whole K's activation fits beside v4's ring: v4");
  }
  // m = 3..8 where v4 does not take it: v5 wherever it runs (K whole or in parts, the image whole
  // or sliced) before v2. Session 16 run 1, m = 8, after the part-sum fix: forced v5 beat v2 on
  // every measured shape, 1.05-1.42x (Llama-8B up 19.6 vs 25.5 us and BitNet-2B gate_up 13.8 vs
  // 18.4, both 2 parts; the 5-, 6- and 14-part shapes 1.05-1.10x).
  if (v5_runs) return plan(Tq2Route::StreamV5, "decode m 3..8 on sm_90 where v4 does not take it: v5 (measured ahead of v2)");
  // m = 9..16: v5's wide kernels (6 or 8 n8 tiles, the image a part's slice at a time) at long K
  // (k >= kTq2V5WideMinK), where v2 is slowest, and on mid-sized shapes (kTq2V5WideMinWeights).
  // Measured at m = 16 (session 16 run 1, H200, after the part-sum fix; us, wide vs v2): Llama-8B
  // down 35.4 vs 83.7, Llama-70B down 102.0 vs 190.9, Llama-8B up 34.3 vs 46.9, BitNet-2B gate_up
  // 27.0 vs 31.8, BitNet-2B down 39.0 vs 42.6; lost 5-10% on BitNet-2B qkv, dit_out and dit_proj,
  // even on Llama-70B up (docs/performance.md "The router after the part-sum fix").
  if (m > cuda_ternary::kTq2V5NarrowMaxM && m <= 16 && sm90 && n < (std::int64_t{1} << 31) &&
      cuda_ternary::tq2_stream_v5_image_plan(m, n, k).image_groups > 0 &&  // so k <= 2^20: n k < 2^51
      cuda_ternary::tq2_stream_v5_parts_for(m, n, k).parts <= cuda_ternary::kTq2V5MaxAutoParts &&
      (k >= cuda_ternary::kTq2V5WideMinK ||
       ((n + cuda_ternary::kTq2V5Rows - 1) / cuda_ternary::kTq2V5Rows < cuda_ternary::kTq2V5TargetItems &&
        n * k >= cuda_ternary::kTq2V5WideMinWeights)))
    return plan(Tq2Route::StreamV5, "decode m 9..16 on sm_90 at long K or mid-sized weights: v5's wide kernels");
  if (m <= 16) return plan(Tq2Route::StreamV2, "decode m <= 16: v2, f16 tensor cores on the activation split once");
  // Prefill on sm_90 with a 16-bit input: the Hopper engine where its tiles fill the SMs
  // (tiled_sm90_tq2_preferred: 1.0-2.1x tq2_dequant_lt there, 0.73-0.93x where they do not). An
  // f32 input stays on tq2_dequant_lt: the precision is not known here, and the engine takes only Fast.
  // First, at m <= 128, the same engine with K in parts where those fill the SMs (few 128-row
  // tiles: tiled_sm90_tq2_split_preferred; 1.4-1.9x the best other route on three H200 shapes, even on a fourth,
  // docs/performance.md "K in parts").
  if (arch.cc_major == 9 && arch.cc_minor == 0 && (in_dtype == DType::F16 || in_dtype == DType::BF16) &&
      engine::tiled_sm90_tq2_split_refusal(m, n, k, in_dtype, in_dtype, false).empty() &&
      engine::tiled_sm90_tq2_split_preferred(m, n, k, arch.sm_count))
    return plan(Tq2Route::TiledSm90SplitK, "prefill m <= 128, 16-bit input on sm_90, few 128-row tiles: the Hopper engine with K in parts");
  if (arch.cc_major == 9 && arch.cc_minor == 0 && (in_dtype == DType::F16 || in_dtype == DType::BF16) &&
      engine::tiled_sm90_tq2_shape_refusal(m, n, k, in_dtype, in_dtype, false).empty() &&
      engine::tiled_sm90_tq2_preferred(m, n, arch.sm_count))
    return plan(Tq2Route::TiledSm90, "prefill, 16-bit input on sm_90, where the engine's tiles fill the SMs: the Hopper engine");
  // tq2_tiled runs one 128 x 128 tile per SM at ~0.7 TFLOP/s (2.76 ms on 1536x27648x3072), so
  // each wave of tiles costs ~45 ns per unit of k (140 us at k = 3072) however small m is.
  // DequantLt costs ~5 launches (~15 us), the f16 weight written once and cuBLASLt's tensor-core
  // GEMMs; from ~2^27 multiply-adds (e.g. 32 x 2048 x 2048) it should win. To be calibrated.
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return macs >= 0x1p27 ? plan(Tq2Route::DequantLt, "prefill from 2^27 multiply-adds: the weight dequantized to f16 by chunks, cuBLASLt GEMMs")
                       : plan(Tq2Route::Tiled, "small prefill (under 2^27 multiply-adds): tq2_tiled");
}

Tq2Route plan_tq2(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, const ArchInfo& arch, Tq2Route force) {
  return plan_gemm_tq2(m, n, k, in_dtype, arch, force).route;
}

Receipt gemm_tq2(Context& ctx, const WeightHandle& w, const View& in, const View& out, const Tq2Options& opts) {
  Checked c = validate(ctx, w, in, out, opts);
  if (c.args.m == 0) return Receipt{"none", "", 0};
  if (c.route == Tq2Route::Cpu) return logged(c, run_cpu(ctx, *w, c.args));
  return logged(c, detail::run_tq2_cuda(ctx, c.route, c.args));
}

Receipt gemm_tq2(Context& ctx, const WeightHandle& w, const float* host_in, float* host_out, std::int64_t m,
                 std::int64_t n, std::int64_t k, const Tq2Options& opts, bool use_pool) {
  check_handle(ctx, w);
  if (m < 0) fail(ErrorCode::InvalidArgument, kOp, ": m ", m, " is negative");
  if (n != w->n() || k != w->k())
    fail(ErrorCode::InvalidArgument, kOp, ": n ", n, ", k ", k, " differ from weight ", w->key(), "'s [", w->n(), ", ",
         w->k(), "]");
  if (m == 0) return Receipt{"none", "", 0};
  if (!host_in || !host_out) fail(ErrorCode::InvalidArgument, kOp, ": null host pointer");
  const std::size_t in_bytes = to_usize(checked_mul(checked_mul(to_u64(m, "m"), to_u64(k, "k"), kOp), 4, kOp), kOp);
  const std::size_t out_bytes = to_usize(checked_mul(checked_mul(to_u64(m, "m"), to_u64(n, "n"), kOp), 4, kOp), kOp);
  if (!ctx.is_cuda())
    return gemm_tq2(ctx, w, View::contiguous(const_cast<float*>(host_in), DType::F32, {m, k}),
                    View::contiguous(host_out, DType::F32, {m, n}), opts);
  // Device scratch: the context's grow-only pool, or fresh buffers (the pre-pool behaviour).
  DeviceBuffer fresh_in, fresh_out;
  void* din;
  void* dout;
  if (use_pool) {
    BufferPool& pool = detail::ternary_pool(ctx);
    din = pool.get("in", in_bytes);
    dout = pool.get("out", out_bytes);
  } else {
    fresh_in = DeviceBuffer(in_bytes, ctx.arch().device_index);
    fresh_out = DeviceBuffer(out_bytes, ctx.arch().device_index);
    din = fresh_in.data(), dout = fresh_out.data();
  }
  View in = View::contiguous(din, DType::F32, {m, k}, DeviceKind::CUDA, ctx.arch().device_index);
  View out = View::contiguous(dout, DType::F32, {m, n}, DeviceKind::CUDA, ctx.arch().device_index);
  Checked c = validate(ctx, w, in, out, opts);  // resolve the route before any copy
  Receipt r = logged(c, detail::run_tq2_cuda(ctx, c.route, c.args,
                                                  [&] { detail::cuda_copy_async(din, host_in, in_bytes, ctx.stream()); }));
  detail::cuda_copy_async(host_out, dout, out_bytes, ctx.stream());
  ctx.synchronize();
  return r;
}

}  // namespace llmm
