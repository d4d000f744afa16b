// kda_chunk_prefill, CUDA, kernel 2 of 2: the state recurrence, one CTA per (sequence, head,
// 32 value columns), chunks in order (design note: kda_chunk_prefill.cu). Per chunk, from the
// intra-chunk kernel's workspace (Qg, Kg, Kd, Tm, Aqk as f16, decay) and the chunk's v:
//   P5  O = Qg S (kept in registers to P7) and Y = V - Kg S -> y;
//   P6  Vn = Tm Y -> vn  (= U - W S with U = Tm V, W = Tm Kg: neither is formed);
//   P7  O += Aqk Vn, stored; S = diag(dec) S + Kd^T Vn, checkpoint.
// Every product is one pass on f16 tensor cores, mma.sync m16n8k16 with f32 accumulation
// (mma_bf16.cuh); the state is carried in f32 registers and rounded to f16 only as an operand.
// Why f16, one pass: a host emulation against the f64 token recurrence
// (tools/kda_product_precision.py, T = 4096; docs/ops/kda.md) puts every product on f16
// operands at 2.0e-5 / 1.1e-4 on outputs and 1.7e-4 / 9.1e-4 on final states (matrix generators
// / weak decay), inside the 4e-3 allowance, where bf16 operands (fla's choice) err 8.1e-3 on weak
// decays: f16 keeps 3 more mantissa bits. Its price is range: operands must stay below 65504 in
// magnitude (Qg, Kg, Kd, Aqk are <= 1 by construction, Tm's entries are O(1), S, Y and Vn scale
// with v); beyond it they become inf and the outputs inf / NaN, never a finite wrong value. The
// 3xBF16 version before (x ~ hi + lo on the state's path, ~2^-16 relative; 3.0e-6 / 1.5e-5 on
// states) issued three times the tensor work and read twice the operand bytes from shared
// memory, which bounds this kernel (Nsight: L1/TEX 77% of peak): at T = 16k, H = 32 it took 762
// us against 537.
// Every warp does a share of every product (warp w: row block mb = w for w < 4, 7 - w above,
// value columns 16 ch .. + 15 with ch = w / 4): P5 and P6 rows 16 mb .. +15 x those 16 columns
// (x K 128; x j < 16 (mb + 1) in P6, Tm being lower triangular); P7-out the same; P7-state key
// dims 16 w .. +15 x all 32 columns x 64. The state tile S[:, v0 .. v0+31] (128 x 32) is f32 in
// registers, in P7-state's C-fragment map (warp w, key dims 16 w ..: 16 values per thread),
// across the whole sequence; after each update its owner writes the f16 copy that P5 reads from
// shared memory. The final state and the checkpoints are stored from the f32
// registers (exact; a bf16 pool's rounded to nearest even: StateIo). That is the uniform layout
// (state_uniform).
// The roles layout (state_roles; kRoles, chosen by the host rule kda_chunk_prefill_state_roles
// when the grid has at most one CTA per SM): row warps 0-3 take row block rb = warp and all 32
// columns in P5 (each S fragment read once for both Qg S and Kg S) and P7-out; state warps 4-7
// hold the state (key dims 32 (warp - 4) .. + 31, two C tiles) and do P7-state and the f16
// copy; P6 as above on all eight. Operand reads from shared memory per chunk and CTA: 131 KB
// instead of 184. The two roles run their own loops and meet at the same three barriers per
// chunk from different code positions (cta_sync_any_position). Every product is the same
// mma.sync on the same operands, accumulated in the same k order, so the two layouts give the
// same bits (tests/ops/kda_cuda_test.cpp, ChunkPrefillStateLayoutsAreBitIdentical). Measured
// (H200, docs/perf.md, twelfth session): 1.03x for the op at 16k and 64k tokens, H = 32; with
// more CTAs than SMs (H = 96) the uniform layout, two CTAs per SM, stays faster.
//
// Pipeline: the chunk's workspace (an image of the operand buffers below, padded rows included:
// kda_chunk_prefill_common.cuh) arrives by three bulk copies (cp.async.bulk, thread 0 issuing,
// one mbarrier per group, each completing once per chunk):
//   B1  wait for group 0 (Qg, Kg); barrier;  issue groups 1 (Tm) and 2 (Kd, Aqk, dec)
//   P5  (reads qg, kg, s);                   then every warp loads the next chunk's v
//   B2  wait for group 1; barrier;           issue group 0 of the next chunk
//   P6  (reads tm, y);
//   B3  wait for group 2; barrier;  P7 (reads aqk, vn, kd, dec; writes s: own rows only).
// Every thread waits on the mbarrier itself (the wait makes the copied bytes visible to it).
// Races, per buffer: group 0 is written by the copy issued after B2 and read in P5 (after the
// next B1); groups 1, 2 written after B1 and read in P6 (after B2) and P7 (after B3), their next
// copies issued after the next B1, when every P7 read is done; y written in P5, read in P6 (B2
// between); vn written in P6, read in P7 (B3), rewritten in the next P6 (two barriers later); s
// read by all in P5, written in P7 (B2, B3 between) and read again in the next P5 (after B1);
// the first s is written before the first B1.
// Operands are read by ldmatrix: A row-major (qg, kg, tm, aqk) plain, Kd^T (Kd stored [j][d])
// and every B (s [d][v], y and vn [j][v], k-major) with .trans. Bank conflicts: a fragment load
// reads 8 rows of 16 bytes; rows of 136 f16 (272 bytes), 72 (144) and 40 (80) put those 8 rows
// 4 banks apart: conflict-free; the C-fragment stores of f16 pairs into s / y / vn (row g (+8),
// word 4 nt + t, rows of 20 words) hit banks 20 g + 4 nt + t: distinct across the warp.
//
// Shared memory (bytes; 91,680): the workspace image WsImage (71,168: qg, kg, tm, kd, aqk, dec)
// | s [128][40] S (d, v) | y, vn [64][40] (j, v) | 3 mbarriers (110 registers: two CTAs can
// share an SM).
// History (T = 4096, H = 32, the state kernel alone, H200, docs/perf.md): 542 us with cvt.rna
// tf32 splits; 353 us with integer splits, ldmatrix, balanced warps, pre-split B operands (tf32);
// 256 us on bf16 tensor cores (3xBF16); 250 us with the balanced row blocks; 198 us with the
// workspace by bulk copies (16-byte cp.async before: ~6,700 per chunk, their address registers
// held the warps); at T = 16k, 762 us (3xBF16) -> 537 us (f16, one pass). Measured and not
// kept: a double-buffered Qg / Kg (cp.async, 208 KB: slower),
// P5 with the next k-step's fragments loaded ahead and two accumulator sets (192 registers: 418
// vs 411 us for the op), and wgmma for every product (branch wgmma-state: correct, but 464 vs 414
// us for the op: descriptor arithmetic ~45% of its instructions, and each phase waiting on its
// wgmma group; its workspace layouts made the intra kernel's stores 16-byte granular, +50 us;
// again with each k-step's descriptor as base + immediate, d52c6c6: the op 460 vs 411 us, the
// difference the intra kernel's, the state kernel no faster than this one).
#pragma once

