// kda_recurrent: T KDA token steps per sequence (target verify: 1 + drafts), token by token,
// with one state slot per position: the sequence starts from the state in column
// num_accepted - 1 of its slot-table row and writes the state after token t into column t,
// so rollback is choosing a column, never a copy. Spec: docs/ops/kda.md.
#pragma once

#include <optional>

#include "kestrel/ops/backend.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops {

struct KdaRecurrentArgs {
  TensorView out;           // [N*T, H, V] bf16 | f32, any strides; row n*T + t is token t of sequence n
  TensorView state_pool;    // [slots, H, V, K] f32, each slot contiguous; columns' slots written
  TensorView mixed_qkv;     // [N*T, >= 2HK+HV] dtype of out, channel stride 1 (as kda_packed_decode)
  TensorView raw_g;         // [N*T, H, K] bf16 | f32, any strides
  TensorView raw_beta;      // [N*T, H] bf16 | f32, any strides
  TensorView A_log;         // [H] f32, any stride
  TensorView dt_bias;       // [H * K] f32, any stride
  TensorView slot_table;    // [N, S] i32 | i64, any strides, S = 1 + num_spec >= T
  TensorView num_accepted;  // [N] i32 | i64, any stride, values in [1, S]
  std::optional<float> lower_bound;
};

void kda_recurrent_check(const KdaRecurrentArgs& a);
Support kda_recurrent_supports(Backend b, const KdaRecurrentArgs& a);
void kda_recurrent(Backend b, const KdaRecurrentArgs& a, Stream stream = nullptr);

namespace cpu {
void kda_recurrent(const KdaRecurrentArgs& a);
}
namespace cuda {
Support kda_recurrent_supports(const KdaRecurrentArgs& a);
void kda_recurrent(const KdaRecurrentArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
