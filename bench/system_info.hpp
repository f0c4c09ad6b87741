// The system line printed before every table: device, SMs, clocks, driver and CUDA versions.
#pragma once
#include <string>

#include "llmm/context.hpp"

namespace llmm::bench {
std::string system_line(const Context& ctx);
std::string device_label(const Context& ctx);
}  // namespace llmm::bench
