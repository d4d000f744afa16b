// kda_chunk_prefill, CUDA, kernel 2 of 2: the state recurrence, one CTA per (sequence, head,
// 32 value columns), chunks in order (design note: kda_chunk_prefill.cu). Per chunk, from the
// intra-chunk kernel's workspace (Qg, Kg, Kd, Tm, Aqk, decay) and the chunk's v:
//   P5  O = Qg S (kept in registers to P7) and Y = V - Kg S -> yt;
//   P6  Vn = Tm Y -> vnt  (= U - W S with U = Tm V, W = Tm Kg: neither is formed);
//   P7  O += Aqk Vn, stored; S = diag(dec) S + Kd^T Vn, checkpoint.
// Every product is on tensor cores, mma.sync m16n8k8 tf32 (mma_tf32.cuh): 3xTF32 (~f32) for the
// three on the carried state's path (Kg S, Tm Y, Kd^T Vn), plain tf32 for the output-only Qg S
// and Aqk Vn (see kPrecise* below for the measured errors). Every warp does a share of every
// product (warp w: row block mb = w % 4, value columns 16 ch .. + 15 with ch = w / 4): P5 and P6
// rows 16 mb .. +15 x those 16 columns (x K 128; x j < 16 (mb + 1) in P6, Tm being lower
// triangular); P7-out the same; P7-state key dims 16 w .. +15 x all 32 columns x 64. (The first
// version gave Qg S and Aqk Vn to warps 0..3 and the three 3xTF32 products to warps 4..7: the
// first four then waited at the barriers, 23% of the stall samples on the H200.) The state tile
// S[:, v0 .. v0+31] (128 x 32 f32, stored as S^T) stays in shared memory across the sequence.
//
// Pipeline (cp.async, 16-byte copies, in groups; a wait leaves at most the newest in flight):
//   B1  wait for Qg, Kg of this chunk; barrier;    then issue Tm, then Kd, Aqk, dec of this chunk
//   P5  (reads qg, kg, st);                        then every warp loads the next chunk's v
//   B2  wait for Tm; barrier;                      then issue Qg, Kg of the next chunk
//   P6  (reads tm, yt);
//   B3  wait for Kd, Aqk, dec; barrier;  P7 (reads aqk, vnt, kd, dec; st: own elements only).
// Races, per buffer: qg / kg are written by the copies issued after B2 and read in P5 (after the
// next B1); tm written after B1 and read in P6 (after B2), kd / aqk / dec written after B1 and
// read in P7 (after B3), and the next copies into them are issued after the next B1, when every
// P7 read is done; yt written in P5, read in P6 (B2 between); vnt written in P6, read in P7
// (B3), rewritten in the next P6 (two barriers later); st read by all in P5, read and written
// in P7 by the owner of each element in the P7-state C fragments (B2, B3 between), read again
// in the next P5 after B1; the final store reads it in the load map after one more barrier.
// Bank conflicts: ldmatrix reads 8 rows of 16 bytes per block; with rows of 132 or 68 floats
// (4 banks on from the row before) the 8 rows cover the 32 banks once; Kd, read down its
// columns element by element, has rows of 136 (banks 8 t + g); the C-fragment stores into yt /
// vnt / st (column 2t (+1), row g) hit banks 8 t + g (+4): all conflict-free.
//
// Shared memory (floats; 197,632 bytes):
//   st, st_lo [32][132] S^T of the tile    qg, kg [64][132]    kd [64][136]    tm, aqk [64][68]
//   (lower 16 x 16 block triangle only: the rest is never written nor read)
//   yt [32][68] Y^T    vnt, vnt_lo [32][68] Vn^T    dec [128]
// S^T and Vn^T, B operands of 3xTF32 products read by several warps, are stored split (st = the
// tf32 big part, st_lo the f32 rest: S = st + st_lo exactly; mma_tf32.cuh split_tf32_store) by
// the one thread that writes each element, instead of being split again by every reader.
// Measured on the H200 (T = 4096, H = 32, the state kernel alone): 542 us with cvt.rna splits
// and the 4 + 4 warp split; 448 us with integer splits, every warp on every product and the
// second load group; then the loop-free copies, the fused Qg S / Kg S pass, the pre-split
// operands, fixed k-steps for the triangles and separate small-term accumulators: 353 us
// (docs/perf.md).
#pragma once

