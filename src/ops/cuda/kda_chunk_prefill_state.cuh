// kda_chunk_prefill, CUDA, kernel 2 of 2: the state recurrence, one CTA per (sequence, head,
// 32 value columns), chunks in order (design note: kda_chunk_prefill.cu). Per chunk, from the
// intra-chunk kernel's workspace (Qg, Kg, Kd, Tm, Aqk as bf16, decay) and the chunk's v:
//   P5  O = Qg S (kept in registers to P7) and Y = V - Kg S -> y;
//   P6  Vn = Tm Y -> vn  (= U - W S with U = Tm V, W = Tm Kg: neither is formed);
//   P7  O += Aqk Vn, stored; S = diag(dec) S + Kd^T Vn, checkpoint.
// Every product is on bf16 tensor cores, mma.sync m16n8k16 with f32 accumulation (mma_bf16.cuh):
// 3xBF16 (x ~ hi + lo on both operands, a b ~ ah bh + ah bl + al bh, ~2^-16 relative) for the
// three on the carried state's path (Kg S, Tm Y, Kd^T Vn), plain bf16 (hi parts) for the
// output-only Qg S and Aqk Vn. A host emulation against the f64 token recurrence
// (tools/kda_product_precision.py, T = 4096; docs/ops/kda.md) puts this at 1.2e-4 / 4.4e-4 on
// outputs and 2.5e-6 / 1.4e-5 on final states (matrix generators / weak decay), against the 4e-3
// allowance. (The tf32 version before it, 3xTF32 on the same three products, erred 5.2e-5 / 7e-7
// and issued ~4x the tensor work: tf32's k8 at half bf16's rate, and every A operand split by
// every warp that read it; here every operand is split once, by the thread that writes it.)
// Every warp does a share of every product (warp w: row block mb = w for w < 4, 7 - w above,
// value columns 16 ch .. + 15 with ch = w / 4): P5 and P6 rows 16 mb .. +15 x those 16 columns
// (x K 128; x j < 16 (mb + 1) in P6, Tm being lower triangular); P7-out the same; P7-state key
// dims 16 w .. +15 x all 32 columns x 64. The state tile S[:, v0 .. v0+31] (128 x 32) is f32 in
// registers, in P7-state's C-fragment map (warp w, key dims 16 w ..: 16 values per thread),
// across the whole sequence; after each update its owner writes the bf16 hi / lo copies that P5
// reads from shared memory. The final state and the checkpoints are stored from the f32
// registers (exact).
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
// reads 8 rows of 16 bytes; rows of 136 bf16 (272 bytes), 72 (144) and 40 (80) put those 8 rows
// 4 banks apart: conflict-free; the C-fragment stores of bf16 pairs into s / y / vn (row g (+8),
// word 4 nt + t, rows of 20 words) hit banks 20 g + 4 nt + t: distinct across the warp.
//
// Shared memory (bytes; 156,192): the workspace image WsImage (115,200: qg, kg_hi, kg_lo,
// tm_hi, tm_lo, kd_hi, kd_lo, aqk, dec) | s_hi, s_lo [128][40] S (d, v) | y_hi, y_lo, vn_hi,
// vn_lo [64][40] (j, v) | 3 mbarriers.
// History (T = 4096, H = 32, the state kernel alone, H200, docs/perf.md): 542 us with cvt.rna
// tf32 splits; 353 us with integer splits, ldmatrix, balanced warps, pre-split B operands (tf32);
// 256 us on bf16 tensor cores (3xBF16); 250 us with the balanced row blocks; 198 us with the
// workspace by bulk copies (16-byte cp.async before: ~6,700 per chunk, their address registers
// held the warps). Measured and not kept: a double-buffered Qg / Kg (cp.async, 208 KB: slower),
// P5 with the next k-step's fragments loaded ahead and two accumulator sets (192 registers: 418
// vs 411 us for the op), and wgmma for every product (branch wgmma-state: correct, but 464 vs 414
// us for the op: descriptor arithmetic ~45% of its instructions, and each phase waiting on its
// wgmma group; its workspace layouts made the intra kernel's stores 16-byte granular, +50 us).
#pragma once

#include "cp_async.cuh"
#include "kda_chunk_prefill_common.cuh"
#include "mma_bf16.cuh"
#include "sm90_ptx.cuh"

#include <type_traits>

