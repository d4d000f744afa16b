// Host conversions; see convert.h for the contract each one keeps.
#include "kestrel/core/convert.h"

#include <array>
#include <cmath>

namespace kestrel {

uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fff;                          // NaN: canonical, sign dropped
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below 2^-14: the f16 result is subnormal (step 2^-24). Adding 0.5 puts the value in a
    // binade whose f32 step is exactly 2^-24, so the FPU's own round-to-nearest-even does the
    // rounding; the low bits are then the subnormal mantissa.
    const float t = f32_from_bits(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(t) - f32_bits(0.5f)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in f32
    const float v = std::ldexp(static_cast<float>(man), -24);
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t x = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return 0x7f;  // NaN: canonical, sign dropped
  // e4m3fn: bias 7, normals 2^-6 .. 448 (S.1111.110), subnormals m * 2^-9 for m = 1..7,
  // S.1111.111 is NaN and there is no infinity.
  uint32_t code;
  if (a < 0.015625f) {  // below 2^-6: subnormal step 2^-9; scaling by 2^9 is exact
    code = static_cast<uint32_t>(std::nearbyint(a * 512.0f));  // 0..8; 8 is 2^-6 itself
  } else if (a >= 464.0f) {
    code = 0x7e;  // at or past the midpoint to the next (absent) step: saturate, inf too
  } else {
    int e;
    const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    // mantissa in eighths of [1, 2): (2m - 1) * 8 is exact in f32; nearbyint rounds to even
    uint32_t q = static_cast<uint32_t>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
    int biased = (e - 1) + 7;
    if (q == 8) {
      q = 0;
      ++biased;
    }
    code = (static_cast<uint32_t>(biased) << 3) | q;
    if (code > 0x7e) code = 0x7e;
  }
  return static_cast<uint8_t>(sign | code);
}

namespace {
std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const int exp = (b >> 3) & 0xf;
    const int man = b & 0x7;
    float v;
    if ((b & 0x7f) == 0x7f) {
      v = std::nanf("");
    } else if (exp == 0) {
      v = std::ldexp(static_cast<float>(man), -9);
    } else {
      v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
    }
    t[b] = (b & 0x80) ? -v : v;
  }
  return t;
}
const std::array<float, 256> kFp8Table = make_fp8_table();
}  // namespace

float fp8_e4m3_to_f32(uint8_t b) { return kFp8Table[b]; }

}  // namespace kestrel
