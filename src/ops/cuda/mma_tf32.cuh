// Warp-scope f32 matrix products on tensor cores: mma.sync m16n8k8 with tf32 operands, each f32
// operand split as x = big + small and the product formed as big*big + big*small + small*big
// ("3xTF32"), about as accurate as an f32 FFMA loop; or, plain, the f32 operands as they are.
//
// The split is integer arithmetic (tf32_split.h, held to its bounds by CPU tests), not
// cvt.rna.tf32.f32: sm_90 has no instruction for that cvt, and its emulation (range test, add,
// mask, select) for every operand element, twice per split, was most of the instructions of the
// prefill state kernel (Nsight, H200: HMMA 7.7% of the issued instructions, FSETP / SEL / LOP3 /
// IMAD of the conversions over 45%). big = x rounded to nearest at tf32 (add half an ulp, mask),
// small = x - big (exact, |small| <= 2^-11 |x|), passed as f32 bits; the tensor core reads a
// .tf32 register's upper 19 bits, so an f32 passed as is loses its low 13 mantissa bits
// (truncation): small to within 2^-10 |small| <= 2^-21 |x|, a plain operand to within 2^-10 |x|
// (cvt.rna: 2^-11). So a 3xTF32 product errs by <= ~2^-20 |a||b| (the dropped small*small term
// and small's truncation), a plain one by <= ~2^-9 |a||b|. NaN still propagates: a NaN x passed
// plain keeps its exponent and top mantissa bits (a NaN whose payload sits only in the low 13
// bits would read as infinity; arithmetic never makes one); in a split, big may lose them but
// small = x - big is NaN. (An infinite x gives a NaN product, as cvt.rna's split did.)
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

#include "tf32_split.h"

namespace kestrel::ops::cuda::mma {

// x = big + small as above (k3x); without k3x, x's bits as they are (small is left unused).
template <bool k3x>
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  if constexpr (k3x) {
    tf32::split(x, big, small);
  } else {
    big = __float_as_uint(x);
    small = 0u;
  }
}

// Not volatile: a pure function of its operands, so the compiler may interleave independent tiles.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8 x 4 blocks of 32-bit elements from shared memory in one instruction: ldmatrix reads
// 8 x 8 b16 matrices, i.e. 8 rows of 16 bytes each; lane l gives the address of row l % 8 of block
// l / 8 and receives, from block j, the word (row l / 4, word l % 4) in r[j]. That is exactly the
// m16n8k8 tf32 fragment element (g, t) of the block, so A's four registers (blocks at rows
// +0 / +8, words +0 / +4) or two tiles of B (blocks at n +0 / +8, words +0 / +4) are one
// instruction instead of four scalar loads. Rows must be 16-byte aligned.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const float* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const float* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}

// A fragments of one k-step (8 deep from column k0) of kMt 16-row tiles: element (m, k) at
// a[m * a_sm + k * a_sk], times a_scale[k] when given; split (k3x) or as is. Row-major A
// (a_sk == 1, known after inlining; rows 16-byte aligned) is read by ldmatrix, a transposed one
// element by element.
template <int kMt, bool k3x>
__device__ __forceinline__ void load_a(uint32_t (&ab)[kMt][4], uint32_t (&as)[kMt][4], const float* a, int a_sm,
                                       int a_sk, int k0, int g, int t, const float* a_scale) {
  const int lane = 4 * g + t;
  const float s0 = a_scale != nullptr ? a_scale[k0 + t] : 1.0f;  // columns t and t + 4
  const float s1 = a_scale != nullptr ? a_scale[k0 + t + 4] : 1.0f;
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    float x[4];
    if (a_sk == 1) {
      // block j = lane / 8: rows +8 (j & 1), words +4 (j >> 1)
      uint32_t r[4];
      ldmatrix_x4(r, a + (16 * mt + lane % 8 + 8 * ((lane / 8) & 1)) * a_sm + k0 + 4 * (lane / 16));
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = __uint_as_float(r[e]);
    } else {
      const float* ap = a + (16 * mt + g) * a_sm + (k0 + t) * a_sk;
      x[0] = ap[0];
      x[1] = ap[8 * a_sm];
      x[2] = ap[4 * a_sk];
      x[3] = ap[8 * a_sm + 4 * a_sk];
    }
    split_tf32<k3x>(x[0] * s0, ab[mt][0], as[mt][0]);
    split_tf32<k3x>(x[1] * s0, ab[mt][1], as[mt][1]);
    split_tf32<k3x>(x[2] * s1, ab[mt][2], as[mt][2]);
    split_tf32<k3x>(x[3] * s1, ab[mt][3], as[mt][3]);
  }
}

