// CUDA-graph timing: `calls` back-to-back invocations captured once, the graph replayed
// `repeats` times between CUDA events; per-call median and spread. Launch gaps vanish, so
// small kernels are timed as they run inside a model's captured graph.
#pragma once
#include <functional>

#include "llmm/context.hpp"

namespace llmm::bench {

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int calls = 0, repeats = 0;
};

// enqueue(i) enqueues call i on `stream` (use i to rotate over weight copies). The number of
// calls per graph is chosen so that one replay lasts about target_ms.
Timing time_graph(StreamHandle stream, const std::function<void(int)>& enqueue, double target_ms = 3.0,
                  int repeats = 15);

// Copies of a buffer of `bytes` needed so that rotating over them defeats an L2 of l2_bytes.
int rotation_copies(double bytes, double l2_bytes);

}  // namespace llmm::bench
