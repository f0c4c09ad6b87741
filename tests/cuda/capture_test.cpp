// Capture mode (the seed's pending buffer ranges) on the GPU, for every op and route: each
// launch records its kernel and the byte ranges it reads and writes. Every operand lives in an
// arena with 4 KiB of 0xFF (NaN) on each side and its padding poisoned the same way, so:
//   - the results must match the float64 reference (a read outside the operands sees NaN);
//   - every write range lies inside the output, the scratch or a workspace, and every output
//     byte outside the write ranges is still 0xFF; the input arenas are unchanged;
//   - the read ranges cover every input operand.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/matmul.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"
#include "llmm/ternary.hpp"
#include "support/compare.hpp"
#include "support/gpu.hpp"
#include "support/moe_case.hpp"
#include "support/random.hpp"
#include "support/tensor.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

constexpr std::size_t kGuard = 4096;

// Which bytes of a host tensor's storage are elements of its view.
std::vector<bool> element_mask(const HostTensor& h) {
  std::vector<bool> mask(h.bytes.size(), false);
  const View& v = h.view;
  if (v.empty()) return mask;
  const std::size_t es = dtype_size(v.dtype);
  std::int64_t idx[View::kMaxRank] = {0, 0, 0, 0};
  for (std::uint64_t e = 0; e < v.numel(); ++e) {
    std::int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += idx[d] * v.stride(d);
    for (std::size_t b = 0; b < es; ++b) mask[static_cast<std::size_t>(off) * es + b] = true;
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.dim(d)) break;
      idx[d] = 0;
    }
  }
  return mask;
}

// A device copy of a host tensor in the middle of an arena of 0xFF; its padding 0xFF too.
struct Guarded {
  DeviceBuffer arena;
  View view;
  std::vector<unsigned char> host;  // the arena as uploaded
  const unsigned char* begin() const { return static_cast<const unsigned char*>(arena.data()) + kGuard; }
  std::size_t bytes = 0;            // the tensor's storage
  std::vector<unsigned char> now() const {
    std::vector<unsigned char> b(host.size());
    copy_to_host(b.data(), arena.data(), b.size());
    return b;
  }
};
Guarded guarded(const HostTensor& h) {
  Guarded g;
  g.bytes = h.bytes.size();
  g.host.assign(g.bytes + 2 * kGuard, 0xFF);
  const std::vector<bool> mask = element_mask(h);
  for (std::size_t i = 0; i < g.bytes; ++i)
    if (mask[i]) g.host[kGuard + i] = h.bytes[i];
  g.arena = DeviceBuffer(g.host.size());
  copy_to_device(g.arena.data(), g.host.data(), g.host.size());
  g.view = h.view;
  g.view.data = static_cast<unsigned char*>(g.arena.data()) + kGuard;
  g.view.device = DeviceKind::CUDA;
  return g;
}
// The tensor's bytes back into a host tensor (for the comparison).
void fetch(const Guarded& g, HostTensor& h) { copy_to_host(h.bytes.data(), g.begin(), g.bytes); }

bool inside(const ByteRange& r, const void* lo, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(r.begin);
  const auto* l = static_cast<const unsigned char*>(lo);
  return b >= l && b + r.bytes <= l + bytes;
}

// The checks common to every op: writes inside `allowed`, output bytes outside the writes
// untouched, inputs unchanged, reads covering every input hull.
void check_capture(const LaunchRecorder& rec, const Receipt& r, const Guarded& out, const std::vector<const Guarded*>& ins,
                   const std::vector<ByteRange>& allowed, const std::vector<ByteRange>& must_read, const std::string& what) {
  ASSERT_EQ(rec.records.size(), static_cast<std::size_t>(r.kernels_launched)) << what;
  ASSERT_GT(rec.records.size(), 0u) << what;
  std::vector<bool> written(out.host.size(), false);
  const auto* obase = static_cast<const unsigned char*>(out.arena.data());
  for (const LaunchRecord& lr : rec.records) {
    for (const ByteRange& w : lr.ranges.writes) {
      bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const ByteRange& a) { return inside(w, a.begin, a.bytes); });
      EXPECT_TRUE(ok) << what << ": " << lr.kernel << " writes " << w.bytes << " bytes outside the output/scratch/workspace";
      const auto* b = static_cast<const unsigned char*>(w.begin);
      if (b >= obase && b < obase + written.size())
        for (std::size_t i = 0; i < w.bytes && static_cast<std::size_t>(b - obase) + i < written.size(); ++i)
          written[static_cast<std::size_t>(b - obase) + i] = true;
    }
  }
  const std::vector<unsigned char> now = out.now();
  std::size_t stray = 0;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (!written[i] && now[i] != 0xFF) ++stray;
  EXPECT_EQ(stray, 0u) << what << ": output bytes changed outside the recorded write ranges";
  for (const Guarded* in : ins) EXPECT_EQ(in->now(), in->host) << what << ": an input arena was written";
  for (const ByteRange& need : must_read) {
    if (need.bytes == 0) continue;  // an empty input (k == 0) has nothing to read
    bool covered = false;
    for (const LaunchRecord& lr : rec.records)
      for (const ByteRange& rr : lr.ranges.reads) covered = covered || inside(need, rr.begin, rr.bytes);
    EXPECT_TRUE(covered) << what << ": no read range covers an input of " << need.bytes << " bytes";
  }
}

