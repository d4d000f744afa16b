// CUDA plumbing shared by the harness files: checked calls and owners of streams, events and
// graphs, and the device fill of a buffer with random non-zero values.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "harness.h"
#include "kestrel/core/cuda_check.h"
#include "kestrel/core/error.h"

namespace kestrel::bench {

#define BENCH_CUDA(expr) KESTREL_CUDA_CHECK(expr)

// A non-blocking stream (graph capture needs one that is not the legacy default stream).
class OwnedStream {
 public:
  OwnedStream() { BENCH_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~OwnedStream() { cudaStreamDestroy(s_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// `n` pairs of events; pair i brackets sample i.
class EventPairs {
 public:
  explicit EventPairs(int n);
  ~EventPairs();
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;
  void start(int i, cudaStream_t s) { BENCH_CUDA(cudaEventRecord(start_[i], s)); }
  void stop(int i, cudaStream_t s) { BENCH_CUDA(cudaEventRecord(stop_[i], s)); }
  // Milliseconds of every pair; synchronises on the last stop event first.
  std::vector<double> elapsed_ms();

 private:
  std::vector<cudaEvent_t> start_, stop_;
};

// Fills `elems` elements of `dtype` at `data` as `fill` says, from `seed`, on `stream`.
void fill_device(void* data, DType dtype, int64_t elems, const Fill& fill, uint64_t seed, cudaStream_t stream);

}  // namespace kestrel::bench
