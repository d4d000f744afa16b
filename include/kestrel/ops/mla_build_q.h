// mla_build_q: q_out[t, h] <- [q_nope[t, h] | q_pe[t, h]] in bf16 (a copy) or fp8 (quantised):
// the absorbed MLA query of DESIGN.md 4.2. Spec: docs/ops/mla_build_q.md.
#pragma once

#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops {

struct MlaBuildQArgs {
  TensorView q_out;    // [T, H, 576] bf16 | fp8_e4m3, any strides, no self-overlap
  TensorView q_nope;   // [T, H, 512] bf16, any strides
  TensorView q_pe;     // [T, H, 64]  bf16, any strides
  float scale = 1.0f;  // fp8 q_out: stored = enc(x / scale), > 0 and finite; bf16: must be 1
};

void mla_build_q_check(const MlaBuildQArgs& a);
Support mla_build_q_supports(Backend b, const MlaBuildQArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void mla_build_q(Backend b, const MlaBuildQArgs& a, Stream stream = nullptr);

namespace cpu {
void mla_build_q(const MlaBuildQArgs& a);
}
namespace cuda {
Support mla_build_q_supports(const MlaBuildQArgs& a);
void mla_build_q(const MlaBuildQArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
