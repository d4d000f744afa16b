// rms_norm_gated, CUDA: one warp per (t, h) row, kWarps rows per block. The rows are head-sized
// (D = 128 for KDA), too short to keep a whole block busy, so a warp owns a row and reduces
// with shuffles alone, no shared memory and no block barrier. Pass 1 reduces the sum of
// squares of x in fp32; pass 2 re-reads x (from L1: a row is a few hundred bytes) with the gate
// and weight and writes out. Each lane reads element d of x and gate before it writes out[d],
// so out may be x or gate itself. Strides are taken as given.
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

template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_gated_kernel(RmsNormGatedParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= p.rows) return;  // the whole warp leaves together: the shuffles below stay full
  const int lane = threadIdx.x % 32;
  const int64_t t = row / p.H, h = row % p.H;
  const T* x = static_cast<const T*>(p.x) + t * p.x_s0 + h * p.x_s1;
  const T* g = static_cast<const T*>(p.gate) + t * p.g_s0 + h * p.g_s1;
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + t * p.out_s0 + h * p.out_s1;
  float sum_sq = 0.0f;
  for (int d = lane; d < p.D; d += 32) {
    const float v = to_f32(x[d * p.x_s2]);
    sum_sq += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(p.D) + p.eps);
  for (int d = lane; d < p.D; d += 32) {
    const float v = to_f32(x[d * p.x_s2]);
    const float gv = to_f32(g[d * p.g_s2]);
    const float sig = 1.0f / (1.0f + expf(-gv));
    out[d * p.out_s2] = from_f32<T>(((v * rstd) * to_f32(w[d * p.w_s0])) * sig);
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
    rms_norm_gated_kernel<T><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    KESTREL_LAUNCHED("rms_norm_gated_kernel");
  });
}

}  // namespace kestrel::ops::cuda
