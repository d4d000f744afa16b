// The 3xTF32 operand split of mma_tf32.cuh as plain bit arithmetic, host and device, so that the
// CPU tests hold it to its stated bounds (tests/ops/tf32_split_test.cpp) and the kernels run the
// same lines. No CUDA types.
//   big   = x rounded to nearest (ties away from zero) at tf32 precision (10 mantissa bits): the
//           bits of x plus half a tf32 ulp, the 13 low bits cleared (cvt.rna.tf32.f32 for
//           finite x below the largest tf32; sm_90 has no instruction for that cvt);
//   small = x - big, exact in f32, |small| <= 2^-11 |x|.
// The tensor core reads only a .tf32 register's upper 19 bits, so small, and a plain operand, are
// passed as their f32 bits and truncated there (trunc_tf32 models that).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KESTREL_TF32_HD __host__ __device__ __forceinline__
#else
#define KESTREL_TF32_HD inline
#endif

namespace kestrel::ops::cuda::tf32 {

// The bits of one 4-byte value as another type (memcpy: defined on host and device, and
// compiled to a register move).
template <typename To, typename From>
KESTREL_TF32_HD To bit_copy(From x) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}
KESTREL_TF32_HD uint32_t bits_of(float x) { return bit_copy<uint32_t>(x); }
KESTREL_TF32_HD float float_of(uint32_t u) { return bit_copy<float>(u); }

inline constexpr uint32_t kHalfUlp = 0x1000u;     // half of bit 13, the last tf32 mantissa bit
inline constexpr uint32_t kKeepMask = 0xffffe000u;  // sign, exponent and 10 mantissa bits

// The big part, as bits (a tf32 value: the 13 low bits are zero).
KESTREL_TF32_HD uint32_t big_bits(float x) { return (bits_of(x) + kHalfUlp) & kKeepMask; }

// x = big + small (k3x); big's bits and small's f32 bits.
KESTREL_TF32_HD void split(float x, uint32_t& big, uint32_t& small) {
  big = big_bits(x);
  small = bits_of(x - float_of(big));
}

// What the tensor core takes from an f32 passed as a .tf32 operand: its upper 19 bits.
KESTREL_TF32_HD float trunc_tf32(float x) { return float_of(bits_of(x) & kKeepMask); }

}  // namespace kestrel::ops::cuda::tf32
