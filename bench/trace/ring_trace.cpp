// llmm-ring-trace: the timeline of one tq2_stream_v5 call inside a CUDA graph of back-to-back
// calls (weights rotated past L2, as the bench times them), from the probes that a build with
// -DLLMM_RING_TRACE=ON puts into the staging and ring kernels (src/cuda/common/trace_sm90.cuh).
// Prints, relative to the traced call's first staging block (or first ring block when the image
// is converted in the block), the spread over blocks of each event, and the ends of blocks on
// SMs that hold one block against those that hold two.
//
//   llmm-ring-trace N K M [staged|inblock|auto] [calls]
//
// A diagnostic for docs/performance.md, not a benchmark: the probes cost a few stores a block.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cuda/common/trace_layout.hpp"
#include "cuda/ternary/launch.hpp"
#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace {

using namespace llmm;
namespace cc = llmm::cuda_common;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(ErrorCode::Cuda, "llmm-ring-trace: ", what, ": ", cudaGetErrorString(e));
}

std::vector<BlockTQ2_128> blocks_for(std::int64_t n, std::int64_t k) {
  std::vector<BlockTQ2_128> b(static_cast<std::size_t>(n * (k / 128)));
  std::uint64_t h = 0x243F6A8885A308D3ull;
  for (auto& blk : b) {
    for (auto& q : blk.qs) {
      h ^= h << 13, h ^= h >> 7, h ^= h << 17;
      std::uint8_t v = 0;
      for (int j = 0; j < 4; ++j) v = static_cast<std::uint8_t>(v | (((h >> (8 * j)) % 3) << (2 * j)));
      q = v;
    }
    blk.d = 0x2400;  // f16 0.0625
  }
  return b;
}

