// gemm, CPU reference: the definition of the op (docs/ops/gemm.md). Products and sums in
// f64 (exact products of bf16 values; the sum is far closer to exact than any fp32 kernel),
// then one rounding to bf16.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/gemm.h"

namespace kestrel::ops::cpu {

namespace {

// f64 -> bf16 rounded once to nearest even. Going through f32 with round-to-nearest would
// round twice; rounding to odd into f32 (16 spare bits) and then to nearest even into bf16
// gives the correctly rounded result.
uint16_t f64_to_bf16(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d && (f32_bits(f) & 1u) == 0)
    f = std::nextafter(f, d > f ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
  return f32_to_bf16(f);
}

}  // namespace

void gemm(const GemmArgs& g) {
  const int64_t M = g.a.size(0), K = g.a.size(1), N = g.b.size(1);
  // Plain copies first (a as [M][K], b transposed to [N][K]) so that the triple loop below
  // walks both contiguously whatever the strides of the views.
  std::vector<double> a(static_cast<size_t>(M * K)), bt(static_cast<size_t>(N * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = load_f32(g.a, m * g.a.stride(0) + k * g.a.stride(1));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) bt[n * K + k] = load_f32(g.b, k * g.b.stride(0) + n * g.b.stride(1));
  for (int64_t m = 0; m < M; ++m) {
    const double* am = a.data() + m * K;
    for (int64_t n = 0; n < N; ++n) {
      const double* bn = bt.data() + n * K;
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += am[k] * bn[k];
      const uint16_t h = f64_to_bf16(acc);
      std::memcpy(static_cast<uint16_t*>(g.c.data) + m * g.c.stride(0) + n * g.c.stride(1), &h, 2);
    }
  }
}

}  // namespace kestrel::ops::cpu
