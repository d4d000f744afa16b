// How many fp8 -> f16 conversions can an SM issue per clock? The question that decides the
// direction docs/ops/mla_attention.md plans for the fp8 cache (keys as the wgmma M, the e4m3 K
// and V converted in the consumers' registers): 18,432 e4m3 -> f16 conversions per 32 keys at
// H = 32 done by 256 consumer threads. This probe times, per SM and clock, over a grid that fills
// every SM:
//   e4m3x2 -> f16x2  (cvt.rn.f16x2.e4m3x2: two values per instruction)
//   f16x2 -> 2 f32   (cvt.f32.f16 twice: the widening an f32 consumer would add)
//   fma.rn.f16x2     (a known pipe, as a yardstick)
//   lop3 (xor)       (what folds the results so that nothing is optimised away)
// Each measured instruction works on 16 independent chains per thread, each result the next
// trip's input (a loop-invariant input would be hoisted by ptxas, whatever the inline asm says),
// folded by xor into a stored value once, after the loop. Rates are warp instructions (32 lanes)
// per SM per clock at the clock the driver reports as the maximum (the H200 runs at it under
// load); the loop's own 3 instructions per 16 are not subtracted.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o cvt_throughput tools/cvt_throughput.cu
//   ./cvt_throughput
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

constexpr int kRegs = 16;    // independent values per thread
constexpr int kIters = 512;  // loop trips

enum Op { kE4m3ToF16x2, kF16ToF32, kHfma2, kLop3 };

template <int kOp>
__global__ void probe(uint32_t seed, uint32_t* out) {
  uint32_t v[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) v[i] = seed * (threadIdx.x + 1) + 0x3c3c3c3cu * (i + 1);
  const uint32_t salt = seed | 1u;
#pragma unroll 1
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      if constexpr (kOp == kE4m3ToF16x2) {
        asm volatile("{\n.reg .b16 lo;\nmov.b32 {lo, _}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(v[i]) : "r"(v[i]));
      } else if constexpr (kOp == kF16ToF32) {  // two cvt and one xor (the chain) per value
        float a, b;
        asm volatile("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}\n"
                     : "=f"(a), "=f"(b)
                     : "r"(v[i]));
        v[i] = __float_as_uint(a) ^ __float_as_uint(b);
      } else if constexpr (kOp == kHfma2) {
        asm volatile("fma.rn.f16x2 %0, %1, %1, %1;\n" : "=r"(v[i]) : "r"(v[i]));
      } else {
        asm volatile("xor.b32 %0, %1, %2;\n" : "=r"(v[i]) : "r"(v[i]), "r"(salt));
      }
    }
  }
  uint32_t acc = 0;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) acc ^= v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int kOp>
int time_op(const char* name, int per_op, int sms, double clock_hz, uint32_t* out) {
  const int threads = 256, blocks = sms * 8;
  probe<kOp><<<blocks, threads>>>(1u, out);  // warm-up
  CHECK(cudaGetLastError());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  const int reps = 10;
  for (int r = 0; r < reps; ++r) probe<kOp><<<blocks, threads>>>(2u + r, out);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double warps = static_cast<double>(blocks) * threads / 32;
  const double instr = warps * kIters * kRegs * per_op * reps;  // warp instructions of the measured op
  const double per_sm_clk = instr / (ms * 1e-3) / clock_hz / sms;
  std::printf("%-18s %8.3f ms  %6.2f warp instructions / SM / clock (%6.1f lane results / SM / clock)\n", name,
              ms / reps, per_sm_clk, per_sm_clk * 32);
  return 0;
}

int main() {
  int dev = 0, sms = 0, khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs, clock %.0f MHz (reported maximum); %d values x %d trips per thread, 8 CTAs of 256 per SM\n",
              prop.name, sms, khz / 1e3, kRegs, kIters);
  uint32_t* out = nullptr;
  CHECK(cudaMalloc(&out, static_cast<size_t>(sms) * 8 * 256 * sizeof(uint32_t)));
  const double hz = khz * 1e3;
  if (time_op<kE4m3ToF16x2>("e4m3x2->f16x2", 1, sms, hz, out)) return 1;
  if (time_op<kF16ToF32>("f16->f32 (x2)", 2, sms, hz, out)) return 1;
  if (time_op<kHfma2>("fma.rn.f16x2", 1, sms, hz, out)) return 1;
  if (time_op<kLop3>("xor (+fold)", 1, sms, hz, out)) return 1;
  CHECK(cudaFree(out));
  return 0;
}
