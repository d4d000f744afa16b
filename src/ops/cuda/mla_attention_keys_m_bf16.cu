// mla_attention, CUDA v3 for a bf16 cache (sm_90a): the keys as the wgmma M, precision fast (P
// rounded once to bf16). Same op, plan (grid of 32-row tiles x splits x sequences, workspace,
// combine kernel) and semantics as v1 / v2 / v3 (docs/ops/mla_attention.md). v2 loads the bf16
// cache as 128-byte-swizzled tensor boxes (~4-7% slower than dense copies, the probe) and pads
// an H 32 decode's 32 query rows to its M of 64; here the rows land in shared memory as they are
// (one bulk copy per 1,152-byte row, rows 1,168 bytes apart: mla_attention_keys_m_bf16_layout.h)
// and both products take the keys from shared memory into registers by ldmatrix:
//   QK  S^T = K Q^T   M = 64 keys, N = 16 query rows per warpgroup, K-dim = 576 features
//   PV  O^T = V^T P^T M = 256 value features per warpgroup (4 m-tiles), N = 32 rows, K-dim = 64 keys
// A bf16 tile of 64 keys is 73,728 bytes, so two stages of 64 keys fit beside Q and P^T, not
// the four of the fp8 kernel: both warpgroups therefore take every tile (as the fp8 kernel's wide
// form does), so that one tile is computed on while the next one streams.
//
// Roles (384 threads; setmaxnreg: 232 registers for the consumers, 40 for the producers):
//   warps 8-11, the producers: per tile, 16 rows a warp (lanes 0-15), one cp.async.bulk per row
//     with an L2 evict-first policy (the cache is read once; the splits' partials stay in L2 for
//     the combine), completing on the stage's `full`. Rows past the split's end are zeros and rows
//     of a page outside the cache bf16 NaN, written by the lane before its warp's arrival.
//   warps 0-7, two consumer warpgroups c = 0, 1, per tile j (stage j % 2, P^T buffer j % 2):
//     QK   36 k-steps of wgmma m64n16k16 in 9 groups of 4; A by one ldmatrix.x4 per k-step (the
//          next group's loads issued after this group's wgmmas), B = Q rows 16 c .. 16 c + 15
//          (bf16, 128-byte swizzle; an fp8 q is widened exactly to bf16 when Q is stored).
//     softmax along M (keys) for its 16 rows, as the fp8 kernel's: lazy rescaling (a column's m
//          moves only when its maximum grows by more than kRescaleSlack = 2^8, log2 units; exact)
//          by one bar.red.or per tile, the column maxima through shared memory only then; the
//          factors of its rows and a flag published for the other warpgroup.
//     P^T  bf16 rows 16 c .. of buffer j % 2 by one stmatrix.x4.trans, then the P barrier (256).
//     PV   both warpgroups' factors applied to its O^T (all 32 rows), then 4 k-steps of 4 wgmma
//          m64n32k16 (one per m-tile); A by ldmatrix.x4.trans of the key rows (the next k-step's
//          loads issued after this k-step's wgmmas). The stage is released (8 warp arrivals)
//          after the last k-step's issue, whose wgmma fence waited for its loads. The last group
//          stays in flight, retired by the next tile's QK or the row tile's end.
//   At a row tile's end: each row's output scale and lse (from m and l, by the 4 threads that
//   hold its sums) and its output address (one lane of warp 4) through shared memory; each
//   warpgroup then writes its 256 features of every row (pairs of adjacent features after one
//   shuffle), its stores back to back.
//
// Shared memory (dynamic, 1024-byte-aligned base):
//   Q       [9 chunks][32 rows][128 B] bf16     36,864
//   P^T     [2 buffers][32 rows][128 B] bf16     8,192
//   stages  2 x 64 rows x 1,168 B              149,504
//   maxima [2][4 warps][16] f32, output scales [32] f32 and row offsets [32] i64, causal limits
//   [32] i32, rescale factors [2 buffers][32] f32 and flags [2][2] i32, mbarriers full[2],
//   empty[2]: 195,888 bytes, 196,912 with the alignment slack.
//
// Barrier protocol (tile counter ti over every tile of the CTA, across row tiles): the fp8
// kernel's wide form's (mla_attention_keys_m.cu), with two stages:
//   full[ti % 2]   count 4 + tx: each producer warp's lane 0 arrive.expect_tx(1,152 x its copies)
//                  after its lanes wrote the rows that are not copies. Both warpgroups wait
//                  parity (ti / 2) & 1.
//   empty[ti % 2]  count 8: every consumer warp after its last PV issue of the tile. The
//                  producer waits parity ((ti / 2) & 1) ^ 1 before refilling.
//   Q (1, 256)     at a row tile's start (every QK of the previous one retired), and after Q and
//                  the causal limits are written (fence.proxy.async first).
//   vote (8 + c), max (2 + c): per warpgroup (128), as the fp8 kernel's.
//   P (4, 256)     both warpgroups wrote their rows of P^T buffer j % 2, factors and flags. The
//                  buffer is written again at tile j + 2, after P(j + 1), which every warp passes
//                  only after its QK(j + 1) retired PV(j), and after its reads of j's factors.
//   merge (6, 256) the output scales and addresses of the 32 rows published.
#include <cuda_bf16.h>

