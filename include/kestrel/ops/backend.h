// Backends and what they can do.
//
// Every op has one argument-checking function shared by all backends, a CPU reference
// implementation that defines it, and a CUDA implementation. Before running, the dispatcher
// asks the backend `supports`; a "no" comes with a reason and is an error, never a silent
// fallback to another backend (DESIGN.md section 2).
#pragma once

#include <string>

#include "kestrel/core/tensor.h"

namespace kestrel::ops {

enum class Backend : uint8_t { cpu, cuda };

inline constexpr Backend kAllBackends[] = {Backend::cpu, Backend::cuda};

constexpr const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }
constexpr Device backend_device(Backend b) { return b == Backend::cpu ? Device::cpu : Device::cuda; }

// The answer to "can you run this?": yes, or no with the reason.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// Whether the backend exists in this build and has a device to run on.
Support backend_available(Backend b);

// Throws a kestrel::Error "<op>: backend <b> cannot run this call: <reason>" when `s` is no.
void require_support(const char* op, Backend b, const Support& s);

}  // namespace kestrel::ops
