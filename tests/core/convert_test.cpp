// The host conversions of core/convert.h against the contract of DESIGN.md 4.1, on the CPU.
//
// Three kinds of proof, each independent of src/core/convert.cpp:
//   - named edge cases with their bits written out by hand (zeros, saturation, overflow, NaN
//     payloads of both signs, subnormals, ties);
//   - exhaustive round trips: every fp8 / bf16 / f16 pattern decodes to the value its fields
//     say (a decoder written here, in doubles) and encodes back to itself;
//   - an oracle: the nearest representable value found by search over the format's own values
//     (in doubles), ties to the even code, for every bf16 and f16 pattern widened to f32 and for
//     random f32 patterns.
// Bit-exact agreement with CUDA's own conversions is proven in convert_cuda_host_test.cu (CUDA's
// host code) and convert_gpu_test.cu (the hardware).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"

namespace kestrel {
namespace {

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

float bits(uint32_t u) { return f32_from_bits(u); }

// ---- independent decoders (fields -> double), written from the format definitions ----

// e4m3fn: bias 7; exponent 0 is subnormal (m * 2^-9); S.1111.111 is NaN; no infinity.
double fp8_value(uint8_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  if ((b & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (b & 0x80) ? -mag : mag;
}

// IEEE half: bias 15; exponent 0 is subnormal (m * 2^-24); exponent 31 is inf / NaN.
double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double mag;
  if (e == 31) {
    mag = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) ? -mag : mag;
}

// bfloat16: the top half of an f32; bias 127, exponent 0 subnormal (m * 2^-133).
double bf16_value(uint16_t h) {
  const int e = (h >> 7) & 0xff, m = h & 0x7f;
  double mag;
  if (e == 255) {
    mag = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  }
  return (h & 0x8000) ? -mag : mag;
}

// ---- the oracle: nearest value by search, ties to the even code ----

// Positive finite codes 0 .. n-1 of a format in increasing order of value (true of all three
// formats: the code order is the value order for non-negative values).
struct Format {
  std::vector<double> value;  // value[c] for code c = 0 .. n-1
  double overflow_at;         // |x| >= this (the midpoint past the largest value) overflows
  uint32_t overflow_code;     // what an overflow encodes to (saturation or inf), sign added
  uint32_t nan_code;
  uint32_t sign_bit;
};

Format fp8_format() {
  Format f{{}, 464.0, 0x7e, 0x7f, 0x80};
  for (int c = 0; c <= 0x7e; ++c) f.value.push_back(fp8_value(static_cast<uint8_t>(c)));
  return f;
}
Format f16_format() {
  Format f{{}, 65520.0, 0x7c00, 0x7fff, 0x8000};
  for (int c = 0; c < 0x7c00; ++c) f.value.push_back(f16_value(static_cast<uint16_t>(c)));
  return f;
}
Format bf16_format() {
  // Largest bf16 is (2 - 2^-7) * 2^127; the next step would be 2^128; the midpoint overflows.
  Format f{{}, std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0x7f80, 0x7fff, 0x8000};
  for (int c = 0; c < 0x7f80; ++c) f.value.push_back(bf16_value(static_cast<uint16_t>(c)));
  return f;
}

uint32_t nearest(const Format& f, float x, bool linear_search) {
  if (std::isnan(x)) return f.nan_code;
  const uint32_t sign = std::signbit(x) ? f.sign_bit : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= f.overflow_at) return sign | f.overflow_code;
  size_t best = 0;
  if (linear_search) {  // brute force: every value, keep the nearest, ties to the even code
    for (size_t c = 1; c < f.value.size(); ++c) {
      const double dc = std::fabs(f.value[c] - a), db = std::fabs(f.value[best] - a);
      if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
  } else {  // the two neighbours of a in the sorted values
    size_t lo = 0, hi = f.value.size() - 1;
    if (a >= f.value[hi]) {
      best = hi;
    } else {
      while (hi - lo > 1) {  // invariant: value[lo] <= a < value[hi]
        const size_t mid = (lo + hi) / 2;
        (f.value[mid] <= a ? lo : hi) = mid;
      }
      const double dl = a - f.value[lo], dh = f.value[hi] - a;
      best = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    }
  }
  return sign | static_cast<uint32_t>(best);
}

// ---- fp8 e4m3fn ----

TEST(ConvertFp8, EdgeCases) {
  struct Case {
    float x;
    uint8_t expected;
    const char* what;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x00, "+0"},
      {-0.0f, 0x80, "-0 keeps its sign"},
      {1.0f, 0x38, "1"},
      {-2.0f, 0xc0, "-2"},
      {448.0f, 0x7e, "max finite"},
      {-448.0f, 0xfe, "-max finite"},
      {449.0f, 0x7e, "449 rounds down to 448"},
      {463.99f, 0x7e, "below the 464 midpoint"},
      {464.0f, 0x7e, "464: tie between 448 (even) and the absent 480: to even, 448"},
      {-464.0f, 0xfe, "-464"},
      {465.0f, 0x7e, "past the midpoint: saturates"},
      {480.0f, 0x7e, "480 (would be S.1111.111, the NaN code): saturates"},
      {-480.0f, 0xfe, "-480 saturates"},
      {1e30f, 0x7e, "1e30 saturates"},
      {-1e30f, 0xfe, "-1e30 saturates"},
      {std::numeric_limits<float>::max(), 0x7e, "FLT_MAX saturates"},
      {inf, 0x7e, "+inf saturates (SATFINITE)"},
      {-inf, 0xfe, "-inf saturates"},
      {bits(0x7fc00000), 0x7f, "quiet NaN"},
      {bits(0xffc00000), 0x7f, "negative quiet NaN: sign dropped"},
      {bits(0x7f800001), 0x7f, "signalling NaN, smallest payload"},
      {bits(0xff800001), 0x7f, "negative signalling NaN"},
      {bits(0x7fbfffff), 0x7f, "signalling NaN, largest payload"},
      {bits(0xffffffff), 0x7f, "negative quiet NaN, all payload bits"},
      {bits(0x7fc00001), 0x7f, "quiet NaN with payload"},
      {0.015625f, 0x08, "2^-6: smallest normal"},
      {-0.015625f, 0x88, "-2^-6"},
      {std::ldexp(1.0f, -10), 0x00, "2^-10: tie between 0 and 2^-9, to even 0"},
      {-std::ldexp(1.0f, -10), 0x80, "-2^-10 rounds to -0"},
      {std::nextafter(std::ldexp(1.0f, -10), 1.0f), 0x01, "just above 2^-10"},
      {std::ldexp(3.0f, -10), 0x02, "1.5 * 2^-9: tie between codes 1 and 2, to even 2"},
      {std::ldexp(5.0f, -10), 0x02, "2.5 * 2^-9: tie between codes 2 and 3, to even 2"},
      {std::ldexp(15.0f, -10), 0x08, "7.5 * 2^-9: tie between 7 * 2^-9 and 2^-6, to even 2^-6"},
      {bits(0x00000001), 0x00, "smallest f32 subnormal"},
      {bits(0x80000001), 0x80, "negative f32 subnormal: -0"},
      {bits(0x007fffff), 0x00, "largest f32 subnormal"},
      {240.0f, 0x77, "240"},
      {248.0f, 0x78, "248: tie between 240 and 256, to even 256"},
      {std::nextafter(248.0f, 0.0f), 0x77, "just below 248"},
      {1.0625f, 0x38, "1 + 2^-4: tie between 1 (even) and 1.125"},
      {1.1875f, 0x3a, "1 + 3 * 2^-4: tie between 1.125 and 1.25 (even)"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(f32_to_fp8_e4m3(c.x), c.expected)
        << c.what << ": x = " << c.x << " (" << hex(f32_bits(c.x), 8) << ")";
}

TEST(ConvertFp8, SubnormalsAreMultiplesOfTwoToTheMinusNine) {
  for (int m = 0; m < 8; ++m) {
    const float v = std::ldexp(static_cast<float>(m), -9);
    EXPECT_EQ(f32_to_fp8_e4m3(v), m) << "m = " << m;
    EXPECT_EQ(f32_to_fp8_e4m3(-v), 0x80 | m) << "m = -" << m;
    EXPECT_EQ(fp8_e4m3_to_f32(static_cast<uint8_t>(m)), v) << "m = " << m;
    EXPECT_EQ(f32_bits(fp8_e4m3_to_f32(static_cast<uint8_t>(0x80 | m))), f32_bits(-v)) << "m = -" << m;
  }
}

// Between every two adjacent positive fp8 values (and their negatives): the midpoint goes to
// the even code, one f32 ulp either side goes to the nearer neighbour.
TEST(ConvertFp8, MidpointsTieToEvenBothWays) {
  int checked = 0;
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = fp8_value(static_cast<uint8_t>(c)), hi = fp8_value(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint not exact in f32";
    const uint8_t even = static_cast<uint8_t>(c % 2 == 0 ? c : c + 1);
    for (float s : {1.0f, -1.0f}) {
      const uint8_t sign = s < 0 ? 0x80 : 0;
      const float m = s * mid;
      EXPECT_EQ(f32_to_fp8_e4m3(m), sign | even) << "midpoint " << m << " of codes " << hex(c, 2) << ", "
                                                 << hex(c + 1, 2);
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(m, s * 1e9f)), sign | (c + 1)) << "just past midpoint " << m;
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(m, 0.0f)), sign | c) << "just before midpoint " << m;
      checked += 3;
    }
  }
  EXPECT_EQ(checked, 0x7e * 6);
}