#include "cp_async.cuh"
#include "kda_chunk_prefill_common.cuh"
#include "mma_bf16.cuh"
#include "sm90_ptx.cuh"

#include <type_traits>

namespace kestrel::ops::cuda::kda_chunk {

inline constexpr int kLdV = kTileV + 8;  // rows of 32 f16 (s, y, vn)
inline constexpr int kRowWarps = 4;      // state_roles: warps 0-3 P5, P7-out; warps 4-7 the state

// A CTA barrier that warps may reach from different code positions (barrier.sync without
// .aligned; __syncthreads is the aligned form, which requires one position for the whole CTA).
// Barrier 1, all kThreads threads.
__device__ __forceinline__ void cta_sync_any_position() {
  asm volatile("barrier.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}

// Calls f(std::integral_constant<int, mb + 1>): the 16-deep k-steps of row block mb of a lower
// block-triangular product over the chunk (16-row blocks), fixed at compile time.
template <typename F>
__device__ __forceinline__ void by_row_block(int mb, F&& f) {
  switch (mb) {
    case 0: f(std::integral_constant<int, 1>{}); break;
    case 1: f(std::integral_constant<int, 2>{}); break;
    case 2: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

struct alignas(16) StateSmem {
  WsImage w;          // the chunk's workspace, loaded by three bulk copies (one per group)
  f16 s[kK][kLdV];    // S (d, v): the f32 state in registers, rounded to f16
  f16 y[kC][kLdV];    // Y (j, v)
  f16 vn[kC][kLdV];   // Vn (j, v)
  uint64_t bar[3];    // mbarriers: workspace group g landed
};
static_assert(sizeof(StateSmem) == 91680, "the note above states this size");

// Thread 0: the bulk copy of workspace group g (kda_chunk_prefill_common.cuh) into s.w,
// completing on s.bar[g].
__device__ __forceinline__ void issue_group(StateSmem& s, int g, const unsigned char* ws) {
  const uint32_t bar = smem_u32(&s.bar[g]);
  sm90::mbar_arrive_expect_tx(bar, ws_group_bytes(g));
  sm90::bulk_copy_g2s(smem_u32(&s.w) + ws_group_offset(g), ws + ws_group_offset(g), ws_group_bytes(g), bar);
}

// Two f32 values of row `row`, columns col, col + 1 of a (j | d, v) operand, rounded to f16.
__device__ __forceinline__ void store2(f16 (*dst)[kLdV], int row, int col, float x0, float x1) {
  *reinterpret_cast<uint32_t*>(&dst[row][col]) = mma16::pack_f16x2(x0, x1);
}

// A thread's v elements of the chunk at rows row0 .. row0 + C - 1 of the sequence, at its P5 C
// positions: row r0 + 8 (c / 2), column col0 + 8 nt + 2 t + c % 2 of the tile (zero past C),
// kept as loaded (widened only when used, a chunk later: converting at the load made the thread
// wait for it). Both layouts.
template <int kNt, typename T>
__device__ __forceinline__ void load_v_block(T (&vr)[kNt][4], const T* vsrc, int64_t qkv_s0, int64_t row0, int C, int r0,
                                             int col0, int t) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = r0 + 8 * (c / 2);
      vr[nt][c] = r < C ? vsrc[(row0 + r) * qkv_s0 + (col0 + 8 * nt + 2 * t + c % 2)] : from_f32<T>(0.0f);
    }
}

// P5's second output: Y = V - Kg S at the thread's C positions (row r0 + 8 hf, columns col0 +
// 8 nt + 2 t ..), rounded to f16 into s.y (both layouts).
template <int kNt, typename T>
__device__ __forceinline__ void store_y(StateSmem& s, const T (&vr)[kNt][4], const float (&y)[kNt][4], int r0, int col0,
                                        int t) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int c = 2 * hf;
      store2(s.y, r0 + 8 * hf, col0 + 8 * nt + 2 * t, to_f32(vr[nt][c]) - y[nt][c], to_f32(vr[nt][c + 1]) - y[nt][c + 1]);
    }
}

// The chunk's outputs at the thread's C positions: rows row0 + r0 + 8 (c / 2) below C, value
// columns col0 + 8 nt + 2 t + c % 2 (both layouts).
template <int kNt, typename T>
__device__ __forceinline__ void store_out(const Params& p, T* out, const float (&o)[kNt][4], int64_t row0, int C, int r0,
                                          int64_t out_h, int col0, int t) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int r = r0 + 8 * (c / 2);
    if (r >= C) continue;
    T* dst = out + (row0 + r) * p.out_s0 + out_h;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) dst[(col0 + 8 * nt + 2 * t + c % 2) * p.out_s2] = from_f32<T>(o[nt][c]);
  }
}

