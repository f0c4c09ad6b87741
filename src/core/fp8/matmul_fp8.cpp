// llmm::matmul_fp8: validate, plan (pure), then the float64 CPU backend or the CUDA routes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/fp8/fp8_launch.hpp"
#include "core/runtime.hpp"
#include "core/stream_workspace.hpp"
#include "cpu/parallel_for.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/fp8.hpp"

namespace llmm {
namespace {

constexpr const char* kOp = "matmul_fp8";
constexpr std::int64_t kStreamMaxM = 16;       // the streaming gemv's most vectors (two passes of 8)
constexpr std::int64_t kStreamMaxVecs = 8;     // vectors one block holds (its largest instantiation)
constexpr int kStreamRowsPerWarp = 4;          // fixed by the kernel
constexpr std::int64_t kStreamTargetWarpsPerSm = 32;
// Auto's crossovers (bench/fp8_matmul.py rows; docs/design/fp8.md, docs/performance.md "FP8"):
// - stream (x unquantized, f32 FMAs) to m 2 for 16-bit x, to m 4 for f32 x (H100 rows);
// - for 16-bit x from m 3, stream_mma (tensor cores, x unquantized) on weights of at most
//   kStreamMmaAllMaxWeights (at m 4-16 on 4096 x 4096: 1.08-1.52x the better of stream and
//   cublaslt, H200) and, at m <= 8, on larger ones with tensor or channel scales (1.10-1.74x at
//   m 8); cuBLASLt's W8A8 GEMM elsewhere, where it serves the shape (larger block-scaled weights:
//   stream_mma 0.84-0.92x of it at m 4-8, 0.50-0.56x at m 16).
constexpr std::int64_t kStreamOverLtMaxM = 4;
constexpr std::int64_t kStreamOverMmaMaxM = 2;
constexpr std::int64_t kStreamMmaLargeMaxM = 8;
constexpr double kStreamMmaAllMaxWeights = 0x1p25;  // n x k codes (32 MiB)

// a >= 0, b > 0; no overflow near INT64_MAX.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }
// b rounded up to 256 bytes; refused (InvalidArgument) where that overflows.
std::size_t align256(std::size_t b) {
  return to_usize(checked_add(b, 255, "matmul_fp8 workspace"), "matmul_fp8 workspace") / 256 * 256;
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Why the stream route does not take the problem (nullptr: it does).
const char* stream_refusal(const MatmulFp8Desc& d, const ArchInfo& arch) {
  if (d.m < 1 || d.m > kStreamMaxM) return "m is outside 1..16";
  if (d.k % 16 != 0) return "k is not a multiple of 16";
  if (!d.stream_aligned) return "x or the codes have rows or a base not 16-byte aligned";
  if (!(arch.cc_major == 9 && arch.cc_minor == 0)) return "the kernel is built for sm_90 (hardware e4m3 conversion)";
  return nullptr;
}

const char* stream_mma_refusal(const MatmulFp8Desc& d, const ArchInfo& arch) {
  if (const char* why = stream_refusal(d, arch)) return why;
  if (d.x_dtype != DType::F16 && d.x_dtype != DType::BF16) return "x is not f16 or bf16 (the mma's operand type)";
  return nullptr;
}

// What both W8A8 routes (cublaslt, tiled_sm90) need: Fast (x is quantized), sm_90 (`arch_why`
// says why in the route's terms), k a positive multiple of 16, 16-byte aligned code and y rows.
const char* w8a8_refusal(const MatmulFp8Desc& d, const ArchInfo& arch, const char* arch_why) {
  if (d.precision == Precision::Exact) return "precision Exact keeps x unquantized (W8A8 needs Fast)";
  if (!(arch.cc_major == 9 && arch.cc_minor == 0)) return arch_why;
  if (d.k < 16 || d.k % 16 != 0) return "k is not a positive multiple of 16";
  if (!d.lt_aligned) return "the codes' or y's rows are not 16-byte aligned";
  return nullptr;
}

// The Hopper engine's W8A8 instance (int coordinates: m, n, k below 2^31 - 256).
const char* tiled_refusal(const MatmulFp8Desc& d, const ArchInfo& arch) {
  if (const char* why = w8a8_refusal(d, arch, "the Hopper tiled engine is built for sm_90a only")) return why;
  constexpr std::int64_t kMax = 0x7fffffff - 256;
  if (d.m > kMax || d.n > kMax || d.k > kMax) return "m, n or k is 2^31 - 256 or more";
  if (ceil_div(d.m, 128) * ceil_div(d.n, 128) > kMax) return "more than 2^31 tiles";
  return nullptr;
}

// tiled_sm90 over the caller's e4m3 codes and 1 x 128 scales (no quantization step).
const char* tiled_e4m3_refusal(const MatmulFp8Desc& d, const ArchInfo& arch) {
  if (d.precision == Precision::Exact)
    return "precision Exact: the e4m3 tensor cores' sums within a 128-k block are not f32 (pass Fast, the default)";
  if (const char* why = tiled_refusal(d, arch)) return why;
  if (!d.x_tma_aligned)
    return "x's codes need a 16-byte aligned base and rows, its scales a token-major layout (strides {1, ld}, ld % 4 == 0, "
           "16-byte aligned base)";
  return nullptr;
}

// Every CUDA route but tiled_sm90 reads 16/32-bit x: the plan of an e4m3 x.
Fp8Plan plan_e4m3_x(const MatmulFp8Desc& d, const ArchInfo& arch, Fp8Route force) {
  if (force != Fp8Route::Auto && force != Fp8Route::TiledSm90)
    fail(ErrorCode::Unsupported, kOp, ": route ", fp8_route_name(force), " reads x in 16 or 32 bits; x given in e4m3 runs on ",
         "tiled_sm90 (or the CPU backend)");
  if (const char* why = tiled_e4m3_refusal(d, arch))
    fail(ErrorCode::Unsupported, kOp, ": ", force == Fp8Route::Auto ? "no CUDA route takes" : "route tiled_sm90 does not take",
         " x in e4m3 for m ", d.m, " n ", d.n, " k ", d.k, ": ", why);
  Fp8Plan p;
  p.route = Fp8Route::TiledSm90;
  p.reason = force == Fp8Route::Auto ? "x given in e4m3: the Hopper engine's e4m3 wgmmas over the caller's codes and scales"
                                     : "forced";
  return p;  // no workspace: nothing to quantize
}

const char* lt_refusal(const MatmulFp8Desc& d, const ArchInfo& arch) {
  if (const char* why = w8a8_refusal(d, arch, "cuBLASLt's FP8 scale modes used here are sm_90 only")) return why;
  if (!d.lt_served) return "cuBLASLt has no FP8 algorithm for this shape and scale kind";
  return nullptr;
}

}  // namespace

const char* fp8_route_name(Fp8Route r) noexcept {
  switch (r) {
    case Fp8Route::Auto: return "auto";
    case Fp8Route::Cpu: return "cpu";
    case Fp8Route::Stream: return "stream";
    case Fp8Route::CublasLt: return "cublaslt";
    case Fp8Route::DequantLt: return "dequant_lt";
    case Fp8Route::StreamMma: return "stream_mma";
    case Fp8Route::TiledSm90: return "tiled_sm90";
  }
  return "?";
}

namespace detail {
Fp8WorkspaceLayout fp8_workspace_layout(Fp8Route route, std::int64_t m, std::int64_t n, std::int64_t k,
                                        Fp8ScaleKind kind, DType dtype) {
  Fp8WorkspaceLayout w;
  const char* what = "matmul_fp8 workspace";
  // Parts one after another, each 256-byte aligned; every size checked for overflow.
  std::size_t at = 0;
  auto part = [&](std::uint64_t count, std::uint64_t elem_bytes) {
    const std::size_t offset = at;
    at = to_usize(checked_add(at, align256(to_usize(checked_mul(count, elem_bytes, what), what)), what), what);
    return offset;
  };
  const std::uint64_t es = dtype_size(dtype);
  if (route == Fp8Route::CublasLt) {
    const std::int64_t kb = ceil_div(k, kFp8Block);
    w.lt_m = fp8_lt_rows(kind, m);
    w.y_staged = w.lt_m != m;
    w.act_codes = part(w.lt_m, k);
    w.act_scales = part(kind == Fp8ScaleKind::Block128 ? checked_mul(kb, w.lt_m, what) : w.lt_m, 4);
    std::uint64_t w_scales = 0;
    if (kind == Fp8ScaleKind::Block128) {
      w.w_scale_ld = (kb + 3) / 4 * 4;
      w_scales = checked_mul(ceil_div(n, kFp8Block), w.w_scale_ld, what);
    } else if (kind == Fp8ScaleKind::Tensor) {
      w_scales = n;  // the one scale broadcast to a per-channel vector
    }
    w.w_scales = part(w_scales, 4);
    if (w.y_staged) w.y_stage = part(checked_mul(w.lt_m, n, what), es);
    w.total = at;
  } else if (route == Fp8Route::TiledSm90) {
    // x quantized per 128 channels whatever the weight's kind; the scales [k / 128][lt_m], lt_m
    // a multiple of 4 (16-byte rows for the engine's TMA box of a tile's token scales).
    w.act_groups128 = true;
    w.lt_m = m % 4 == 0 ? m : m - m % 4 + 4;
    w.act_codes = part(w.lt_m, k);
    w.act_scales = part(checked_mul(ceil_div(k, kFp8Block), w.lt_m, what), 4);
    w.total = at;
  } else if (route == Fp8Route::DequantLt) {
    w.image = part(checked_mul(n, k, what), es);
    w.total = at;
  }
  return w;
}
}  // namespace detail

Fp8Plan plan_matmul_fp8(const MatmulFp8Desc& d, const ArchInfo& arch, Fp8Route force) {
  if (d.m < 0 || d.n < 0 || d.k < 0)
    fail(ErrorCode::InvalidArgument, kOp, ": sizes must be non-negative, got m ", d.m, " n ", d.n, " k ", d.k);
  Fp8Plan p;
  if (arch.kind == DeviceKind::CPU) {
    if (force != Fp8Route::Auto && force != Fp8Route::Cpu)
      fail(ErrorCode::Unsupported, kOp, ": route ", fp8_route_name(force), " needs a CUDA context");
    p.route = Fp8Route::Cpu;
    p.reason = "CPU context: the float64 reference";
    return p;
  }
  if (d.x_e4m3) return plan_e4m3_x(d, arch, force);
  const char* s_why = stream_refusal(d, arch);
  const char* l_why = lt_refusal(d, arch);
  switch (force) {
    case Fp8Route::Cpu: fail(ErrorCode::Unsupported, kOp, ": route cpu needs a CPU context");
    case Fp8Route::Stream:
      if (s_why) fail(ErrorCode::Unsupported, kOp, ": route stream does not take m ", d.m, " n ", d.n, " k ", d.k, ": ", s_why);
      p.route = Fp8Route::Stream, p.reason = "forced";
      break;
    case Fp8Route::CublasLt:
      if (l_why) fail(ErrorCode::Unsupported, kOp, ": route cublaslt does not take m ", d.m, " n ", d.n, " k ", d.k, ": ", l_why);
      p.route = Fp8Route::CublasLt, p.reason = "forced";
      break;
    case Fp8Route::DequantLt: p.route = Fp8Route::DequantLt, p.reason = "forced"; break;
    case Fp8Route::TiledSm90:
      if (const char* why = tiled_refusal(d, arch))
        fail(ErrorCode::Unsupported, kOp, ": route tiled_sm90 does not take m ", d.m, " n ", d.n, " k ", d.k, ": ", why);
      p.route = Fp8Route::TiledSm90, p.reason = "forced";
      break;
    case Fp8Route::StreamMma:
      if (const char* why = stream_mma_refusal(d, arch))
        fail(ErrorCode::Unsupported, kOp, ": route stream_mma does not take m ", d.m, " n ", d.n, " k ", d.k, ": ", why);
      p.route = Fp8Route::StreamMma, p.reason = "forced";
      break;
    case Fp8Route::Auto: {
      const char* m_why = stream_mma_refusal(d, arch);
      const bool small_w = static_cast<double>(d.n) * static_cast<double>(d.k) <= kStreamMmaAllMaxWeights;
      const bool mma = !m_why && d.m > kStreamOverMmaMaxM &&
                       (small_w || (d.m <= kStreamMmaLargeMaxM && d.kind != Fp8ScaleKind::Block128) || l_why);
      if (!s_why && (d.m <= (m_why ? kStreamOverLtMaxM : kStreamOverMmaMaxM) || (l_why && m_why))) {
        p.route = Fp8Route::Stream;
        p.reason = !l_why || d.m <= kStreamOverMmaMaxM ? "small m: the weights streamed once, x unquantized"
                                                        : std::string("cublaslt: ") + l_why + "; the weights streamed, x unquantized";
      } else if (mma) {
        p.route = Fp8Route::StreamMma;
        p.reason = l_why ? std::string("cublaslt: ") + l_why + "; the weights streamed once into tensor cores, x unquantized"
                         : small_w ? "m 3..16 on weights of at most 2^25 codes: the weights streamed once into tensor cores"
                                   : "m 3..8, tensor or channel scales: the weights streamed once into tensor cores";
      } else if (!l_why) {
        p.route = Fp8Route::CublasLt;
        p.reason = "x quantized per token (W8A8), cuBLASLt's FP8 GEMM with the weight's scales";
      } else {
        p.route = Fp8Route::DequantLt;
        p.reason = std::string("stream: ") + (s_why ? s_why : "m above its crossover") + "; cublaslt: " + l_why;
      }
      break;
    }
  }
  if (p.route == Fp8Route::StreamMma) {
    // 16-row tiles, K split over 1..8 warps of a 256-thread block until the device has ~16
    // warps an SM, while each warp keeps >= 2 unrolled groups of 4 rounds of 64 k.
    const std::int64_t sms = arch.sm_count > 0 ? arch.sm_count : 132;
    const std::int64_t tiles = ceil_div(std::max<std::int64_t>(d.n, 1), 16), rounds = ceil_div(d.k, 64);
    p.mma_k_warps = 1;
    while (p.mma_k_warps < 8 && tiles < sms * 16 && tiles * p.mma_k_warps < sms * 16 && rounds >= 8 * 2 * p.mma_k_warps)
      p.mma_k_warps *= 2;
  }
  if (p.route == Fp8Route::Stream) {
    // A block per pass of up to 8 vectors; K split over 1, 2 or 4 warps a row group until the
    // device has enough warps in flight, while each thread still streams >= 2 16-byte vectors.
    // f32 x holds 4 vectors a pass (8 would spill: each chunk of 16 weights is 4 x loads a vector).
    const std::int64_t max_vecs = d.x_dtype == DType::F32 ? 4 : kStreamMaxVecs;
    const int passes = static_cast<int>(ceil_div(d.m, max_vecs));
    const std::int64_t per_pass = ceil_div(d.m, passes);
    p.gemv_vecs = per_pass <= 1 ? 1 : per_pass <= 2 ? 2 : per_pass <= 4 ? 4 : 8;
    p.gemv_grid_x = passes;
    const std::int64_t sms = arch.sm_count > 0 ? arch.sm_count : 132;
    const std::int64_t row_groups = ceil_div(std::max<std::int64_t>(d.n, 1), kStreamRowsPerWarp);
    const std::int64_t k_vecs = d.k / 16;
    p.gemv_k_lanes = 32;
    while (p.gemv_k_lanes < 128 && row_groups < sms * kStreamTargetWarpsPerSm &&
           row_groups * passes * (p.gemv_k_lanes / 32) < sms * kStreamTargetWarpsPerSm &&
           k_vecs >= 4 * p.gemv_k_lanes)
      p.gemv_k_lanes *= 2;
  }
  p.workspace_bytes = detail::fp8_workspace_layout(p.route, d.m, d.n, d.k, d.kind, d.x_dtype).total;
  return p;
}

Fp8Activations quantize_fp8_activations(const View& x, std::int64_t group) {
  constexpr const char* op = "quantize_fp8_activations";
  if (x.rank != 2 || !is_float(x.dtype) || x.device != DeviceKind::CPU)
    fail(ErrorCode::InvalidArgument, op, ": x must be a float [m, k] CPU view, got ", x.describe());
  Fp8Activations a;
  a.m = x.dim(0), a.k = x.dim(1), a.group = group;
  if (group < 1) fail(ErrorCode::InvalidArgument, op, ": group ", group, " must be >= 1");
  const std::int64_t groups = ceil_div(a.k, group);
  a.codes.assign(to_usize(checked_mul(a.m, a.k, op), op), 0);
  a.scales.assign(to_usize(checked_mul(a.m, groups, op), op), 1.0f);
  for (std::int64_t i = 0; i < a.m; ++i)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t l0 = g * group, l1 = std::min(a.k, l0 + group);
      float amax = 0.0f;
      bool finite = true;
      for (std::int64_t l = l0; l < l1; ++l) {
        const float v = static_cast<float>(load_as_double(x.data, x.dtype, i * x.stride(0) + l * x.stride(1)));
        finite = finite && std::isfinite(v);
        amax = std::max(amax, std::fabs(v));
      }
      const float s = !finite ? std::numeric_limits<float>::quiet_NaN()
                      : amax == 0.0f ? 1.0f
                                     : std::max(amax / kE4M3Max, std::numeric_limits<float>::denorm_min());
      a.scales[static_cast<std::size_t>(g * a.m + i)] = s;
      for (std::int64_t l = l0; l < l1; ++l) {
        const float v = static_cast<float>(load_as_double(x.data, x.dtype, i * x.stride(0) + l * x.stride(1)));
        a.codes[static_cast<std::size_t>(i * a.k + l)] = f32_to_e4m3fn_bits(v / s, true);
      }
    }
  return a;
}

namespace {

void check_device(const Context& ctx, const View& v, const char* name) {
  validate_view(v, kOp, name);
  if (v.device != ctx.kind() || (ctx.is_cuda() && v.device_index != ctx.arch().device_index))
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " is on ", v.describe(), " but the context is ",
         ctx.is_cuda() ? "cuda:" + std::to_string(ctx.arch().device_index) : std::string("cpu"));
}

// Row stride of a rank-2 view whose innermost stride must be 1 (any, when it has <= 1 column).
std::int64_t row_stride(const View& v, const char* name) {
  if (v.empty()) return std::max<std::int64_t>(v.dim(1), 1);  // no element: the strides are never used
  if (v.dim(1) > 1 && v.stride(1) != 1)
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " ", v.describe(), " must have innermost stride 1");
  if (v.dim(0) > 1 && v.stride(0) < v.dim(1))
    fail(ErrorCode::InvalidArgument, kOp, ": ", name, " ", v.describe(), " has a row stride below its row length");
  return v.dim(0) > 1 ? v.stride(0) : std::max<std::int64_t>(v.dim(1), std::max<std::int64_t>(v.stride(0), 1));
}

