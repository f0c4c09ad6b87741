// EXPECT that a call throws llmm::Error with a given code and a message containing `part`.
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "llmm/error.hpp"

namespace llmm::test {

template <class Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown (expected one containing '" << part << "')";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace llmm::test