// P5 for row block rb and kNt 8-column tiles from column c0: o += Qg S, y += Kg S, each S
// fragment read once for both products (both layouts).
template <int kNt>
__device__ __forceinline__ void p5_products(StateSmem& s, int rb, int c0, int lane, float (&o)[kNt][4],
                                            float (&y)[kNt][4]) {
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    uint32_t aq[4], ak[4], b[kNt][2];
    mma16::load_a(aq, &s.w.qg[16 * rb][16 * ks], kLdA, lane);
    mma16::load_a(ak, &s.w.kg[16 * rb][16 * ks], kLdA, lane);
    mma16::load_b_trans(b, &s.s[16 * ks][c0], kLdV, lane);
    mma16::mma_row<kNt, f16>(o, aq, b);
    mma16::mma_row<kNt, f16>(y, ak, b);
  }
}

// P6 for row block mb and the 16 columns 16 ch ..: Vn = Tm Y -> vn; Tm is lower triangular, so
// block mb needs columns j < 16 (mb + 1) only (both layouts, every warp).
__device__ __forceinline__ void p6_products(StateSmem& s, int mb, int ch, int lane) {
  const int g = lane / 4, t = lane % 4;
  by_row_block(mb, [&](auto steps) {
    float vn[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < decltype(steps)::value; ++ks) {
      uint32_t ta[4], b[2][2];
      mma16::load_a(ta, &s.w.tm[16 * mb][16 * ks], kLdT, lane);
      mma16::load_b_trans(b, &s.y[16 * ks][16 * ch], kLdV, lane);
      mma16::mma_row<2, f16>(vn, ta, b);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        store2(s.vn, 16 * mb + g + 8 * hf, 16 * ch + 8 * nt + 2 * t, vn[nt][2 * hf], vn[nt][2 * hf + 1]);
  });
}

// P7-out for row block rb and kNt 8-column tiles from column c0: o += Aqk Vn over the k-steps j <
// 16 (rb + 1) (Aqk is lower triangular; both layouts).
template <int kNt>
__device__ __forceinline__ void p7_out_products(StateSmem& s, int rb, int c0, int lane, float (&o)[kNt][4]) {
  by_row_block(rb, [&](auto steps) {
#pragma unroll
    for (int ks = 0; ks < decltype(steps)::value; ++ks) {
      uint32_t aa[4], b[kNt][2];
      mma16::load_a(aa, &s.w.aqk[16 * rb][16 * ks], kLdT, lane);
      mma16::load_b_trans(b, &s.vn[16 * ks][c0], kLdV, lane);
      mma16::mma_row<kNt, f16>(o, aa, b);
    }
  });
}

// Where a CTA's state comes from and goes to: the head's block of a pool slot or of the f32
// carry (StateIo: base, dtype), element (d, v) at (v0 + v) K + d. A null `from` is the zero state.
struct StateIo {
  void* base;
  bool bf16;
  __device__ __forceinline__ float load(int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]) : static_cast<const float*>(base)[i];
  }
  // bf16: rounded to nearest even, as the reference (docs/ops/kda.md "State dtype"). The dtype
  // as a template argument (with_dtype), so that a loop of stores has no branch in it.
  template <bool kBf16>
  __device__ __forceinline__ void store(int64_t i, float x) const {
    if constexpr (kBf16) {
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
    } else {
      static_cast<float*>(base)[i] = x;
    }
  }
  // f(std::integral_constant<bool, bf16>{}): the stores of a whole fragment under one branch.
  template <typename F>
  __device__ __forceinline__ void with_dtype(F&& f) const {
    if (bf16) {
      f(std::true_type{});
    } else {
      f(std::false_type{});
    }
  }
};