// cuBLASLt asked (through the context's cache) only where the cublaslt route's other gates pass.
bool lt_served(Context& ctx, const MatmulFp8Desc& d, const detail::Fp8LaunchArgs& a) {
  const ArchInfo& arch = ctx.arch();
  if (!ctx.is_cuda() || lt_refusal(d, arch) != nullptr) return d.lt_served;
  return detail::cublaslt_fp8_serves(ctx, a);
}


}  // namespace

Fp8Plan plan_matmul_fp8(Context& ctx, MatmulFp8Desc d, Fp8Route force) {
  detail::Fp8LaunchArgs a;
  a.dtype = d.x_dtype, a.m = d.m, a.n = d.n, a.k = d.k, a.w_ld = std::max<std::int64_t>(d.k, 1),
  a.y_ld = std::max<std::int64_t>(d.n, 1), a.kind = d.kind;
  d.lt_served = d.m > 0 && d.n > 0 && lt_served(ctx, d, a);
  return plan_matmul_fp8(d, ctx.arch(), force);
}

namespace {

// The weight's checks both forms of x share (x's k given); returns the codes' row stride.
std::int64_t check_weight(const Fp8WeightView& w, std::int64_t k, const std::string& x_desc) {
  if (w.codes.rank != 2 || w.codes.dtype != DType::F8E4M3)
    fail(ErrorCode::InvalidArgument, kOp, ": codes must be an f8e4m3 [n, k] matrix, got ", w.codes.describe());
  const std::int64_t n = w.codes.dim(0);
  if (w.codes.dim(1) != k)
    fail(ErrorCode::InvalidArgument, kOp, ": x ", x_desc, " has k ", k, " but the codes ", w.codes.describe(), " have ",
         w.codes.dim(1));
  const auto [sr, sc] = fp8_scale_shape(w.kind, n, k);
  const bool scale_shape_ok = w.scales.dtype == DType::F32 && w.scales.is_contiguous() &&
                              w.scales.numel() == static_cast<std::uint64_t>(sr * sc) &&
                              (w.scales.rank != 2 || (w.scales.dim(0) == sr && w.scales.dim(1) == sc));
  if (!scale_shape_ok)
    fail(ErrorCode::InvalidArgument, kOp, ": ", fp8_scale_kind_name(w.kind), " scales of a [", n, ", ", k,
         "] weight must be a contiguous f32 [", sr, ", ", sc, "], got ", w.scales.describe());
  return row_stride(w.codes, "codes");
}

// The float64 backend: y[i, j] = sum_l x_at(i, l) * e4m3(code(j, l)) * scale of (j, l)'s group,
// rounded once into y.
template <class XAt>
Receipt run_cpu(Context& ctx, std::int64_t m, std::int64_t k, const XAt& x_at, const Fp8WeightView& w, std::int64_t w_ld,
                const View& y, std::int64_t y_ld) {
  const std::int64_t n = w.codes.dim(0);
  const auto [sr, sc] = fp8_scale_shape(w.kind, n, k);
  check_fp8_scales(kOp, w.kind, n, k, static_cast<const float*>(w.scales.data), static_cast<std::size_t>(sr * sc));
  const float* scales = static_cast<const float*>(w.scales.data);
  const auto* codes = static_cast<const std::uint8_t*>(w.codes.data);
  const std::int64_t scol = sc;  // a structured binding cannot be captured by clang's lambdas
  cpu::detail::parallel_for(m, ctx.arch().cpu_threads, [&](std::int64_t i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        const std::int64_t g = w.kind == Fp8ScaleKind::Tensor    ? 0
                               : w.kind == Fp8ScaleKind::Channel ? j
                                                                 : (j / kFp8Block) * scol + l / kFp8Block;
        s += x_at(i, l) * (static_cast<double>(e4m3fn_bits_to_f32(codes[j * w_ld + l])) * static_cast<double>(scales[g]));
      }
      store_from_double(y.data, y.dtype, i * y_ld + j, s);
    }
  });
  return Receipt{"cpu", "reference_matmul_fp8", 0};
}

