// fp8_quantize, CPU reference: the definition of the op (docs/ops/fp8_quantize.md).
#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/fp8_quantize.h"

namespace kestrel::ops::cpu {

void fp8_quantize(const Fp8QuantizeArgs& a) {
  // Views of rank 1..4 seen as rank 4 with leading size-1 dims.
  int64_t n[4] = {1, 1, 1, 1}, so[4] = {0, 0, 0, 0}, sx[4] = {0, 0, 0, 0};
  const int lead = 4 - a.out.rank;
  for (int d = 0; d < a.out.rank; ++d) {
    n[lead + d] = a.out.size(d);
    so[lead + d] = a.out.stride(d);
    sx[lead + d] = a.x.stride(d);
  }
  for (int64_t i0 = 0; i0 < n[0]; ++i0)
    for (int64_t i1 = 0; i1 < n[1]; ++i1)
      for (int64_t i2 = 0; i2 < n[2]; ++i2)
        for (int64_t i3 = 0; i3 < n[3]; ++i3) {
          const float v = load_f32(a.x, i0 * sx[0] + i1 * sx[1] + i2 * sx[2] + i3 * sx[3]);
          // IEEE f32 division (not a multiply by 1/scale), then round-to-nearest-even with
          // saturation to +-448 and NaN -> 0x7F (core/convert.h).
          store_f32(a.out, i0 * so[0] + i1 * so[1] + i2 * so[2] + i3 * so[3], v / a.scale);
        }
}

}  // namespace kestrel::ops::cpu
