#include "system_info.hpp"

#include <sstream>

#include "llmm/version.hpp"

#ifdef LLMM_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace llmm::bench {

std::string device_label(const Context& ctx) {
  if (!ctx.is_cuda()) return "cpu";
  return "cuda:" + std::to_string(ctx.arch().device_index) + " " + ctx.arch().name;
}

std::string system_line(const Context& ctx) {
  std::ostringstream os;
  const ArchInfo& a = ctx.arch();
  if (!ctx.is_cuda()) {
    os << "system: CPU reference backend, " << a.cpu_threads << " threads"
       << (built_with_cuda() ? " (built with CUDA, no device visible)" : " (built without CUDA)");
    return os.str();
  }
  os << "system: " << a.name << ", sm_" << a.cc_major << a.cc_minor << ", " << a.sm_count << " SMs, L2 "
     << a.l2_bytes / (1024 * 1024) << " MiB, " << a.global_mem_bytes / (1024 * 1024 * 1024) << " GiB, SM clock "
     << a.sm_clock_khz / 1000 << " MHz, memory clock " << a.mem_clock_khz / 1000 << " MHz x " << a.mem_bus_width_bits
     << " bits";
#ifdef LLMM_HAS_CUDA
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  os << ", driver API " << driver / 1000 << "." << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "."
     << (runtime % 1000) / 10;
#endif
  return os.str();
}

namespace {
std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}
}  // namespace

std::string system_json(const Context& ctx) {
#ifndef LLMM_GIT_SHA
#define LLMM_GIT_SHA "unknown"
#endif
  const ArchInfo& a = ctx.arch();
  std::ostringstream os;
  os << "{\"system\": " << quoted(system_line(ctx)) << ", \"llmm_version\": " << quoted(LLMM_VERSION_STRING)
     << ", \"git_sha\": " << quoted(LLMM_GIT_SHA) << ", \"backend\": " << quoted(ctx.is_cuda() ? "cuda" : "cpu")
     << ", \"device\": " << quoted(a.name) << ", \"cpu_threads\": " << a.cpu_threads;
  if (ctx.is_cuda()) {
    os << ", \"cc\": \"" << a.cc_major << "." << a.cc_minor << "\", \"sms\": " << a.sm_count
       << ", \"l2_mib\": " << a.l2_bytes / (1024 * 1024) << ", \"mem_gib\": " << a.global_mem_bytes / (1024 * 1024 * 1024)
       << ", \"sm_clock_mhz\": " << a.sm_clock_khz / 1000 << ", \"mem_clock_mhz\": " << a.mem_clock_khz / 1000
       << ", \"bus_bits\": " << a.mem_bus_width_bits;
#ifdef LLMM_HAS_CUDA
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    os << ", \"driver\": " << driver << ", \"runtime\": " << runtime;
#endif
  }
  os << "}";
  return os.str();
}

}  // namespace llmm::bench
