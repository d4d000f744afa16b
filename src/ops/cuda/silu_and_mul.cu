// silu_and_mul, CUDA: elementwise over the T x F outputs; grid.x spans the columns of a row,
// grid.y the rows (looping past 65535 rows). Two kernels:
//  - vec: when x and out have unit inner stride, 16-byte aligned bases and row strides, and F a
//    multiple of the vector width, each thread loads 16 bytes of each half and stores 16 bytes
//    (8 bf16/f16 or 4 f32), the widest single access;
//  - strided: any strides, one element per thread step.
// Both compute the same f32 chain per element, so they give the same bits.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "kestrel/ops/silu_and_mul.h"

namespace kestrel::ops::cuda {

namespace {

struct SiluAndMulParams {
  void* out;      // [T, F]
  const void* x;  // [T, 2F]
  int64_t out_s0, out_s1, x_s0, x_s1;
  int64_t T, F;
};

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;  // the hardware limit of gridDim.y; rows beyond it loop

template <typename T>
__device__ __forceinline__ float silu_mul(T gate, T up) {
  const float g = to_f32(gate);
  return (g / (1.0f + expf(-g))) * to_f32(up);
}

// grid.x covers a row's columns (elements or vectors), grid.y steps over the rows: no 64-bit
// division per element.
template <typename T>
__global__ void __launch_bounds__(kThreads) silu_and_mul_strided_kernel(SiluAndMulParams p) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (f >= p.F) return;
  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    const T* row = static_cast<const T*>(p.x) + t * p.x_s0;
    static_cast<T*>(p.out)[t * p.out_s0 + f * p.out_s1] =
        from_f32<T>(silu_mul(row[f * p.x_s1], row[(p.F + f) * p.x_s1]));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) silu_and_mul_vec_kernel(SiluAndMulParams p) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t f = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (f >= p.F) return;
  for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
    const T* row = static_cast<const T*>(p.x) + t * p.x_s0;
    const uint4 gate_v = *reinterpret_cast<const uint4*>(row + f);
    const uint4 up_v = *reinterpret_cast<const uint4*>(row + p.F + f);
    const T* gate = reinterpret_cast<const T*>(&gate_v);
    const T* up = reinterpret_cast<const T*>(&up_v);
    uint4 out_v;
    T* o = reinterpret_cast<T*>(&out_v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] = from_f32<T>(silu_mul(gate[k], up[k]));
    *reinterpret_cast<uint4*>(static_cast<T*>(p.out) + t * p.out_s0 + f) = out_v;
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The 16-byte path: unit inner strides, and every vector (row starts, the up half at F)
// on a 16-byte boundary.
bool vec_ok(const SiluAndMulArgs& a) {
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(a.out.dtype));
  const int64_t F = a.out.size(1);
  return a.out.stride(1) == 1 && a.x.stride(1) == 1 && F % vec == 0 && a.out.stride(0) % vec == 0 &&
         a.x.stride(0) % vec == 0 && aligned16(a.out.data) && aligned16(a.x.data);
}

}  // namespace

Support silu_and_mul_supports(const SiluAndMulArgs&) { return Support::yes(); }

void silu_and_mul(const SiluAndMulArgs& a, Stream stream) {
  SiluAndMulParams p{};
  p.out = a.out.data;
  p.x = a.x.data;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1);
  p.x_s0 = a.x.stride(0); p.x_s1 = a.x.stride(1);
  p.T = a.out.size(0);
  p.F = a.out.size(1);
  if (p.T * p.F == 0) return;
  const bool vec = vec_ok(a);
  const int64_t cols = vec ? p.F / (16 / static_cast<int64_t>(dtype_size(a.out.dtype))) : p.F;
  const dim3 blocks(checked_int((cols + kThreads - 1) / kThreads, "silu_and_mul", "F / 256"),
                    static_cast<unsigned>(std::min(p.T, kMaxGridY)));
  dispatch_float(a.out.dtype, "silu_and_mul", [&]<typename T>() {
    if (vec) {
      silu_and_mul_vec_kernel<T><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("silu_and_mul_vec_kernel");
    } else {
      silu_and_mul_strided_kernel<T><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("silu_and_mul_strided_kernel");
    }
  });
}

}  // namespace kestrel::ops::cuda
