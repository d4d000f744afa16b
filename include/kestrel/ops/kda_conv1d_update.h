// kda_conv1d_update: the short convolution for T new tokens per sequence (decode T = 1, verify
// T = 1 + drafts) against each sequence's conv state, which keeps E extra rows so that
// the inputs of every draft stay available for rollback. Spec: docs/ops/kda.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct KdaConv1dUpdateArgs {
  TensorView out;            // [N*T, C] bf16 | f32, any strides; row n*T + t; may be x itself
  TensorView conv_state;     // [slots, R, C] dtype of x, any strides, R = W - 1 + E, T <= E + 1
  TensorView x;              // [N*T, C] dtype of out, any strides
  TensorView weight;         // [C, W] bf16 | f32, any strides, W >= 2
  TensorView state_indices;  // [N] i32 | i64, any stride; <= 0: padding (out rows 0, no state)
  TensorView num_accepted;   // optional [N] i32 | i64 in [1, E + 1]: tokens of the previous
                             //   call that were accepted (absent: 1, plain decode)
};

void kda_conv1d_update_check(const KdaConv1dUpdateArgs& a);
Support kda_conv1d_update_supports(Backend b, const KdaConv1dUpdateArgs& a);
void kda_conv1d_update(Backend b, const KdaConv1dUpdateArgs& a, Stream stream = nullptr);

namespace cpu {
void kda_conv1d_update(const KdaConv1dUpdateArgs& a);
}
namespace cuda {
Support kda_conv1d_update_supports(const KdaConv1dUpdateArgs& a);
void kda_conv1d_update(const KdaConv1dUpdateArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