#include "common.cuh"
#include "cp_async.cuh"
#include "kestrel/ops/mla_attention.h"
#include "mla_attention_common.cuh"
#include "mla_attention_keys_m_bf16_layout.h"
#include "mla_attention_keys_m_softmax.cuh"
#include "mla_attention_sm90_layout.h"
#include "mma_bf16.cuh"
#include "sm90_ptx.cuh"

namespace kestrel::ops::cuda {

namespace {

namespace kmb = keys_m_bf16;
using mma16::ldsm_x4;
using sm90::bulk_copy_g2s_hint;
using sm90::desc_of;
using sm90::fence_operands;
using sm90::fence_proxy_async;
using sm90::k_step_lo;
using sm90::l2_evict_first_policy;
using sm90::mbar_arrive;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_init;
using sm90::mbar_wait;
using sm90::named_bar_sync;
using sm90::opaque;
using sm90::stmatrix_x4_trans;
using sm90::sw128_lo;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_wait;
using keys_m_softmax::col_of_slot;
using keys_m_softmax::publish_row_sums;
using keys_m_softmax::rescale_maxima;
using keys_m_softmax::row_sum;
using keys_m_softmax::slot_of_reg;

constexpr int kKeys = kmb::kKeys, kRows = kmb::kRows, kWgRows = kmb::kWgRows;
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 128;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= sm90::setmaxnreg_pool(kThreads), "setmaxnreg budget");
constexpr int kStages = 2;
constexpr uint32_t kBf16NanPair = 0x7fc07fc0u;

constexpr uint32_t kQBytes = kmb::kDqk / 64 * kRows * 128;  // 36,864
constexpr uint32_t kPtBytes = kRows * kKeys * 2;              // 4,096: one 128-byte-swizzled chunk
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffPt = kOffQ + kQBytes;  // [2 buffers]
constexpr uint32_t kOffStages = kOffPt + 2 * kPtBytes;
constexpr uint32_t kOffMax = kOffStages + kStages * kmb::kStageBytes;  // [2][4 warps][16] f32
constexpr uint32_t kOffScale = kOffMax + 2 * 4 * kWgRows * 4;        // [32] f32
constexpr uint32_t kOffRowOff = kOffScale + kRows * 4;               // [32] i64
constexpr uint32_t kOffLim = kOffRowOff + kRows * 8;                 // [32] i32
constexpr uint32_t kOffAlpha = kOffLim + kRows * 4;                  // [2 buffers][32] f32
constexpr uint32_t kOffGrew = kOffAlpha + 2 * kRows * 4;             // [2 buffers][2 warpgroups] i32
constexpr uint32_t kOffBar = kOffGrew + 4 * 4;
constexpr uint32_t kBarFull = kOffBar, kBarEmpty = kOffBar + 8 * kStages;
constexpr uint32_t kSmemUsed = kBarEmpty + 8 * kStages;
constexpr uint32_t kSmemBytes = kSmemUsed + 1024;  // slack to align the base to 1024
static_assert(kOffPt % 1024 == 0 && kOffStages % 1024 == 0 && kOffRowOff % 8 == 0 && kOffBar % 8 == 0);
static_assert(kSmemBytes == 196912 && kSmemBytes <= 232448, "the design note states the shared-memory size");
static_assert(kmb::kCacheRowBytes % 16 == 0 && kmb::kRowBytes % 16 == 0, "bulk copies of whole 16 bytes");

constexpr int kBarQ = 1, kBarMax = 2, kBarP = 4, kBarMerge = 6, kBarVote = 8;

using SeqPlan = MlaSeqPlan;
using TilePlan = MlaTilePlan;

// ---- producer warpgroup ----------------------------------------------------------------------------
// Warp pw (0 .. 3) copies keys 16 pw .. 16 pw + 15 of each tile, one row per lane 0 .. 15.
__device__ __forceinline__ void producer(const MlaAttentionParams& p, int b, const SeqPlan& s, uint32_t base,
                                         uint8_t* base_ptr, int pw, int lane) {
  const int row = 16 * pw + (lane & 15);
  const bool mine = lane < 16;
  uint32_t ti = 0;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = mla_tile_plan<kRows, kKeys>(p, s, mt);
    for (int j = 0; j < tp.ntiles; ++j, ++ti) {
      const int st = static_cast<int>(ti % kStages), pos = s.begin + j * kKeys + row;
      bool nan = false;
      const uint8_t* src = mine && pos < tp.kv_end ? kv_row(p, b, pos, nan) : nullptr;
      const bool copy = src != nullptr;
      const uint32_t dst = kOffStages + st * kmb::kStageBytes + row * kmb::kRowBytes;
      mbar_wait(base + kBarEmpty + 8 * st, ((ti / kStages) & 1) ^ 1);
      if (mine && !copy) {  // past the end: zeros; a page outside the cache: bf16 NaN
        const uint32_t f = nan ? kBf16NanPair : 0u;
        uint4* d = reinterpret_cast<uint4*>(base_ptr + dst);
#pragma unroll 4
        for (int u = 0; u < kmb::kCacheRowBytes / 16; ++u) d[u] = make_uint4(f, f, f, f);
        fence_proxy_async();  // (generic writes where the async proxy wrote before and will again)
      }
      const int copies = __popc(__ballot_sync(0xffffffffu, copy));
      __syncwarp();  // the filled rows before lane 0's arrival (release)
      const uint32_t full = base + kBarFull + 8 * st;
      if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(copies) * kmb::kCacheRowBytes);
      __syncwarp();  // the expected bytes are announced before any copy can complete
      if (copy) bulk_copy_g2s_hint(base + dst, src, kmb::kCacheRowBytes, full, l2_evict_first_policy());
    }
  }
}

