// Warp-scope 16-bit tensor-core pieces: mma.sync m16n8k16 (bf16 or f16 operands, f32
// accumulation), the ldmatrix loads of its fragments (plain and .trans), and the packing of f32
// pairs into operand registers. Users: the mla_attention v1 kernel (bf16), kda_chunk_prefill's
// state kernel (f16: 3 more mantissa bits than bf16, range |x| < 65504; why f16 there:
// kda_chunk_prefill_state.cuh), and for the packing also the mla_attention v2 kernel and the KDA
// intra-chunk kernel's workspace stores. ldmatrix moves 16-bit elements whatever they mean, so both types
// share the loads and the fragment layouts below.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16; g = lane / 4, t = lane % 4;
// each 32-bit register holds two consecutive-k elements, the lower k in the low half):
//   A 16 x 16 (row): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
//   B 16 x 8 (col):  b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g)
//   C 16 x 8 (f32):  c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// ldmatrix reads 8 x 8 b16 matrices, lane l giving the address of row l % 8 of matrix l / 8;
// plain, lane l receives (row l / 4, columns 2 (l % 4), +1) of each matrix, .trans the same
// positions of the transposed matrix, i.e. (rows 2 (l % 4), +1, column l / 4). So a row-major A
// ([m][k]) and an n-major B ([n][k]) load plain, an A stored [k][m] or a B stored [k][n] load
// with .trans. Rows must be 16-byte aligned.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

namespace kestrel::ops::cuda::mma16 {

using bf16 = __nv_bfloat16;
using f16 = __half;

// Not volatile: a pure function of its operands, so the compiler may interleave independent tiles.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// The instruction for operands of element type E (bf16 | f16).
template <typename E>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<E, bf16> || std::is_same_v<E, f16>, "bf16 or f16 operands");
  if constexpr (std::is_same_v<E, bf16>) mma_bf16(c, a, b);
  else mma_f16(c, a, b);
}

// Four 8 x 8 b16 matrices from shared memory (address a: this lane's row), plain or .trans.
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t a) {
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  }
}
template <bool kTrans, typename E>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const E* row) {
  static_assert(sizeof(E) == 2, "16-bit elements");
  ldsm_x4<kTrans>(r, static_cast<uint32_t>(__cvta_generic_to_shared(row)));
}

// The A fragment of the 16 x 16 block at a (element (m, k) at a[m * ld + k]): matrices
// (rows +0 / +8, k +0 / +8) in the order a0 a1 a2 a3.
template <typename E>
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const E* a, int ld, int lane) {
  ldsm_x4<false>(r, a + (lane % 8 + 8 * ((lane / 8) & 1)) * ld + 8 * (lane / 16));
}

// The same A fragment from A stored transposed (element (m, k) at a[k * ld + m]): matrix j of
// the x4 covers k +8 (j >> 1), m +8 (j & 1), each read by .trans.
template <typename E>
__device__ __forceinline__ void load_a_trans(uint32_t (&r)[4], const E* a, int ld, int lane) {
  ldsm_x4<true>(r, a + (lane % 8 + 8 * (lane / 16)) * ld + 8 * ((lane / 8) & 1));
}

// B fragments of kNt 8-column tiles (n +0, +8, ...; kNt even) of the 16-deep k-step at b, B
// stored k-major (element (k, n) at b[k * ld + n]): per pair of tiles one x4, matrices (k +0 / +8,
// n +0 / +8) in the order r[nt][0] r[nt][1] r[nt + 1][0] r[nt + 1][1], each read by .trans.
template <int kNt, typename E>
__device__ __forceinline__ void load_b_trans(uint32_t (&r)[kNt][2], const E* b, int ld, int lane) {
  static_assert(kNt % 2 == 0, "tiles in pairs");
#pragma unroll
  for (int nt = 0; nt < kNt; nt += 2) {
    uint32_t x[4];
    ldsm_x4<true>(x, b + (lane % 8 + 8 * ((lane / 8) & 1)) * ld + 8 * (nt + lane / 16));
    r[nt][0] = x[0];
    r[nt][1] = x[1];
    r[nt + 1][0] = x[2];
    r[nt + 1][1] = x[3];
  }
}

// c[nt] += a b[nt] for kNt tiles: consecutive mmas accumulate into different tiles (E: the
// operands' element type).
template <int kNt, typename E>
__device__ __forceinline__ void mma_row(float (&c)[kNt][4], const uint32_t (&a)[4], const uint32_t (&b)[kNt][2]) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) mma<E>(c[nt], a, b[nt]);
}

// Two f32 values rounded to one bf16 pair, x0 in the low half (the layout of a fragment register
// and of memory).
__device__ __forceinline__ uint32_t pack_bf16x2(float x0, float x1) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);  // .x (lower 16 bits) = x0
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two f32 values rounded to one f16 pair (nearest even; |x| >= 65520 becomes inf), x0 in
// the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float x0, float x1) {
  const __half2 v = __floats2half2_rn(x0, x1);  // .x (lower 16 bits) = x0
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace kestrel::ops::cuda::mma16