// The work of one state CTA, as the kernel resolved it (sequence, head, value tile, window).
struct StateTask {
  int tid, warp, lane, v0, h;
  int64_t bos, len, beg, end, ws0, c_begin, out_h, head, ck0;
  StateIo from, to;  // the initial state (from.base null: zeros) and where the last one goes
};

// Checkpoint row `row`, head offset `head` (elements): the dtype of the pool.
__device__ __forceinline__ StateIo checkpoint_at(const Params& p, int64_t row, int64_t head) {
  return {static_cast<unsigned char*>(p.ckpt) + (row * p.ckpt_s0 + head) * (p.pool_bf16 ? 2 : 4), p.pool_bf16};
}

// Uniform warps: every warp does a share of every product (the map in the note above).
template <typename T>
__device__ __forceinline__ void state_uniform(const Params& p, StateSmem& s, const StateTask& k) {
  const int tid = k.tid, warp = k.warp, lane = k.lane, v0 = k.v0, h = k.h;
  const int64_t bos = k.bos, len = k.len, beg = k.beg, end = k.end, ws0 = k.ws0, c_begin = k.c_begin;
  const int64_t out_h = k.out_h, head = k.head, ck0 = k.ck0;
  const StateIo from = k.from, to = k.to;
  T* out = static_cast<T*>(p.out);
  // Fragment coordinates (mma_bf16.cuh): g = lane / 4, t = lane % 4; C element c of tile nt is
  // row g + 8 (c / 2), column 8 nt + 2 t + c % 2 of the tile's 16 x 8 block.
  const int g = lane / 4, t = lane % 4;
  // The state tile in registers, P7-state's map: S[d][v] for d = 16 warp + g + 8 (c / 2),
  // v = 8 nt + 2 t + c % 2 (columns of the tile).
  const int d0 = 16 * warp;
  float st[4][4];
  auto st_d = [&](int c) { return d0 + g + 8 * (c / 2); };
  auto st_v = [&](int nt, int c) { return 8 * nt + 2 * t + c % 2; };
  // Writes the f16 copy of this thread's state elements (read by P5).
  auto publish_state = [&] {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) store2(s.s, st_d(2 * hf), st_v(nt, 0), st[nt][2 * hf], st[nt][2 * hf + 1]);
  };
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      st[nt][c] = from.base != nullptr ? from.load(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c)) : 0.0f;
  publish_state();
  if (tid == 0) {
    for (int g = 0; g < 3; ++g) sm90::mbar_init(smem_u32(&s.bar[g]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // the inits before the async proxy's use
    if (beg < end) issue_group(s, 0, ws_at(p, ws0 + c_begin, h));
  }
  __syncthreads();  // the mbarriers initialised before any thread waits on them

  // The warp's 16-row block of the chunk in P5, P6, P7-out, and its 16 value columns 16 ch ..
  // 16 ch + 15 of the tile. Block mb costs mb + 1 k-steps in P6 and P7-out (Tm, Aqk lower
  // triangular); warps w and w + 4 share a scheduler, so they take blocks mb and 3 - mb: every
  // scheduler then issues 5 k-steps there (with mb = w % 4, one issued 8 and another 2).
  const int mb = warp < 4 ? warp : 7 - warp;
  const int ch = warp / 4;
  // This thread's v elements of the current chunk at its P5 C positions (load_v_block).
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const T* vsrc = static_cast<const T*>(p.qkv) + 2 * HK + static_cast<int64_t>(h) * p.V + v0;
  T vr[2][4];
  auto load_v = [&](int64_t c0) {
    load_v_block(vr, vsrc, p.qkv_s0, bos + c0, static_cast<int>(len - c0 < kC ? len - c0 : kC), 16 * mb + g, 16 * ch, t);
  };
  if (beg < end) load_v(beg);

  uint32_t phase = 0;  // of the three mbarriers: each completes once per chunk
#pragma unroll 1
  for (int64_t c0 = beg; c0 < end; c0 += kC, phase ^= 1) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
    const int64_t row0 = bos + c0;
    const unsigned char* ws = ws_at(p, ws0 + c0 / kC, h);
    // ---- B1 (every thread waits on the mbarrier: that wait makes the copy's bytes visible to it)
    sm90::mbar_wait(smem_u32(&s.bar[0]), phase);
    __syncthreads();
    if (tid == 0) {
      issue_group(s, 1, ws);
      issue_group(s, 2, ws);
    }
    // ---- P5, every warp on its 16 rows x 16 columns, one pass over S's fragments:
    // O = Qg S (kept to P7); Y = V - Kg S -> y.
    float o[2][4] = {};
    {
      float y[2][4] = {};
      p5_products(s, mb, 16 * ch, lane, o, y);
      store_y(s, vr, y, 16 * mb + g, 16 * ch, t);
    }
    if (c0 + kC < end) load_v(c0 + kC);
    // ---- B2 (Tm landed; Kd, Aqk, dec may still be in flight)
    sm90::mbar_wait(smem_u32(&s.bar[1]), phase);
    __syncthreads();
    if (tid == 0 && c0 + kC < end) issue_group(s, 0, ws + static_cast<int64_t>(p.H) * kWsBytes);  // the next slot, same head
    // ---- P6: Vn = Tm Y -> vn, the same 16 rows x 16 columns.
    p6_products(s, mb, ch, lane);
    // ---- B3 (Kd, Aqk, dec landed; the next Qg, Kg may still be in flight)
    sm90::mbar_wait(smem_u32(&s.bar[2]), phase);
    __syncthreads();
    // ---- P7-out: O += Aqk Vn (block mb, j < 16 (mb + 1)), stored.
    p7_out_products(s, mb, 16 * ch, lane, o);
    store_out(p, out, o, row0, C, 16 * mb + g, out_h, v0 + 16 * ch, t);
    // ---- P7-state: S = diag(dec) S + Kd^T Vn on key dims d0 .. d0 + 15, all 32 columns, in the
    // f32 registers that hold S (the products accumulate into them); then the f16 copy for the
    // next P5, and the checkpoint.
    {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[nt][c] *= s.w.dec[st_d(c)];
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks) {
        uint32_t ka[4], b[4][2];
        mma16::load_a_trans(ka, &s.w.kd[16 * ks][d0], kLdA, lane);
        mma16::load_b_trans(b, &s.vn[16 * ks][0], kLdV, lane);
        mma16::mma_row<4, f16>(st, ka, b);
      }
      publish_state();
      if (p.ckpt != nullptr && C == kC) {
        const StateIo ck = checkpoint_at(p, ck0 + c0 / kC, head);
        ck.with_dtype([&](auto bf16) {
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c)
              ck.store<bf16.value>(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c), st[nt][c]);
        });
      }
    }
  }
  // The final state from the registers (an empty sequence stores its initial state, or zeros).
  to.with_dtype([&](auto bf16) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        to.store<bf16.value>(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c), st[nt][c]);
  });
}