// ---- consumers ----------------------------------------------------------------------------------
// Thread t of warpgroup c: warp w = t / 32, g = (t % 32) / 4, q4 = t % 4. Accumulator register i
// holds M row 16 w + g + 8 ((i / 2) % 2) and column (query row) 8 (i / 4) + 2 q4 + i % 2, i.e.
// column slot k = 2 (i / 4) + i % 2 of the thread's columns n_k = 8 (k / 2) + 2 q4 + k % 2
// (4 slots of S^T's 16 columns, 8 of O^T's 32).

// Q of the row tile into shared memory, bf16 in natural feature order (an fp8 q widened exactly;
// q_scale stays in the softmax constant); rows past the sequence's rows zero (masked). A thread's
// 9 pieces are all loaded before any is stored: one global latency, not 9 in a row (a loop of
// load-then-store did that, and the row tile's first QK waited on it).
template <bool kQFp8>
__device__ __forceinline__ void load_q(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp,
                                       uint8_t* base_ptr, int ct) {
  constexpr int kPieces = kmb::kDqk / 8;  // 8 values (16 bytes of bf16) each
  constexpr int kPer = kRows * kPieces / kConsumerThreads;
  static_assert(kPer * kConsumerThreads == kRows * kPieces, "whole pieces per thread");
  ct = static_cast<int>(opaque(static_cast<uint32_t>(ct)));  // (not hoisted out of the row-tile loop)
  uint4 v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int idx = ct + u * kConsumerThreads, n = idx / kPieces, f0 = 8 * (idx % kPieces);
    v[u] = n < tp.rows_here ? q_chunk<kQFp8>(p, s.qb, tp.r0 + n, f0) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int idx = ct + u * kConsumerThreads;
    *reinterpret_cast<uint4*>(base_ptr + kOffQ + kmb::sw128(idx / kPieces, 8 * (idx % kPieces))) = v[u];
  }
}

