// fp8_dequantize: out = round_dtype(dec(x) * scale), the per-tensor fp8 e4m3 decode of
// DESIGN.md 4.1. Spec: docs/ops/fp8_dequantize.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct Fp8DequantizeArgs {
  TensorView out;      // [...] f32 | bf16 | f16, rank 1..4, any strides, no self-overlap
  TensorView x;        // [...] same shape, fp8_e4m3, any strides
  float scale = 1.0f;  // > 0 and finite: value = dec(x) * scale
};

void fp8_dequantize_check(const Fp8DequantizeArgs& a);
Support fp8_dequantize_supports(Backend b, const Fp8DequantizeArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void fp8_dequantize(Backend b, const Fp8DequantizeArgs& a, Stream stream = nullptr);

namespace cpu {
void fp8_dequantize(const Fp8DequantizeArgs& a);
}
namespace cuda {
Support fp8_dequantize_supports(const Fp8DequantizeArgs& a);
void fp8_dequantize(const Fp8DequantizeArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
