// Our host conversions against the GPU's hardware conversions, bit for bit.
//
// A kernel encodes with the same intrinsics CUDA code uses (__nv_cvt_float_to_fp8 with
// __NV_SATFINITE / __NV_E4M3, __float2bfloat16_rn, __float2half_rn: single cvt instructions on
// sm_89+), and the host computes kestrel::f32_to_fp8_e4m3 / f32_to_bf16 / f32_to_f16 on the same
// inputs, spread over all cores. Inputs: every bf16 and f16 pattern widened to f32, the named
// edge cases, and more than 10^8 random f32 patterns that the device generates from a counter
// hash (the host regenerates them with the same hash), in chunks so memory stays small. The
// decoders (fp8, bf16, f16 -> f32) are compared on every pattern too.
// Needs a GPU: skipped, with the reason, where there is none.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"

namespace kestrel {
namespace {

// Every CUDA call is checked; a failure throws, and GoogleTest reports it with the call.
#define CHECK_CUDA(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t err_ = (expr);                                                              \
    if (err_ != cudaSuccess)                                                                      \
      throw ::kestrel::Error(::kestrel::str("CUDA error ", cudaGetErrorName(err_), " (",         \
                                            cudaGetErrorString(err_), ") in ", #expr, " at ",     \
                                            __FILE__, ":", __LINE__));                            \
  } while (0)

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { CHECK_CUDA(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// ---- inputs: a counter hash, identical on host and device ----

__host__ __device__ inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// fp8 midpoints between adjacent positive codes, as f32 bits (passed to the kernel by value).
struct Midpoints {
  uint32_t bits[0x7e];
};

Midpoints make_midpoints() {
  Midpoints m{};
  for (int c = 0; c < 0x7e; ++c)
    m.bits[c] = f32_bits(static_cast<float>(
        (double{fp8_e4m3_to_f32(static_cast<uint8_t>(c))} + double{fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1))}) / 2));
  return m;
}

__host__ __device__ inline float bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return f32_from_bits(u);
#endif
}

// Input i: i % 4 in {0, 1}: a uniform 32-bit pattern; 2: uniform in [-600, 600]; 3: within
// 4 f32 ulps of an fp8 midpoint, either sign.
__host__ __device__ inline float random_input(uint64_t seed, uint64_t i, const Midpoints& mids) {
  const uint64_t h = mix(seed + 0x9e3779b97f4a7c15ull * (i + 1));
  switch (i & 3) {
    case 2: {
      const float k = static_cast<float>(h >> 40);  // 0 .. 2^24 - 1, exact
      constexpr float kStep = 1200.0f / 16777216.0f;
      // Two separately rounded operations: no fused multiply-add on either side.
#ifdef __CUDA_ARCH__
      return __fsub_rn(__fmul_rn(k, kStep), 600.0f);
#else
      const float scaled = k * kStep;
      return scaled - 600.0f;
#endif
    }
    case 3: {
      const uint32_t c = static_cast<uint32_t>((h >> 8) % 0x7e);
      const int32_t ulps = static_cast<int32_t>((h >> 24) % 9) - 4;
      return bits_to_f32((mids.bits[c] + static_cast<uint32_t>(ulps)) | static_cast<uint32_t>(h & 0x80000000u));
    }
    default: return bits_to_f32(static_cast<uint32_t>(h >> 32));
  }
}

// ---- kernels ----

// Encodes in[i] (or, when in is null, random_input(seed, base + i)) with the hardware.
__global__ void encode_kernel(uint8_t* out_fp8,    // [n]
                              uint16_t* out_bf16,  // [n]
                              uint16_t* out_f16,   // [n]
                              const float* in,     // [n] or null
                              int64_t n, uint64_t seed, uint64_t base, Midpoints mids) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = in ? in[i] : random_input(seed, base + static_cast<uint64_t>(i), mids);
    out_fp8[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    out_bf16[i] = __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    out_f16[i] = __half_raw(__float2half_rn(x)).x;
  }
}

// Decodes every 16-bit pattern as bf16 and as f16, and every byte as fp8 e4m3.
__global__ void decode_kernel(float* out_bf16,  // [65536]
                              float* out_f16,   // [65536]
                              float* out_fp8) {  // [256]
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= 65536) return;
  __nv_bfloat16_raw b;
  b.x = static_cast<unsigned short>(p);
  __half_raw h;
  h.x = static_cast<unsigned short>(p);
  out_bf16[p] = __bfloat162float(__nv_bfloat16(b));
  out_f16[p] = __half2float(__half(h));
  if (p < 256) out_fp8[p] = __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(p), __NV_E4M3)));
}