// S^T of one tile (64 keys x the warpgroup's 16 rows) into sc, retired on return with every older
// wgmma of the warpgroup: 9 groups of 4 k-steps, the next group's ldmatrix after this group's
// issue (the warpgroup fence waits for pending register writes, so loads issued before it would
// be waited for at once).
__device__ __forceinline__ void qk_tile(float (&sc)[8], uint32_t tile, uint32_t q_lo, int w, int lane) {
  constexpr int kGroups = kmb::kQkSteps / 4;
  const uint32_t row = tile + kmb::qk_key(w, lane) * kmb::kRowBytes + kmb::qk_byte(0, lane);
#pragma unroll
  for (int i = 0; i < 8; ++i) sc[i] = 0.0f;
  uint32_t a[kGroups][4][4];
#pragma unroll
  for (int rr = 0; rr < 4; ++rr) ldsm_x4<false>(a[0][rr], row + kmb::qk_byte(rr, 0));
#pragma unroll
  for (int q = 0; q < kGroups; ++q) {
    if (q == 0) wgmma_wait<0>();  // the previous tile's last PV group (see pv_tile)
    wgmma_fence();
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const int ks = 4 * q + rr;
      sm90::wgmma_m64n16k16_bf16_rs(sc, a[q][rr], desc_of(q_lo + k_step_lo(ks)), ks > 0 ? 1 : 0);
    }
    wgmma_commit();
    if (q + 1 < kGroups) {
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) ldsm_x4<false>(a[q + 1][rr], row + kmb::qk_byte(4 * (q + 1) + rr, 0));
    }
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  fence_operands(sc);
}

// PV's A registers of k-step ks, all 4 m-tiles: ldmatrix.x4.trans of the key rows.
__device__ __forceinline__ void pv_load(uint32_t (&a)[kmb::kPvTiles][4], uint32_t tile, int c, int w, int lane, int ks) {
  const uint32_t row = tile + kmb::pv_key(ks, lane) * kmb::kRowBytes;
#pragma unroll
  for (int mm = 0; mm < kmb::kPvTiles; ++mm) ldsm_x4<true>(a[mm], row + 2 * kmb::pv_feature(c, mm, w, lane));
}

// O^T (this warpgroup's 4 m-tiles, 32 rows) += V^T P^T over one tile: 4 k-steps of one group of 4
// wgmma m64n32k16; a0 holds k-step 0's loads (issued by the caller before the softmax). The stage
// is released after the last k-step's issue: its wgmma fence waited for the last loads.
__device__ __forceinline__ void pv_tile(float (&o)[kmb::kPvTiles][16], const uint32_t (&a0)[kmb::kPvTiles][4], uint32_t tile,
                                        uint32_t pt_lo, uint32_t empty, int c, int w, int lane) {
  uint32_t a[kmb::kPvSteps][kmb::kPvTiles][4];
#pragma unroll
  for (int mm = 0; mm < kmb::kPvTiles; ++mm)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[0][mm][e] = a0[mm][e];
#pragma unroll
  for (int ks = 0; ks < kmb::kPvSteps; ++ks) {
    wgmma_fence();
#pragma unroll
    for (int mm = 0; mm < kmb::kPvTiles; ++mm) sm90::wgmma_m64n32k16_rs<false>(o[mm], a[ks][mm], desc_of(pt_lo + k_step_lo(ks)), 1);
    wgmma_commit();
    if (ks + 1 < kmb::kPvSteps) {
      pv_load(a[ks + 1], tile, c, w, lane, ks + 1);
    } else {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);  // every byte of the tile this warp reads is in registers
    }
    wgmma_wait<1>();
  }
  // The last group stays in flight: the next QK retires it, or the row tile's end does.
}

// The scores in log2 units, masked keys -inf (lim: the causal limits of the warpgroup's 16 rows).
// A tile below every live row's causal limit and the split's end needs no mask.
__device__ __forceinline__ void scale_scores(float (&sc)[8], float scale_log2, int kv0, int kv_end, int lim_first,
                                             const int* lim, int w, int g, int q4) {
  if (kv0 + kKeys <= kv_end && kv0 + kKeys <= lim_first) {
#pragma unroll
    for (int i = 0; i < 8; ++i) sc[i] *= scale_log2;
  } else {
    const int key0 = kv0 + 16 * w + g;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int key = key0 + 8 * ((i / 2) % 2);
      const bool ok = key < kv_end && key < lim[col_of_slot(q4, slot_of_reg(i))];
      sc[i] = ok ? sc[i] * scale_log2 : -INFINITY;
    }
  }
}