// B fragments of one k-step of kNt 8-column tiles: element (k, n) at b[n * b_ld + k]. With
// b_small (k3x only), B is stored pre-split (b holds big, b_small small, at the same offsets:
// see split_tf32_store), so nothing is computed here.
// Raw B fragments of kNt tiles from one array, by ldmatrix (two tiles per x4, a last odd one by
// x2): lane l addresses row n = 8 (nt + (l / 16)) + l % 8, words k0 + 4 ((l / 8) & 1).
template <int kNt>
__device__ __forceinline__ void ldmatrix_b(uint32_t (&r)[kNt][2], const float* b, int b_ld, int k0, int lane) {
#pragma unroll
  for (int nt = 0; nt + 1 < kNt; nt += 2) {
    uint32_t x[4];
    ldmatrix_x4(x, b + (8 * (nt + lane / 16) + lane % 8) * b_ld + k0 + 4 * ((lane / 8) & 1));
    r[nt][0] = x[0];
    r[nt][1] = x[1];
    r[nt + 1][0] = x[2];
    r[nt + 1][1] = x[3];
  }
  if constexpr (kNt % 2 == 1) {
    uint32_t x[2];
    ldmatrix_x2(x, b + (8 * (kNt - 1) + lane % 8) * b_ld + k0 + 4 * ((lane / 8) & 1));  // lanes 16..31: ignored
    r[kNt - 1][0] = x[0];
    r[kNt - 1][1] = x[1];
  }
}

template <int kNt, bool k3x>
__device__ __forceinline__ void load_b(uint32_t (&bb)[kNt][2], uint32_t (&bs)[kNt][2], const float* b,
                                       const float* b_small, int b_ld, int k0, int g, int t) {
  const int lane = 4 * g + t;
  ldmatrix_b<kNt>(bb, b, b_ld, k0, lane);
  if (k3x && b_small != nullptr) {
    ldmatrix_b<kNt>(bs, b_small, b_ld, k0, lane);
  } else {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) split_tf32<k3x>(__uint_as_float(bb[nt][e]), bb[nt][e], bs[nt][e]);
  }
}

// c[mt][nt] += a[mt] b[nt] for every tile: consecutive mmas accumulate into different tiles.
template <int kMt, int kNt>
__device__ __forceinline__ void mma_tiles(float (&c)[kMt][kNt][4], const uint32_t (&a)[kMt][4],
                                          const uint32_t (&b)[kNt][2]) {
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) mma_tf32(c[mt][nt], a[mt], b[nt]);
}

// A product's accumulators: c (the big products, the caller's) and, for 3xTF32, the two small-term
// products in their own tiles, added to c at the end: three independent mma chains per tile
// instead of one three times as long (each mma waits for the previous one into its tile).
template <int kMt, int kNt, bool k3x>
struct Acc {
  float (&c)[kMt][kNt][4];
  float s1[k3x ? kMt : 1][k3x ? kNt : 1][4] = {};
  float s2[k3x ? kMt : 1][k3x ? kNt : 1][4] = {};
  __device__ __forceinline__ void step(const uint32_t (&ab)[kMt][4], const uint32_t (&as)[kMt][4],
                                       const uint32_t (&bb)[kNt][2], const uint32_t (&bs)[kNt][2]) {
    if constexpr (k3x) {
      mma_tiles(s1, as, bb);
      mma_tiles(s2, ab, bs);
    }
    mma_tiles(c, ab, bb);
  }
  __device__ __forceinline__ void finish() {
    if constexpr (k3x) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) c[mt][nt][e] += s1[mt][nt][e] + s2[mt][nt][e];
    }
  }
};

