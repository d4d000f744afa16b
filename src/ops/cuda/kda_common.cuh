// Device helpers the CUDA KDA kernels share: index and mixed-dtype loads, the warp sums, and the
// per-element math of docs/ops/kda.md in f32 (gate, beta, SiLU). Semantics: src/ops/cpu/kda_math.h.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace kestrel::ops::cuda::kda {

// Element `off` of an i32 | i64 index tensor.
__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t off) {
  return is64 ? static_cast<const int64_t*>(p)[off] : static_cast<int64_t>(static_cast<const int32_t*>(p)[off]);
}

// Element `off` of a bf16 | f32 tensor whose dtype is only known at run time (raw_g, raw_beta and
// the conv weight may differ from the token dtype).
__device__ __forceinline__ float load_real(const void* p, bool bf16, int64_t off) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[off]) : static_cast<const float*>(p)[off];
}

// 4 consecutive elements (address aligned to 4 elements) as one 16-byte (f32) or 8-byte (bf16)
// load, widened to f32 exactly (bf16: element 0 in the low half of the first word).
__device__ __forceinline__ float4 load4(const float* x) { return *reinterpret_cast<const float4*>(x); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* x) {
  const uint2 u = *reinterpret_cast<const uint2*>(x);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

// Sum over the 32 lanes of a warp; every lane gets the same bits (the xor butterfly adds the same
// two operands on both partners at each level).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// kN independent warp sums, interleaved so that their shuffles overlap.
template <int kN>
__device__ __forceinline__ void warp_sum_n(float (&v)[kN]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// The log-decay g of one key dim from a = raw_g + dt_bias and exp(A_log[h]) (kda_math.h gate()):
//   no lower bound: g = -exp(A_log) * softplus(a), softplus(a) = a above 20, else log1p(exp(a));
//   lower bound LB: g = LB * sigmoid(exp(A_log) * a).
__device__ __forceinline__ float gate(float a, float exp_a_log, bool has_lb, float lb) {
  if (!has_lb) return -exp_a_log * (a > 20.0f ? a : log1pf(expf(a)));
  return lb * sigmoid(exp_a_log * a);
}

// The MUFU forms ex2 and lg2 (common.cuh): CUDA's accurate expf is ~8 instructions and log1pf ~25.
using cuda::ex2;
using cuda::lg2;
inline constexpr float kLog2e = 1.4426950408889634f;

// The gate above in base 2, g / ln 2, from the MUFU forms. softplus(a) / ln 2 = log2(1 + e^a),
// e^a = 2^(a log2e): below e^a = 1/16 the series e (1 - e/2 + e^2/3 - e^3/4) log2e (relative
// error < e^4 / 5 < 2e-7: cancellation in 1 + e would cost lg2 its relative accuracy there), else
// lg2(1 + e^a) (>= log2(17/16) = 0.087 with absolute error ~2^-22: relative <= 3e-6), and
// a / ln 2 above 20 (the reference's threshold). Lower bound LB: LB log2e sigmoid(x) = LB log2e /
// (1 + 2^(-x log2e)). Against gate(), |g2 ln2 - g| <= ~3e-6 |g|; NaN propagates (every comparison
// fails, lg2(NaN) = NaN), a = -inf gives -0 as the reference's 0. Every branch's value is formed
// and one selected (as nested conditionals, the three cases cost three divergence regions per
// element: 1/5 of the prefill intra kernel's P1 instructions).
__device__ __forceinline__ float gate_log2_softplus(float a, float exp_a_log) {
  const float e = ex2(a * kLog2e);
  const float series = kLog2e * e * fmaf(e, fmaf(e, fmaf(e, -0.25f, 1.0f / 3.0f), -0.5f), 1.0f);
  const float log_1pe = lg2(1.0f + e);
  const float small_or_mid = e < 0.0625f ? series : log_1pe;
  return -exp_a_log * (a > 20.0f ? a * kLog2e : small_or_mid);
}
__device__ __forceinline__ float gate_log2_lb(float a, float exp_a_log, float lb) {
  return __fdividef(lb * kLog2e, 1.0f + ex2(-exp_a_log * a * kLog2e));
}

}  // namespace kestrel::ops::cuda::kda
