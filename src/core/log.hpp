// The per-call log line behind LLMM_LOG (llmm/log.hpp): ops call log_call only when log_level() > 0.
#pragma once
#include <string>

#include "llmm/log.hpp"
#include "llmm/matmul.hpp"

namespace llmm::detail {

// "llmm: <op> <problem> -> route <route> (<reason>), <n> kernel(s): <kernels>" on stderr, one write.
void log_call(const char* op, const std::string& problem, const Receipt& r, const std::string& reason);

}  // namespace llmm::detail