TEST(ConvertFp8, DecodeEveryByte) {
  for (int b = 0; b < 256; ++b) {
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    const double want = fp8_value(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << hex(b, 2) << " should decode to NaN, got " << got;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << hex(b, 2);
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << hex(b, 2) << " sign";
    }
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), kFp8E4m3Max);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -kFp8E4m3Max);
}

TEST(ConvertFp8, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t back = f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(b)));
    const uint8_t want = (b & 0x7f) == 0x7f ? 0x7f : static_cast<uint8_t>(b);  // NaN -> canonical
    EXPECT_EQ(back, want) << hex(b, 2);
  }
}

// enc(x) is the fp8 value nearest x (ties to even, saturating), by brute force over all fp8
// values, for every bf16 and f16 bit pattern widened to f32: this covers the whole f32
// exponent range (bf16) and every fp8 rounding boundary at f16 resolution.
TEST(ConvertFp8, NearestEvenSaturatingForEveryBf16AndF16Pattern) {
  const Format f = fp8_format();
  int64_t compared = 0;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    for (float x : {bf16_to_f32(static_cast<uint16_t>(p)), f16_to_f32(static_cast<uint16_t>(p))}) {
      const uint32_t want = nearest(f, x, /*linear_search=*/true);
      ASSERT_EQ(f32_to_fp8_e4m3(x), want) << "x = " << x << " (" << hex(f32_bits(x), 8) << ")";
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * 65536);
}