// c[mt][nt] (16 x 8 tiles) += A[kMt * 16 rows from A's origin][ksteps * 8] * B[ksteps * 8][kNt * 8
// columns from B's origin], by one warp: 3xTF32 (k3x) or plain tf32 (see the top). A element
// (m, k) at a[m * a_sm + k * a_sk], times a_scale[k] when a_scale is given (a per-k factor,
// multiplied in f32 before the split); B element (k, n) at b[n * b_ld + k], pre-split when
// b_small is given. kSteps > 0: fixed at compile time and fully unrolled (every shared-memory
// address the base plus an immediate); kSteps = 0: ksteps at run time, unrolled twice.
template <int kSteps, int kMt, int kNt, bool k3x = true>
__device__ __forceinline__ void warp_mma_tf32(float (&c)[kMt][kNt][4], const float* a, int a_sm, int a_sk,
                                                const float* b, int b_ld, int lane, int ksteps = kSteps,
                                                const float* a_scale = nullptr, const float* b_small = nullptr) {
  const int g = lane / 4, t = lane % 4;
  Acc<kMt, kNt, k3x> acc{c};
  auto kstep = [&](int ks) {
    uint32_t ab[kMt][4], as[kMt][4], bb[kNt][2], bs[kNt][2];
    load_a<kMt, k3x>(ab, as, a, a_sm, a_sk, 8 * ks, g, t, a_scale);
    load_b<kNt, k3x>(bb, bs, b, b_small, b_ld, 8 * ks, g, t);
    acc.step(ab, as, bb, bs);
  };
  if constexpr (kSteps > 0) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) kstep(ks);
  } else {
#pragma unroll 2
    for (int ks = 0; ks < ksteps; ++ks) kstep(ks);
  }
  acc.finish();
}

// Two products sharing B, in one pass over it (B's fragments loaded once): cp += Ap B in plain
// tf32 and c3 += A3 B in 3xTF32; Ap and A3 have the same layout. The plain product takes B's
// big part (tf32 rounded to nearest, not truncated).
template <int kSteps, int kMt, int kNt>
__device__ __forceinline__ void warp_mma_tf32_pair(float (&cp)[kMt][kNt][4], const float* ap, float (&c3)[kMt][kNt][4],
                                                     const float* a3, int a_sm, int a_sk, const float* b,
                                                     const float* b_small, int b_ld, int lane) {
  const int g = lane / 4, t = lane % 4;
  Acc<kMt, kNt, false> accp{cp};
  Acc<kMt, kNt, true> acc3{c3};
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    uint32_t pb[kMt][4], ps[kMt][4], ab[kMt][4], as[kMt][4], bb[kNt][2], bs[kNt][2];
    load_a<kMt, false>(pb, ps, ap, a_sm, a_sk, 8 * ks, g, t, nullptr);
    load_a<kMt, true>(ab, as, a3, a_sm, a_sk, 8 * ks, g, t, nullptr);
    load_b<kNt, true>(bb, bs, b, b_small, b_ld, 8 * ks, g, t);
    accp.step(pb, ps, bb, bs);
    acc3.step(ab, as, bb, bs);
  }
  acc3.finish();
}

// Stores x into a pre-split B operand: big at dst_big, small at dst_small (same offset), as
// load_b with b_small reads them.
__device__ __forceinline__ void split_tf32_store(float* dst_big, float* dst_small, float x) {
  uint32_t big, small;
  split_tf32<true>(x, big, small);
  *dst_big = __uint_as_float(big);
  *dst_small = __uint_as_float(small);
}

}  // namespace kestrel::ops::cuda::mma
