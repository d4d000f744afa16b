// Warp-scope f32 matrix products on tensor cores: mma.sync m16n8k8 with tf32 operands, each f32
// operand split as x = big + small (both tf32, cvt.rna) and the product formed as
// big*big + big*small + small*big ("3xTF32"): the dropped small*small term is below 2^-22 of
// |a||b|, so a product is about as accurate as an f32 FFMA loop (plain tf32 would keep 2^-11).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8" with .tf32; g = lane / 4, t = lane % 4):
//   A 16 x 8 (row): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B 8 x 8 (col):  b0 (k = t, n = g), b1 (k = t + 4, n = g)
//   C 16 x 8 (f32): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// Operands are read from shared memory through strides, so one routine serves A stored row-major
// (element (m, k) at m * sm + k) and A stored transposed (at k * sk + m); B is always stored
// n-major (element (k, n) at n * ld + k), as every B of kda_chunk_prefill is.
#pragma once

#include <cstdint>

namespace kestrel::ops::cuda::mma {

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// x = big + small, both tf32 (small holds the next 11 bits of the mantissa, rounded); without
// k3x only big is formed (small is left for the compiler to drop).
template <bool k3x>
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = k3x ? to_tf32(x - __uint_as_float(big)) : 0u;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c[mt][nt] (16 x 8 tiles) += A[kMt * 16 rows from A's origin][ksteps * 8] * B[ksteps * 8][kNt * 8
// columns from B's origin], by one warp: 3xTF32 (k3x) or plain tf32 (operands rounded once, a third
// of the mma; ~2^-11 relative per operand). A element (m, k) at a[m * a_sm + k * a_sk], times
// a_scale[k] when a_scale is given (a per-k factor, multiplied in f32 before the split); B element
// (k, n) at b[n * b_ld + k].
template <int kMt, int kNt, bool k3x = true>
__device__ __forceinline__ void warp_mma_tf32(float (&c)[kMt][kNt][4], const float* a, int a_sm, int a_sk,
                                                const float* b, int b_ld, int ksteps, int lane,
                                                const float* a_scale = nullptr) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll 2
  for (int ks = 0; ks < ksteps; ++ks) {
    const int k0 = 8 * ks;
    uint32_t ab[kMt][4], as[kMt][4], bb[kNt][2], bs[kNt][2];
    const float s0 = a_scale != nullptr ? a_scale[k0 + t] : 1.0f;  // columns t and t + 4
    const float s1 = a_scale != nullptr ? a_scale[k0 + t + 4] : 1.0f;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      const float* ap = a + (16 * mt + g) * a_sm + (k0 + t) * a_sk;
      split_tf32<k3x>(ap[0] * s0, ab[mt][0], as[mt][0]);
      split_tf32<k3x>(ap[8 * a_sm] * s0, ab[mt][1], as[mt][1]);
      split_tf32<k3x>(ap[4 * a_sk] * s1, ab[mt][2], as[mt][2]);
      split_tf32<k3x>(ap[8 * a_sm + 4 * a_sk] * s1, ab[mt][3], as[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const float* bp = b + (8 * nt + g) * b_ld + k0 + t;
      split_tf32<k3x>(bp[0], bb[nt][0], bs[nt][0]);
      split_tf32<k3x>(bp[4], bb[nt][1], bs[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        if constexpr (k3x) {
          mma_tf32(c[mt][nt], as[mt], bb[nt]);  // small terms first, then the big product
          mma_tf32(c[mt][nt], ab[mt], bs[nt]);
        }
        mma_tf32(c[mt][nt], ab[mt], bb[nt]);
      }
    }
  }
}

}  // namespace kestrel::ops::cuda::mma
