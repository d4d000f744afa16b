// The keys-as-M kernels' softmax along M (mla_attention_keys_m.cu for the fp8 cache,
// mla_attention_keys_m_bf16.cu for the bf16 one): a warpgroup's S^T accumulators, 64 keys x kN
// query rows (the columns), kN / 2 registers a thread. Thread t (warp w = t / 32, g = (t % 32) / 4,
// q4 = t % 4) holds in register i the key row 16 w + g + 8 ((i / 2) % 2) of column slot
// k = slot_of_reg(i), its column col_of_slot(q4, k) (kN / 4 slots).
#pragma once

#include <cstdint>

#include "sm90_ptx.cuh"

namespace kestrel::ops::cuda::keys_m_softmax {

constexpr float kRescaleSlack = 8.0f;  // log2 units: P <= 256 between rescales (f16 and bf16 hold it)

__device__ __forceinline__ int col_of_slot(int q4, int k) { return 8 * (k / 2) + 2 * q4 + k % 2; }
__device__ __forceinline__ int slot_of_reg(int i) { return 2 * (i / 4) + i % 2; }

// bar.red.or over `count` threads of named barrier `id`: whether any of them passed true.
__device__ __forceinline__ bool named_bar_or(int id, int count, bool v) {
  uint32_t r;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
               : "=r"(r)
               : "r"(static_cast<uint32_t>(v)), "r"(id), "r"(count)
               : "memory");
  return r != 0;
}

// Lazy rescaling: the column maxima are exchanged only when some score exceeds its column's m by
// more than the slack (m = -inf: any attended key); the common tile costs one bar.red (vote_bar,
// vote_threads: the warpgroup's 128 or both warpgroups) instead of shuffles, a barrier and
// shared-memory traffic. Then the thread's maxima, the 8 lanes g by shuffles, the 4 warps through
// colmax ([4 warps][kN]) and the warpgroup's barrier max_bar. When some column's m moved (the same
// answer in every warp: all read the same maxima) it calls rescale(alpha) with the factor of each
// of the thread's kN / 4 columns (1 where m stayed), by which l is already scaled and O^T must be;
// returns whether it did. (A callback: the factors returned to the caller made ptxas spill in the
// fp8 32-row consumer.)
template <int kN, class Rescale>
__device__ __forceinline__ bool rescale_maxima(const float (&sc)[kN / 2], float (&m)[kN / 4], float (&l)[kN / 4],
                                               float* colmax, int vote_bar, int vote_threads, int max_bar, int w, int g,
                                               int q4, Rescale&& rescale) {
  constexpr int kSlots = kN / 4;
  bool above = false;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) above |= sc[i] > m[slot_of_reg(i)] + kRescaleSlack;
  if (!named_bar_or(vote_bar, vote_threads, above)) return false;
  float mx[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) mx[k] = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) mx[slot_of_reg(i)] = fmaxf(mx[slot_of_reg(i)], sc[i]);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 4));
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 8));
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 16));
  }
  if (g == 0) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) colmax[w * kN + col_of_slot(q4, k)] = mx[k];
  }
  sm90::named_bar_sync(max_bar, 128);
  float alpha[kSlots];
  bool grew = false;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int n = col_of_slot(q4, k);
    const float tile_max = fmaxf(fmaxf(colmax[n], colmax[kN + n]), fmaxf(colmax[2 * kN + n], colmax[3 * kN + n]));
    alpha[k] = 1.0f;
    if (tile_max > m[k] + kRescaleSlack) {
      const float m_new = fmaxf(m[k], tile_max);
      alpha[k] = exp2f(m[k] - m_new);  // 0 while nothing was attended
      m[k] = m_new;
      l[k] *= alpha[k];
      grew = true;
    }
  }
  if (!__any_sync(0xffffffffu, grew)) return false;
  rescale(alpha);
  return true;
}

// The row sums of a warpgroup at a row tile's end: the thread's rows, the 8 lanes g by shuffles,
// then the 4 warps' partial sums through colmax (free: every warp passed the P barrier after its
// last read) and the warpgroup's barrier max_bar; row_sum gives column n's total after it.
template <int kN>
__device__ __forceinline__ void publish_row_sums(float (&l)[kN / 4], float* colmax, int max_bar, int w, int g, int q4) {
#pragma unroll
  for (int k = 0; k < kN / 4; ++k) {
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 4);
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 8);
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 16);
  }
  if (g == 0) {
#pragma unroll
    for (int k = 0; k < kN / 4; ++k) colmax[w * kN + col_of_slot(q4, k)] = l[k];
  }
  sm90::named_bar_sync(max_bar, 128);
}
template <int kN>
__device__ __forceinline__ float row_sum(const float* colmax, int n) {
  return (colmax[n] + colmax[kN + n]) + (colmax[2 * kN + n] + colmax[3 * kN + n]);
}

}  // namespace kestrel::ops::cuda::keys_m_softmax
