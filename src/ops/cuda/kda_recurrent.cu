// kda_recurrent, CUDA (sm_90a): T token steps per sequence (target verify, T = 1 + drafts <= S)
// with per-position state columns. Kernel: kda_token_steps_kernel<T, true> in
// kda_token_step.cuh, the same code as kda_packed_decode (DESIGN.md rule 4). Design note:
//
// - grid and registers as decode (kda_packed_decode.cu): one CTA of 4 warps per (sequence, head,
//   tile of 32 state rows); a warp holds 8 state rows in registers (a float4 per lane each);
// - the state is read once, from slot table[n][num_accepted[n] - 1], and stays in registers
//   across all T tokens; after token t the rows are stored to slot table[n][t] (skipped where
//   that id is <= 0), so each column's state is written exactly once and nothing is re-read.
//   Reading the start slot completes before any store, so a start slot that is also a written
//   column (num_accepted = 1 writes column 0) is safe; distinct sequences own distinct slots
//   (the engine's contract, validated by the CPU reference), so CTAs never share state rows;
// - token t + 1's inputs are loaded before token t's math (a one-deep software pipeline), so
//   their latency hides behind the step; the per-token math is in f32 registers as in decode;
// - padding sequences (start slot <= 0): the CTA writes T rows of zero outputs, no state.
// Bytes per (sequence, head): K * V * sizeof(pool) * (1 + columns written) (state) + T * ((2K + V) *
// sizeof(T) + K * sizeof(raw_g) + V * sizeof(T) + beta).
#include "kda_token_step.cuh"
#include "kestrel/ops/kda_recurrent.h"

namespace kestrel::ops::cuda {

Support kda_recurrent_supports(const KdaRecurrentArgs& a) {
  return kda::token_steps_supports(a.state_pool, a.raw_g.size(2), a.slot_table.size(0), a.raw_g.size(1),
                                   a.out.size(2));
}

void kda_recurrent(const KdaRecurrentArgs& a, Stream stream) {
  kda::KdaStepParams p = kda::token_steps_params(a);
  const int64_t N = a.slot_table.size(0);
  p.table = a.slot_table.data;
  p.tab64 = a.slot_table.dtype == DType::i64;
  p.tab_s0 = a.slot_table.stride(0);
  p.tab_s1 = a.slot_table.stride(1);
  p.accepted = a.num_accepted.data;
  p.acc64 = a.num_accepted.dtype == DType::i64;
  p.acc_s0 = a.num_accepted.stride(0);
  p.N = static_cast<int>(N);
  p.T = N == 0 ? 0 : checked_int(a.mixed_qkv.size(0) / N, "kda_recurrent", "T");
  kda::launch_token_steps<true>(p, a.out.dtype, a.state_pool.dtype, stream,
                                  "kda_recurrent", "kda_recurrent_kernel");
}

}  // namespace kestrel::ops::cuda
