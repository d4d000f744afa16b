// The engine's own CUDA runtime calls: the stream-ordered metadata upload and CUDA graphs.
#include <cuda_runtime.h>

#include "cuda_engine.h"
#include "kestrel/core/cuda_check.h"
#include "kestrel/engine/cuda_graph.h"

namespace kestrel::engine {

namespace detail {
void upload_async(void* dst_device, const void* src_host, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  KESTREL_CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
}
}  // namespace detail

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (...) {  // a destructor must not throw; the context is failing anyway
  }
}

void CudaGraph::reset() {
  if (exec_) KESTREL_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  exec_ = nullptr;
  if (graph_) KESTREL_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  graph_ = nullptr;
}

void CudaGraph::capture(Stream stream, const std::function<void()>& body) {
  KESTREL_CHECK(stream != nullptr, "CudaGraph::capture: stream: expected a non-blocking stream (stream_create), "
                                   "got the legacy default stream");
  reset();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  KESTREL_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);  // leave capture mode; the partial graph is discarded
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  KESTREL_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  KESTREL_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void CudaGraph::replay(Stream stream) const {
  KESTREL_CHECK(exec_ != nullptr, "CudaGraph::replay: nothing captured");
  KESTREL_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)));
}

}  // namespace kestrel::engine
