// kda_chunk_prefill: KDA over varlen sequences (prefill), chunk by chunk (64 tokens, WY / UT
// transform), initial states read from pool slots, final states written back to the same
// slots, optional state checkpoints every 64 tokens. Spec: docs/ops/kda.md.
#pragma once

#include <optional>

#include "kestrel/ops/backend.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops {

struct KdaChunkPrefillArgs {
  TensorView out;                // [T, H, V] bf16 | f32, any strides (T = all tokens of the batch)
  TensorView state_pool;         // [slots, H, V, K] f32 | bf16, each slot contiguous; final states written
  TensorView checkpoints;        // optional [P, H, V, K] dtype of state_pool, each row contiguous: the state after
                                 //   token 64c - 1 of sequence n goes to row cu_checkpoints[n] + c - 1
  TensorView mixed_qkv;          // [T, >= 2HK+HV] dtype of out, channel stride 1
  TensorView raw_g;              // [T, H, K] bf16 | f32, any strides
  TensorView raw_beta;           // [T, H] bf16 | f32, any strides
  TensorView A_log;              // [H] f32, any stride
  TensorView dt_bias;            // [H * K] f32, any stride
  TensorView cu_seqlens;         // [N + 1] i32 | i64, any stride: 0 = c0 <= c1 <= ... <= cN = T
  TensorView state_indices;      // [N] i32 | i64, any stride; <= 0: padding sequence
  TensorView has_initial_state;  // optional [N] i32 | i64: 0 = start from the zero state
                                 //   (absent: every sequence reads its slot)
  TensorView cu_checkpoints;     // [N + 1] i32 | i64 with checkpoints: sequence n owns
                                 //   floor(len_n / 64) rows starting at cu_checkpoints[n]
  std::optional<float> lower_bound;
  // CUDA: the most scratch memory the call may take for its chunk workspace (bytes; 0: the
  // default, kda_chunk_prefill_default_workspace_bytes of the device's memory). The batch's
  // chunks run in windows of as many chunks as fit (at least one), the states carried through
  // the pool slots from window to window (a bf16 pool: through an f32 copy of the batch's
  // states, N H V K 4 bytes of scratch beside this bound, only when there are several windows);
  // results are bit-identical for any value.
  int64_t max_workspace_bytes = 0;
};

// CUDA: the default workspace bound (a pure function, docs/ops/kda.md): a 32nd of the device's
// memory, at least 1 GiB and at most 4 GiB. An H200 (141 GB) gets 4 GiB, one window for a
// 64k-token sequence at H = 32 (2.3 GB); an 80 GB card 2.5 GiB; a card of 32 GB or less 1 GiB.
int64_t kda_chunk_prefill_default_workspace_bytes(int64_t device_memory_bytes);

// CUDA: the chunk workspace takes this many bytes per (chunk slot, head); a call's chunk slots
// are N + floor(T / 64). (The unit of max_workspace_bytes; the kernels static_assert it.)
inline constexpr int64_t kKdaChunkWorkspaceBytesPerSlotHead = 71168;

// CUDA: the state kernel's warp layout (a pure function, docs/ops/kda.md): warps in two roles
// (one set multiplies the chunk's rows, the other holds and updates the state) when its grid of
// `ctas` CTAs (sequences x heads x value tiles of 32) has at most one CTA per SM; else uniform
// warps, of which an SM holds two CTAs. The two give bit-identical results.
bool kda_chunk_prefill_state_roles(int64_t ctas, int64_t num_sms);

void kda_chunk_prefill_check(const KdaChunkPrefillArgs& a);
Support kda_chunk_prefill_supports(Backend b, const KdaChunkPrefillArgs& a);
void kda_chunk_prefill(Backend b, const KdaChunkPrefillArgs& a, Stream stream = nullptr);

namespace cpu {
// The reference: the chunked form (chunk 64, WY / UT transform) in f64 with f32 states at
// chunk boundaries.
void kda_chunk_prefill(const KdaChunkPrefillArgs& a);
// The same op computed token by token (the recurrence, f32 state after every token, exactly as
// kda_packed_decode steps): the second reference the chunked form is proven equal to.
void kda_chunk_prefill_token_by_token(const KdaChunkPrefillArgs& a);
}  // namespace cpu
namespace cuda {
Support kda_chunk_prefill_supports(const KdaChunkPrefillArgs& a);
void kda_chunk_prefill(const KdaChunkPrefillArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