// P = exp2(s - m) as bf16 into rows 16 c .. of P^T by one stmatrix.x4.trans (register j packs
// accumulators 4 (j / 2) + 2 (j % 2) and + 1: layout header); l gains the row sums.
__device__ __forceinline__ void store_pt(const float (&sc)[8], const float (&m)[4], float (&l)[4], uint32_t pt_base, int c,
                                         int w, int lane) {
  uint32_t r[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = 4 * (j / 2) + 2 * (j % 2), k = slot_of_reg(i);  // registers i, i + 1: slots k, k + 1
    const float p0 = ex2(sc[i] - (m[k] == -INFINITY ? 0.0f : m[k]));
    const float p1 = ex2(sc[i + 1] - (m[k + 1] == -INFINITY ? 0.0f : m[k + 1]));
    l[k] += p0;
    l[k + 1] += p1;
    r[j] = pack_bf16x2(p0, p1);
  }
  const int ln = static_cast<int>(opaque(static_cast<uint32_t>(lane)));
  stmatrix_x4_trans(pt_base + kmb::sw128(kmb::pt_row(c, ln), kmb::pt_key(w, ln)), r);
}

// The row tile's ends, before the merge barrier: each row's output scale and lse from its m and
// l (the four publisher threads of a warpgroup, 4 rows each; lse written here), and each row's
// output address (warp 4, a row per lane: one division by H each), so that no thread repeats
// them for its 8 rows. o is bf16 when the call has one split, else the split's f32 partial for
// the combine kernel; lse likewise (natural log / base 2).
__device__ __forceinline__ void row_ends(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp, int split,
                                         const float (&m)[4], const float* colmax, float* scale_s, int64_t* rowoff_s,
                                         int c, int w, int lane) {
  const int g = lane / 4, q4 = lane % 4;
  if (w == 0 && g == 0) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int n = kWgRows * c + col_of_slot(q4, k);
      const auto [scale, lse2] = mla_row_end(s.bad_len, m[k], row_sum<kWgRows>(colmax, col_of_slot(q4, k)), p.out_scale);
      scale_s[n] = scale;
      if (n < tp.rows_here) {
        const int64_t at = mla_row_offsets(p, s, split, tp.r0 + n).lse;
        if (p.splits > 1) {
          p.ws_lse[at] = lse2;
        } else if (p.lse) {
          p.lse[at] = lse2 * kLn2;
        }
      }
    }
  }
  if (c == 1 && w == 0) rowoff_s[lane] = mla_row_offsets(p, s, split, tp.r0 + lane).o;
}

// The row tile's output, after the merge barrier. Row n of O^T slot k holds features F + g and
// F + g + 8 of each m-tile (F = 256 c + 64 mm + 16 w); lanes g and g ^ 1 swap one of them, so that
// each holds a pair of adjacent features: even g (F + g, F + g + 1), odd g (F + g + 7, F + g + 8),
// i.e. f0 + 64 mm. The uniform choices (one split or several, vector o or not) are taken outside
// the loops, so that a thread's 32 stores issue back to back. (A store per pair with its own
// address, division and branches took ~8 us at the end of every CTA: H200 timeline of B128 8k
// H32, twenty-fourth session, docs/perf.md.)
__device__ __forceinline__ void store_output(const MlaAttentionParams& p, const TilePlan& tp, const float (&o)[kmb::kPvTiles][16],
                                             const float* scale_s, const int64_t* rowoff_s, int c, int t) {
  const int lane = t % 32, g = lane / 4, q4 = lane % 4;
  const bool odd = (g & 1) != 0;
  const int f0 = odd ? kmb::o_feature(c, 0, t, 2) - 1 : kmb::o_feature(c, 0, t, 0);
  float lo[8][kmb::kPvTiles], hi[8][kmb::kPvTiles];
  int64_t off[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int n = col_of_slot(q4, k);
    const float scale = scale_s[n];
    off[k] = rowoff_s[n];
#pragma unroll
    for (int mm = 0; mm < kmb::kPvTiles; ++mm) {
      const int i0 = 4 * (k / 2) + k % 2;  // the register of feature F + g; i0 + 2 that of F + g + 8
      const float v0 = o[mm][i0] * scale, v1 = o[mm][i0 + 2] * scale;
      const float got = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
      lo[k][mm] = odd ? got : v0;
      hi[k][mm] = odd ? v1 : got;
    }
  }
  if (p.splits > 1) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (col_of_slot(q4, k) < tp.rows_here) {
        float* wrow = p.ws_o + off[k] + f0;
#pragma unroll
        for (int mm = 0; mm < kmb::kPvTiles; ++mm) *reinterpret_cast<float2*>(wrow + 64 * mm) = make_float2(lo[k][mm], hi[k][mm]);
      }
  } else if (p.o_vec) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (col_of_slot(q4, k) < tp.rows_here) {
#pragma unroll
        for (int mm = 0; mm < kmb::kPvTiles; ++mm)
          *reinterpret_cast<uint32_t*>(p.o + off[k] + f0 + 64 * mm) = pack_bf16x2(lo[k][mm], hi[k][mm]);
      }
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (col_of_slot(q4, k) < tp.rows_here) {
#pragma unroll
        for (int mm = 0; mm < kmb::kPvTiles; ++mm) {
          const uint32_t pk = pack_bf16x2(lo[k][mm], hi[k][mm]);
          p.o[off[k] + static_cast<int64_t>(f0 + 64 * mm) * p.o_s2] = static_cast<uint16_t>(pk & 0xffffu);
          p.o[off[k] + static_cast<int64_t>(f0 + 64 * mm + 1) * p.o_s2] = static_cast<uint16_t>(pk >> 16);
        }
      }
  }
}

