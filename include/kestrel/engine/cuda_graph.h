// CUDA-graph capture and replay of an engine step (DESIGN.md 2.3 and rule 5). The step's
// kernels read only capture-stable buffers (MlaStepBuffers, the engine's activation buffers);
// before each replay the engine refreshes those buffers on the same stream.
#pragma once

#include <functional>

#include "kestrel/core/device.h"

namespace kestrel::engine {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures everything `body` enqueues on `stream` and instantiates it. `stream` must be a
  // non-blocking stream (stream_create), not the legacy default stream. Capture mode is
  // thread-local: a capture-unsafe call (a synchronous copy, cudaMalloc) made by this thread
  // inside `body` fails the capture. Stream-ordered allocation (cudaMallocAsync /
  // cudaFreeAsync, used by mla_attention's split workspace and the fp8 chain's temporaries)
  // becomes graph memory nodes, which is legal. If `body` throws or capture fails, the stream
  // leaves capture mode and the error is rethrown. Replaces any earlier capture.
  void capture(Stream stream, const std::function<void()>& body);
  // Launches the instantiated graph on `stream` (asynchronous).
  void replay(Stream stream) const;
  bool captured() const { return exec_ != nullptr; }

 private:
  void reset();
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace kestrel::engine
