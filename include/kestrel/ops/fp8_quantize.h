// fp8_quantize: out = enc(x / scale), the per-tensor fp8 e4m3 encode of DESIGN.md 4.1.
// Spec: docs/ops/fp8_quantize.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct Fp8QuantizeArgs {
  TensorView out;      // [...] fp8_e4m3, rank 1..4, any strides, no self-overlap
  TensorView x;        // [...] same shape, f32 | bf16 | f16, any strides
  float scale = 1.0f;  // > 0 and finite: stored = enc(x / scale)
};

void fp8_quantize_check(const Fp8QuantizeArgs& a);
Support fp8_quantize_supports(Backend b, const Fp8QuantizeArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void fp8_quantize(Backend b, const Fp8QuantizeArgs& a, Stream stream = nullptr);

namespace cpu {
void fp8_quantize(const Fp8QuantizeArgs& a);
}
namespace cuda {
Support fp8_quantize_supports(const Fp8QuantizeArgs& a);
void fp8_quantize(const Fp8QuantizeArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
