// fp8_dequantize, CUDA: elementwise over two views of rank 1..4 and any strides (the walk in
// elementwise_pair.cuh: one thread per element, grid-stride). The math is the reference's to
// the bit: an exact decode, one f32 multiply, one rounding to the output dtype; a NaN is
// written as the output dtype's canonical NaN.
#include <type_traits>

#include "elementwise_pair.cuh"
#include "kestrel/ops/fp8_dequantize.h"

namespace kestrel::ops::cuda {

namespace {

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
__global__ void __launch_bounds__(kPairThreads)
    fp8_dequantize_kernel(PairShape s, T* out, const __nv_fp8_e4m3* x, float scale) {
  for_each_pair<kContiguous>(s, [&](int64_t oo, int64_t xo) { out[oo] = dequantized<T>(to_f32(x[xo]) * scale); });
}

}  // namespace

Support fp8_dequantize_supports(const Fp8DequantizeArgs&) { return Support::yes(); }

void fp8_dequantize(const Fp8DequantizeArgs& a, Stream stream) {
  const PairShape s = pair_shape(a.out, a.x);
  if (s.numel == 0) return;
  const auto* x = static_cast<const __nv_fp8_e4m3*>(a.x.data);
  dispatch_float(a.out.dtype, "fp8_dequantize", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      throw Error("fp8_dequantize: out must not be fp8");  // excluded by fp8_dequantize_check
    } else {
      T* out = static_cast<T*>(a.out.data);
      if (s.contiguous) {
        fp8_dequantize_kernel<T, true><<<pair_blocks(s.numel), kPairThreads, 0, as_cuda(stream)>>>(s, out, x, a.scale);
      } else {
        fp8_dequantize_kernel<T, false><<<pair_blocks(s.numel), kPairThreads, 0, as_cuda(stream)>>>(s, out, x, a.scale);
      }
      KESTREL_LAUNCHED("fp8_dequantize_kernel");
    }
  });
}

}  // namespace kestrel::ops::cuda
