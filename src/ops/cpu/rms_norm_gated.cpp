// rms_norm_gated, CPU reference: the definition of the op (docs/ops/rms_norm_gated.md).
#include <cmath>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/rms_norm_gated.h"

namespace kestrel::ops::cpu {

void rms_norm_gated(const RmsNormGatedArgs& a) {
  const int64_t T = a.x.size(0), H = a.x.size(1), D = a.x.size(2);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t xo = t * a.x.stride(0) + h * a.x.stride(1);
      const int64_t go = t * a.gate.stride(0) + h * a.gate.stride(1);
      const int64_t oo = t * a.out.stride(0) + h * a.out.stride(1);
      double sum_sq = 0;  // fp64 accumulation: the reference is closer to exact than any kernel
      for (int64_t d = 0; d < D; ++d) {
        const float v = load_f32(a.x, xo + d * a.x.stride(2));
        sum_sq += static_cast<double>(v) * v;
      }
      const float rstd = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(D) + a.eps));
      // Element d of x and gate is read before out[d] is written: out may be x or gate itself.
      for (int64_t d = 0; d < D; ++d) {
        const float v = load_f32(a.x, xo + d * a.x.stride(2));
        const float g = load_f32(a.gate, go + d * a.gate.stride(2));
        const float w = load_f32(a.weight, d * a.weight.stride(0));
        const float sig = 1.0f / (1.0f + std::exp(-g));
        store_f32(a.out, oo + d * a.out.stride(2), ((v * rstd) * w) * sig);
      }
    }
  }
}

}  // namespace kestrel::ops::cpu
