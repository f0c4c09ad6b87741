#include "cuda/ternary/tq2_dequant_lt.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "core/ranges.hpp"
#include "core/ternary/tq2_dequant_lt_plan.hpp"
#include "core/ternary/tq2_workspace.hpp"
#include "cuda/cublaslt/cublaslt_gemm.hpp"
#include "cuda/ternary/tq2_dequant.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm::detail {
namespace {

using cuda_dense::CublasLtGemm;
using cuda_dense::DenseArgs;
using cuda_ternary::Tq2Args;
using cuda_ternary::Tq2LtPlan;

// Resolved cuBLASLt plans of a context for this route, keyed by everything but the pointers.
struct LtCache {
  std::map<std::string, std::shared_ptr<CublasLtGemm>> plans;
};

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume of a pointer.
std::uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

// out[:, chunk] (row-major [m, rows], ld d_ld) = x [m, k] . W_chunk [rows, k]^T, all f16 operands.
DenseArgs chunk_gemm(const Tq2Args& g, const void* x, std::int64_t x_ld, const void* w, void* d, std::int64_t d_ld,
                     std::int64_t rows) {
  DenseArgs a;
  a.dtype = DType::F16;
  a.m = g.m, a.n = rows, a.k = g.k;
  a.a = x, a.a_ld = x_ld;
  a.b = w, a.b_ld = g.k, a.b_trans = true;
  a.c = d, a.c_ld = d_ld;
  return a;
}

const CublasLtGemm& lt_plan(Context& ctx, const DenseArgs& a, DType out, bool device_scalars, std::uint32_t align) {
  auto& slot = ctx.cache_slot("ternary.dequant_lt.cublaslt");
  if (!slot) slot = std::make_shared<LtCache>();
  auto& cache = *static_cast<LtCache*>(slot.get());
  std::ostringstream key;
  key << a.m << ':' << a.n << ':' << a.k << ':' << a.a_ld << ':' << a.c_ld << ':' << static_cast<int>(out) << ':'
      << device_scalars << ':' << align;
  auto it = cache.plans.find(key.str());
  if (it == cache.plans.end()) {
    cuda_dense::LtGemmOptions o;
    o.out_dtype = out, o.device_scalars = device_scalars, o.min_alignment = align;
    auto plan = std::make_shared<CublasLtGemm>(ctx.cublaslt_handle(), a, cuda_dense::LtMath::Default,
                                               Context::kCublasLtWorkspaceBytes, o);
    it = cache.plans.emplace(key.str(), std::move(plan)).first;
  }
  return *it->second;
}

}  // namespace

