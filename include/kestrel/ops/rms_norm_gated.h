// rms_norm_gated: per-head RMSNorm times a sigmoid gate, the output norm after KDA
// (DESIGN.md 4.3). Spec: docs/ops/rms_norm_gated.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct RmsNormGatedArgs {
  TensorView out;     // [T, H, D] bf16 | f16 | f32, any strides; may be `x` or `gate` itself
  TensorView x;       // [T, H, D] same dtype as out, any strides; normalised over D per (t, h)
  TensorView gate;    // [T, H, D] same dtype, any strides; out *= sigmoid(gate)
  TensorView weight;  // [D]       same dtype, any stride; shared by every head
  float eps = 1e-5f;
};

void rms_norm_gated_check(const RmsNormGatedArgs& a);
Support rms_norm_gated_supports(Backend b, const RmsNormGatedArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void rms_norm_gated(Backend b, const RmsNormGatedArgs& a, Stream stream = nullptr);

namespace cpu {
void rms_norm_gated(const RmsNormGatedArgs& a);
}
namespace cuda {
Support rms_norm_gated_supports(const RmsNormGatedArgs& a);
void rms_norm_gated(const RmsNormGatedArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
