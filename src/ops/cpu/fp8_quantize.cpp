// fp8_quantize, CPU reference: the definition of the op (docs/ops/fp8_quantize.md).
#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/fp8_quantize.h"

namespace kestrel::ops::cpu {

void fp8_quantize(const Fp8QuantizeArgs& a) {
  for_each_pair(a.out, a.x, [&](int64_t out_off, int64_t x_off) {
    // IEEE f32 division (not a multiply by 1/scale), then round-to-nearest-even with
    // saturation to +-448 and NaN -> 0x7F (core/convert.h).
    store_f32(a.out, out_off, load_f32(a.x, x_off) / a.scale);
  });
}

}  // namespace kestrel::ops::cpu