ByteRange hull(const Guarded& g) { return byte_range(g.view); }

}  // namespace

TEST(CaptureGpu, DenseEveryRoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  for (DenseRoute route : {DenseRoute::ZeroFill, DenseRoute::GemvWide, DenseRoute::CublasLt,
                           DenseRoute::TiledSm90})
    for (DType t : {DType::F32, DType::BF16}) {
      if (route == DenseRoute::TiledSm90 && t == DType::F32) continue;
      if (route == DenseRoute::TiledSm90 && !(ctx.arch().cc_major == 9 && ctx.arch().cc_minor == 0)) continue;
      const std::int64_t m = route == DenseRoute::GemvWide ? 5 : 67;
      const std::int64_t n = 131, k = route == DenseRoute::ZeroFill ? 0 : 200, batch = 2;
      HostTensor a = host_tensor_3d(t, batch, m, k, 8, 24), b = host_tensor_3d(t, batch, n, k, 8, 24),
                 c = host_tensor_3d(t, batch, m, n, 8, 24);
      fill_random(a.view, 1), fill_random(b.view, 2);
      Guarded ga = guarded(a), gb = guarded(b), gc = guarded(c);
      MatmulOptions o;
      o.transpose_b = true, o.force_route = route;
      LaunchRecorder rec;
      ctx.set_launch_recorder(&rec);
      Receipt r = matmul(ctx, ga.view, gb.view, gc.view, o);
      ctx.synchronize();
      ctx.set_launch_recorder(nullptr);
      const std::string what = std::string(route_name(route)) + " " + std::string(dtype_name(t));
      fetch(gc, c);
      cpu::MatmulF64 ref = cpu::matmul_f64({a.view, b.view, false, true});
      Tolerance tol{1e-30, 1.0, (t == DType::F32 ? 4 * std::ldexp(1.0, -22) : 0) + k * std::ldexp(1.0, -24), unit_roundoff(t)};
      EXPECT_TRUE(matches_reference(c.view, ref, tol)) << what;
      check_capture(rec, r, gc, {&ga, &gb},
                    {hull(gc), ByteRange{ctx.cublaslt_workspace(), Context::kCublasLtWorkspaceBytes}}, {hull(ga), hull(gb)},
                    what);
    }
}

TEST(CaptureGpu, MatmulIdBothRoutes) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  // Room to stage the bf16 rows (k 136): the i64 / bf16-input case runs the Hopper engine on sm_90
  // after moe_map, staged (Auto at m 40), the i32 one the engine sorting the rows itself (forced).
  MatmulIdScratch scratch(ctx, 16, 40, 4, 136 * 2);
  for (auto route : {MatmulIdRoute::Direct, MatmulIdRoute::GroupedPrefill})
    for (DType ids : {DType::U32, DType::I64, DType::I32}) {  // i64 / i32 ids with a bf16 input: the Hopper engine on sm_90
      if (ids == DType::I32 && (route == MatmulIdRoute::Direct || !ctx.arch().is_hopper())) continue;
      MatmulIdOptions opts;
      if (ids == DType::I32) opts.grouped_kernel = MatmulIdGroupedKernel::TiledSm90Fused;
      MoeCase c;
      c.p.m = 40, c.p.n = 70, c.p.k = 136, c.p.top_k = 4, c.p.n_experts = 16, c.p.route = route;
      c.p.input_layout = MatmulIdInputLayout::Slotted;
      c.w_dtype = DType::BF16, c.p.input_dtype = ids != DType::U32 ? DType::BF16 : DType::F32;
      c.expert_pad = 24, c.input_pad = 8, c.ids_dtype = ids;
      c.out_of_range_every = 9, c.routing = Routing::Repeats;
      MoeBuffers b = make_moe_buffers(c);
      Guarded gw = guarded(b.w), gin = guarded(b.in), gids = guarded(b.ids), gout = guarded(b.out);
      LaunchRecorder rec;
      ctx.set_launch_recorder(&rec);
      Receipt r = matmul_id(ctx, gw.view, gin.view, gids.view, gout.view, &scratch, b.p, opts);
      ctx.synchronize();
      ctx.set_launch_recorder(nullptr);
      const std::string what = std::string(matmul_id_route_name(route)) + " ids " + std::string(dtype_name(ids)) + " " + r.kernel;
      fetch(gout, b.out);
      cpu::MatmulIdF64 ref = cpu::matmul_id_f64(b.w.view.data, DType::BF16, b.in.view.data, b.ids.view.data, b.p);
      cpu::MatmulF64 dense{1, ref.rows, ref.n, 136, ref.value, ref.abs_sum};
      EXPECT_TRUE(matches_reference(View::contiguous(b.out.view.data, DType::F32, {1, ref.rows, ref.n}), dense,
                                    Tolerance{1e-30, 1.0, std::ldexp(1.0, -15) + 136 * std::ldexp(1.0, -24), 0}))
          << what;
      const ByteRange scratch_range{scratch.counts(), scratch.counts_bytes() + scratch.rows_bytes()};
      const ByteRange staged_range{scratch.staged(), scratch.staged_bytes()};
      const ByteRange counter_range{scratch.tile_counter(), sizeof(std::uint32_t)};  // the engine's tile hand-out
      check_capture(rec, r, gout, {&gw, &gin, &gids}, {hull(gout), scratch_range, staged_range, counter_range},
                    {hull(gw), hull(gin), hull(gids)}, what);
    }
}

