#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace llmm {
namespace {

// -1: not read yet (LLMM_LOG is read on first use).
std::atomic<int> g_level{-1};

int level_from_env() noexcept {
  const char* v = std::getenv("LLMM_LOG");
  if (!v || !*v) return 0;
  const int l = std::atoi(v);
  return l > 0 ? l : 0;
}

}  // namespace

void set_log_level(int level) noexcept { g_level.store(level > 0 ? level : 0, std::memory_order_relaxed); }

int log_level() noexcept {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    int expected = -1;
    g_level.compare_exchange_strong(expected, level_from_env(), std::memory_order_relaxed);
    l = g_level.load(std::memory_order_relaxed);
  }
  return l;
}

namespace detail {

void log_call(const char* op, const std::string& problem, const Receipt& r, const std::string& reason) {
  std::string line = "llmm: ";
  line += op;
  line += ' ';
  line += problem;
  line += " -> route " + r.route;
  if (!reason.empty()) line += " (" + reason + ")";
  line += ", " + std::to_string(r.kernels_launched) + (r.kernels_launched == 1 ? " kernel" : " kernels");
  if (!r.kernel.empty()) line += ": " + r.kernel;
  line += '\n';
  std::fputs(line.c_str(), stderr);  // one write: lines of concurrent calls do not interleave
}

}  // namespace detail
}  // namespace llmm