// Codes and y rows as cuBLASLt's and the engine's TMA read and write them.
bool lt_rows_aligned(const View& codes, std::int64_t w_ld, const View& y, std::int64_t y_ld) {
  const std::int64_t ys = static_cast<std::int64_t>(dtype_size(y.dtype)), n = codes.dim(0), m = y.dim(0);
  return aligned16(codes.data) && aligned16(y.data) && (n <= 1 || w_ld % 16 == 0) && (m <= 1 || (y_ld * ys) % 16 == 0) &&
         (n * ys) % 16 == 0;
}

}  // namespace

Receipt matmul_fp8(Context& ctx, const View& x, const Fp8WeightView& w, const View& y, const MatmulFp8Options& opts) {
  check_device(ctx, x, "x");
  check_device(ctx, w.codes, "codes");
  check_device(ctx, w.scales, "scales");
  check_device(ctx, y, "y");
  if (x.rank != 2 || !is_float(x.dtype))
    fail(ErrorCode::InvalidArgument, kOp, ": x must be an f32/f16/bf16 [m, k] matrix, got ", x.describe());
  const std::int64_t m = x.dim(0), k = x.dim(1);
  const std::int64_t w_ld = check_weight(w, k, x.describe()), n = w.codes.dim(0);
  if (y.rank != 2 || y.dim(0) != m || y.dim(1) != n || y.dtype != x.dtype)
    fail(ErrorCode::InvalidArgument, kOp, ": y must be a ", dtype_name(x.dtype), " [", m, ", ", n, "] matrix (x's dtype), got ",
         y.describe());
  const std::int64_t x_ld = row_stride(x, "x"), y_ld = row_stride(y, "y");
  if (m == 0 || n == 0) return Receipt{"empty", "", 0};
  if (overlaps(y, x) || overlaps(y, w.codes) || overlaps(y, w.scales))
    fail(ErrorCode::InvalidArgument, kOp, ": y ", y.describe(), " overlaps an input");

  const std::size_t xs = dtype_size(x.dtype);
  MatmulFp8Desc d;
  d.m = m, d.n = n, d.k = k, d.x_dtype = x.dtype, d.kind = w.kind, d.precision = opts.precision;
  d.stream_aligned = aligned16(x.data) && aligned16(w.codes.data) &&
                     (m <= 1 || (static_cast<std::size_t>(x_ld) * xs) % 16 == 0) && (n <= 1 || w_ld % 16 == 0);
  d.lt_aligned = lt_rows_aligned(w.codes, w_ld, y, y_ld);
  detail::Fp8LaunchArgs a;
  a.dtype = x.dtype, a.m = m, a.n = n, a.k = k;
  a.x = x.data, a.x_ld = x_ld;
  a.codes = static_cast<const std::uint8_t*>(w.codes.data), a.w_ld = w_ld;
  a.kind = w.kind, a.scales = static_cast<const float*>(w.scales.data);
  a.y = y.data, a.y_ld = y_ld;
  d.lt_served = lt_served(ctx, d, a);
  const Fp8Plan plan = plan_matmul_fp8(d, ctx.arch(), opts.force_route);

  if (plan.route == Fp8Route::Cpu)
    return run_cpu(
        ctx, m, k, [&](std::int64_t i, std::int64_t l) { return load_as_double(x.data, x.dtype, i * x_ld + l); }, w, w_ld, y,
        y_ld);
  a.workspace = detail::stream_workspace(ctx, kOp, plan.workspace_bytes);
  return detail::run_matmul_fp8_cuda(ctx, plan, a);
}

