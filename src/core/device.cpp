// Raw memory and streams. CUDA runtime calls are compiled only in CUDA builds; a CPU-only
// build answers "built without CUDA" wherever a CUDA device is asked for.
#include "kestrel/core/device.h"

#include <cstdlib>
#include <cstring>

#include "kestrel/core/error.h"

#if KESTREL_WITH_CUDA
#include "kestrel/core/cuda_check.h"
#endif

namespace kestrel {

bool cuda_available(std::string* why) {
#if KESTREL_WITH_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (why) *why = err != cudaSuccess ? str("no CUDA device (", cudaGetErrorString(err), ")") : "no CUDA device";
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return true;
#else
  if (why) *why = "built without CUDA";
  return false;
#endif
}

std::string cuda_device_summary() {
  std::string why;
  if (!cuda_available(&why)) return why;
#if KESTREL_WITH_CUDA
  cudaDeviceProp p{};
  KESTREL_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return str(p.name, ", sm_", p.major, p.minor, ", ", p.multiProcessorCount, " SMs, ",
             p.totalGlobalMem / 1000000000, " GB, L2 ", p.l2CacheSize / (1024 * 1024), " MiB");
#else
  return why;
#endif
}

void* device_alloc(Device d, size_t bytes) {
  if (bytes == 0) bytes = 64;  // a distinct, valid pointer even for empty tensors
  if (d == Device::cpu) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);  // as cudaMalloc aligns
    KESTREL_CHECK(p, "device_alloc: host allocation of ", bytes, " bytes failed");
    return p;
  }
#if KESTREL_WITH_CUDA
  void* p = nullptr;
  KESTREL_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
#else
  throw Error("device_alloc: cuda memory requested but this build has no CUDA backend");
#endif
}

void device_free(Device d, void* p) {
  if (!p) return;
  if (d == Device::cpu) {
    std::free(p);
    return;
  }
#if KESTREL_WITH_CUDA
  cudaFree(p);  // never throws from a destructor path
#endif
}

void memcpy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::cpu && src_dev == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if KESTREL_WITH_CUDA
  KESTREL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  throw Error("memcpy_bytes: cuda memory requested but this build has no CUDA backend");
#endif
}

Stream stream_create() {
#if KESTREL_WITH_CUDA
  cudaStream_t s = nullptr;
  KESTREL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
#else
  throw Error("stream_create: this build has no CUDA backend");
#endif
}

void stream_destroy(Stream stream) {
#if KESTREL_WITH_CUDA
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#else
  (void)stream;
#endif
}

void stream_sync(Stream stream) {
#if KESTREL_WITH_CUDA
  KESTREL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
#else
  (void)stream;
#endif
}

void device_sync() {
#if KESTREL_WITH_CUDA
  std::string why;
  if (cuda_available(&why)) KESTREL_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace kestrel
