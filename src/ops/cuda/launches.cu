// The launch counter (cuda_launches.h), the post-launch check, per-device settings and
// stream-ordered scratch.
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>
#include <utility>

#include "common.cuh"

namespace kestrel::ops::cuda {

namespace {
std::atomic<uint64_t> g_launches{0};
std::mutex g_log_mu;
std::vector<std::string>* g_log = nullptr;
}  // namespace

uint64_t launch_count() { return g_launches.load(); }

void set_launch_log(std::vector<std::string>* log) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log = log;
}

void note_launch(const char* kernel) {
  g_launches.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (g_log != nullptr) g_log->emplace_back(kernel);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(str("CUDA launch of ", kernel, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

void once_per_device(const void* tag, void (*set)()) {
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  int dev = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({dev, tag}) != 0) return;
  set();  // throws on failure, and then is tried again next time
  done.insert({dev, tag});
}

namespace {
void retain_pool_memory() {
  int dev = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool = nullptr;
  KESTREL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t keep = UINT64_MAX;
  KESTREL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}
const char kRetainPoolTag = 0;
}  // namespace

void* scratch_alloc(size_t bytes, cudaStream_t s) {
  once_per_device(&kRetainPoolTag, retain_pool_memory);
  void* p = nullptr;
  KESTREL_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, s));
  return p;
}

void scratch_free(void* p, cudaStream_t s) {
  if (p != nullptr) KESTREL_CUDA_CHECK(cudaFreeAsync(p, s));
}

int num_sms() {
  int dev = 0, sms = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  KESTREL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

int64_t l2_bytes() {
  int dev = 0, bytes = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  KESTREL_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev));
  return bytes;
}

int64_t device_memory_bytes() {
  // No device attribute holds the total, and cudaGetDeviceProperties is slow: each device's
  // answer is kept.
  static std::mutex mu;
  static std::map<int, int64_t> known;
  int dev = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(dev);
  if (it == known.end()) {
    cudaDeviceProp prop{};
    KESTREL_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    it = known.emplace(dev, static_cast<int64_t>(prop.totalGlobalMem)).first;
  }
  return it->second;
}

}  // namespace kestrel::ops::cuda
