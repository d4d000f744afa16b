// rms_norm: RMSNorm over the last dim, optionally with the residual add fused in front.
// Spec: docs/ops/rms_norm.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct RmsNormArgs {
  TensorView out;       // [T, D] bf16 | f16 | f32, any strides; may be `x` itself
  TensorView x;         // [T, D] same dtype as out, any strides
  TensorView weight;    // [D]    same dtype, any stride
  TensorView residual;  // optional [T, D] same dtype: h = round(x + residual) is written back
                        // here and normalised instead of x
  float eps = 1e-6f;
};

void rms_norm_check(const RmsNormArgs& a);
Support rms_norm_supports(Backend b, const RmsNormArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void rms_norm(Backend b, const RmsNormArgs& a, Stream stream = nullptr);

namespace cpu {
void rms_norm(const RmsNormArgs& a);
}
namespace cuda {
Support rms_norm_supports(const RmsNormArgs& a);
void rms_norm(const RmsNormArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