namespace kestrel::ops::cuda::kda_chunk {

inline constexpr int kLdV = kTileV + 8;  // rows of 32 bf16 (s, y, vn)

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
  WsImage w;             // the chunk's workspace, loaded by three bulk copies (one per group)
  bf16 s_hi[kK][kLdV];   // S (d, v), hi and lo of the f32 state in registers
  bf16 s_lo[kK][kLdV];
  bf16 y_hi[kC][kLdV];   // Y (j, v)
  bf16 y_lo[kC][kLdV];
  bf16 vn_hi[kC][kLdV];  // Vn (j, v)
  bf16 vn_lo[kC][kLdV];
  uint64_t bar[3];       // mbarriers: workspace group g landed
};
static_assert(sizeof(StateSmem) == 156192, "the note above states this size");

// Thread 0: the bulk copy of workspace group g (kda_chunk_prefill_common.cuh) into s.w,
// completing on s.bar[g].
__device__ __forceinline__ void issue_group(StateSmem& s, int g, const unsigned char* ws) {
  const uint32_t bar = smem_u32(&s.bar[g]);
  sm90::mbar_arrive_expect_tx(bar, ws_group_bytes(g));
  sm90::bulk_copy_g2s(smem_u32(&s.w) + ws_group_offset(g), ws + ws_group_offset(g), ws_group_bytes(g), bar);
}

// Two f32 values of row `row`, columns col, col + 1 of a (j | d, v) operand, as bf16 hi / lo.
__device__ __forceinline__ void store_split2(bf16 (*hi)[kLdV], bf16 (*lo)[kLdV], int row, int col, float x0, float x1) {
  uint32_t h, l;
  mma16::split_bf16x2(x0, x1, h, l);
  *reinterpret_cast<uint32_t*>(&hi[row][col]) = h;
  *reinterpret_cast<uint32_t*>(&lo[row][col]) = l;
}

