#include "gpu/timing.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "llmm/error.hpp"

namespace llmm::bench {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(ErrorCode::Cuda, "bench timing: ", what, ": ", cudaGetErrorString(e));
}
}  // namespace

struct GraphTimer::State {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;

  float replay_ms() {
    check(cudaEventRecord(e0, stream), "cudaEventRecord");
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(e1, stream), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    return ms;
  }
  ~State() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
};

int rotation_copies(double bytes, double l2_bytes) {
  if (bytes <= 0) return 1;
  return std::clamp(static_cast<int>(std::ceil(3.0 * l2_bytes / bytes)), 2, 64);
}

GraphTimer::GraphTimer(StreamHandle stream, const std::function<void(int)>& enqueue, double target_ms)
    : s_(std::make_unique<State>()) {
  State& st = *s_;
  st.stream = stream;
  check(cudaEventCreate(&st.e0), "cudaEventCreate");
  check(cudaEventCreate(&st.e1), "cudaEventCreate");
  // Warm-up outside the graph (module load, handle set-up), then a rough per-call estimate.
  for (int i = 0; i < 3; ++i) enqueue(i);
  check(cudaStreamSynchronize(stream), "warm-up");
  check(cudaEventRecord(st.e0, stream), "cudaEventRecord");
  for (int i = 0; i < 5; ++i) enqueue(i);
  check(cudaEventRecord(st.e1, stream), "cudaEventRecord");
  check(cudaEventSynchronize(st.e1), "cudaEventSynchronize");
  float est_ms = 0;
  check(cudaEventElapsedTime(&est_ms, st.e0, st.e1), "cudaEventElapsedTime");
  calls_ = std::clamp(static_cast<int>(target_ms / std::max(est_ms / 5.0, 1e-4)), 1, 1000);

  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < calls_; ++i) enqueue(i);
  check(cudaStreamEndCapture(stream, &st.graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&st.exec, st.graph, 0), "cudaGraphInstantiate");
  // Warm replays for at least 40 ms: the clocks of an idle GPU ramp up over a few ms, and the
  // first configuration timed after a pause (setup, host checks) would otherwise run slower.
  float warm_ms = 0;
  for (int w = 0; w < 200 && warm_ms < 40.0f; ++w) warm_ms += st.replay_ms();
}

GraphTimer::~GraphTimer() = default;

void GraphTimer::measure(int repeats, std::vector<double>& samples) {
  for (int r = 0; r < repeats; ++r) samples.push_back(s_->replay_ms() * 1000.0 / calls_);
}

Timing summarize(std::vector<double> samples, int calls) {
  std::sort(samples.begin(), samples.end());
  Timing t;
  t.median_us = samples[samples.size() / 2];
  t.min_us = samples.front();
  t.max_us = samples.back();
  t.calls = calls;
  t.repeats = static_cast<int>(samples.size());
  return t;
}

Timing time_graph(StreamHandle stream, const std::function<void(int)>& enqueue, double target_ms, int repeats) {
  GraphTimer g(stream, enqueue, target_ms);
  std::vector<double> samples;
  g.measure(repeats, samples);
  return summarize(samples, g.calls());
}

std::pair<Timing, Timing> time_pair(StreamHandle stream, const std::function<void(int)>& a,
                                    const std::function<void(int)>& b, int rounds, int repeats) {
  GraphTimer ga(stream, a), gb(stream, b);
  std::vector<double> sa, sb;
  for (int r = 0; r < rounds; ++r) {
    ga.measure(repeats, sa);
    gb.measure(repeats, sb);
  }
  return {summarize(sa, ga.calls()), summarize(sb, gb.calls())};
}

}  // namespace llmm::bench
