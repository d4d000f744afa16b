// Warp-scope bf16 tensor-core pieces: mma.sync m16n8k16 (bf16 operands, f32 accumulation), the
// ldmatrix loads of its fragments (plain and .trans), and the "3xBF16" split of an f32 value,
// x ~ hi + lo with hi = bf16(x), lo = bf16(x - hi) (round to nearest even both times), so that a
// product a b ~ ah bh + ah bl + al bh errs by ~2^-16 |a||b| (the dropped al bl and the two
// residuals x - hi - lo, each <= 2^-17 |x|): the f32-class substitute for 3xTF32 on Hopper at a
// quarter of its tensor issue (twice the K per instruction, twice the rate). Where it is used and
// what it costs in accuracy: kda_chunk_prefill_state.cuh, docs/ops/kda.md. The mla_attention
// kernels take their bf16 packing, ldmatrix and mma.sync from here too.
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

namespace kestrel::ops::cuda::mma16 {

using bf16 = __nv_bfloat16;

// Not volatile: a pure function of its operands, so the compiler may interleave independent tiles.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
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
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* row) {
  ldsm_x4<kTrans>(r, static_cast<uint32_t>(__cvta_generic_to_shared(row)));
}

// The A fragment of the 16 x 16 block at a (element (m, k) at a[m * ld + k]): matrices
// (rows +0 / +8, k +0 / +8) in the order a0 a1 a2 a3.
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const bf16* a, int ld, int lane) {
  ldsm_x4<false>(r, a + (lane % 8 + 8 * ((lane / 8) & 1)) * ld + 8 * (lane / 16));
}

// The same A fragment from A stored transposed (element (m, k) at a[k * ld + m]): matrix j of
// the x4 covers k +8 (j >> 1), m +8 (j & 1), each read by .trans.
__device__ __forceinline__ void load_a_trans(uint32_t (&r)[4], const bf16* a, int ld, int lane) {
  ldsm_x4<true>(r, a + (lane % 8 + 8 * (lane / 16)) * ld + 8 * ((lane / 8) & 1));
}

// B fragments of kNt 8-column tiles (n +0, +8, ...; kNt even) of the 16-deep k-step at b, B
// stored k-major (element (k, n) at b[k * ld + n]): per pair of tiles one x4, matrices (k +0 / +8,
// n +0 / +8) in the order r[nt][0] r[nt][1] r[nt + 1][0] r[nt + 1][1], each read by .trans.
template <int kNt>
__device__ __forceinline__ void load_b_trans(uint32_t (&r)[kNt][2], const bf16* b, int ld, int lane) {
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

// c[nt] += a b[nt] for kNt tiles: consecutive mmas accumulate into different tiles.
template <int kNt>
__device__ __forceinline__ void mma_row(float (&c)[kNt][4], const uint32_t (&a)[4], const uint32_t (&b)[kNt][2]) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) mma_bf16(c[nt], a, b[nt]);
}

// A 3xBF16 product's accumulators: c (the hi x hi terms, the caller's) and the two cross terms
// in their own tiles (three independent mma chains instead of one three times as long), added
// to c by finish() as c + (lo_a + lo_b).
template <int kNt>
struct Acc3 {
  float (&c)[kNt][4];
  float lo_a[kNt][4] = {};  // a_lo b_hi
  float lo_b[kNt][4] = {};  // a_hi b_lo
  // One k-step: c += ah bh, lo_a += al bh, lo_b += ah bl.
  __device__ __forceinline__ void step(const uint32_t (&ah)[4], const uint32_t (&al)[4], const uint32_t (&bh)[kNt][2],
                                       const uint32_t (&bl)[kNt][2]) {
    mma_row(c, ah, bh);
    mma_row(lo_a, al, bh);
    mma_row(lo_b, ah, bl);
  }
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[nt][e] += lo_a[nt][e] + lo_b[nt][e];
  }
};

// Two f32 values rounded to one bf16 pair, x0 in the low half (the layout of a fragment register
// and of memory).
__device__ __forceinline__ uint32_t pack_bf16x2(float x0, float x1) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);  // .x (lower 16 bits) = x0
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The same pair split: hi = bf16(x), lo = bf16(x - hi).
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_bf16x2(x0 - hf.x, x1 - hf.y);
}

}  // namespace kestrel::ops::cuda::mma16