Receipt matmul_fp8(Context& ctx, const Fp8ActivationView& x, const Fp8WeightView& w, const View& y,
                   const MatmulFp8Options& opts) {
  check_device(ctx, x.codes, "x codes");
  check_device(ctx, x.scales, "x scales");
  check_device(ctx, w.codes, "codes");
  check_device(ctx, w.scales, "scales");
  check_device(ctx, y, "y");
  if (x.codes.rank != 2 || x.codes.dtype != DType::F8E4M3)
    fail(ErrorCode::InvalidArgument, kOp, ": x codes must be an f8e4m3 [m, k] matrix, got ", x.codes.describe());
  const std::int64_t m = x.codes.dim(0), k = x.codes.dim(1), groups = ceil_div(k, kFp8Block);
  if (x.scales.rank != 2 || x.scales.dtype != DType::F32 || x.scales.dim(0) != m || x.scales.dim(1) != groups)
    fail(ErrorCode::InvalidArgument, kOp, ": the scales of x codes [", m, ", ", k, "] must be an f32 [", m, ", ", groups,
         "] matrix (one a token and 128 channels), got ", x.scales.describe());
  const std::int64_t w_ld = check_weight(w, k, x.codes.describe()), n = w.codes.dim(0);
  if (y.rank != 2 || y.dim(0) != m || y.dim(1) != n || !is_float(y.dtype))
    fail(ErrorCode::InvalidArgument, kOp, ": y must be an f32/f16/bf16 [", m, ", ", n, "] matrix, got ", y.describe());
  const std::int64_t x_ld = row_stride(x.codes, "x codes"), y_ld = row_stride(y, "y");
  if (m == 0 || n == 0) return Receipt{"empty", "", 0};
  if (overlaps(y, x.codes) || overlaps(y, x.scales) || overlaps(y, w.codes) || overlaps(y, w.scales))
    fail(ErrorCode::InvalidArgument, kOp, ": y ", y.describe(), " overlaps an input");

  MatmulFp8Desc d;
  d.m = m, d.n = n, d.k = k, d.x_dtype = y.dtype, d.kind = w.kind, d.precision = opts.precision;
  d.x_e4m3 = true;
  d.lt_aligned = lt_rows_aligned(w.codes, w_ld, y, y_ld);
  const std::int64_t s_tok = x.scales.stride(0), s_grp = x.scales.stride(1);
  d.x_tma_aligned = aligned16(x.codes.data) && (m <= 1 || x_ld % 16 == 0) && aligned16(x.scales.data) &&
                    (m <= 1 || s_tok == 1) && (groups <= 1 || (s_grp % 4 == 0 && s_grp >= m));
  d.lt_served = false;
  const Fp8Plan plan = plan_matmul_fp8(d, ctx.arch(), opts.force_route);

  if (plan.route == Fp8Route::Cpu) {
    const auto* xc = static_cast<const std::uint8_t*>(x.codes.data);
    const auto* xsc = static_cast<const float*>(x.scales.data);
    return run_cpu(
        ctx, m, k,
        [&](std::int64_t i, std::int64_t l) {
          return static_cast<double>(e4m3fn_bits_to_f32(xc[i * x_ld + l])) *
                 static_cast<double>(xsc[i * s_tok + (l / kFp8Block) * s_grp]);
        },
        w, w_ld, y, y_ld);
  }
  detail::Fp8LaunchArgs a;
  a.dtype = y.dtype, a.m = m, a.n = n, a.k = k;
  a.x = x.codes.data, a.x_ld = x_ld;
  a.x_e4m3 = true, a.x_scales = static_cast<const float*>(x.scales.data);
  a.x_scale_ld = groups > 1 ? s_grp : (m + 3) / 4 * 4;  // one group: the map's unused pitch, a multiple of 4
  a.codes = static_cast<const std::uint8_t*>(w.codes.data), a.w_ld = w_ld;
  a.kind = w.kind, a.scales = static_cast<const float*>(w.scales.data);
  a.y = y.data, a.y_ld = y_ld;
  return detail::run_matmul_fp8_cuda(ctx, plan, a);
}

}  // namespace llmm
