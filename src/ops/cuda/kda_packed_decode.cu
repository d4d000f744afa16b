// kda_packed_decode, CUDA (sm_90a): one KDA token step per sequence, the state updated in place
// in its pool slot. Kernel: kda_token_steps_kernel<T, false> in kda_token_step.cuh, shared with
// kda_recurrent. Design note:
//
// Decode is memory-bound: per (sequence, head) it must read and write the K x V = 128 x 128 f32
// state (64 KB each way) and read only ~1 KB of token inputs. So the work is split to stream
// the state once at full width:
// - grid: one CTA of one warp per (sequence, head, 8 state rows v): B * H * 16 CTAs at V = 128
//   (512 already for B = 1, H = 32); adjacent CTAs touch adjacent state rows;
// - lane l owns key dims 4l .. 4l+3 of each of the warp's 8 rows, so a row (512 contiguous bytes,
//   K innermost) is one coalesced 16-byte copy per lane. The 8 rows go to shared memory by
//   cp.async first (4 KB per warp, f32), every copy in flight before any math and none of it
//   held in registers; each lane copies the 4 dims it will compute on, so after its own
//   wait_group it reads them back with no barrier. The rows are then stepped in registers (32
//   floats per lane) and written back once;
// - the shape was measured (H200, 2026-11-29, f32 pool; us at B = 256, H = 32):
//     registers only (state loaded straight into registers), rows/warp x warps/CTA:
//       2x8 434, 4x8 308 (the first version, 82% of copy), 4x4 303, 8x8 322, 8x4 289;
//     a resident grid whose warps loop over units, the next unit's rows prefetched: 520
//       (104 registers: 16 warps per SM);
//     staged in shared memory, rows/warp x warps/CTA x rows per register batch:
//       8x4x2 381, 8x4x4 314, 16x4x4 298, 16x2x4 285, 8x4x8 287, 16x2x8 272, 8x2x8 278,
//       16x1x8 273, 8x1x8 266 (95% of copy; also the fastest at B = 1, 8 and 32).
//   Decode is bound by the state bytes in flight per SM: registers cap it (8x4 ran 5 CTAs of
//   96 registers: 80 KB in flight); staged, up to 32 one-warp CTAs per SM keep 128 KB in flight;
// - the token math is done per warp in f32 registers, its loads issued while the state loads
//   are in flight (and, with a bf16 pool, its arithmetic too: kda_token_step.cuh says why only
//   there): q, k, raw_g of the lane's 4 dims (scalar loads: any row stride, any raw_g strides), the sum
//   of squares by a 5-step xor shuffle, exp(g) by expf / log1pf, beta by expf. Recomputing it in
//   each of a head's 16 warps costs ~1.5 KB of L1-resident loads and a few dozen instructions
//   per warp, and saves a block barrier: the kernel has none;
// - per row, S'^T k and S^T q are 4-wide partial dots per lane reduced by xor shuffles, the 8
//   rows' reductions interleaved; lane j writes o[v0 + j].
// - with an f32 pool and at most twice the L2 of state, the rows go back by streaming stores
//   (st.global.cs, evict-first in L2; kda_packed_decode_streaming_stores): B = 1 4.66 -> 4.29 us,
//   B = 8 1.04x, B = 32 1.02x at H = 32 on the H200; from B = 128 they cost 1-2%, and bf16 pools
//   gained nothing (docs/perf.md, thirteenth session).
// - the kernel is a programmatic dependent launch (launch_token_steps_as): its CTAs may be resident
//   while the kernel before it drains, and wait (griddepcontrol.wait) before their first global
//   access; then each triggers its own dependents. Graph replay of back-to-back calls: B = 1
//   1.05x, B = 8 1.03x, B = 32 1.016x at H = 32 (docs/perf.md, sixteenth session). The same
//   session measured, and did not keep: the rows stepped from shared memory in two passes (64
//   registers, 32 CTAs per SM: 0.96x at B = 32, bf16 pools 0.87-0.92x); 4 rows per warp (the
//   token math then per 2 KB: 0.75x); register caps for more resident CTAs (80: 1.00x, 72 and
//   64 with spills 0.85-0.92x); the row sums as reduce-scatters (fewer instructions, a longer
//   dependent chain: bf16 pools 1.02-1.08x from B = 32 but 0.95x at B = 1, 8, f32 0.98x from
//   B = 128, verify 0.96-0.98x). A data-movement-only variant of this kernel (results wrong by
//   construction) took 35.2 us at B = 32, H = 32 against 36.0 for the kernel and 33.2 for a
//   device copy of the same bytes: the token math costs ~2%, the shape of the kernel the rest.
// A bf16 pool halves the state bytes: a lane moves its 4 key dims as one 8-byte access, the
// rows are widened to f32 in registers and rounded back to bf16 (nearest even) before the store.
// Bytes per (token, head): 2 * K * V * sizeof(pool) (state) + (2K + V) * sizeof(T) (q, k, v)
// + K * sizeof(raw_g) + V * sizeof(T) (out) + beta, A_log, dt_bias (4 B + 4 + 512, L2-resident).
// Padding rows (slot <= 0): the CTA writes its 32 zero outputs and reads no state.
// Needs K = 128 and slots aligned to 4 elements (supports says so otherwise); any V, H, strides.
#include "kda_token_step.cuh"
#include "kestrel/ops/kda_packed_decode.h"

namespace kestrel::ops::cuda {

Support kda_packed_decode_supports(const KdaPackedDecodeArgs& a) {
  return kda::token_steps_supports(a.state_pool, a.raw_g.size(2), a.state_indices.size(0), a.raw_g.size(1),
                                   a.out.size(2));
}

void kda_packed_decode(const KdaPackedDecodeArgs& a, Stream stream) {
  kda::KdaStepParams p = kda::token_steps_params(a);
  p.table = a.state_indices.data;
  p.tab64 = a.state_indices.dtype == DType::i64;
  p.tab_s0 = a.state_indices.stride(0);
  p.tab_s1 = 0;  // only column 0 exists
  p.accepted = nullptr;
  p.N = static_cast<int>(a.state_indices.size(0));
  p.T = 1;
  kda::launch_token_steps<false>(p, a.out.dtype, a.state_pool.dtype, stream,
                                  "kda_packed_decode", "kda_packed_decode_kernel");
}

}  // namespace kestrel::ops::cuda