template <typename T>
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
  // The first window of a sequence starts from its initial state (or zeros); a later one from
  // the slot, where the window before left the f32 state after chunk c_begin - 1.
  const bool read_state =
      c_begin > 0 || p.has_init == nullptr || load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot
  float* slot_head = p.pool + slot * p.pool_s0 + head;
  const int64_t ck0 = p.ckpt != nullptr ? load_index(p.cu_ckpt, p.cuk64, n * p.cuk_s0) : 0;

  // Fragment coordinates (mma_bf16.cuh): g = lane / 4, t = lane % 4; C element c of tile nt is
  // row g + 8 (c / 2), column 8 nt + 2 t + c % 2 of the tile's 16 x 8 block.
  const int g = lane / 4, t = lane % 4;
  // The state tile in registers, P7-state's map: S[d][v] for d = 16 warp + g + 8 (c / 2),
  // v = 8 nt + 2 t + c % 2 (columns of the tile).
  const int d0 = 16 * warp;
  float st[4][4];
  auto st_d = [&](int c) { return d0 + g + 8 * (c / 2); };
  auto st_v = [&](int nt, int c) { return 8 * nt + 2 * t + c % 2; };
  // Writes the hi / lo copies of this thread's state elements (read by P5).
  auto publish_state = [&] {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) store_split2(s.s_hi, s.s_lo, st_d(2 * hf), st_v(nt, 0), st[nt][2 * hf], st[nt][2 * hf + 1]);
  };
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      st[nt][c] = read_state ? slot_head[static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c)] : 0.0f;
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
  auto row_of = [&](int c) { return 16 * mb + g + 8 * (c / 2); };
  auto col_of = [&](int nt, int c) { return 16 * ch + 8 * nt + 2 * t + c % 2; };
  // This thread's v elements of the current chunk at its P5 C positions, kept as loaded (widened
  // only when used, a chunk later: converting at the load made the thread wait for it).
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const T* vsrc = static_cast<const T*>(p.qkv) + 2 * HK + static_cast<int64_t>(h) * p.V + v0;
  T vr[2][4];
  auto load_v = [&](int64_t c0) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        vr[nt][c] = row_of(c) < C ? vsrc[(bos + c0 + row_of(c)) * p.qkv_s0 + col_of(nt, c)] : from_f32<T>(0.0f);
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
    // O = Qg_hi S_hi (kept to P7); Y = V - Kg S in 3xBF16 (three accumulators: independent mma
    // chains) -> y.
    float o[2][4] = {};
    {
      float y[2][4] = {};
      mma16::Acc3<2> ky{y};
#pragma unroll
      for (int ks = 0; ks < kK / 16; ++ks) {
        uint32_t aq[4], akh[4], akl[4], bh[2][2], bl[2][2];
        mma16::load_a(aq, &s.w.qg[16 * mb][16 * ks], kLdA, lane);
        mma16::load_a(akh, &s.w.kg_hi[16 * mb][16 * ks], kLdA, lane);
        mma16::load_a(akl, &s.w.kg_lo[16 * mb][16 * ks], kLdA, lane);
        mma16::load_b_trans(bh, &s.s_hi[16 * ks][16 * ch], kLdV, lane);
        mma16::load_b_trans(bl, &s.s_lo[16 * ks][16 * ch], kLdV, lane);
        mma16::mma_row(o, aq, bh);
        ky.step(akh, akl, bh, bl);
      }
      ky.finish();
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int c = 2 * hf;
          store_split2(s.y_hi, s.y_lo, row_of(c), col_of(nt, 0), to_f32(vr[nt][c]) - y[nt][c],
                       to_f32(vr[nt][c + 1]) - y[nt][c + 1]);
        }
    }
    if (c0 + kC < end) load_v(c0 + kC);
    // ---- B2 (Tm landed; Kd, Aqk, dec may still be in flight)
    sm90::mbar_wait(smem_u32(&s.bar[1]), phase);
    __syncthreads();
    if (tid == 0 && c0 + kC < end) issue_group(s, 0, ws + static_cast<int64_t>(p.H) * kWsBytes);  // the next slot, same head
    // ---- P6: Vn = Tm Y (3xBF16) -> vn, the same 16 rows x 16 columns; Tm is lower triangular,
    // so block mb needs columns j < 16 (mb + 1) only.
    by_row_block(mb, [&](auto steps) {
      float vn[2][4] = {};
      mma16::Acc3<2> tv{vn};
#pragma unroll
      for (int ks = 0; ks < decltype(steps)::value; ++ks) {
        uint32_t th[4], tl[4], bh[2][2], bl[2][2];
        mma16::load_a(th, &s.w.tm_hi[16 * mb][16 * ks], kLdT, lane);
        mma16::load_a(tl, &s.w.tm_lo[16 * mb][16 * ks], kLdT, lane);
        mma16::load_b_trans(bh, &s.y_hi[16 * ks][16 * ch], kLdV, lane);
        mma16::load_b_trans(bl, &s.y_lo[16 * ks][16 * ch], kLdV, lane);
        tv.step(th, tl, bh, bl);
      }
      tv.finish();
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int c = 2 * hf;
          store_split2(s.vn_hi, s.vn_lo, row_of(c), col_of(nt, 0), vn[nt][c], vn[nt][c + 1]);
        }
    });
    // ---- B3 (Kd, Aqk, dec landed; the next Qg, Kg may still be in flight)
    sm90::mbar_wait(smem_u32(&s.bar[2]), phase);
    __syncthreads();
    // ---- P7-out: O += Aqk_hi Vn_hi (block mb, j < 16 (mb + 1)), stored.
    by_row_block(mb, [&](auto steps) {
#pragma unroll
      for (int ks = 0; ks < decltype(steps)::value; ++ks) {
        uint32_t aa[4], bh[2][2];
        mma16::load_a(aa, &s.w.aqk[16 * mb][16 * ks], kLdT, lane);
        mma16::load_b_trans(bh, &s.vn_hi[16 * ks][16 * ch], kLdV, lane);
        mma16::mma_row(o, aa, bh);
      }
    });
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (row_of(c) >= C) continue;
      T* dst = out + (row0 + row_of(c)) * p.out_s0 + out_h;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) dst[(v0 + col_of(nt, c)) * p.out_s2] = from_f32<T>(o[nt][c]);
    }
    // ---- P7-state: S = diag(dec) S + Kd^T Vn (3xBF16) on key dims d0 .. d0 + 15, all 32 columns,
    // in the registers that hold S; then the hi / lo copies for the next P5, and the checkpoint.
    {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[nt][c] *= s.w.dec[st_d(c)];
      mma16::Acc3<4> kv{st};
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks) {
        uint32_t kh[4], kl[4], bh[4][2], bl[4][2];
        mma16::load_a_trans(kh, &s.w.kd_hi[16 * ks][d0], kLdA, lane);
        mma16::load_a_trans(kl, &s.w.kd_lo[16 * ks][d0], kLdA, lane);
        mma16::load_b_trans(bh, &s.vn_hi[16 * ks][0], kLdV, lane);
        mma16::load_b_trans(bl, &s.vn_lo[16 * ks][0], kLdV, lane);
        kv.step(kh, kl, bh, bl);
      }
      kv.finish();
      publish_state();
      if (p.ckpt != nullptr && C == kC) {
        float* ck = p.ckpt + (ck0 + c0 / kC) * p.ckpt_s0 + head;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) ck[static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c)] = st[nt][c];
      }
    }
  }
  // The final state from the registers (an empty sequence stores its initial state, or zeros).
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) slot_head[static_cast<int64_t>(v0 + st_v(nt, c)) * kK + st_d(c)] = st[nt][c];
}

}  // namespace kestrel::ops::cuda::kda_chunk
