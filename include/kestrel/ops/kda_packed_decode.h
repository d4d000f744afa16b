// kda_packed_decode: one KDA token step per sequence (decode), reading q | k | v from the packed
// post-conv projection row and updating the recurrent state in place in its pool slot.
// Spec: docs/ops/kda.md.
#pragma once

#include <optional>

#include "kestrel/ops/backend.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops {

struct KdaPackedDecodeArgs {
  TensorView out;            // [B, H, V] bf16 | f32, any strides; padding rows are written 0
  TensorView state_pool;     // [slots, H, V, K] f32, each slot contiguous; updated in place
  TensorView mixed_qkv;      // [B, >= 2HK+HV] dtype of out, channel stride 1, any row stride:
                             //   q = cols [0, HK), k = [HK, 2HK), v = [2HK, 2HK+HV), head-major
  TensorView raw_g;          // [B, H, K] bf16 | f32, any strides: gate input before dt_bias
  TensorView raw_beta;       // [B, H] bf16 | f32, any strides: beta logits
  TensorView A_log;          // [H] f32, any stride
  TensorView dt_bias;        // [H * K] f32, any stride
  TensorView state_indices;  // [B] i32 | i64, any stride (e.g. column 0 of a slot table);
                             //   <= 0: padding (out row 0, no state touched); else < slots
  std::optional<float> lower_bound;  // none: softplus gate; LB < 0: LB * sigmoid(...) gate
};

// CUDA: whether the decode kernel writes an f32 state back with streaming stores (st.global.cs,
// evict-first in L2) rather than plain ones (a pure function, docs/ops/kda.md): when the call's
// state bytes (B H V K 4, each way) are at most twice the L2. Measured on the H200 (60 MiB L2):
// 1.02-1.09x at B <= 8 and 1.02x at B = 32 (H = 32), 0.98x from B = 128; bf16 pools and verify
// (kda_recurrent) keep plain stores (neutral to 3% slower with them). The same values either way.
bool kda_packed_decode_streaming_stores(int64_t state_bytes, int64_t l2_bytes);

void kda_packed_decode_check(const KdaPackedDecodeArgs& a);
Support kda_packed_decode_supports(Backend b, const KdaPackedDecodeArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void kda_packed_decode(Backend b, const KdaPackedDecodeArgs& a, Stream stream = nullptr);

namespace cpu {
void kda_packed_decode(const KdaPackedDecodeArgs& a);
}
namespace cuda {
Support kda_packed_decode_supports(const KdaPackedDecodeArgs& a);
void kda_packed_decode(const KdaPackedDecodeArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
