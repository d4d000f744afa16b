// The 3xTF32 operand split of the CUDA tensor-core products (src/ops/cuda/tf32_split.h, used by
// mma_tf32.cuh in kda_chunk_prefill) held to the bounds its comments and docs/ops/kda.md state,
// against references written here from the definitions: big is x rounded to nearest (ties away
// from zero) at 11 significant bits, small = x - big exactly, the tensor core's truncation
// keeps 11 significant bits, and a 3xTF32 product errs by at most ~2^-20 |a| |b|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "../../src/ops/cuda/tf32_split.h"

namespace {

namespace tf = kestrel::ops::cuda::tf32;

// x rounded to 11 significant bits, ties away from zero, in double (exact: 11 bits fit).
double round_tf32_ref(float x) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // x = m 2^e, 0.5 <= |m| < 1
  const double scaled = std::ldexp(m, 11);                   // 11 significant bits above the point
  const double r = std::copysign(std::floor(std::fabs(scaled) + 0.5), scaled);
  return std::ldexp(r, e - 11);
}

// Random f32 over a wide range of magnitudes (normal numbers), both signs.
float random_normal(std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-100, 100);
  std::bernoulli_distribution neg(0.5);
  const float v = std::ldexp(mant(rng), ex(rng));
  return neg(rng) ? -v : v;
}

TEST(Tf32Split, BigIsRoundToNearestTiesAwayAndSmallIsTheExactRest) {
  std::mt19937 rng(20261129);
  for (int i = 0; i < 200000; ++i) {
    const float x = random_normal(rng);
    uint32_t big = 0, small = 0;
    tf::split(x, big, small);
    ASSERT_EQ(big & ~tf::kKeepMask, 0u) << "big is not a tf32 value for x = " << x;
    ASSERT_EQ(static_cast<double>(tf::float_of(big)), round_tf32_ref(x)) << "x = " << x;
    const float s = tf::float_of(small);
    ASSERT_EQ(static_cast<double>(tf::float_of(big)) + s, static_cast<double>(x)) << "big + small != x for x = " << x;
    ASSERT_LE(std::fabs(static_cast<double>(s)), std::ldexp(std::fabs(static_cast<double>(x)), -11)) << "x = " << x;
  }
}

TEST(Tf32Split, TiesRoundAwayFromZero) {
  // 1 + 2^-10 + 2^-11 lies halfway between the tf32 values 1 + 2^-10 and 1 + 2^-9.
  const float x = 1.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -11);
  EXPECT_EQ(tf::float_of(tf::big_bits(x)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(tf::float_of(tf::big_bits(-x)), -(1.0f + std::ldexp(1.0f, -9)));
  // Just below the tie: down.
  const float below = std::nextafter(x, 0.0f);
  EXPECT_EQ(tf::float_of(tf::big_bits(below)), 1.0f + std::ldexp(1.0f, -10));
  // A carry into the exponent: the largest value below 2 that rounds up.
  const float near2 = 2.0f - std::ldexp(1.0f, -12);
  EXPECT_EQ(tf::float_of(tf::big_bits(near2)), 2.0f);
}

TEST(Tf32Split, TruncationKeepsElevenSignificantBits) {
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const float x = random_normal(rng);
    const double t = tf::trunc_tf32(x);
    ASSERT_LE(std::fabs(t), std::fabs(static_cast<double>(x))) << "truncation grew x = " << x;
    ASSERT_LT(std::fabs(static_cast<double>(x) - t), std::ldexp(std::fabs(static_cast<double>(x)), -10)) << "x = " << x;
  }
}

// The product the tensor core forms from the parts (each part as it reads it), against a b in
// double: within (2^-20 + 2^-22) |a| |b| (small's truncation on each side, and the dropped
// small * small term).
TEST(Tf32Split, ThreeTermProductErrsByAtMostTwoToMinusTwentyOfTheMagnitudes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  double worst = 0, worst_plain = 0;
  for (int i = 0; i < 200000; ++i) {
    const float a = u(rng), b = u(rng);
    uint32_t ab, as, bb, bs;
    tf::split(a, ab, as);
    tf::split(b, bb, bs);
    const double A = tf::float_of(ab), B = tf::float_of(bb);
    const double sa = tf::trunc_tf32(tf::float_of(as)), sb = tf::trunc_tf32(tf::float_of(bs));
    const double got = A * B + A * sb + sa * B;
    const double mag = std::fabs(static_cast<double>(a)) * std::fabs(static_cast<double>(b));
    if (mag == 0) continue;
    const double rel = std::fabs(got - static_cast<double>(a) * b) / mag;
    worst = std::max(worst, rel);
    ASSERT_LE(rel, std::ldexp(1.0, -20) + std::ldexp(1.0, -22)) << "a = " << a << ", b = " << b;
    const double plain = static_cast<double>(tf::trunc_tf32(a)) * tf::trunc_tf32(b);
    worst_plain = std::max(worst_plain, std::fabs(plain - static_cast<double>(a) * b) / mag);
  }
  // The bound is not vacuous: the same products from plain (truncated) operands break it by
  // orders of magnitude (up to ~2^-9).
  EXPECT_GT(worst_plain, 256 * (std::ldexp(1.0, -20) + std::ldexp(1.0, -22))) << "3xTF32 worst " << worst;
}

TEST(Tf32Split, NanPropagatesAndInfinityGivesNanSmall) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint32_t big = 0, small = 0;
  tf::split(nan, big, small);
  EXPECT_TRUE(std::isnan(tf::float_of(small))) << "a NaN operand must keep the 3xTF32 product NaN";
  EXPECT_TRUE(std::isnan(tf::trunc_tf32(nan))) << "a plain NaN operand must stay NaN";
  const float inf = std::numeric_limits<float>::infinity();
  tf::split(inf, big, small);
  EXPECT_EQ(tf::float_of(big), inf);
  EXPECT_TRUE(std::isnan(tf::float_of(small)));
}

}  // namespace