// Warps in two roles (kRoles; the note above): row warps 0-3 (P5, P7-out), state warps 4-7
// (the state, P7-state), P6 on all.
template <typename T>
__device__ __forceinline__ void state_roles(const Params& p, StateSmem& s, const StateTask& k) {
  const int tid = k.tid, warp = k.warp, lane = k.lane, v0 = k.v0, h = k.h;
  const int64_t bos = k.bos, len = k.len, beg = k.beg, end = k.end, ws0 = k.ws0, c_begin = k.c_begin;
  const int64_t out_h = k.out_h, head = k.head, ck0 = k.ck0;
  const StateIo from = k.from, to = k.to;
  T* out = static_cast<T*>(p.out);
  // Fragment coordinates (mma_bf16.cuh): g = lane / 4, t = lane % 4; C element c of tile nt is
  // row g + 8 (c / 2), column 8 nt + 2 t + c % 2 of the tile's 16 x 8 block.
  const int g = lane / 4, t = lane % 4;
  // P6's map (all warps): 16-row block mb, value columns 16 ch .. 16 ch + 15. Block mb costs mb +
  // 1 k-steps (Tm lower triangular); warps w and w + 4 share a scheduler, so they take blocks mb
  // and 3 - mb: every scheduler then issues 5 k-steps there.
  const int mb = warp < 4 ? warp : 7 - warp;
  const int ch = warp / 4;
  auto p6 = [&] { p6_products(s, mb, ch, lane); };  // P6 on block mb x columns 16 ch ..
  // Every thread waits on a group's mbarrier itself (the wait makes the copied bytes visible to
  // it), then the CTA barrier. The two roles below run their own loops (each keeps only its own
  // registers live: one loop for both needed 192), and meet at the same barriers, B1 B2 B3 once
  // per chunk, from different code positions: cta_sync_any_position, not __syncthreads.
  auto landed_and_sync = [&](int group, uint32_t phase) {
    sm90::mbar_wait(smem_u32(&s.bar[group]), phase);
    cta_sync_any_position();
  };
  if (tid == 0) {
    for (int g = 0; g < 3; ++g) sm90::mbar_init(smem_u32(&s.bar[g]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // the inits before the async proxy's use
    if (beg < end) issue_group(s, 0, ws_at(p, ws0 + c_begin, h));
  }

  if (warp < kRowWarps) {
    // ---- Row warps: row block rb = warp of the chunk, all 32 columns, in P5 and P7-out.
    const int rb = warp;
    // This warp's v elements of the current chunk at its P5 C positions (load_v_block).
    const int64_t HK = static_cast<int64_t>(p.H) * kK;
    const T* vsrc = static_cast<const T*>(p.qkv) + 2 * HK + static_cast<int64_t>(h) * p.V + v0;
    T vr[4][4];
    auto load_v = [&](int64_t c0) {
      load_v_block(vr, vsrc, p.qkv_s0, bos + c0, static_cast<int>(len - c0 < kC ? len - c0 : kC), 16 * rb + g, 0, t);
    };
    if (beg < end) load_v(beg);
    cta_sync_any_position();  // the mbarriers initialised, the first f16 state published
    uint32_t phase = 0;  // of the three mbarriers: each completes once per chunk
#pragma unroll 1
    for (int64_t c0 = beg; c0 < end; c0 += kC, phase ^= 1) {
      const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
      const unsigned char* ws = ws_at(p, ws0 + c0 / kC, h);
      landed_and_sync(0, phase);  // ---- B1: Qg, Kg landed; S published
      if (tid == 0) {
        issue_group(s, 1, ws);
        issue_group(s, 2, ws);
      }
      // ---- P5: O = Qg S (kept to P7) and Y = V - Kg S -> y, each S fragment read once for both.
      float o[4][4] = {};
      {
        float y[4][4] = {};
        p5_products(s, rb, 0, lane, o, y);
        store_y(s, vr, y, 16 * rb + g, 0, t);
      }
      if (c0 + kC < end) load_v(c0 + kC);
      landed_and_sync(1, phase);  // ---- B2: Tm landed; y written
      if (tid == 0 && c0 + kC < end) issue_group(s, 0, ws + static_cast<int64_t>(p.H) * kWsBytes);  // the next slot, same head
      p6();
      landed_and_sync(2, phase);  // ---- B3: Kd, Aqk, dec landed; vn written
      // ---- P7-out: O += Aqk Vn (block rb, j < 16 (rb + 1)), stored.
      p7_out_products(s, rb, 0, lane, o);
      store_out(p, out, o, bos + c0, C, 16 * rb + g, out_h, v0, t);
    }
    return;
  }

  // ---- State warps: key dims d0 .. d0 + 31 of the state tile S[:, v0 .. v0 + 31], all 32
  // columns, in f32 registers (two 16-row C tiles: S[d][v] for d = d0 + 16 mt + g + 8 (c / 2), v
  // = 8 nt + 2 t + c % 2) across the whole sequence; after each update they write the f16 copy
  // that P5 reads. The final state and the checkpoints are stored from the f32 registers (exact).
  const int d0 = 32 * (warp - kRowWarps);
  auto st_d = [&](int mt, int c) { return d0 + 16 * mt + g + 8 * (c / 2); };
  auto st_v = [&](int nt, int c) { return 8 * nt + 2 * t + c % 2; };
  float st[2][4][4];
  auto publish_state = [&] {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          store2(s.s, st_d(mt, 2 * hf), st_v(nt, 0), st[mt][nt][2 * hf], st[mt][nt][2 * hf + 1]);
  };
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        st[mt][nt][c] = from.base != nullptr ? from.load(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(mt, c)) : 0.0f;
  publish_state();
  cta_sync_any_position();  // the mbarriers initialised, the first f16 state published
  uint32_t phase = 0;
#pragma unroll 1
  for (int64_t c0 = beg; c0 < end; c0 += kC, phase ^= 1) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
    landed_and_sync(0, phase);  // B1
    landed_and_sync(1, phase);  // B2
    p6();
    landed_and_sync(2, phase);  // B3
    // ---- P7-state: S = diag(dec) S + Kd^T Vn, in the f32 registers that hold S; then the f16
    // copy for the next P5 (read after the next B1), and the checkpoint.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[mt][nt][c] *= s.w.dec[st_d(mt, c)];
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t b[4][2];
      mma16::load_b_trans(b, &s.vn[16 * ks][0], kLdV, lane);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t ka[4];
        mma16::load_a_trans(ka, &s.w.kd[16 * ks][d0 + 16 * mt], kLdA, lane);
        mma16::mma_row<4, f16>(st[mt], ka, b);
      }
    }
    publish_state();
    if (p.ckpt != nullptr && C == kC) {
      const StateIo ck = checkpoint_at(p, ck0 + c0 / kC, head);
      ck.with_dtype([&](auto bf16) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c)
              ck.store<bf16.value>(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(mt, c), st[mt][nt][c]);
      });
    }
  }
  // The final state (an empty sequence stores its initial state, or zeros).
  to.with_dtype([&](auto bf16) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          to.store<bf16.value>(static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(mt, c), st[mt][nt][c]);
  });
}

