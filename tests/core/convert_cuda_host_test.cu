// Our host encoders against CUDA's own host-side implementations, bit for bit.
//
// cuda_fp8.h / cuda_bf16.h / cuda_fp16.h compile a software path for host code (no
// __CUDA_ARCH__); calling them from a host function here gives NVIDIA's reference answer with
// no GPU, so this runs in CI. Compared: every bf16 and every f16 pattern widened to f32, and
// more than 10^8 random f32 patterns (uniform 32-bit patterns, uniform values in [-600, 600]
// and f32 neighbours of fp8 midpoints), through all three encoders; plus the decoders of every
// fp8 byte. The GPU's hardware conversions are compared in convert_gpu_test.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kestrel/core/convert.h"

namespace kestrel {
namespace {

uint8_t cuda_fp8(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint16_t cuda_bf16(float x) {
  const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
  return r.x;
}
uint16_t cuda_f16(float x) {
  const __half_raw r = __float2half_rn(x);
  return r.x;
}

// A counter hash (a 64-bit finaliser): the i-th input of a run is a pure function of
// (seed, i), so a failure names the index that reproduces it.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// fp8 midpoints (m + 0.5 ulp) for the 126 adjacent pairs of positive codes, as f32 bits.
struct Midpoints {
  uint32_t bits[0x7e];
  Midpoints() {
    for (int c = 0; c < 0x7e; ++c) {
      const double mid = (fp8_e4m3_to_f32(static_cast<uint8_t>(c)) + fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1))) / 2.0;
      bits[c] = f32_bits(static_cast<float>(mid));
    }
  }
};

// Input i: one of three kinds by i % 4 (0, 1: uniform bits; 2: uniform in [-600, 600];
// 3: within 4 f32 ulps of an fp8 midpoint, either sign).
float input(uint64_t seed, uint64_t i, const Midpoints& mids) {
  const uint64_t h = mix(seed + 0x9e3779b97f4a7c15ull * (i + 1));
  switch (i & 3) {
    case 2: {
      // 2^24 evenly spaced points over [-600, 600): k * (1200 / 2^24) - 600, two separately
      // rounded f32 operations (the same sequence convert_gpu_test.cu runs on the device).
      const float k = static_cast<float>(h >> 40);
      return k * (1200.0f / 16777216.0f) - 600.0f;
    }
    case 3: {
      const uint32_t c = static_cast<uint32_t>((h >> 8) % 0x7e);
      const int32_t ulps = static_cast<int32_t>((h >> 24) % 9) - 4;
      return f32_from_bits((mids.bits[c] + static_cast<uint32_t>(ulps)) | static_cast<uint32_t>(h & 0x80000000u));
    }
    default: return f32_from_bits(static_cast<uint32_t>(h >> 32));
  }
}

// Compares one input through all three encoders; reports (up to a few) mismatches.
struct Comparer {
  uint64_t compared = 0, mismatches = 0;
  void operator()(float x) {
    const uint8_t a8 = f32_to_fp8_e4m3(x), c8 = cuda_fp8(x);
    const uint16_t ab = f32_to_bf16(x), cb = cuda_bf16(x);
    const uint16_t ah = f32_to_f16(x), ch = cuda_f16(x);
    compared += 3;
    if (a8 != c8 || ab != cb || ah != ch) {
      if (++mismatches <= 8)
        ADD_FAILURE() << std::hex << "x = 0x" << f32_bits(x) << " (" << std::dec << x << std::hex << "): fp8 ours 0x"
                      << int{a8} << " cuda 0x" << int{c8} << "; bf16 ours 0x" << ab << " cuda 0x" << cb
                      << "; f16 ours 0x" << ah << " cuda 0x" << ch;
    }
  }
};

TEST(ConvertCudaHost, EveryBf16AndF16PatternMatchesCuda) {
  Comparer cmp;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    cmp(bf16_to_f32(static_cast<uint16_t>(p)));
    cmp(f16_to_f32(static_cast<uint16_t>(p)));
  }
  // Every f32 whose low 16 bits are 0x8000 or within 1 of it: exactly the bf16 ties and their
  // neighbours, over the whole exponent range.
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u}) cmp(f32_from_bits(hi << 16 | lo));
  EXPECT_EQ(cmp.mismatches, 0u);
  std::printf("[ convert ] cuda host: %llu conversions compared (all bf16/f16 patterns, bf16 ties)\n",
              static_cast<unsigned long long>(cmp.compared));
}

TEST(ConvertCudaHost, RandomF32MatchesCuda) {
  const auto start = std::chrono::steady_clock::now();
  const Midpoints mids;
  constexpr uint64_t kN = 100'000'000 + 1'000'000;  // > 10^8 inputs, each through 3 encoders
  Comparer cmp;
  for (uint64_t i = 0; i < kN; ++i) cmp(input(0x6b657374726c, i, mids));
  EXPECT_EQ(cmp.mismatches, 0u);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ convert ] cuda host: %llu random f32 inputs, %llu conversions compared in %.1f s\n",
              static_cast<unsigned long long>(kN), static_cast<unsigned long long>(cmp.compared), s);
}

TEST(ConvertCudaHost, DecodersMatchCuda) {
  for (int b = 0; b < 256; ++b) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
    const float want = f16_to_f32(h.x);  // every e4m3 value is exact in f16
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "fp8 0x" << std::hex << b;  // NaN sign is not part of the contract
    } else {
      EXPECT_EQ(f32_bits(got), f32_bits(want)) << "fp8 0x" << std::hex << b;
    }
  }
  for (uint32_t p = 0; p < 0x10000; ++p) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(p);
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(p);
    const float hw = __half2float(__half(hr)), bw = __bfloat162float(__nv_bfloat16(br));
    const float hg = f16_to_f32(static_cast<uint16_t>(p)), bg = bf16_to_f32(static_cast<uint16_t>(p));
    ASSERT_TRUE(f32_bits(hg) == f32_bits(hw) || (std::isnan(hg) && std::isnan(hw)))
        << std::hex << "f16 0x" << p << ": ours 0x" << f32_bits(hg) << " cuda 0x" << f32_bits(hw);
    ASSERT_EQ(f32_bits(bg), f32_bits(bw)) << std::hex << "bf16 0x" << p;
  }
}

}  // namespace
}  // namespace kestrel