Receipt run_tq2_dequant_lt(Context& ctx, const Tq2Args& g, const std::function<void()>& before) {
  const Tq2LtPlan p = cuda_ternary::tq2_lt_plan(g.m, g.n, g.k, g.in_dtype, g.out_dtype, g.exact, g.chunk_rows);
  std::ostringstream what;
  what << "m " << g.m << ", n " << g.n << ", k " << g.k << " (" << dtype_name(g.in_dtype) << " -> "
       << dtype_name(g.out_dtype) << ")";
  auto* const ws = static_cast<unsigned char*>(tq2_route_workspace(ctx, g, p.bytes, Tq2Route::DequantLt, what.str()));
  float* const alpha = reinterpret_cast<float*>(ws + p.alpha_off);
  unsigned char* const parts = ws + p.parts_off;
  void* const w16 = ws + p.weight_off;
  float* const temp = reinterpret_cast<float*>(ws + p.temp_off);
  const std::size_t out_es = dtype_size(g.out_dtype);

  // The GEMMs of a chunk of `rows` weight rows (pointers of chunk 0; run() takes each chunk's).
  // Chunk offsets are multiples of 128 rows, so every chunk's D keeps chunk 0's alignment.
  const void* x0 = p.parts > 0 ? static_cast<const void*>(parts) : g.in;
  const std::int64_t x_ld = p.parts > 0 ? g.k : g.in_ld;
  void* const d0 = p.via_temp ? static_cast<void*>(temp) : g.out;
  const std::int64_t d_ld = p.via_temp ? p.temp_ld : g.out_ld;
  const std::uint32_t align = std::min(alignment_of(d0), alignment_of(x0));
  struct Gemms {
    const CublasLtGemm* first = nullptr;
    const CublasLtGemm* second = nullptr;
  };
  auto resolve = [&](std::int64_t rows) {
    const DenseArgs a = chunk_gemm(g, x0, x_ld, w16, d0, d_ld, rows);
    Gemms r;
    r.first = &lt_plan(ctx, a, p.gemm_out, false, align);
    if (p.gemms == 2) r.second = r.first;  // the same GEMM, run with other host scalars
    return r;
  };
  const Gemms full = resolve(p.chunk_rows), last = resolve(p.last_rows);
  void* const lt_ws = ctx.cublaslt_workspace();

  std::vector<std::string> kinds;  // every kernel, in launch order, checked before anything is enqueued
  for (const std::string& n : {p.rowscale_kernel, p.dequant_kernel, full.first->description(),
                               full.second ? full.second->description() : std::string(), p.scale_kernel})
    if (!n.empty() && std::find(kinds.begin(), kinds.end(), n) == kinds.end()) kinds.push_back(n);
  std::string names;
  for (const std::string& n : kinds) {
    ctx.check_launchable(n);
    names += (names.empty() ? "" : "+") + n;
  }
  if (before) before();

  StreamHandle s = ctx.stream();
  int launched = 0;
  // Capture ranges, conservatively per kernel: the operands, this route's workspace and
  // cuBLASLt's (every write lies in the output or a workspace).
  auto noted = [&](const std::string& n) {
    ctx.note_launch(n, [&] {
      LaunchRanges r = tq2_ranges(g);
      const ByteRange route_ws{ws, p.bytes}, lt{lt_ws, Context::kCublasLtWorkspaceBytes};
      r.reads.insert(r.reads.end(), {route_ws, lt});
      r.writes.insert(r.writes.end(), {route_ws, lt});
      return r;
    });
    ++launched;
  };
  if (p.scaled) {
    const cuda_ternary::Tq2LtInput x{g.in, g.in_dtype, g.m, g.k, g.in_ld};
    cuda_ternary::launch_tq2_rowscale_f16(x, p.parts, parts, p.part_bytes, alpha, s);
    noted(p.rowscale_kernel);
  }
  static constexpr float kOne = 1.0f, kZero = 0.0f, kLo = 1.0f / static_cast<float>(1 << cuda_ternary::kTq2LtLoShift);
  for (std::int64_t c = 0; c < p.chunks; ++c) {
    const std::int64_t j0 = c * p.chunk_rows, rows = c + 1 == p.chunks ? p.last_rows : p.chunk_rows;
    const Gemms& gm = rows == p.chunk_rows ? full : last;
    cuda_ternary::launch_tq2_dequant_f16(g.codes, g.scales, j0, rows, g.k, w16, s);
    noted(p.dequant_kernel);
    void* const out_chunk = static_cast<unsigned char*>(g.out) + j0 * static_cast<std::int64_t>(out_es);
    void* const d = p.via_temp ? d0 : out_chunk;
    DenseArgs a = chunk_gemm(g, x0, x_ld, w16, d, d_ld, rows);
    gm.first->run(a, lt_ws, s, &kOne, &kZero);  // D = hi . W^T
    noted(gm.first->description());
    if (gm.second) {  // D = 2^-11 lo . W^T + D
      a.a = parts + p.part_bytes;
      gm.second->run(a, lt_ws, s, &kLo, &kOne);
      noted(gm.second->description());
    }
    if (p.scaled) {  // out[i][chunk] = 2^e_i D[i]
      cuda_ternary::launch_tq2_lt_scale_rows(static_cast<const float*>(d), d_ld, alpha, out_chunk, g.out_dtype, g.out_ld,
                                             g.m, rows, s);
      noted(p.scale_kernel);
    }
  }
  return Receipt{tq2_route_name(Tq2Route::DequantLt), names, launched};
}

}  // namespace llmm::detail