// ---- random f32 patterns against the oracle, for all three encoders ----

// Uniform random bit patterns, plus values concentrated where fp8 lives: uniform in
// [-600, 600] and f32 neighbours of fp8 midpoints.
std::vector<float> random_inputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> near(-600.0f, 600.0f);
  std::vector<float> xs;
  xs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    switch (i % 3) {
      case 0: xs.push_back(bits(static_cast<uint32_t>(r))); break;
      case 1: xs.push_back(near(rng)); break;
      default: {
        const int c = static_cast<int>(r % 0x7e);
        const float mid = static_cast<float>((fp8_value(static_cast<uint8_t>(c)) + fp8_value(static_cast<uint8_t>(c + 1))) / 2);
        const int32_t ulps = static_cast<int32_t>((r >> 8) % 9) - 4;
        xs.push_back(bits((f32_bits(mid) + static_cast<uint32_t>(ulps)) | ((r >> 32) & 1 ? 0x80000000u : 0)));
      }
    }
  }
  return xs;
}

TEST(ConvertRandom, AllEncodersMatchTheOracle) {
  const Format f8 = fp8_format(), f16 = f16_format(), b16 = bf16_format();
  const std::vector<float> xs = random_inputs(1 << 21, 20240601);
  for (float x : xs) {
    ASSERT_EQ(f32_to_fp8_e4m3(x), nearest(f8, x, false)) << "fp8: x = " << x << " (" << hex(f32_bits(x), 8) << ")";
    ASSERT_EQ(f32_to_f16(x), nearest(f16, x, false)) << "f16: x = " << x << " (" << hex(f32_bits(x), 8) << ")";
    ASSERT_EQ(f32_to_bf16(x), nearest(b16, x, false)) << "bf16: x = " << x << " (" << hex(f32_bits(x), 8) << ")";
  }
  std::printf("[ convert ] %zu random f32 patterns x 3 encoders matched the oracle\n", xs.size());
}

// ---- bf16 ----

