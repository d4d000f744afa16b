// rms_norm, CUDA: one block per row. Pass 1 reads the row (adding and writing back the
// residual when fused) and reduces the sum of squares in fp32; pass 2 re-reads the row
// (from L1/L2: a row is at most a few tens of KB) and writes the normalised output. Each
// thread touches the same elements in both passes, so the in-place residual write in pass 1
// and the read in pass 2 need no barrier. Strides are taken as given.
#include "common.cuh"
#include "kestrel/ops/rms_norm.h"

namespace kestrel::ops::cuda {

namespace {

struct RmsNormParams {
  void* out;             // [T, D]
  const void* x;         // [T, D]
  const void* weight;    // [D]
  void* residual;        // [T, D] or nullptr
  int64_t out_s0, out_s1, x_s0, x_s1, w_s0, r_s0, r_s1;
  int T, D;
  float eps;
};

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNormParams p) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + t * p.x_s0;
  T* res = p.residual ? static_cast<T*>(p.residual) + t * p.r_s0 : nullptr;
  float sum_sq = 0.0f;
  for (int d = threadIdx.x; d < p.D; d += kThreads) {
    float v = to_f32(x[d * p.x_s1]);
    if (res) {
      const T h = from_f32<T>(v + to_f32(res[d * p.r_s1]));
      res[d * p.r_s1] = h;
      v = to_f32(h);
    }
    sum_sq += v * v;
  }
  sum_sq = block_sum<kThreads>(sum_sq, scratch);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(p.D) + p.eps);
  const T* w = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out) + t * p.out_s0;
  for (int d = threadIdx.x; d < p.D; d += kThreads) {
    const float h = res ? to_f32(res[d * p.r_s1]) : to_f32(x[d * p.x_s1]);
    out[d * p.out_s1] = from_f32<T>((h * rstd) * to_f32(w[d * p.w_s0]));
  }
}

}  // namespace

Support rms_norm_supports(const RmsNormArgs& a) {
  if (a.x.size(0) > INT32_MAX) return Support::no("T must fit in int32");
  return Support::yes();
}

void rms_norm(const RmsNormArgs& a, Stream stream) {
  RmsNormParams p{};
  p.out = a.out.data;
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.residual = a.residual.defined() ? a.residual.data : nullptr;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1);
  p.x_s0 = a.x.stride(0); p.x_s1 = a.x.stride(1);
  p.w_s0 = a.weight.stride(0);
  if (p.residual) { p.r_s0 = a.residual.stride(0); p.r_s1 = a.residual.stride(1); }
  p.T = checked_int(a.x.size(0), "rms_norm", "T");
  p.D = checked_int(a.x.size(1), "rms_norm", "D");
  p.eps = a.eps;
  if (p.T == 0) return;
  dispatch_float(a.out.dtype, "rms_norm", [&]<typename T>() {
    rms_norm_kernel<T><<<p.T, kThreads, 0, as_cuda(stream)>>>(p);
    KESTREL_LAUNCHED("rms_norm_kernel");
  });
}

}  // namespace kestrel::ops::cuda
