// Test helper: a call that must throw kestrel::Error whose message names what went wrong.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "kestrel/core/error.h"

namespace kestrel::testing_util {

// Runs `fn`, which must throw kestrel::Error whose message contains every one of `parts`.
inline ::testing::AssertionResult throws_error_with(const std::function<void()>& fn,
                                                    std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kestrel exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace kestrel::testing_util
