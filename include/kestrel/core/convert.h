// Exact scalar conversions between f32 and the narrow float types, on the host.
//
// These define the bits. Each equals the CUDA intrinsic named beside it on every input
// (proven against CUDA's host code by tests/core/convert_cuda_host_test.cu and against the
// GPU's hardware conversions by tests/core/convert_gpu_test.cu; docs/ops/fp8.md):
//   f32_to_bf16      __float2bfloat16_rn              round to nearest even, NaN -> 0x7FFF
//   f32_to_f16       __float2half_rn                  round to nearest even, overflow -> inf,
//                                                     NaN -> 0x7FFF
//   f32_to_fp8_e4m3  __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)
//                    round to nearest even, saturating to +-448 (inf too), NaN -> 0x7F
// Widening conversions (bf16, f16, fp8 -> f32) are exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace kestrel {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN: canonical, sign dropped
  x += 0x7fffu + ((x >> 16) & 1u);                        // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

uint8_t f32_to_fp8_e4m3(float f);
float fp8_e4m3_to_f32(uint8_t b);

inline constexpr float kFp8E4m3Max = 448.0f;

}  // namespace kestrel
