// CUDA-graph timing: `calls` back-to-back invocations captured once, the graph replayed between
// CUDA events; per-call median and spread. Launch gaps vanish, so small kernels are timed as
// they run inside a model's captured graph.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "llmm/context.hpp"

namespace llmm::bench {

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int calls = 0, repeats = 0;
};

// One captured graph of `calls` invocations of enqueue(i) (use i to rotate over weight copies);
// calls is chosen so that one replay lasts about target_ms. The constructor warms up (eager
// calls, then at least 40 ms of replays, so clocks have ramped).
class GraphTimer {
 public:
  GraphTimer(StreamHandle stream, const std::function<void(int)>& enqueue, double target_ms = 3.0);
  ~GraphTimer();
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;
  // Per-call microseconds of `repeats` timed replays, appended to `samples`.
  void measure(int repeats, std::vector<double>& samples);
  int calls() const { return calls_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  int calls_ = 0;
};

Timing summarize(std::vector<double> samples, int calls);

// One graph, 15 timed replays.
Timing time_graph(StreamHandle stream, const std::function<void(int)>& enqueue, double target_ms = 3.0,
                  int repeats = 15);

// Two graphs timed in alternating rounds (A, B, A, B, ...), so that clock or thermal drift
// during the run affects both sides alike: the ratio of the two is what benchmarks report.
std::pair<Timing, Timing> time_pair(StreamHandle stream, const std::function<void(int)>& a,
                                    const std::function<void(int)>& b, int rounds = 4, int repeats = 5);

// Copies of a buffer of `bytes` needed so that rotating over them defeats an L2 of l2_bytes.
int rotation_copies(double bytes, double l2_bytes);

}  // namespace llmm::bench
