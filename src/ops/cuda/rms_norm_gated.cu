// rms_norm_gated, CUDA: one warp per (t, h) row, kWarps rows per block. The rows are head-sized
// (D = 128 for KDA), too short to keep a whole block busy, so a warp owns a row and reduces
// with shuffles alone, no shared memory and no block barrier. For D <= 256 a lane holds its
// elements of x and gate in registers (one read of the row, all loads in flight at once);
// wider rows take two passes, the second re-reading x from L1. The sum of squares is fp32.
// Each lane reads element d of x and gate before it writes out[d], so out may be x or gate
// itself. Strides are taken as given.
#include "common.cuh"
#include "kestrel/ops/rms_norm_gated.h"

namespace kestrel::ops::cuda {

namespace {

struct RmsNormGatedParams {
  void* out;           // [T, H, D]
  const void* x;       // [T, H, D]
  const void* gate;    // [T, H, D]
  const void* weight;  // [D]
  int64_t out_s0, out_s1, out_s2, x_s0, x_s1, x_s2, g_s0, g_s1, g_s2, w_s0;
  int64_t rows;  // T * H
  int H, D;
  float eps;
};

constexpr int kWarps = 8;  // rows per block: 256 threads, enough blocks for T * H >= ~1k rows
constexpr int kThreads = kWarps * 32;

// kPer > 0: D <= 32 * kPer, and a lane keeps its kPer elements of x and gate in registers:
// every load of the row is issued before the reduction waits on any of them. kPer == 0: any
// D, in two passes over the row (pass 2 re-reads x from L1).
template <typename T, int kPer>
__global__ void __launch_bounds__(kThreads) rms_norm_gated_kernel(RmsNormGatedParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= p.rows) return;  // the whole warp leaves together: the shuffles below stay full
  const int lane = threadIdx.x % 32;
  const int64_t t = row / p.H, h = row % p.H;
  const T* x = static_cast<const T*>(p.x) + t * p.x_s0 + h * p.x_s1;
  const T* g = static_cast<const T*>(p.gate) + t * p.g_s0 + h * p.g_s1;
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + t * p.out_s0 + h * p.out_s1;
  auto gated = [&](float v, float rstd, float gv, float wv) {
    const float sig = 1.0f / (1.0f + expf(-gv));
    return from_f32<T>(((v * rstd) * wv) * sig);
  };
  float sum_sq = 0.0f;
  if constexpr (kPer > 0) {
    float xv[kPer], gv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      xv[i] = d < p.D ? to_f32(x[d * p.x_s2]) : 0.0f;
      gv[i] = d < p.D ? to_f32(g[d * p.g_s2]) : 0.0f;
      sum_sq += xv[i] * xv[i];
    }
    for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
    const float rstd = rsqrtf(sum_sq / static_cast<float>(p.D) + p.eps);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < p.D) out[d * p.out_s2] = gated(xv[i], rstd, gv[i], to_f32(w[d * p.w_s0]));
    }
  } else {
#pragma unroll 4
    for (int d = lane; d < p.D; d += 32) {
      const float v = to_f32(x[d * p.x_s2]);
      sum_sq += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
    const float rstd = rsqrtf(sum_sq / static_cast<float>(p.D) + p.eps);
#pragma unroll 4
    for (int d = lane; d < p.D; d += 32)
      out[d * p.out_s2] = gated(to_f32(x[d * p.x_s2]), rstd, to_f32(g[d * p.g_s2]), to_f32(w[d * p.w_s0]));
  }
}

}  // namespace

Support rms_norm_gated_supports(const RmsNormGatedArgs& a) {
  const int64_t rows = a.x.size(0) * a.x.size(1);
  if ((rows + kWarps - 1) / kWarps > INT32_MAX) return Support::no("T * H / 8 must fit in int32 (grid size)");
  return Support::yes();
}

void rms_norm_gated(const RmsNormGatedArgs& a, Stream stream) {
  RmsNormGatedParams p{};
  p.out = a.out.data;
  p.x = a.x.data;
  p.gate = a.gate.data;
  p.weight = a.weight.data;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1); p.out_s2 = a.out.stride(2);
  p.x_s0 = a.x.stride(0); p.x_s1 = a.x.stride(1); p.x_s2 = a.x.stride(2);
  p.g_s0 = a.gate.stride(0); p.g_s1 = a.gate.stride(1); p.g_s2 = a.gate.stride(2);
  p.w_s0 = a.weight.stride(0);
  p.rows = a.x.size(0) * a.x.size(1);
  p.H = checked_int(a.x.size(1), "rms_norm_gated", "H");
  p.D = checked_int(a.x.size(2), "rms_norm_gated", "D");
  p.eps = a.eps;
  if (p.rows == 0) return;
  const int blocks = static_cast<int>((p.rows + kWarps - 1) / kWarps);
  dispatch_float(a.out.dtype, "rms_norm_gated", [&]<typename T>() {
    auto launch = [&]<int kPer>() {
      rms_norm_gated_kernel<T, kPer><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
      KESTREL_LAUNCHED("rms_norm_gated_kernel");
    };
    // register tiers: KDA's D = 128 takes kPer = 4
    if (p.D <= 64) launch.template operator()<2>();
    else if (p.D <= 128) launch.template operator()<4>();
    else if (p.D <= 256) launch.template operator()<8>();
    else launch.template operator()<0>();
  });
}

}  // namespace kestrel::ops::cuda