TEST(CaptureGpu, TernaryEveryRoute) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  TernaryWeightCache cache(ctx);
  const std::int64_t n = 200;
  struct R { Tq2Route route; std::int64_t m; std::int64_t k = 384; };
  for (R rt : {R{Tq2Route::StreamV2, 1}, R{Tq2Route::StreamV2, 9},
               R{Tq2Route::StreamV4, 2}, R{Tq2Route::StreamV5, 2}, R{Tq2Route::StreamV5, 7}, R{Tq2Route::Tiled, 40}, R{Tq2Route::DequantLt, 40},
               R{Tq2Route::TiledSm90, 40}, R{Tq2Route::TiledSm90SplitK, 40, 3200}}) {  // 3200: 3 K parts
    const std::int64_t k = rt.k;
    std::vector<BlockTQ2_128> blocks = seed_tq2_blocks(n, k, 5);
    WeightHandle w = cache.get_or_upload(static_cast<std::uint64_t>(k), blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k);
    std::vector<float> wf = tq2_dequantize(blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k);
    const bool engine = rt.route == Tq2Route::TiledSm90 || rt.route == Tq2Route::TiledSm90SplitK;
    if ((rt.route == Tq2Route::StreamV4 || rt.route == Tq2Route::StreamV5 || engine) && !ctx.arch().is_hopper()) continue;  // built for sm_90a only
    HostTensor in = host_tensor_3d(DType::F32, 1, rt.m, k, 4), out = host_tensor_3d(DType::F32, 1, rt.m, n, 4);
    fill_random(in.view, 7);
    Guarded gin = guarded(in), gout = guarded(out);
    auto as2d = [](const View& v) { return View::strided(v.data, v.dtype, {v.dim(1), v.dim(2)}, {v.stride(1), 1}, v.device); };
    Tq2Options o;
    o.force_route = rt.route;
    o.precision = engine ? Precision::Fast : Precision::Exact;  // the engine rounds f32 to f16 (Fast only)
    o.workspace_bytes = tq2_workspace_bytes(rt.m, n, k, DType::F32, DType::F32, o);
    HostTensor ws_host = host_tensor(DType::U8, {static_cast<std::int64_t>(std::max<std::size_t>(o.workspace_bytes, 256))});
    Guarded gws = guarded(ws_host);  // 256-byte aligned: kGuard is a multiple of 256
    if (o.workspace_bytes > 0) o.workspace = gws.view.data;
    LaunchRecorder rec;
    ctx.set_launch_recorder(&rec);
    Receipt r = gemm_tq2(ctx, w, as2d(gin.view), as2d(gout.view), o);
    ctx.synchronize();
    ctx.set_launch_recorder(nullptr);
    const std::string what = std::string(tq2_route_name(rt.route)) + " m " + std::to_string(rt.m);
    fetch(gout, out);
    cpu::MatmulF64 ref = cpu::matmul_f64({in.view, View::contiguous(wf.data(), DType::F32, {1, n, k}), false, true});
    const double u_in = std::ldexp(1.0, engine ? -11 : -16);
    EXPECT_TRUE(matches_reference(out.view, ref, Tolerance{1e-30, 1.0, u_in + k * std::ldexp(1.0, -24), 0})) << what;
    check_capture(rec, r, gout, {&gin},
                  {hull(gout), ByteRange{gws.view.data, o.workspace_bytes},
                   ByteRange{ctx.cublaslt_workspace(), Context::kCublasLtWorkspaceBytes}},
                  {hull(gin), ByteRange{w->codes(), static_cast<std::size_t>(n * k / 4)},
                   ByteRange{w->scales(), static_cast<std::size_t>(n * k / 128 * 2)}},
                  what);
  }
}
