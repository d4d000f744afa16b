// fp8_dequantize, CPU reference: the definition of the op (docs/ops/fp8_dequantize.md).
#include <cmath>
#include <cstring>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/fp8_dequantize.h"

namespace kestrel::ops::cpu {

void fp8_dequantize(const Fp8DequantizeArgs& a) {
  for_each_pair(a.out, a.x, [&](int64_t out_off, int64_t x_off) {
    // dec() is exact; one f32 multiply; one rounding to the output dtype.
    const float v = load_f32(a.x, x_off) * a.scale;
    if (std::isnan(v) && a.out.dtype == DType::f32) {
      // NaN (x = 0x7F or 0xFF) is the canonical f32 NaN 0x7FFFFFFF, whatever its sign;
      // bf16 and f16 NaNs are canonical (0x7FFF) through store_f32 already.
      const uint32_t nan_bits = 0x7fffffffu;
      std::memcpy(static_cast<float*>(a.out.data) + out_off, &nan_bits, 4);
      return;
    }
    store_f32(a.out, out_off, v);
  });
}

}  // namespace kestrel::ops::cpu
