// rms_norm, CPU reference: the definition of the op (docs/ops/rms_norm.md).
#include <cmath>
#include <vector>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/rms_norm.h"

namespace kestrel::ops::cpu {

void rms_norm(const RmsNormArgs& a) {
  const int64_t T = a.x.size(0), D = a.x.size(1);
  std::vector<float> h(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    double sum_sq = 0;  // fp64 accumulation: the reference is closer to exact than any kernel
    for (int64_t d = 0; d < D; ++d) {
      float v = load_f32(a.x, t * a.x.stride(0) + d * a.x.stride(1));
      if (a.residual.defined()) {
        const int64_t ro = t * a.residual.stride(0) + d * a.residual.stride(1);
        v = round_to(a.out.dtype, v + load_f32(a.residual, ro));
        store_f32(a.residual, ro, v);
      }
      h[d] = v;
      sum_sq += static_cast<double>(v) * v;
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(D) + a.eps));
    for (int64_t d = 0; d < D; ++d) {
      const float w = load_f32(a.weight, d * a.weight.stride(0));
      store_f32(a.out, t * a.out.stride(0) + d * a.out.stride(1), (h[d] * rstd) * w);
    }
  }
}

}  // namespace kestrel::ops::cpu
