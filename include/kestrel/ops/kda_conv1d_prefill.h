// kda_conv1d_prefill: the short convolution in front of KDA over varlen sequences: causal
// depthwise conv1d (width W, 4 for Kimi, no bias) then SiLU, per channel of the packed
// q | k | v projection, continuing from and updating each sequence's conv state slot.
// Spec: docs/ops/kda.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct KdaConv1dPrefillArgs {
  TensorView out;                // [T, C] bf16 | f32, any strides; may be x itself
  TensorView conv_state;         // [slots, R, C] dtype of x, any strides, R >= W - 1: rows 0 .. W-2
                                 //   hold the last W - 1 inputs (oldest first); updated in place
  TensorView x;                  // [T, C] dtype of out, any strides (T = all tokens of the batch)
  TensorView weight;             // [C, W] bf16 | f32, any strides, W >= 2; tap W-1 = current token
  TensorView cu_seqlens;         // [N + 1] i32 | i64, any stride
  TensorView state_indices;      // [N] i32 | i64, any stride; <= 0: padding (out rows 0, no state)
  TensorView has_initial_state;  // optional [N] i32 | i64: 0 = start from zero history
};

void kda_conv1d_prefill_check(const KdaConv1dPrefillArgs& a);
Support kda_conv1d_prefill_supports(Backend b, const KdaConv1dPrefillArgs& a);
void kda_conv1d_prefill(Backend b, const KdaConv1dPrefillArgs& a, Stream stream = nullptr);

namespace cpu {
void kda_conv1d_prefill(const KdaConv1dPrefillArgs& a);
}
namespace cuda {
Support kda_conv1d_prefill_supports(const KdaConv1dPrefillArgs& a);
void kda_conv1d_prefill(const KdaConv1dPrefillArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
