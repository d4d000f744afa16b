// The fp8 encoders' x / scale as the MLA writers take it (mla_rows.cuh), host side, so that the
// CPU tests hold the choice to its claim (tests/ops/div_scale_test.cpp). No CUDA types.
// For a power-of-two scale, 1 / scale is exact, and x * (1 / scale) is the same real number as
// x / scale, rounded once: the bits of the IEEE division for every x (NaN, infinities, signed
// zeros, subnormals). The kernels then multiply (one FMUL) where __fdiv_rn costs a reciprocal,
// its refinement and a range check per element; other scales keep the division.
#pragma once

#include <cmath>

namespace kestrel::ops::cuda::mla {

struct DivScale {
  float scale;
  float inv;  // 1 / scale when exact (scale a power of two whose inverse is a float), else 0
};

inline DivScale div_scale(float scale) {
  int e = 0;
  const bool pow2 = std::isfinite(scale) && scale != 0.0f && std::frexp(scale, &e) == 0.5f;
  const float inv = pow2 ? 1.0f / scale : 0.0f;  // exact for a power of two unless it overflows
  return {scale, pow2 && std::isfinite(inv) && inv * scale == 1.0f ? inv : 0.0f};
}

}  // namespace kestrel::ops::cuda::mla