template <typename T, bool kRoles>
__global__ void __launch_bounds__(kThreads, 1) kda_chunk_prefill_state_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StateSmem& s = *reinterpret_cast<StateSmem*>(smem_raw);
  const int tile = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.tiles));
  const int64_t nh = blockIdx.x / static_cast<unsigned>(p.tiles);
  const int h = static_cast<int>(nh % p.H);
  const int64_t n = nh / p.H;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int v0 = tile * kTileV;
  const int64_t bos = load_index(p.cu_seqlens, p.cu64, n * p.cu_s0);
  const int64_t len = load_index(p.cu_seqlens, p.cu64, (n + 1) * p.cu_s0) - bos;
  const int64_t slot = load_index(p.slots, p.slot64, n * p.slot_s0);
  T* out = static_cast<T*>(p.out);
  const int64_t out_h = static_cast<int64_t>(h) * p.out_s1;
  // This launch's window of chunk slots: chunks c_begin .. c_end - 1 of the sequence, rows
  // beg .. end - 1. An empty sequence (no chunk) is handled by the first window.
  const int64_t ws0 = chunk_slot_base(p, n);  // workspace slot of chunk 0
  const int64_t nchunks = (len + kC - 1) / kC;
  const int64_t c_begin = p.slot_lo > ws0 ? p.slot_lo - ws0 : 0;
  const int64_t c_end = p.slot_hi - ws0 < nchunks ? p.slot_hi - ws0 : nchunks;
  const int64_t beg = c_begin * kC, end = c_end * kC < len ? c_end * kC : len;
  if (beg >= end && !(len == 0 && p.slot_lo == 0)) return;  // nothing here (uniform: no barrier yet)
  if (slot <= 0) {  // padding: zero output rows, no state read or written
    for (int64_t x = tid; x < (end - beg) * kTileV; x += kThreads)
      out[(bos + beg + x / kTileV) * p.out_s0 + out_h + (v0 + x % kTileV) * p.out_s2] = from_f32<T>(0.0f);
    return;
  }
  // The first window of a sequence starts from its initial state in the slot (or zeros), and the
  // last stores its final state there (bf16 pools: rounded once, from the f32 registers). Between
  // windows the f32 state after chunk c_end - 1 waits where the next window reads it: in the slot
  // of an f32 pool (exactly), in the f32 carry for a bf16 pool (rounding it there would change
  // the result with the window bound), so the results do not depend on the windows.
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot
  const int64_t esize = p.pool_bf16 ? 2 : 4;
  const StateIo slot_io{static_cast<unsigned char*>(p.pool) + (slot * p.pool_s0 + head) * esize, p.pool_bf16};
  const StateIo between =
      p.carry != nullptr ? StateIo{p.carry + (n * p.H + h) * static_cast<int64_t>(p.V) * kK, false} : slot_io;
  const bool init =
      c_begin > 0 || p.has_init == nullptr || load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  const StateIo from = c_begin > 0 ? between : init ? slot_io : StateIo{nullptr, false};
  const StateIo to = len > 0 && c_end < nchunks ? between : slot_io;  // an empty sequence: its slot
  const int64_t ck0 = p.ckpt != nullptr ? load_index(p.cu_ckpt, p.cuk64, n * p.cuk_s0) : 0;
  const StateTask task{tid, warp, lane, v0, h, bos, len, beg, end, ws0, c_begin, out_h, head, ck0, from, to};
  if constexpr (kRoles) {
    state_roles<T>(p, s, task);
  } else {
    state_uniform<T>(p, s, task);
  }
}

}  // namespace kestrel::ops::cuda::kda_chunk
