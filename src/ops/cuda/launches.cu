// The launch counter (cuda_launches.h) and the post-launch check.
#include "common.cuh"

namespace kestrel::ops::cuda {

namespace {
std::atomic<uint64_t> g_launches{0};
}

uint64_t launch_count() { return g_launches.load(); }

void note_launch(const char* kernel) {
  g_launches.fetch_add(1);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(str("CUDA launch of ", kernel, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace kestrel::ops::cuda
