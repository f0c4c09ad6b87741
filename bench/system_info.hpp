// The system line printed before every table: device, SMs, clocks, driver and CUDA versions.
#pragma once
#include <string>

#include "llmm/context.hpp"

namespace llmm::bench {
std::string system_line(const Context& ctx);
// The same as one JSON object (the first record of --json): "system" (the line), "llmm_version",
// "git_sha", "backend", "device", "cc", "sms", "l2_mib", "mem_gib", "sm_clock_mhz",
// "mem_clock_mhz", "bus_bits", "driver", "runtime", "cpu_threads".
std::string system_json(const Context& ctx);
std::string device_label(const Context& ctx);
}  // namespace llmm::bench