struct Spread {
  double min = 0, p10 = 0, p50 = 0, p90 = 0, max = 0;
  int count = 0;
};
Spread spread(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  s.min = v.front(), s.p10 = at(0.1), s.p50 = at(0.5), s.p90 = at(0.9), s.max = v.back(), s.count = static_cast<int>(v.size());
  return s;
}
void print(const char* name, const Spread& s) {
  if (s.count == 0) {
    std::printf("  %-34s (no samples)\n", name);
    return;
  }
  std::printf("  %-34s %5d  %7.2f %7.2f %7.2f %7.2f %7.2f\n", name, s.count, s.min, s.p10, s.p50, s.p90, s.max);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s N K M [staged|inblock|auto] [calls]\n", argv[0]);
    return 2;
  }
  const std::int64_t n = std::atoll(argv[1]), k = std::atoll(argv[2]), m = std::atoll(argv[3]);
  const std::string image = argc > 4 ? argv[4] : "auto";
  const int calls = argc > 5 ? std::atoi(argv[5]) : 20;
  try {
    Context ctx = Context::cuda(0);
    cudaStream_t s = reinterpret_cast<cudaStream_t>(ctx.stream());
    TernaryWeightCache cache(ctx);
    const auto blocks = blocks_for(n, k);
    const double packed = static_cast<double>(n * k / 4 + n * (k / 128) * 2);
    const int copies = std::max(2, static_cast<int>(3.0 * static_cast<double>(ctx.arch().l2_bytes) / packed) + 1);
    std::vector<WeightHandle> w;
    for (int i = 0; i < copies; ++i)
      w.push_back(cache.get_or_upload(static_cast<std::uint64_t>(i + 1), blocks.data(), blocks.size() * sizeof(BlockTQ2_128), n, k));
    std::vector<float> hin(static_cast<std::size_t>(m * k));
    for (std::size_t i = 0; i < hin.size(); ++i) hin[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    DeviceBuffer in(hin.size() * 4), out(static_cast<std::size_t>(m * n) * 4), trace(cc::kTraceWords * 8);
    check(cudaMemcpy(in.data(), hin.data(), hin.size() * 4, cudaMemcpyHostToDevice), "copy input");
    Tq2Options o;
    o.force_route = Tq2Route::StreamV5;
    o.stream_image = image == "inblock" ? Tq2StreamImage::InBlock : image == "staged" ? Tq2StreamImage::Staged : Tq2StreamImage::Auto;
    Receipt r;
    auto call = [&](int i) {
      r = gemm_tq2(ctx, w[static_cast<std::size_t>(i % copies)], View::contiguous(in.data(), DType::F32, {m, k}, DeviceKind::CUDA),
                   View::contiguous(out.data(), DType::F32, {m, n}, DeviceKind::CUDA), o);
    };
    call(0);  // the context's workspace, tensor-map caches, module loads
    check(cudaStreamSynchronize(s), "warm-up");
    // One graph of `calls` calls; only the last one's kernels carry the trace buffer.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (int i = 0; i < calls; ++i) {
      cuda_ternary::tq2_ring_trace_arm(i == calls - 1 ? static_cast<unsigned long long*>(trace.data()) : nullptr);
      call(i);
    }
    cuda_ternary::tq2_ring_trace_arm(nullptr);
    check(cudaStreamEndCapture(s, &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event");
    for (int i = 0; i < 20; ++i) check(cudaGraphLaunch(exec, s), "warm replay");
    check(cudaMemsetAsync(trace.data(), 0, cc::kTraceWords * 8, s), "zero trace");
    check(cudaEventRecord(e0, s), "record");
    check(cudaGraphLaunch(exec, s), "replay");
    check(cudaEventRecord(e1, s), "record");
    check(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    std::vector<unsigned long long> t(cc::kTraceWords);
    check(cudaMemcpy(t.data(), trace.data(), t.size() * 8, cudaMemcpyDeviceToHost), "copy trace");

    std::printf("llmm-ring-trace: n %lld k %lld m %lld image %s: %s (%s), %d calls in the graph, %.2f us a call\n",
                static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m), image.c_str(), r.route.c_str(),
                r.kernel.c_str(), calls, 1000.0 * ms / calls);
    // Time zero: the traced call's first staging block, else its first ring block.
    unsigned long long t0 = ~0ull;
    int stage_blocks = 0, ring_blocks = 0;
    for (int b = 0; b < cc::kTraceStageBlocks; ++b)
      if (const auto v = t[static_cast<std::size_t>(b * cc::kTraceStageWords + cc::kEvStageEntry)]) t0 = std::min(t0, v), ++stage_blocks;
    auto ring = [&](int b, int e) { return t[static_cast<std::size_t>(cc::kTraceRingBase + b * cc::kTraceRingWords + e)]; };
    for (int b = 0; b < cc::kTraceRingBlocks; ++b)
      if (ring(b, cc::kEvEntry)) ++ring_blocks;
    if (ring_blocks == 0) fail(ErrorCode::Internal, "llmm-ring-trace: no ring block wrote its probes (was the build traced?)");
    if (stage_blocks == 0)
      for (int b = 0; b < ring_blocks; ++b) t0 = std::min(t0, ring(b, cc::kEvEntry));
    auto us = [&](unsigned long long v) { return static_cast<double>(static_cast<long long>(v - t0)) * 1e-3; };
    std::printf("  %-34s %5s  %7s %7s %7s %7s %7s   (us from the first staging block)\n", "event", "blocks", "min", "p10", "p50",
                "p90", "max");
    const char* stage_names[3] = {"staging: entry", "staging: past griddepcontrol.wait", "staging: end (last warp)"};
    for (int e = 0; e < 3; ++e) {
      std::vector<double> v;
      for (int b = 0; b < stage_blocks; ++b)
        if (const auto x = t[static_cast<std::size_t>(b * cc::kTraceStageWords + e)]) v.push_back(us(x));
      print(stage_names[e], spread(v));
    }
    const std::pair<int, const char*> events[] = {
        {cc::kEvEntry, "ring: entry"},
        {cc::kEvProducerFirst, "ring: producer's first copies"},
        {cc::kEvProducerLast, "ring: producer's last copies"},
        {cc::kEvDepWait, "ring: consumers past dep. wait"},
        {cc::kEvImage, "ring: image in shared memory"},
        {cc::kEvFirstFull, "ring: warp 0's first stage full"},
        {cc::kEvLastStage, "ring: warp 0's last stage decoded"},
        {cc::kEvEnd, "ring: warp 0 stored"},
        {cc::kEvLastWarpEnd, "ring: warp 7 stored"},
    };
    std::map<unsigned long long, int> per_sm;
    for (int b = 0; b < ring_blocks; ++b) ++per_sm[ring(b, cc::kEvSm)];
    for (const auto& [e, name] : events) {
      std::vector<double> v;
      for (int b = 0; b < ring_blocks; ++b)
        if (ring(b, e)) v.push_back(us(ring(b, e)));
      print(name, spread(v));
    }
    // Durations inside a block.
    std::vector<double> fill, decode, wait_image;
    for (int b = 0; b < ring_blocks; ++b) {
      if (ring(b, cc::kEvFirstFull) && ring(b, cc::kEvProducerFirst))
        fill.push_back(static_cast<double>(static_cast<long long>(ring(b, cc::kEvFirstFull) - ring(b, cc::kEvProducerFirst))) * 1e-3);
      if (ring(b, cc::kEvLastStage) && ring(b, cc::kEvFirstFull))
        decode.push_back(static_cast<double>(static_cast<long long>(ring(b, cc::kEvLastStage) - ring(b, cc::kEvFirstFull))) * 1e-3);
      if (ring(b, cc::kEvImage) && ring(b, cc::kEvEntry))
        wait_image.push_back(static_cast<double>(static_cast<long long>(ring(b, cc::kEvImage) - ring(b, cc::kEvEntry))) * 1e-3);
    }
    // After the first stage: waiting on full stages against the rest (decode, epilogue).
    std::vector<double> waiting, busy, per_stage;
    for (int b = 0; b < ring_blocks; ++b) {
      if (!ring(b, cc::kEvLastStage) || !ring(b, cc::kEvFirstFull)) continue;
      const double span = static_cast<double>(static_cast<long long>(ring(b, cc::kEvLastStage) - ring(b, cc::kEvFirstFull))) * 1e-3;
      const double w = static_cast<double>(ring(b, cc::kEvFullWaitNs)) * 1e-3;
      waiting.push_back(w), busy.push_back(span - w);
      if (ring(b, cc::kEvStages) > 1) per_stage.push_back(1e3 * (span - w) / static_cast<double>(ring(b, cc::kEvStages) - 1));
    }
    print("dur: first copies -> first full", spread(fill));
    print("dur: warp 0 waiting on full stages", spread(waiting));
    print("dur: warp 0 not waiting (decode)", spread(busy));
    print("ns a stage decoded (warp 0)", spread(per_stage));
    print("dur: first full -> last decoded", spread(decode));
    print("dur: entry -> image", spread(wait_image));
    for (int load : {1, 2, 3}) {
      std::vector<double> v;
      for (int b = 0; b < ring_blocks; ++b)
        if (per_sm[ring(b, cc::kEvSm)] == load && ring(b, cc::kEvLastWarpEnd)) v.push_back(us(ring(b, cc::kEvLastWarpEnd)));
      if (!v.empty()) {
        const std::string name = "end, blocks on SMs holding " + std::to_string(load);
        print(name.c_str(), spread(v));
      }
    }
    std::vector<double> items;
    for (int b = 0; b < ring_blocks; ++b) items.push_back(static_cast<double>(ring(b, cc::kEvItems)));
    const Spread si = spread(items);
    std::printf("  ring blocks %d on %zu SMs, items a block %.0f..%.0f; globaltimer steps seen: ", ring_blocks, per_sm.size(), si.min,
                si.max);
    std::vector<unsigned long long> ends;
    for (int b = 0; b < ring_blocks; ++b) ends.push_back(ring(b, cc::kEvEnd));
    std::sort(ends.begin(), ends.end());
    unsigned long long step = ~0ull;
    for (std::size_t i = 1; i < ends.size(); ++i)
      if (ends[i] > ends[i - 1]) step = std::min(step, ends[i] - ends[i - 1]);
    std::printf("%llu ns\n", step);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
