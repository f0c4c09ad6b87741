// The version macros come from project(llmm VERSION ...) and agree with each other.
#include <string>

#include <gtest/gtest.h>

#include "llmm/llmm.hpp"

TEST(Version, MacrosAgree) {
  EXPECT_EQ(std::string(LLMM_VERSION_STRING), std::to_string(LLMM_VERSION_MAJOR) + "." + std::to_string(LLMM_VERSION_MINOR) +
                                                  "." + std::to_string(LLMM_VERSION_PATCH));
  EXPECT_EQ(LLMM_VERSION, LLMM_VERSION_MAJOR * 10000 + LLMM_VERSION_MINOR * 100 + LLMM_VERSION_PATCH);
  EXPECT_GE(LLMM_VERSION, 200);  // 0.2.0: the first version with the Hopper tiled engine
}