template <bool kQFp8>
__device__ __forceinline__ void consumer(const MlaAttentionParams& p, const SeqPlan& s, int split, uint32_t base,
                                         uint8_t* base_ptr, int c, int t) {
  const int w = t / 32, lane = t % 32, g = lane / 4, q4 = lane % 4;
  float* colmax = reinterpret_cast<float*>(base_ptr + kOffMax) + c * 4 * kWgRows;  // [4 warps][16]
  float* scale_s = reinterpret_cast<float*>(base_ptr + kOffScale);                  // [32]
  int64_t* rowoff_s = reinterpret_cast<int64_t*>(base_ptr + kOffRowOff);           // [32]
  int* lim_s = reinterpret_cast<int*>(base_ptr + kOffLim);                          // [32]
  float* alpha_s = reinterpret_cast<float*>(base_ptr + kOffAlpha);                  // [2][32]
  int* grew_s = reinterpret_cast<int*>(base_ptr + kOffGrew);                        // [2][2]
  const uint32_t q_lo = sw128_lo(base + kOffQ + c * kWgRows * 128);  // rows 16 c ..: 1024-byte aligned
  uint32_t ti_run = 0;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = mla_tile_plan<kRows, kKeys>(p, s, mt);
    const int lim_first = s.L - s.n + tp.r0 / p.H + 1;  // the causal limit of the tile's first row (the least)
    named_bar_sync(kBarQ, kConsumerThreads);  // every QK and read of the previous row tile done
    if (tp.ntiles > 0) {
      if (c == 0 && t < kRows) {
        const int r = tp.r0 + t;
        lim_s[t] = r < s.rows_b ? s.L - s.n + r / p.H + 1 : 0;
      }
      load_q<kQFp8>(p, s, tp, base_ptr, t + 128 * c);
      fence_proxy_async();
      named_bar_sync(kBarQ, kConsumerThreads);
    }

    float o[kmb::kPvTiles][16];
#pragma unroll
    for (int mm = 0; mm < kmb::kPvTiles; ++mm)
#pragma unroll
      for (int i = 0; i < 16; ++i) o[mm][i] = 0.0f;
    float m[4], l[4];  // this warpgroup's 16 rows
#pragma unroll
    for (int k = 0; k < 4; ++k) m[k] = -INFINITY, l[k] = 0.0f;

    for (int j = 0; j < tp.ntiles; ++j) {
      const uint32_t ti = ti_run + static_cast<uint32_t>(j);
      const int st = static_cast<int>(ti % kStages), buf = j & 1;
      mbar_wait(base + kBarFull + 8 * st, (ti / kStages) & 1);
      const uint32_t tile = base + kOffStages + st * kmb::kStageBytes;
      float sc[8];
      qk_tile(sc, tile, q_lo, w, lane);
      uint32_t pv_a[kmb::kPvTiles][4];
      pv_load(pv_a, tile, c, w, lane, 0);  // PV's first loads, landing during the softmax
#pragma unroll
      for (int mm = 0; mm < kmb::kPvTiles; ++mm) fence_operands(o[mm]);

      scale_scores(sc, p.scale_log2, s.begin + j * kKeys, tp.kv_end, lim_first, lim_s + kWgRows * c, w, g, q4);
      const bool grew = rescale_maxima<kWgRows>(sc, m, l, colmax, kBarVote + c, 128, kBarMax + c, w, g, q4,
                                                [&](const float (&alpha)[4]) {
                                                  if (w == 0 && g == 0) {
#pragma unroll
                                                    for (int k = 0; k < 4; ++k)
                                                      alpha_s[buf * kRows + kWgRows * c + col_of_slot(q4, k)] = alpha[k];
                                                  }
                                                });
      if (t == 0) grew_s[2 * buf + c] = grew;
      store_pt(sc, m, l, base + kOffPt + buf * kPtBytes, c, w, lane);
      fence_proxy_async();  // P^T (generic stores) -> the async proxy of the wgmma
      named_bar_sync(kBarP, kConsumerThreads);
      // Both warpgroups' factors on the 32 columns of this warpgroup's O^T.
      const int grew0 = grew_s[2 * buf], grew1 = grew_s[2 * buf + 1];
      if (grew0 | grew1) {
        float a[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int n = col_of_slot(q4, k);
          a[k] = (n < kWgRows ? grew0 : grew1) ? alpha_s[buf * kRows + n] : 1.0f;
        }
#pragma unroll
        for (int mm = 0; mm < kmb::kPvTiles; ++mm)
#pragma unroll
          for (int i = 0; i < 16; ++i) o[mm][i] *= a[slot_of_reg(i)];
      }
      pv_tile(o, pv_a, tile, sw128_lo(base + kOffPt + buf * kPtBytes), base + kBarEmpty + 8 * st, c, w, lane);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mm = 0; mm < kmb::kPvTiles; ++mm) fence_operands(o[mm]);
    ti_run += static_cast<uint32_t>(max(tp.ntiles, 0));

    // Row sums of the warpgroup's 16 rows, then the scales and addresses of all 32 rows through
    // shared memory.
    publish_row_sums<kWgRows>(l, colmax, kBarMax + c, w, g, q4);
    row_ends(p, s, tp, split, m, colmax, scale_s, rowoff_s, c, w, lane);
    named_bar_sync(kBarMerge, kConsumerThreads);
    store_output(p, tp, o, scale_s, rowoff_s, c, t);
  }
}

