// silu_and_mul, CPU reference: the definition of the op (docs/ops/silu_and_mul.md).
#include <cmath>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/silu_and_mul.h"

namespace kestrel::ops::cpu {

void silu_and_mul(const SiluAndMulArgs& a) {
  const int64_t T = a.out.size(0), F = a.out.size(1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      const float g = load_f32(a.x, t * a.x.stride(0) + f * a.x.stride(1));
      const float u = load_f32(a.x, t * a.x.stride(0) + (F + f) * a.x.stride(1));
      const float silu = g / (1.0f + std::exp(-g));
      store_f32(a.out, t * a.out.stride(0) + f * a.out.stride(1), silu * u);
    }
  }
}

}  // namespace kestrel::ops::cpu
