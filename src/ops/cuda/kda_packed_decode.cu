// kda_packed_decode, CUDA (sm_90a): one KDA token step per sequence, the state updated in place
// in its pool slot. Kernel: kda_token_steps_kernel<T, false> in kda_token_step.cuh, shared with
// kda_recurrent. Design note:
//
// Decode is memory-bound: per (sequence, head) it must read and write the K x V = 128 x 128 f32
// state (64 KB each way) and read only ~1 KB of token inputs. So the work is split to stream
// the state once at full width:
// - grid: one CTA of 4 warps per (sequence, head, tile of 32 state rows v): B * H * 4 CTAs at
//   V = 128 (128 CTAs already for B = 1, H = 32); adjacent CTAs touch adjacent state rows;
// - a warp owns 8 state rows; lane l owns key dims 4l .. 4l+3 of each, so a row (512 contiguous
//   bytes, K innermost) is one coalesced 16-byte load per lane, and the 8 rows' loads are all in
//   flight before any math. The state rows stay in registers (32 floats per lane) from load to
//   store, and are written back once;
// - the shape was measured (H200, 2026-11-29, f32 pool, B = 256): rows per warp x warps per
//   CTA = 2x8: 434 us at H = 32; 4x8 (the first version): 308; 4x4: 303; 8x8: 322; 8x4: 289
//   (88% of copy; verify N = 32, T = 4, H = 96: 478 -> 377 us). Decode is bound by the state
//   bytes in flight per SM: 8x4 runs 5 CTAs of 96 registers per SM (80 KB of loads in flight)
//   against 4 x 16 KB for 4x8; 8x8 fits only 2 CTAs. A resident grid whose warps loop over
//   units with the next unit's rows prefetched was slower still (520 us: 104 registers, 16 warps
//   per SM). More bytes in flight without registers (state tiles through shared memory by bulk
//   copies) is the next step toward the copy ceiling;
// - the token math is done per warp in f32 registers while the state loads are in flight:
//   q, k, raw_g of the lane's 4 dims (scalar loads: any row stride, any raw_g strides), the sum
//   of squares by a 5-step xor shuffle, exp(g) by expf / log1pf, beta by expf. Recomputing it in
//   each of a head's 32 warps costs ~1.5 KB of L1-resident loads and a few dozen instructions
//   per warp, and saves a block barrier and shared memory: the kernel has neither;
// - per row, S'^T k and S^T q are 4-wide partial dots per lane reduced by xor shuffles, the 4
//   rows' reductions interleaved; lane j writes o[v0 + j].
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
