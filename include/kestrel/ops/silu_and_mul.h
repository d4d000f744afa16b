// silu_and_mul: the gated activation of a SwiGLU MLP, out = silu(x[:, :F]) * x[:, F:].
// Spec: docs/ops/silu_and_mul.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct SiluAndMulArgs {
  TensorView out;  // [T, F]  bf16 | f16 | f32, any strides
  TensorView x;    // [T, 2F] same dtype as out, any strides: [gate (silu) half | up half]
};

void silu_and_mul_check(const SiluAndMulArgs& a);
Support silu_and_mul_supports(Backend b, const SiluAndMulArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void silu_and_mul(Backend b, const SiluAndMulArgs& a, Stream stream = nullptr);

namespace cpu {
void silu_and_mul(const SiluAndMulArgs& a);
}
namespace cuda {
Support silu_and_mul_supports(const SiluAndMulArgs& a);
void silu_and_mul(const SiluAndMulArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
