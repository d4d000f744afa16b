// The one error type of Kestrel, and the helpers that build its messages.
//
// Every message names the op (or subsystem), the argument, what was expected and what was
// given: "rms_norm: x: expected rank 2 [T, D], got rank 3 [2, 3, 4]". The library never calls
// exit(); it throws kestrel::Error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kestrel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates anything streamable into one string.
template <typename... Parts>
std::string str(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

// "op: arg: expected X, got Y"
[[noreturn]] inline void fail_arg(const std::string& op, const std::string& arg, const std::string& expected,
                                  const std::string& got) {
  throw Error(str(op, ": ", arg, ": expected ", expected, ", got ", got));
}

}  // namespace kestrel

// Throws kestrel::Error with the concatenated message when `cond` is false.
#define KESTREL_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::kestrel::Error(::kestrel::str(__VA_ARGS__)); \
  } while (0)