TEST(ConvertBf16, EdgeCases) {
  struct Case {
    uint32_t x;
    uint16_t expected;
    const char* what;
  };
  const Case cases[] = {
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x3f800000, 0x3f80, "1"},
      {0x3f808000, 0x3f80, "tie, lower is even: down"},
      {0x3f818000, 0x3f82, "tie, lower is odd: up"},
      {0x3f808001, 0x3f81, "just past the tie"},
      {0x3f807fff, 0x3f80, "just before the tie"},
      {0xbf818000, 0xbf82, "negative tie up"},
      {0x7f7f0000, 0x7f7f, "max finite bf16"},
      {0x7f7f7fff, 0x7f7f, "just below the overflow midpoint"},
      {0x7f7f8000, 0x7f80, "overflow midpoint, tie to even: inf"},
      {0x7f7fffff, 0x7f80, "FLT_MAX: inf"},
      {0xff7fffff, 0xff80, "-FLT_MAX: -inf"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fff, "quiet NaN: canonical"},
      {0xffc00000, 0x7fff, "negative NaN: sign dropped"},
      {0x7f800001, 0x7fff, "signalling NaN, low payload (would round to inf if not caught)"},
      {0xff800001, 0x7fff, "negative signalling NaN"},
      {0x7fffffff, 0x7fff, "NaN, all payload bits"},
      {0x00000001, 0x0000, "f32 subnormal"},
      {0x00008000, 0x0000, "subnormal tie, to even 0"},
      {0x00018000, 0x0002, "subnormal tie, to even 2"},
      {0x807fffff, 0x8080, "negative subnormal rounds up into the smallest normal"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(f32_to_bf16(bits(c.x)), c.expected) << c.what << ": x = " << hex(c.x, 8);
}

TEST(ConvertBf16, EveryPatternDecodesAndRoundTrips) {
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const uint16_t h = static_cast<uint16_t>(p);
    const float x = bf16_to_f32(h);
    ASSERT_EQ(f32_bits(x), p << 16) << hex(p, 4);
    const double want = bf16_value(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(x)) << hex(p, 4);
      ASSERT_EQ(f32_to_bf16(x), 0x7fff) << hex(p, 4);
    } else {
      ASSERT_EQ(static_cast<double>(x), want) << hex(p, 4);
      ASSERT_EQ(f32_to_bf16(x), h) << hex(p, 4);
    }
  }
}

// ---- f16 ----

TEST(ConvertF16, EdgeCases) {
  struct Case {
    float x;
    uint16_t expected;
    const char* what;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x0000, "+0"},
      {-0.0f, 0x8000, "-0"},
      {1.0f, 0x3c00, "1"},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00, "tie, lower is even: down"},
      {1.0f + std::ldexp(3.0f, -11), 0x3c02, "tie, lower is odd: up"},
      {65504.0f, 0x7bff, "max finite"},
      {65519.0f, 0x7bff, "65519 rounds down to 65504"},
      {std::nextafter(65520.0f, 0.0f), 0x7bff, "just below 65520"},
      {65520.0f, 0x7c00, "65520: midpoint to the absent 65536, tie to even: inf"},
      {-65520.0f, 0xfc00, "-65520: -inf"},
      {1e30f, 0x7c00, "1e30: inf"},
      {inf, 0x7c00, "+inf"},
      {-inf, 0xfc00, "-inf"},
      {bits(0x7fc00000), 0x7fff, "quiet NaN"},
      {bits(0xffc00000), 0x7fff, "negative NaN: sign dropped"},
      {bits(0x7f800001), 0x7fff, "signalling NaN"},
      {bits(0xff800001), 0x7fff, "negative signalling NaN"},
      {std::ldexp(1.0f, -14), 0x0400, "2^-14: smallest normal"},
      {std::ldexp(1.0f, -24), 0x0001, "2^-24: smallest subnormal"},
      {-std::ldexp(1.0f, -24), 0x8001, "-2^-24"},
      {std::ldexp(1.0f, -25), 0x0000, "2^-25: tie between 0 and 2^-24, to even 0"},
      {std::nextafter(std::ldexp(1.0f, -25), 1.0f), 0x0001, "just above 2^-25"},
      {std::ldexp(3.0f, -25), 0x0002, "1.5 * 2^-24: tie, to even 2"},
      {std::ldexp(2047.0f, -25), 0x0400, "1023.5 * 2^-24: tie, to even 2^-14"},
      {bits(0x00000001), 0x0000, "f32 subnormal"},
      {bits(0x80000001), 0x8000, "negative f32 subnormal: -0"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(f32_to_f16(c.x), c.expected) << c.what << ": x = " << c.x << " (" << hex(f32_bits(c.x), 8) << ")";
}

TEST(ConvertF16, EveryPatternDecodesAndRoundTrips) {
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const uint16_t h = static_cast<uint16_t>(p);
    const float x = f16_to_f32(h);
    const double want = f16_value(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(x)) << hex(p, 4);
      ASSERT_EQ(f32_to_f16(x), 0x7fff) << hex(p, 4);
    } else {
      ASSERT_EQ(static_cast<double>(x), want) << hex(p, 4);
      ASSERT_EQ(std::signbit(x), (p & 0x8000) != 0) << hex(p, 4);
      ASSERT_EQ(f32_to_f16(x), h) << hex(p, 4);
    }
  }
}

// f16 rounding of every bf16 pattern (the whole f32 exponent range) against the oracle.
TEST(ConvertF16, NearestEvenForEveryBf16Pattern) {
  const Format f = f16_format();
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const float x = bf16_to_f32(static_cast<uint16_t>(p));
    ASSERT_EQ(f32_to_f16(x), nearest(f, x, false)) << "x = " << x << " (" << hex(f32_bits(x), 8) << ")";
  }
}

}  // namespace
}  // namespace kestrel
