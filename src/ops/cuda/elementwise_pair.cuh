// Elementwise ops over two views of one shape (out and x, rank 1..4, any strides), one thread
// per element in a grid-stride loop: the fp8 quantize / dequantize kernels. The views are seen
// as rank 4 (leading size-1 dims); when both are contiguous the flat index is the offset,
// otherwise it is split into four indices and dotted with each view's strides.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common.cuh"

namespace kestrel::ops::cuda {

struct PairShape {
  int64_t n[4], so[4], sx[4];  // sizes; strides of out and of x (elements)
  int64_t numel;
  bool contiguous;             // both views contiguous: offsets are the flat index
};

inline PairShape pair_shape(const TensorView& out, const TensorView& x) {
  PairShape s{};
  const int lead = 4 - out.rank;
  for (int d = 0; d < 4; ++d) {
    s.n[d] = 1;
    s.so[d] = s.sx[d] = 0;
  }
  for (int d = 0; d < out.rank; ++d) {
    s.n[lead + d] = out.size(d);
    s.so[lead + d] = out.stride(d);
    s.sx[lead + d] = x.stride(d);
  }
  s.numel = out.numel();
  s.contiguous = out.is_contiguous() && x.is_contiguous();
  return s;
}

constexpr int kPairThreads = 256;
// Enough blocks to fill an H200 many times over; the grid-stride loop covers the rest.
inline int pair_blocks(int64_t numel) {
  return static_cast<int>(std::min<int64_t>((numel + kPairThreads - 1) / kPairThreads, int64_t{1} << 16));
}

// f(out_offset, x_offset) for each element of this thread's grid-stride share.
template <bool kContiguous, typename F>
__device__ __forceinline__ void for_each_pair(const PairShape& s, F&& f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kPairThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kPairThreads + threadIdx.x; i < s.numel; i += step) {
    int64_t xo = i, oo = i;
    if constexpr (!kContiguous) {
      const int64_t i3 = i % s.n[3], r = i / s.n[3];
      const int64_t i2 = r % s.n[2], r2 = r / s.n[2];
      const int64_t i1 = r2 % s.n[1], i0 = r2 / s.n[1];
      xo = i0 * s.sx[0] + i1 * s.sx[1] + i2 * s.sx[2] + i3 * s.sx[3];
      oo = i0 * s.so[0] + i1 * s.so[1] + i2 * s.so[2] + i3 * s.so[3];
    }
    f(oo, xo);
  }
}

}  // namespace kestrel::ops::cuda
