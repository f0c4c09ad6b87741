// GPU tests skip with a message where no CUDA device is visible, and fail instead when
// LLMM_REQUIRE_GPU=1 (scripts/gpu-check sets it), so a skipped GPU test never passes there.
#pragma once
#include <cstdlib>

#include <gtest/gtest.h>

#include "llmm/context.hpp"

#define LLMM_REQUIRE_CUDA()                                                                    \
  do {                                                                                         \
    if (!::llmm::cuda_available()) {                                                           \
      const char* req = std::getenv("LLMM_REQUIRE_GPU");                                       \
      if (req && req[0] == '1') FAIL() << "LLMM_REQUIRE_GPU=1 but no CUDA device is visible";  \
      GTEST_SKIP() << (::llmm::built_with_cuda() ? "no CUDA device visible: GPU test skipped"  \
                                                 : "built without CUDA: GPU test skipped");   \
    }                                                                                          \
  } while (0)
