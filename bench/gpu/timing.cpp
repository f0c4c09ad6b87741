#include "gpu/timing.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "llmm/error.hpp"

namespace llmm::bench {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(ErrorCode::Cuda, "bench timing: ", what, ": ", cudaGetErrorString(e));
}
}  // namespace

int rotation_copies(double bytes, double l2_bytes) {
  if (bytes <= 0) return 1;
  return std::clamp(static_cast<int>(std::ceil(3.0 * l2_bytes / bytes)), 2, 64);
}

Timing time_graph(StreamHandle s, const std::function<void(int)>& enqueue, double target_ms, int repeats) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  // Warm-up outside the graph (module load, handle set-up), then a rough per-call estimate.
  for (int i = 0; i < 3; ++i) enqueue(i);
  check(cudaStreamSynchronize(s), "warm-up");
  check(cudaEventRecord(e0, s), "cudaEventRecord");
  for (int i = 0; i < 5; ++i) enqueue(i);
  check(cudaEventRecord(e1, s), "cudaEventRecord");
  check(cudaEventSynchronize(e1), "cudaEventSynchronize");
  float est_ms = 0;
  check(cudaEventElapsedTime(&est_ms, e0, e1), "cudaEventElapsedTime");
  int calls = std::clamp(static_cast<int>(target_ms / std::max(est_ms / 5.0, 1e-4)), 1, 1000);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < calls; ++i) enqueue(i);
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  // Warm replays for at least 40 ms: the clocks of an idle GPU ramp up over a few ms, and the
  // first configuration timed after a pause (setup, host checks) would otherwise run slower.
  float warm_ms = 0;
  for (int w = 0; w < 200 && warm_ms < 40.0f; ++w) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    warm_ms += ms;
  }
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    per_call.push_back(ms * 1000.0 / calls);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(per_call.begin(), per_call.end());
  Timing t;
  t.median_us = per_call[per_call.size() / 2];
  t.min_us = per_call.front();
  t.max_us = per_call.back();
  t.calls = calls;
  t.repeats = repeats;
  return t;
}

}  // namespace llmm::bench
