// Test helper: a tensor on a device from a host vector, and a tensor's contents back on the
// host, for tests that run an op on each backend and compare.
#pragma once

#include <cstdint>
#include <vector>

#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"

namespace kestrel::testing_util {

// A new contiguous tensor of `shape` and `dt` on `dev` holding `host`'s bytes (which must be
// exactly the tensor's size).
template <typename T>
Tensor upload(const std::vector<T>& host, const Shape& shape, DType dt, Device dev) {
  Tensor t = Tensor::empty(shape, dt, dev);
  KESTREL_CHECK(static_cast<int64_t>(host.size() * sizeof(T)) == t.bytes(), "upload: ", host.size() * sizeof(T),
                " host bytes for a tensor of ", t.bytes());
  memcpy_bytes(t.data(), dev, host.data(), Device::cpu, host.size() * sizeof(T));
  return t;
}

// The tensor's bytes, as elements of T (uint8_t: the raw bytes).
template <typename T = uint8_t>
std::vector<T> download(const Tensor& t) {
  std::vector<T> h(static_cast<size_t>(t.bytes()) / sizeof(T));
  memcpy_bytes(h.data(), Device::cpu, t.data(), t.view().device, h.size() * sizeof(T));
  return h;
}

}  // namespace kestrel::testing_util
