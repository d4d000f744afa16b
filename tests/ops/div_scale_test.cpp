// The MLA fp8 writers' x / scale (src/ops/cuda/div_scale.h): for a power-of-two scale they
// multiply by the exact inverse, claiming the bits of the IEEE division for every input. Proven
// here exhaustively over every bf16 value (the writers' inputs, widened to f32: normals,
// subnormals, zeros of both signs, infinities, NaNs) for every power-of-two scale whose inverse
// is a float, in IEEE f32 arithmetic (the host's, the same rounding as the device's __fmul_rn /
// __fdiv_rn); and the choice itself: an inverse only where it is exact.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../../src/ops/cuda/div_scale.h"

namespace kestrel::ops::cuda::mla {
namespace {

// volatile: the compiler must do the f32 operations as written (no contraction, no folding).
float mul(float a, float b) {
  volatile float r = a * b;
  return r;
}
float div(float a, float b) {
  volatile float r = a / b;
  return r;
}

TEST(DivScale, InverseOnlyForPowersOfTwoWithAFloatInverse) {
  for (int e = -149; e <= 127; ++e) {  // every power of two a float holds, subnormals included
    const float s = std::ldexp(1.0f, e);
    const DivScale d = div_scale(s);
    EXPECT_EQ(d.scale, s);
    if (e >= -127) {  // 1 / s = 2^-e <= 2^127
      EXPECT_EQ(d.inv, std::ldexp(1.0f, -e)) << "2^" << e;
    } else {
      EXPECT_EQ(d.inv, 0.0f) << "2^" << e << ": its inverse overflows";
    }
  }
  for (float s : {0.75f, 1.5f, 2.5f, 0.625f, 3.0f, 1.0f + 1.0f / 1024, std::nextafter(1.0f, 2.0f), 448.0f / 3})
    EXPECT_EQ(div_scale(s).inv, 0.0f) << s;
  for (float s : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_EQ(div_scale(s).inv, 0.0f) << s;
  EXPECT_EQ(div_scale(-2.0f).inv, 0.0f);  // (scales are checked positive; a negative one divides)
}

TEST(DivScale, PowerOfTwoInverseGivesTheDivisionsBitsForEveryBf16) {
  int64_t checked = 0;
  for (int e = -127; e <= 127; ++e) {
    const float s = std::ldexp(1.0f, e);
    const DivScale d = div_scale(s);
    ASSERT_NE(d.inv, 0.0f) << "2^" << e;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = std::bit_cast<float>(h << 16);
      const float q_div = div(x, s), q_mul = mul(x, d.inv);
      if (std::isnan(q_div)) {
        ASSERT_TRUE(std::isnan(q_mul)) << "x bits " << h << ", scale 2^" << e;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(q_mul), std::bit_cast<uint32_t>(q_div)) << "x bits " << h << ", scale 2^" << e;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 255 * 65536);
}

}  // namespace
}  // namespace kestrel::ops::cuda::mla
