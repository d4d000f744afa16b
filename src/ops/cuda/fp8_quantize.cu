// fp8_quantize, CUDA: elementwise over two views of rank 1..4 and any strides (the walk in
// elementwise_pair.cuh: one thread per element, grid-stride). The math is the reference's to
// the bit: an IEEE f32 division (nvcc's default -prec-div=true; this file must never be built
// with fast math) and the saturating encode.
#include <type_traits>

#include "elementwise_pair.cuh"
#include "kestrel/ops/fp8_quantize.h"

namespace kestrel::ops::cuda {

namespace {

template <typename T, bool kContiguous>
__global__ void __launch_bounds__(kPairThreads)
    fp8_quantize_kernel(PairShape s, __nv_fp8_e4m3* out, const T* x, float scale) {
  for_each_pair<kContiguous>(s, [&](int64_t oo, int64_t xo) { out[oo] = from_f32<__nv_fp8_e4m3>(to_f32(x[xo]) / scale); });
}

}  // namespace

Support fp8_quantize_supports(const Fp8QuantizeArgs&) { return Support::yes(); }

void fp8_quantize(const Fp8QuantizeArgs& a, Stream stream) {
  const PairShape s = pair_shape(a.out, a.x);
  if (s.numel == 0) return;
  auto* out = static_cast<__nv_fp8_e4m3*>(a.out.data);
  dispatch_float(a.x.dtype, "fp8_quantize", [&]<typename T>() {
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      throw Error("fp8_quantize: x must not be fp8");  // excluded by fp8_quantize_check
    } else {
      const T* x = static_cast<const T*>(a.x.data);
      if (s.contiguous) {
        fp8_quantize_kernel<T, true><<<pair_blocks(s.numel), kPairThreads, 0, as_cuda(stream)>>>(s, out, x, a.scale);
      } else {
        fp8_quantize_kernel<T, false><<<pair_blocks(s.numel), kPairThreads, 0, as_cuda(stream)>>>(s, out, x, a.scale);
      }
      KESTREL_LAUNCHED("fp8_quantize_kernel");
    }
  });
}

}  // namespace kestrel::ops::cuda
