// The engine's CUDA runtime calls in a build without CUDA: each is an error.
#include "cuda_engine.h"
#include "kestrel/core/error.h"
#include "kestrel/engine/cuda_graph.h"

#if !KESTREL_WITH_CUDA
namespace kestrel::engine {

namespace detail {
void upload_async(void*, const void*, size_t, Stream) { throw Error("upload_async: built without CUDA"); }
}  // namespace detail

CudaGraph::~CudaGraph() = default;
void CudaGraph::reset() {}
void CudaGraph::capture(Stream, const std::function<void()>&) { throw Error("CudaGraph::capture: built without CUDA"); }
void CudaGraph::replay(Stream) const { throw Error("CudaGraph::replay: built without CUDA"); }

}  // namespace kestrel::engine
#endif
