// gemm: c [M, N] = a [M, K] @ b [K, N]; bf16 in, fp32 accumulation, bf16 out.
// Spec: docs/ops/gemm.md.
//
// Every operand is a strided view, so a transpose is only a swap of strides: a weight
// W [N, K] (row-major) multiplies as b = W viewed [K, N] with strides (1, K).
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct GemmArgs {
  TensorView c;  // [M, N] bf16, any strides, no self-overlap (CUDA: a unit stride in one dim)
  TensorView a;  // [M, K] bf16, any strides (CUDA: a unit stride in one dim)
  TensorView b;  // [K, N] bf16, any strides (CUDA: a unit stride in one dim)
};

void gemm_check(const GemmArgs& a);
Support gemm_supports(Backend b, const GemmArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void gemm(Backend b, const GemmArgs& a, Stream stream = nullptr);

namespace cpu {
void gemm(const GemmArgs& a);
}
namespace cuda {
Support gemm_supports(const GemmArgs& a);
void gemm(const GemmArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