// ---- the host side ----

struct Mismatch {
  float x;
  uint8_t dev8, host8;
  uint16_t dev_bf16, host_bf16, dev_f16, host_f16;
};

std::string describe(const Mismatch& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "x = 0x%08x (%.9g): fp8 gpu 0x%02x host 0x%02x | bf16 gpu 0x%04x host 0x%04x | f16 gpu 0x%04x host 0x%04x",
                f32_bits(m.x), double{m.x}, m.dev8, m.host8, m.dev_bf16, m.host_bf16, m.dev_f16, m.host_f16);
  return buf;
}

// Totals over a run, shared by the worker threads.
struct Tally {
  std::mutex mu;
  uint64_t compared = 0;  // conversions (3 per input)
  uint64_t mismatched = 0;
  std::vector<Mismatch> first;  // up to kKeep, in no particular order across threads
  static constexpr size_t kKeep = 8;
};

// Compares device results for inputs [0, n) with the host encoders on all cores.
template <typename InputAt>
void compare_on_host(const std::vector<uint8_t>& d8, const std::vector<uint16_t>& dbf, const std::vector<uint16_t>& dh,
                     int64_t n, const InputAt& input_at, Tally& tally) {
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int64_t lo = t * per, hi = std::min(n, lo + per);
      uint64_t bad = 0;
      std::vector<Mismatch> keep;
      for (int64_t i = lo; i < hi; ++i) {
        const float x = input_at(i);
        const uint8_t h8 = f32_to_fp8_e4m3(x);
        const uint16_t hbf = f32_to_bf16(x), hh = f32_to_f16(x);
        if (h8 != d8[i] || hbf != dbf[i] || hh != dh[i]) {
          ++bad;
          if (keep.size() < Tally::kKeep) keep.push_back({x, d8[i], h8, dbf[i], hbf, dh[i], hh});
        }
      }
      std::lock_guard<std::mutex> lock(tally.mu);
      tally.compared += 3 * static_cast<uint64_t>(std::max<int64_t>(0, hi - lo));
      tally.mismatched += bad;
      for (const Mismatch& m : keep)
        if (tally.first.size() < Tally::kKeep) tally.first.push_back(m);
    });
  }
  for (std::thread& th : pool) th.join();
}

void report(const char* what, const Tally& tally) {
  std::printf("[ convert ] gpu vs host, %s: %llu conversions compared bit for bit, %llu mismatched\n", what,
              static_cast<unsigned long long>(tally.compared), static_cast<unsigned long long>(tally.mismatched));
  std::string list;
  for (const Mismatch& m : tally.first) list += "\n  " + describe(m);
  EXPECT_EQ(tally.mismatched, 0u) << "first mismatches:" << list;
}

// Encodes `xs` on the device and compares with the host.
void compare_inputs(const std::vector<float>& xs, Tally& tally) {
  const int64_t n = static_cast<int64_t>(xs.size());
  DeviceBuffer<float> in(xs.size());
  DeviceBuffer<uint8_t> o8(xs.size());
  DeviceBuffer<uint16_t> obf(xs.size()), oh(xs.size());
  CHECK_CUDA(cudaMemcpy(in.p, xs.data(), xs.size() * sizeof(float), cudaMemcpyHostToDevice));
  encode_kernel<<<256, 256>>>(o8.p, obf.p, oh.p, in.p, n, 0, 0, Midpoints{});
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> d8(xs.size());
  std::vector<uint16_t> dbf(xs.size()), dh(xs.size());
  CHECK_CUDA(cudaMemcpy(d8.data(), o8.p, xs.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(dbf.data(), obf.p, xs.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(dh.data(), oh.p, xs.size() * 2, cudaMemcpyDeviceToHost));
  compare_on_host(d8, dbf, dh, n, [&](int64_t i) { return xs[i]; }, tally);
}

class ConvertGpu : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(ConvertGpu, EveryBf16AndF16PatternAndEdgeCase) {
  std::vector<float> xs;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    xs.push_back(bf16_to_f32(static_cast<uint16_t>(p)));
    xs.push_back(f16_to_f32(static_cast<uint16_t>(p)));
  }
  // Edge cases: zeros, saturation and overflow, NaN payloads of both signs, subnormals, ties.
  const float named[] = {0.0f, -0.0f, 448.0f, -448.0f, 449.0f, 463.99f, 464.0f, -464.0f, 465.0f, 480.0f, 1e30f,
                         -1e30f, std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                         std::ldexp(1.0f, -10), std::ldexp(3.0f, -10), std::ldexp(15.0f, -10), std::ldexp(1.0f, -25),
                         std::ldexp(3.0f, -25), std::ldexp(2047.0f, -25)};
  for (float x : named) xs.push_back(x);
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0xffffffffu, 0x00000001u,
                     0x80000001u, 0x007fffffu, 0x807fffffu, 0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu})
    xs.push_back(f32_from_bits(u));
  // Every fp8 midpoint and its f32 neighbours, both signs; every fp8 value itself.
  const Midpoints mids = make_midpoints();
  for (uint32_t m : mids.bits)
    for (int d = -2; d <= 2; ++d)
      for (uint32_t s : {0u, 0x80000000u}) xs.push_back(f32_from_bits((m + static_cast<uint32_t>(d)) | s));
  for (int b = 0; b < 256; ++b) xs.push_back(fp8_e4m3_to_f32(static_cast<uint8_t>(b)));
  // bf16 ties and their neighbours over the whole exponent range.
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u}) xs.push_back(f32_from_bits(hi << 16 | lo));
  Tally tally;
  compare_inputs(xs, tally);
  report("all bf16/f16 patterns, edge cases, fp8 midpoints, bf16 ties", tally);
}

