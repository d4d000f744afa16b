// Shared pieces of the CUDA backend: error checks, the launch counter, and element access
// for every float dtype with the exact conversions of core/convert.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kestrel/core/cuda_check.h"
#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/cuda_launches.h"

namespace kestrel::ops::cuda {


// Call right after every <<<...>>>: counts the launch and surfaces launch errors.
void note_launch(const char* kernel);
#define KESTREL_LAUNCHED(name) ::kestrel::ops::cuda::note_launch(name)

inline cudaStream_t as_cuda(Stream s) { return static_cast<cudaStream_t>(s); }

// Launches kernel(args...) with no dynamic shared memory, as a programmatic dependent of the
// work before it on the stream when `dependent` (PDL: its CTAs may start before that work ends;
// the kernel waits in griddepcontrol.wait before it reads that work's results).
template <typename... KernelArgs, typename... Args>
void launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, cudaStream_t stream, bool dependent,
                      Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent ? 1 : 0;
  KESTREL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...));
}

// Runs `set` once per (current device, tag): settings that CUDA keeps per device, such as a
// kernel's dynamic shared-memory opt-in (cudaFuncSetAttribute). A process-wide std::call_once
// would leave every device but the first without it.
void once_per_device(const void* tag, void (*set)());

// The current device's SM count (host rules that size or shape grids read it once per call).
int num_sms();
// The current device's L2 cache size in bytes (host rules that pick a cache policy).
int64_t l2_bytes();
// The current device's memory in bytes (host rules that size scratch bounds; read once per device).
int64_t device_memory_bytes();

// Stream-ordered scratch (cudaMallocAsync / cudaFreeAsync on the stream; inside a CUDA graph
// capture these become graph memory nodes). The first call on a device makes its default
// memory pool keep freed memory (release threshold = max), so a call does not map and unmap
// pages every time the stream synchronises: without that, a 4 MB scratch cost ~50 us a call.
void* scratch_alloc(size_t bytes, cudaStream_t s);
void scratch_free(void* p, cudaStream_t s);

// ---- element types -------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_f32<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// Runs `body.template operator()<T>()` with T the CUDA type of a float dtype.
template <typename F>
void dispatch_float(DType t, const char* op, F&& body) {
  switch (t) {
    case DType::f32: body.template operator()<float>(); return;
    case DType::bf16: body.template operator()<__nv_bfloat16>(); return;
    case DType::f16: body.template operator()<__half>(); return;
    case DType::fp8_e4m3: body.template operator()<__nv_fp8_e4m3>(); return;
    default: throw Error(str(op, ": no CUDA kernel for dtype ", dtype_name(t)));
  }
}

// int64 -> int with a checked range, for kernel params that are int for speed.
inline int checked_int(int64_t v, const char* op, const char* what) {
  KESTREL_CHECK(v >= INT32_MIN && v <= INT32_MAX, op, ": ", what, " = ", v, " does not fit in int32");
  return static_cast<int>(v);
}

// The MUFU forms (one SFU instruction each): ex2.approx.ftz, relative error <= 2^-22 (results
// below 2^-126 flush to 0); lg2.approx.ftz, absolute error <= 2^-22 near 1.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Sum over a block of `kThreads` threads; every thread gets the result.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch /* [32] shared */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // scratch may be reused by the caller
  return v;
}

}  // namespace kestrel::ops::cuda
