// The two ceilings every case is held against, measured on this GPU in this run (METHOD.md:
// datasheet rates are leads, measure them):
//   bandwidth  a device-to-device cudaMemcpyAsync of 1 GiB; bytes = read + write = 2 GiB.
//   math       a cuBLAS bf16 GEMM, n = 8192 (M = N = K), fp32 accumulate, bf16 out, on random
//              non-zero data (zeros ran 13% faster on one H200: METHOD.md); FLOPs = 2 n^3.
// Both are the median of `reps` event-timed repetitions after a warm-up.
#include <cublas_v2.h>

#include <algorithm>

#include "cuda_util.h"

namespace kestrel::bench {

namespace {

#define BENCH_CUBLAS(expr)                                                                         \
  do {                                                                                             \
    cublasStatus_t st_ = (expr);                                                                   \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      throw ::kestrel::Error(::kestrel::str("cuBLAS error ", cublasGetStatusName(st_), " in ", #expr, \
                                            " at ", __FILE__, ":", __LINE__));                     \
  } while (0)

constexpr int kCeilingWarmup = 3;

class CublasHandle {
 public:
  CublasHandle() { BENCH_CUBLAS(cublasCreate(&h_)); }
  ~CublasHandle() { cublasDestroy(h_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

void measure_copy(Ceilings& c, const Options& opt, double gib, cudaStream_t s) {
  const int64_t bytes = static_cast<int64_t>(gib * 1024.0 * 1024.0 * 1024.0);
  const int64_t elems = bytes / 2;
  Tensor src = Tensor::storage(elems, DType::bf16, Device::cuda);
  Tensor dst = Tensor::storage(elems, DType::bf16, Device::cuda);
  fill_device(src.data(), DType::bf16, elems, Fill::signed_mag(), 1, s);
  fill_device(dst.data(), DType::bf16, elems, Fill::signed_mag(), 2, s);
  const size_t n = static_cast<size_t>(elems) * 2;
  for (int i = 0; i < kCeilingWarmup; ++i)
    BENCH_CUDA(cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDeviceToDevice, s));
  const int reps = std::max(opt.reps, 1);
  EventPairs ev(reps);
  for (int i = 0; i < reps; ++i) {
    ev.start(i, s);
    BENCH_CUDA(cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDeviceToDevice, s));
    ev.stop(i, s);
  }
  std::vector<double> us = ev.elapsed_ms();
  for (double& t : us) t *= 1e3;
  c.copy = stats_of(std::move(us));
  c.copy_bytes = 2.0 * static_cast<double>(n);
  c.copy_gbps = c.copy_bytes / (c.copy.median_us * 1e3);
}

void measure_gemm(Ceilings& c, const Options& opt, int n, cudaStream_t s) {
  const int64_t elems = static_cast<int64_t>(n) * n;
  Tensor a = Tensor::storage(elems, DType::bf16, Device::cuda);
  Tensor b = Tensor::storage(elems, DType::bf16, Device::cuda);
  Tensor d = Tensor::storage(elems, DType::bf16, Device::cuda);
  fill_device(a.data(), DType::bf16, elems, Fill::signed_mag(), 3, s);
  fill_device(b.data(), DType::bf16, elems, Fill::signed_mag(), 4, s);
  fill_device(d.data(), DType::bf16, elems, Fill::signed_mag(), 5, s);
  CublasHandle h;
  BENCH_CUBLAS(cublasSetStream(h.get(), s));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    BENCH_CUBLAS(cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(),
                              CUDA_R_16BF, n, &beta, d.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < kCeilingWarmup; ++i) gemm();
  const int reps = std::max(opt.reps, 1);
  EventPairs ev(reps);
  for (int i = 0; i < reps; ++i) {
    ev.start(i, s);
    gemm();
    ev.stop(i, s);
  }
  std::vector<double> us = ev.elapsed_ms();
  for (double& t : us) t *= 1e3;
  c.gemm = stats_of(std::move(us));
  c.gemm_n = n;
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  c.gemm_tflops = flops / (c.gemm.median_us * 1e6);
}

}  // namespace

Ceilings measure_ceilings(const Options& opt, double copy_gib, int gemm_n) {
  Ceilings c;
  OwnedStream stream;
  measure_copy(c, opt, copy_gib, stream.get());
  measure_gemm(c, opt, gemm_n, stream.get());
  BENCH_CUDA(cudaStreamSynchronize(stream.get()));
  c.measured = true;
  return c;
}

}  // namespace kestrel::bench