TEST_F(ConvertGpu, RandomF32Patterns) {
  constexpr int64_t kChunk = int64_t{1} << 22;  // 4 Mi inputs: 20 MiB on the device
  constexpr int kChunks = 24;                   // 24 * 4 Mi = 100.7 M > 10^8 inputs
  constexpr uint64_t kSeed = 0x6b657374726c31ull;
  const Midpoints mids = make_midpoints();
  DeviceBuffer<uint8_t> o8(kChunk);
  DeviceBuffer<uint16_t> obf(kChunk), oh(kChunk);
  std::vector<uint8_t> d8(kChunk);
  std::vector<uint16_t> dbf(kChunk), dh(kChunk);
  Tally tally;
  for (int c = 0; c < kChunks; ++c) {
    const uint64_t base = static_cast<uint64_t>(c) * kChunk;
    encode_kernel<<<1024, 256>>>(o8.p, obf.p, oh.p, nullptr, kChunk, kSeed, base, mids);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(d8.data(), o8.p, kChunk, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(dbf.data(), obf.p, kChunk * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(dh.data(), oh.p, kChunk * 2, cudaMemcpyDeviceToHost));
    compare_on_host(d8, dbf, dh, kChunk,
                    [&](int64_t i) { return random_input(kSeed, base + static_cast<uint64_t>(i), mids); }, tally);
  }
  std::printf("[ convert ] gpu: %lld random f32 inputs in %d chunks of %lld\n",
              static_cast<long long>(kChunk) * kChunks, kChunks, static_cast<long long>(kChunk));
  report("random f32 patterns", tally);
}

TEST_F(ConvertGpu, DecodersMatchOnEveryPattern) {
  DeviceBuffer<float> dbf(65536), dh(65536), d8(256);
  decode_kernel<<<256, 256>>>(dbf.p, dh.p, d8.p);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> gbf(65536), gh(65536), g8(256);
  CHECK_CUDA(cudaMemcpy(gbf.data(), dbf.p, 65536 * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(gh.data(), dh.p, 65536 * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(g8.data(), d8.p, 256 * 4, cudaMemcpyDeviceToHost));
  // Bit-exact, except that a NaN need only be a NaN (its sign and payload are not part of the
  // decode contract).
  auto same = [](float gpu, float host) {
    return f32_bits(gpu) == f32_bits(host) || (std::isnan(gpu) && std::isnan(host));
  };
  int bad = 0;
  auto check = [&](const char* type, uint32_t p, float gpu, float host) {
    if (same(gpu, host)) return;
    if (++bad <= 8)
      ADD_FAILURE() << type << " 0x" << std::hex << p << ": gpu 0x" << f32_bits(gpu) << " host 0x" << f32_bits(host);
  };
  for (uint32_t p = 0; p < 65536; ++p) {
    check("bf16", p, gbf[p], bf16_to_f32(static_cast<uint16_t>(p)));
    check("f16", p, gh[p], f16_to_f32(static_cast<uint16_t>(p)));
  }
  for (uint32_t p = 0; p < 256; ++p) check("fp8", p, g8[p], fp8_e4m3_to_f32(static_cast<uint8_t>(p)));
  std::printf("[ convert ] gpu decode: %d patterns compared (65536 bf16, 65536 f16, 256 fp8), %d mismatched\n",
              65536 * 2 + 256, bad);
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace kestrel