template <bool kQFp8>
__global__ void __launch_bounds__(kThreads, 1) mla_attention_keys_m_bf16_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  uint8_t* base_ptr = smem_raw + (base - raw_addr);
  const int tid = static_cast<int>(threadIdx.x);
  const int b = static_cast<int>(blockIdx.z), split = static_cast<int>(blockIdx.y);
  if (p.combine_early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(base + kBarFull + 8 * st, 4);   // each producer warp's lane 0 (+ transaction bytes)
      mbar_init(base + kBarEmpty + 8 * st, 8);  // every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  SeqPlan s;
  if (!mla_seq_plan<kRows, kKeys>(p, b, split, s)) return;

  if (tid >= kConsumerThreads) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    producer(p, b, s, base, base_ptr, (tid - kConsumerThreads) / 32, tid % 32);
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    // The warpgroup index through a shuffle: warp-uniform for the compiler (uniform registers for
    // what derives from it, as in the fp8 kernel).
    const int c = __shfl_sync(0xffffffffu, tid / 128, 0);
    consumer<kQFp8>(p, s, split, base, base_ptr, c, tid % 128);
  }
}

template <bool kQFp8>
void launch(const MlaAttentionParams& p, dim3 grid, cudaStream_t s) {
  static const char tag = 0;  // one per instantiation
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_keys_m_bf16_kernel<kQFp8>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
  });
  mla_attention_keys_m_bf16_kernel<kQFp8><<<grid, kThreads, kSmemBytes, s>>>(p);
  KESTREL_LAUNCHED(kQFp8 ? "mla_attention_keys_m_bf16_kernel<bf16 cache, fp8 q, fast P>"
                         : "mla_attention_keys_m_bf16_kernel<bf16 cache, bf16 q, fast P>");
}

}  // namespace

void launch_mla_attention_keys_m_bf16(const MlaAttentionParams& p, dim3 grid, bool fp8_q, cudaStream_t s) {
  if (fp8_q) {
    launch<true>(p, grid, s);
  } else {
    launch<false>(p, grid, s);
  }
}

}  // namespace kestrel::ops::cuda