#include "cp_async.cuh"
#include "kda_chunk_prefill_common.cuh"
#include "mma_tf32.cuh"

#include <type_traits>

namespace kestrel::ops::cuda::kda_chunk {

// Kd is read as a transposed A operand (element (d, j) at kd[j][d]): rows of 136 floats put the
// 32 lanes of a fragment load, (j = t, d = g) + const, in banks 8 t + g, all distinct; the other
// operands are read along their rows, where 132 (68) gives banks 4 g + t.
inline constexpr int kLdKd = kK + 8;

// Precision per product (true: 3xTF32, ~f32; false: plain tf32, a third of the mma). Chosen from
// a host emulation of this kernel's exact fragment maps and roundings (workspace from f64) against
// an f64 token recurrence, T = 4096, max abs errors (out / checkpoints):
//   matrix generators (strong decay): all 3xTF32 8e-9 / 6e-8; this choice 1.6e-5 / 6e-8;
//   weak decay (g in [-0.004, 0], states remember): all 3xTF32 4e-8 / 7e-7; this choice
//   5.2e-5 / 7e-7; all plain tf32 8.5e-5 / 8.1e-4, and Kg S alone plain 2.5e-5 / 2.7e-4.
// So the three products on the carried state's path (Kg S, Tm Y, Kd^T Vn) are 3xTF32 and the
// state stays f32-accurate; the output-only products (Qg S, Aqk Vn) are plain tf32, errors two
// orders under the 4e-3 allowance and not carried from chunk to chunk.
inline constexpr bool kPreciseQS = false;      // P5: Qg S (output only)
inline constexpr bool kPreciseKS = true;       // P5: Kg S
inline constexpr bool kPrecise6 = true;        // P6: Tm Y
inline constexpr bool kPrecise7Out = false;    // P7: Aqk Vn (output only)
inline constexpr bool kPrecise7State = true;   // P7: Kd^T Vn
static_assert(!kPreciseQS && kPreciseKS, "P5 runs Qg S and Kg S as one pass over S (warp_mma_tf32_pair)");
static_assert(!kPrecise7Out, "P7-out reads Vn's big part only (vnt), not vnt_lo");

// Calls f(std::integral_constant<int, 2 (mb + 1)>): the k-steps of row block mb of a lower
// block-triangular product over the chunk (16-row blocks, 8-deep k-steps), fixed at compile time.
template <typename F>
__device__ __forceinline__ void by_row_block(int mb, F&& f) {
  switch (mb) {
    case 0: f(std::integral_constant<int, 2>{}); break;
    case 1: f(std::integral_constant<int, 4>{}); break;
    case 2: f(std::integral_constant<int, 6>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

struct alignas(16) StateSmem {
  float st[kTileV][kLdK];      // S^T, big part (tf32); S = st + st_lo exactly
  float st_lo[kTileV][kLdK];   // S^T, small part
  float qg[kC][kLdK];
  float kg[kC][kLdK];
  float kd[kC][kLdKd];
  float tm[kC][kLdC];
  float aqk[kC][kLdC];
  float yt[kTileV][kLdC];
  float vnt[kTileV][kLdC];     // Vn^T, big part
  float vnt_lo[kTileV][kLdC];  // Vn^T, small part
  float dec[kK];
};
static_assert(sizeof(StateSmem) == 197632, "the note above states this size");

// 16 bytes of the workspace into shared memory (cp_async.cuh).
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem) { cp_async_16(smem_u32(smem), gmem); }

// rows x 128 floats of the workspace into a padded [rows][kLdK] shared array, by all threads:
// thread tid copies float4 tid % 32 of rows tid / 32 + 8 it, so every copy is the thread's base
// address plus a constant (a loop over a flat index spent ~10 integer instructions per copy).
template <int kRows, int kLd = kLdK>
__device__ __forceinline__ void copy_rows128(float (*dst)[kLd], const float* src, int tid) {
  constexpr int kRowsPerPass = kThreads / (kK / 4);  // 8
  static_assert(kRows % kRowsPerPass == 0, "whole passes");
  float* d = &dst[tid / (kK / 4)][4 * (tid % (kK / 4))];
  const float* g = src + (tid / (kK / 4)) * kK + 4 * (tid % (kK / 4));
#pragma unroll
  for (int it = 0; it < kRows / kRowsPerPass; ++it) cp_async16(d + it * kRowsPerPass * kLd, g + it * kRowsPerPass * kK);
}

// The lower block triangle (16 x 16 blocks I >= J) of a [64][64] workspace matrix into a padded
// [64][kLdC] shared array, by all threads: Tm and Aqk are zero above it, and no product reads there.
// Thread tid copies float4 j4 = tid % 16 of rows tid / 16 + 16 it, which lie in block row it: the
// copy is needed when its columns 4 j4 .. are below 16 (it + 1).
__device__ __forceinline__ void copy_lower64(float (*dst)[kLdC], const float* src, int tid) {
  constexpr int kPieces = kC / 4;                 // 16 float4 per row
  constexpr int kRowsPerPass = kThreads / kPieces;  // 16 = kB: pass it is block row it
  static_assert(kRowsPerPass == kB, "one block row per pass");
  const int j4 = tid % kPieces;
  float* d = &dst[tid / kPieces][4 * j4];
  const float* g = src + (tid / kPieces) * kC + 4 * j4;
#pragma unroll
  for (int it = 0; it < kC / kB; ++it)
    if (4 * j4 < kB * (it + 1)) cp_async16(d + it * kB * kLdC, g + it * kB * kC);
}

__device__ __forceinline__ void issue_qk(StateSmem& s, const float* ws, int tid) {
  copy_rows128<kC>(s.qg, ws + kWsQg, tid);
  copy_rows128<kC>(s.kg, ws + kWsKg, tid);
  cp_async_commit();
}

// Tm (read in P6) as one group, then Kd, Aqk, dec (read in P7) as another: P7's operands get P6
// as well as P5 to arrive.
__device__ __forceinline__ void issue_rest(StateSmem& s, const float* ws, int tid) {
  copy_lower64(s.tm, ws + kWsTm, tid);
  cp_async_commit();
  copy_rows128<kC, kLdKd>(s.kd, ws + kWsKd, tid);
  copy_lower64(s.aqk, ws + kWsAqk, tid);
  if (tid < kK / 4) cp_async16(&s.dec[4 * tid], ws + kWsDec + 4 * tid);
  cp_async_commit();
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
  // the slot, where the window before left the state after chunk c_begin - 1 (exactly: S is
  // stored as the f32 sum of its split parts and split again the same way when read back).
  const bool read_state =
      c_begin > 0 || p.has_init == nullptr || load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot
  float* slot_head = p.pool + slot * p.pool_s0 + head;
  const int64_t ck0 = p.ckpt != nullptr ? load_index(p.cu_ckpt, p.cuk64, n * p.cuk_s0) : 0;

  // The state tile, S^T rows v = warp + 8b, key dims 4 lane .. 4 lane + 3 (the load / store map).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    const float4 x = read_state ? ld4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
    const float e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) mma::split_tf32_store(&s.st[v][4 * lane + i], &s.st_lo[v][4 * lane + i], e[i]);
  }
  if (beg < end) issue_qk(s, ws_at(p, ws0 + c_begin, h), tid);

  // Fragment coordinates (mma_tf32.cuh): g = lane / 4, t = lane % 4; C element c of tile (mt, nt)
  // is row 16 mt + g + 8 (c / 2), column 8 nt + 2 t + c % 2.
  const int g = lane / 4, t = lane % 4;
  const int mb = warp % 4;  // the warp's 16-row block of the chunk in P5, P6, P7-out
  const int ch = warp / 4;  // and its 16 value columns 16 ch .. 16 ch + 15 of the tile
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

#pragma unroll 1
  for (int64_t c0 = beg; c0 < end; c0 += kC) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
    const int64_t row0 = bos + c0;
    const float* ws = ws_at(p, ws0 + c0 / kC, h);
    // ---- B1
    cp_async_wait_all();
    __syncthreads();
    issue_rest(s, ws, tid);
    // ---- P5, every warp on its 16 rows x 16 columns: O = Qg S (kept to P7), Y = V - Kg S -> yt.
    float o[1][2][4] = {}, y[1][2][4] = {};
    mma::warp_mma_tf32_pair<kK / 8>(o, &s.qg[16 * mb][0], y, &s.kg[16 * mb][0], kLdK, 1, &s.st[16 * ch][0],
                                    &s.st_lo[16 * ch][0], kLdK, lane);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s.yt[col_of(nt, c)][row_of(c)] = to_f32(vr[nt][c]) - y[0][nt][c];
    if (c0 + kC < end) load_v(c0 + kC);
    // ---- B2 (Tm landed; Kd, Aqk, dec may still be in flight)
    cp_async_wait_but_one();
    __syncthreads();
    if (c0 + kC < end) issue_qk(s, ws + static_cast<int64_t>(p.H) * kWsFloats, tid);  // the next slot, same head
    // ---- P6: Vn = Tm Y -> vnt, the same 16 rows x 16 columns; Tm is lower triangular, so block
    // mb needs columns j < 16 (mb + 1) only.
    {
      float vn[1][2][4] = {};
      by_row_block(mb, [&](auto steps) {
        mma::warp_mma_tf32<decltype(steps)::value, 1, 2, kPrecise6>(vn, &s.tm[16 * mb][0], kLdC, 1, &s.yt[16 * ch][0], kLdC, lane);
      });
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          mma::split_tf32_store(&s.vnt[col_of(nt, c)][row_of(c)], &s.vnt_lo[col_of(nt, c)][row_of(c)], vn[0][nt][c]);
    }
    // ---- B3 (Kd, Aqk, dec landed; the next Qg, Kg may still be in flight)
    if (c0 + kC < end) cp_async_wait_but_one(); else cp_async_wait_all();
    __syncthreads();
    // ---- P7-out: O += Aqk Vn (block mb, j < 16 (mb + 1)), stored.
    by_row_block(mb, [&](auto steps) {
      mma::warp_mma_tf32<decltype(steps)::value, 1, 2, kPrecise7Out>(o, &s.aqk[16 * mb][0], kLdC, 1, &s.vnt[16 * ch][0], kLdC, lane);
    });
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (row_of(c) >= C) continue;
      T* dst = out + (row0 + row_of(c)) * p.out_s0 + out_h;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) dst[(v0 + col_of(nt, c)) * p.out_s2] = from_f32<T>(o[0][nt][c]);
    }
    // ---- P7-state: S = diag(dec) S + Kd^T Vn on key dims d0 .. d0 + 15, all 32 columns; each st
    // element is read and written by the thread that owns it in the C fragment.
    {
      const int d0 = 16 * warp;
      float sn[1][4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = d0 + g + 8 * (c / 2), v = 8 * nt + 2 * t + c % 2;
          sn[0][nt][c] = s.dec[d] * (s.st[v][d] + s.st_lo[v][d]);
        }
      mma::warp_mma_tf32<kC / 8, 1, 4, kPrecise7State>(sn, &s.kd[0][d0], 1, kLdKd, &s.vnt[0][0], kLdC, lane, kC / 8, nullptr,
                                            &s.vnt_lo[0][0]);
      float* ck = p.ckpt != nullptr && C == kC ? p.ckpt + (ck0 + c0 / kC) * p.ckpt_s0 + head : nullptr;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = d0 + g + 8 * (c / 2), v = 8 * nt + 2 * t + c % 2;
          mma::split_tf32_store(&s.st[v][d], &s.st_lo[v][d], sn[0][nt][c]);
          if (ck != nullptr) ck[static_cast<int64_t>(v0 + v) * kK + d] = sn[0][nt][c];
        }
    }
  }
  __syncthreads();  // P7-state wrote st in the fragment map; the store below reads the load map
  // The final state (an empty sequence stores its initial state, or zeros).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    const float4 hi = ld4(&s.st[v][4 * lane]), lo = ld4(&s.st_lo[v][4 * lane]);
    st4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane,
        make_float4(hi.x + lo.x, hi.y + lo.y, hi.z + lo.z, hi.w + lo.w));
  }
}

}  // namespace kestrel::ops::cuda::kda_chunk
