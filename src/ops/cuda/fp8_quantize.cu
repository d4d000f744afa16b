// fp8_quantize, CUDA: elementwise, one thread per element in a grid-stride loop. Views of
// rank 1..4 are seen as rank 4 (leading size-1 dims); when both are contiguous the linear
// index is the offset, otherwise it is split into four indices and dotted with each view's
// strides. The math is the reference's to the bit: an IEEE f32 division (nvcc's default
// -prec-div=true; this file must never be built with fast math) and the saturating encode.
#include <algorithm>
#include <type_traits>

#include "common.cuh"
#include "kestrel/ops/fp8_quantize.h"

namespace kestrel::ops::cuda {

namespace {

struct Fp8QuantizeParams {
  __nv_fp8_e4m3* out;  // [n0, n1, n2, n3] strides so
  const void* x;       // [n0, n1, n2, n3] strides sx
  int64_t n[4], so[4], sx[4];
  int64_t numel;
  float scale;
};

constexpr int kThreads = 256;
// Enough blocks to fill an H200 many times over; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 1 << 16;

template <typename T, bool kContiguous>
__global__ void __launch_bounds__(kThreads) fp8_quantize_kernel(Fp8QuantizeParams p) {
  const T* x = static_cast<const T*>(p.x);
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
    p.out[oo] = from_f32<__nv_fp8_e4m3>(to_f32(x[xo]) / p.scale);
  }
}

}  // namespace

Support fp8_quantize_supports(const Fp8QuantizeArgs&) { return Support::yes(); }

void fp8_quantize(const Fp8QuantizeArgs& a, Stream stream) {
  Fp8QuantizeParams p{};
  p.out = static_cast<__nv_fp8_e4m3*>(a.out.data);
  p.x = a.x.data;
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
  dispatch_float(a.x.dtype, "fp8_quantize", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      throw Error("fp8_quantize: x must not be fp8");  // excluded by fp8_quantize_check
    } else if (contiguous) {
      fp8_quantize_kernel<T, true><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("fp8_quantize_kernel");
    } else {
      fp8_quantize_kernel<T, false><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("fp8_quantize_kernel");
    }
  });
}

}  // namespace kestrel::ops::cuda
