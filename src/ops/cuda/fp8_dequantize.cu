// fp8_dequantize, CUDA: elementwise, one thread per element in a grid-stride loop. Views of
// rank 1..4 are seen as rank 4 (leading size-1 dims); when both are contiguous the linear
// index is the offset, otherwise it is split into four indices and dotted with each view's
// strides. The math is the reference's to the bit: an exact decode, one f32 multiply, one
// rounding to the output dtype; a NaN is written as the output dtype's canonical NaN.
#include <algorithm>
#include <type_traits>

#include "common.cuh"
#include "kestrel/ops/fp8_dequantize.h"

namespace kestrel::ops::cuda {

namespace {

struct Fp8DequantizeParams {
  void* out;                // [n0, n1, n2, n3] strides so
  const __nv_fp8_e4m3* x;   // [n0, n1, n2, n3] strides sx
  int64_t n[4], so[4], sx[4];
  int64_t numel;
  float scale;
};

constexpr int kThreads = 256;
// Enough blocks to fill an H200 many times over; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 1 << 16;

template <typename T>
__device__ __forceinline__ T dequantized(float v) {
  if constexpr (std::is_same_v<T, float>) {
    // The canonical f32 NaN, sign dropped, as the CPU reference writes it; bf16 and f16 NaNs
    // are canonical (0x7FFF) through the conversion already.
    if (isnan(v)) return __int_as_float(0x7fffffff);
    return v;
  } else {
    return from_f32<T>(v);
  }
}

template <typename T, bool kContiguous>
__global__ void __launch_bounds__(kThreads) fp8_dequantize_kernel(Fp8DequantizeParams p) {
  T* out = static_cast<T*>(p.out);
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.numel; i += step) {
    int64_t xo = i, oo = i;
    if constexpr (!kContiguous) {
      const int64_t i3 = i % p.n[3], r = i / p.n[3];
      const int64_t i2 = r % p.n[2], r2 = r / p.n[2];
      const int64_t i1 = r2 % p.n[1], i0 = r2 / p.n[1];
      xo = i0 * p.sx[0] + i1 * p.sx[1] + i2 * p.sx[2] + i3 * p.sx[3];
      oo = i0 * p.so[0] + i1 * p.so[1] + i2 * p.so[2] + i3 * p.so[3];
    }
    out[oo] = dequantized<T>(to_f32(p.x[xo]) * p.scale);
  }
}

}  // namespace

Support fp8_dequantize_supports(const Fp8DequantizeArgs&) { return Support::yes(); }

void fp8_dequantize(const Fp8DequantizeArgs& a, Stream stream) {
  Fp8DequantizeParams p{};
  p.out = a.out.data;
  p.x = static_cast<const __nv_fp8_e4m3*>(a.x.data);
  const int lead = 4 - a.out.rank;
  for (int d = 0; d < 4; ++d) { p.n[d] = 1; p.so[d] = 0; p.sx[d] = 0; }
  for (int d = 0; d < a.out.rank; ++d) {
    p.n[lead + d] = a.out.size(d);
    p.so[lead + d] = a.out.stride(d);
    p.sx[lead + d] = a.x.stride(d);
  }
  p.numel = a.out.numel();
  p.scale = a.scale;
  if (p.numel == 0) return;
  const bool contiguous = a.out.is_contiguous() && a.x.is_contiguous();
  const int blocks = static_cast<int>(std::min<int64_t>((p.numel + kThreads - 1) / kThreads, kMaxBlocks));
  dispatch_float(a.out.dtype, "fp8_dequantize", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      throw Error("fp8_dequantize: out must not be fp8");  // excluded by fp8_dequantize_check
    } else if (contiguous) {
      fp8_dequantize_kernel<T, true><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("fp8_dequantize_kernel");
    } else {
      fp8_dequantize_kernel<T, false><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("fp8_dequantize_kernel");
    }
  });
}

}  // namespace kestrel::ops::cuda
