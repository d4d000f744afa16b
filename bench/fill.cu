// Random non-zero device fills and the event pairs the timers use.
//
// Every element is a pure function of (seed, index) through a splitmix64 hash, so a fill needs
// no state, runs at memory speed, and gives the same bytes on every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda_util.h"

namespace kestrel::bench {

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T> __device__ __forceinline__ T narrow(float v);
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 narrow<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

struct FillParams {
  void* data;  // [elems]
  int64_t elems;
  uint64_t seed;
  int kind;  // Fill::Kind
  float lo, hi;
  int64_t ilo, ispan;  // integer fills: lo and hi - lo + 1
};

template <typename T>
__global__ void fill_real_kernel(FillParams p) {
  T* out = static_cast<T*>(p.data);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.elems; i += step) {
    const uint64_t h = splitmix64(p.seed ^ splitmix64(static_cast<uint64_t>(i)));
    const float u = static_cast<float>(h >> 40) * 0x1.0p-24f;  // [0, 1) from the top 24 bits
    float v = p.lo + (p.hi - p.lo) * u;
    if (p.kind == Fill::signed_magnitude && (h & 1u)) v = -v;
    out[i] = narrow<T>(v);
  }
}

template <typename T>
__global__ void fill_int_kernel(FillParams p) {
  T* out = static_cast<T*>(p.data);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.elems; i += step) {
    const uint64_t h = splitmix64(p.seed ^ splitmix64(static_cast<uint64_t>(i)));
    out[i] = static_cast<T>(p.ilo + static_cast<int64_t>(h % static_cast<uint64_t>(p.ispan)));
  }
}

}  // namespace

void fill_device(void* data, DType dtype, int64_t elems, const Fill& fill, uint64_t seed, cudaStream_t stream) {
  if (elems == 0) return;
  FillParams p{};
  p.data = data;
  p.elems = elems;
  p.seed = seed;
  p.kind = fill.kind;
  p.lo = static_cast<float>(fill.lo);
  p.hi = static_cast<float>(fill.hi);
  const bool is_int = dtype == DType::i32 || dtype == DType::i64;
  KESTREL_CHECK(is_int == (fill.kind == Fill::integer), "fill: an integer fill needs an integer dtype and back, got ",
                dtype_name(dtype));
  if (is_int) {
    p.ilo = static_cast<int64_t>(fill.lo);
    p.ispan = static_cast<int64_t>(fill.hi) - p.ilo + 1;
    KESTREL_CHECK(p.ispan > 0, "fill: empty integer range [", fill.lo, ", ", fill.hi, "]");
  } else {
    KESTREL_CHECK(fill.kind != Fill::signed_magnitude || fill.lo > 0, "fill: signed magnitudes need lo > 0, got ",
                  fill.lo);
  }
  // A grid-stride loop over at most 64K blocks: enough to fill the chip, few enough to launch.
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((elems + kThreads - 1) / kThreads, 65536);
  const dim3 grid(static_cast<unsigned>(blocks));
  switch (dtype) {
    case DType::f32: fill_real_kernel<float><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::bf16: fill_real_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::f16: fill_real_kernel<__half><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::fp8_e4m3: fill_real_kernel<__nv_fp8_e4m3><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::i32: fill_int_kernel<int32_t><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::i64: fill_int_kernel<int64_t><<<grid, kThreads, 0, stream>>>(p); break;
  }
  BENCH_CUDA(cudaGetLastError());
}

EventPairs::EventPairs(int n) : start_(n, nullptr), stop_(n, nullptr) {
  for (int i = 0; i < n; ++i) {
    BENCH_CUDA(cudaEventCreate(&start_[i]));
    BENCH_CUDA(cudaEventCreate(&stop_[i]));
  }
}

EventPairs::~EventPairs() {
  for (size_t i = 0; i < start_.size(); ++i) {
    if (start_[i]) cudaEventDestroy(start_[i]);
    if (stop_[i]) cudaEventDestroy(stop_[i]);
  }
}

std::vector<double> EventPairs::elapsed_ms() {
  std::vector<double> ms(start_.size());
  if (start_.empty()) return ms;
  BENCH_CUDA(cudaEventSynchronize(stop_.back()));
  for (size_t i = 0; i < start_.size(); ++i) {
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start_[i], stop_[i]));
    ms[i] = t;
  }
  return ms;
}

}  // namespace kestrel::bench
