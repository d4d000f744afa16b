// mla_attention, CUDA v4 (sm_90a): the seesaw over 64-key tiles, for a bf16 cache with P rounded
// once (precision fast). Same op, plan (grid of 64-row tiles, split rule, workspace, combine) and
// semantics as the other kernels (docs/ops/mla_attention.md). The automatic choice for a bf16 cache
// at the fast precision with more than 32 rows a sequence and splits of 4096+ keys (the rule:
// mla_attention_cuda_kernel); forced as wgmma_seesaw64.
// Twenty-seventh session: a clock64 timeline of the copies (branch s64-copytime) showed the half-R
// producer issuing b.R ~2,000 cycles after its release, behind a.R; one producer warp per (stage,
// half) and evict-first copies took H 128 B128 8k from 577 to ~502 us (v2 524, FlashMLA ~465).
// Twenty-eighth session: nothing but the copies after a producer's wake-up (barriers armed before
// it, the row in the page computed before it: 1.05x) and a producer of its own for pages of 64+;
// a tile that ends inside its page copied whole and its tail zeroed (one-row copies had cost ~28
// us per CTA). H 128 B128 8k ~484 us beside FlashMLA's 465 (0.96x).
// Thirtieth session: past one wave (more CTAs than SMs, one split), one wave of CTAs that walk
// the batch, the tile counts running on across sequences, so that a CTA's next sequence starts
// under its last one's end (the launch and the kernel's loop over b): H100, two jobs, H 128 B128
// 8k 1.014-1.016x (496-500 us beside FlashMLA's 506-507), H 96 1.02x, verify 4 1.02-1.03x,
// verify 8 1.03-1.08x.
// Thirty-first session: a per-warpgroup timeline put ~5.5 us of a walking item's end in its 64
// scattered 4-byte o stores a thread; o through shared memory (Q's region, free by then) and one
// bulk copy a row: H100, H 128 B128 8k 1.015-1.018x, 4k 1.053x, verify 4 1.017-1.023x (488-489 us
// beside FlashMLA's 508 in one job at boost clocks; 541-545 beside 548 under the power cap).
// Thirty-sixth session: o staged in the last KV tile's stage, so that the next row tile's Q comes
// by tensor copy under the epilogue (as FlashMLA's): H100 short runs 1.02-1.05x at 1k keys and
// 1.00x at 8k (decode H 128 B128 8k at FlashMLA's 517 us); under the power cap 1.00x (verify 8
// H 96 8k 0.994x).
// Thirty-eighth session: a whole row tile's o out as 4 boxes a warpgroup by tensor copy (one
// thread) instead of 128 row copies, in a kernel of its own (kOBoxes) for splits of at most 2048
// keys: H100 1.035-1.054x at 1k keys (verify 8 1k 1.067x under the power cap); the row copies'
// kernel keeps the code that runs 4k-32k (with the boxes' code in it, 8k lost 1.6-2%).
// The history below is the draft's.
// Measured (H200, twenty-fifth session; docs/perf.md): correct at its first run (the -s64 matrix
// cases, CI and full sizes), but 0.87-0.93x of v2: B128 8k H 128 635-657 us (v2 560), H 96 663
// (547), verify 2 / 4 / 8 346 / 648 / 1257 (319 / 565 / 1160), H 32 330-353 (313). Its phase
// counters (branch seesaw64-prof): warpgroup 1 waits on `full` ~4,400 cycles of a ~8,450-cycle
// pair, warpgroup 0 ~1,850 and ~2,300 more on P1: with two stages each half is refilled only
// after its last reader and read again at once, so every pair pays a refill's latency (at any
// batch: B 8-64, one wave, are as slow). An L2 prefetch of the tile two or four ahead made it
// slower (0.96x / 0.90x at H 128); the block-table lookups one tile ahead: within noise (kept).
// ptxas: 20 bytes of spills in the producers' row-tile loop (40 registers), none in the consumers.
// Twenty-sixth session (branch s64-nomask): the softmax as FlashMLA's (ex2 for exp2f, no mask on
// tiles every row attends whole, the scale folded into the exponent's FMA): H 128 B128 8k 645 ->
// 577 us (0.96x of v2 at 2eb2ae4), verify 4 655 -> 587, verify 8 1208 -> 1140, H 32 372 -> 308.
// It then executes about FlashMLA's instruction count (Nsight: 110.6 M against 104.0 M) and
// still waits: warpgroup 1 for the next tile b's first chunk (18% of the stall samples),
// warpgroup 0 for Scale1 behind it (10%). Not kept: lazy rescaling (0.99x: its warp vote sits
// between the maxima and the exponentials, on the chain), half R loaded b before a (0.97x).
//
// Why. v2 (mla_attention_sm90.cu) runs the compute-bound rows (H 96 / 128, verify blocks) at
// 0.85x of FlashMLA. Its QK is m64n32k16 over 32-key tiles: each k-step reads 2 KB of Q and 1 KB of
// K from shared memory for 32 K MACs, so the QK is bound by shared-memory bandwidth (~362 KB of
// operand traffic per 64 keys, ~2,830 cycles at 128 B / clock, against ~4,250 measured). With
// 64-key tiles (m64n64k16, 4 KB per 64 K MACs) and P of a warpgroup's own tile from registers,
// a 64-key block moves ~293 KB. The schedule is FlashMLA's sm90 one (its public source, read for
// the technique; this is our code): per 64-column chunk mbarriers, each half of a tile released
// by the one warpgroup that reads it last, the next QK issued on the chunks released first.
//
// Roles (384 threads; setmaxnreg: 232 registers for the consumers, 40 for the producers):
//   warps 8-11 (producers), one per (stage, half): warp 8 + 2 st + h loads half h of the tiles in
//     stage st (half L: column chunks 0-3, V columns 0-255; half R: chunks 4-8), each waiting on
//     its own `empty` barrier, so that a half is refilled as soon as its last reader releases it
//     (evict-first in L2); one `full` mbarrier per chunk.
//     Pages of 64+ (producer_paged64): one box per chunk; a tile that ends inside its page is
//     copied whole on the warp's `edge` barrier, then its rows past kv_end zeroed; a page outside
//     the cache: bf16 NaN rows below kv_end. Other page sizes (producer): a whole tile is 64 /
//     tile_rows boxes per chunk, otherwise one-row boxes per key, zeros past kv_end and NaN for a
//     page outside the cache, written before the arrival.
//   warpgroups 0 and 1 (consumers) own all 64 rows; warpgroup c accumulates O[64][256] for V
//     columns 256 c .. (m64n256k16, 128 f32 registers). Tiles go in pairs (a, b):
//     wg0: S_a = Q K_a^T (issued in the pair before) -> softmax of a against m (m_s, from the last
//          b): m_a, scale0 -> [Scale0] -> O *= scale0, O += P_a V_aL (P from registers) -> a.L
//          released -> [Scale1] -> P_a * scale1 to P0 -> [P0] -> O *= scale1 -> [P1] O += P_b V_bL
//          (P1) -> QK of the next a on chunks 0-3 -> b.L released -> chunks 4-8.
//     wg1: [Scale0] -> softmax of b against m_a: m_b, scale1 -> [Scale1] -> O *= scale0 scale1,
//          P_b to P1, O += P_b V_bR (registers) -> [P0] O += P_a' V_aR (P0) -> [P1] -> b.R, a.R
//          released -> QK of the next b on chunks 4-8, then 0-3.
//     Both end every pair with every wgmma retired; the last pair (and the pair before a last
//     pair without b) are separate instantiations, so no wgmma is issued under a condition (ptxas
//     would serialise them: scripts/nvcc-wgmma-guard).
//   Q's chunk 8 (its last 64 features) is held in registers (16 a thread) once loaded, and its
//   8 KB hold P1: two P buffers beside two 73,728-byte stages.
//
// Barriers. full[stage][chunk] (count 1 + tx): the producer lane's arrive.expect_tx (for a whole
// tile made before the wait on `empty`, once the chunk's previous phase completed; for an edge or
// filled tile a plain arrive after the writes), the tensor copies complete_tx; a consumer waits
// parity (tile / 2) & 1 before any wgmma reading the chunk (also where another warpgroup waited
// before). edge[stage][half] (count 1 + tx): a producer's own, for a tile that ends inside its page. empty[stage][half] (count 4): every warp of the
// half's last reader, after wait_group showed its wgmma retired (L: wg0, after P_a V_aL or P_b
// V_bL; R: wg1, after P_b V_bR or P_a' V_aR). Named (256: 128 arrive + 128 sync): Scale0 (m_s,
// scale0 written), Scale1 (m_s, scale1), P0 (P0 written, proxy-fenced), P1 (P1 written and wg1's
// P0 read issued), Q (256 sync, Q through registers only: the previous row tile's wgmmas retired;
// Q stored), L (row sums), O + c (128: warpgroup c's o rows staged in half c of the last KV tile's
// stage, whose release waits for their copies). Q by tensor copy: Q's `full` mbarrier and the
// freed count (producer_q).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "common.cuh"
#include "kestrel/ops/mla_attention.h"  // mla_attention_seesaw64_walks
#include "cp_async.cuh"
#include "mla_attention_common.cuh"
#include "mla_attention_seesaw64_layout.h"
#include "sm90_ptx.cuh"

namespace kestrel::ops::cuda {

namespace {

namespace s64 = seesaw64;
using sm90::desc_of;
using sm90::fence_operands;
using sm90::fence_proxy_async;
using sm90::frag_d_col;
using sm90::frag_d_row;
using sm90::mbar_arrive;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_init;
using sm90::mbar_wait;
using sm90::named_bar_arrive;
using sm90::named_bar_sync;
using sm90::opaque;
using sm90::q_step_lo;
using sm90::sw128_lo;
using sm90::tma_load_3d;
using sm90::tma_load_3d_hint;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_wait;

constexpr int kRows = s64::kRows, kKeys = s64::kKeys, kChunks = s64::kColChunks;
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 128;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= sm90::setmaxnreg_pool(kThreads), "setmaxnreg budget");
constexpr uint32_t kBf16NanPair = 0x7fc07fc0u;
constexpr int kBarQ = 1, kBarScale0 = 2, kBarScale1 = 3, kBarP0 = 4, kBarP1 = 5, kBarL = 6, kBarO = 7;  // kBarO + c: warpgroup c
constexpr int kHalfL = 0, kHalfR = 1;

using SeqPlan = MlaSeqPlan;
using TilePlan = MlaTilePlan;

// ---- producers ---------------------------------------------------------------------------------
// Q by tensor copy (a bf16 q whose tokens are H rows apart: encode_mla_q_map), as FlashMLA issues
// its next request's Q under the last one's epilogue (thirty-fourth session): the producer warp
// that copies a row tile's first KV tile (half L of its stage) first waits until the consumers
// have freed Q's region qn times (the last row tile's L barrier: every wgmma retired; o is staged
// in a KV stage, not there), then one lane issues the 9 boxes of the row tile's 64 query rows
// into Q's region on Q's barrier. Row tiles without KV tiles take no Q (the consumers neither
// wait nor free); qn counts those that do, the same in every producer warp. Box rows
// past the row tile's rows hold other queries or zeros (past the tensor): padded rows, never
// stored, each row's softmax its own.
__device__ __forceinline__ void producer_q(const CUtensorMap* map_q, const MlaAttentionParams& p, const SeqPlan& s,
                                           const TilePlan& tp, uint32_t base, int half, int st, int lane, uint32_t ti,
                                           uint32_t& qn) {
  if (map_q == nullptr || tp.ntiles <= 0) return;
  if (half == kHalfL && static_cast<int>(ti % s64::kStages) == st) {
    if (lane == 0) {
      uint32_t freed;
      for (;;) {
        asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(freed) : "r"(base + s64::kOffQFreed) : "memory");
        if (freed >= qn) break;
        __nanosleep(64);
      }
      mbar_arrive_expect_tx(base + s64::kOffBarQ, sm90::kQBytes);
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        sm90::tma_load_2d(base + s64::kOffQ + c * sm90::kQChunkBytes, map_q, c * s64::kAtomCols, s.qb * p.H + tp.r0,
                          base + s64::kOffBarQ);
    }
  }
  ++qn;
}

// The pages of lane l's keys l and l + 32 of the tile at pos0 (0 past kv_end).
__device__ __forceinline__ void lookup_pages(int (&page)[2], const MlaAttentionParams& p, int b, int pos0, int kv_end, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pos = pos0 + lane + 32 * h;
    page[h] = pos < kv_end ? page_at(p, b, pos / p.page_size) : 0;
  }
}

// Pages of 64 keys or more (tile_rows 64): a tile (its first key a multiple of 64) lies in one
// page, so one lookup, one box per chunk, and no per-key state: the warp's few registers do not
// spill, and nothing but the copies follows the wait for the stage's release. A whole tile's
// barriers are armed before that wait (once their previous phase completed), and its row in the
// page computed before it: together 1.05x at H 128 B128 8k (twenty-eighth session).
// A tile that ends inside its page (the last of a split or under a causal limit) is copied whole
// on the warp's edge barrier and its rows past kv_end zeroed before `full`, instead of one-row
// copies per key (64 of those per chunk cost ~28 us per CTA: H 128 B128 decode 551 us at 8,190
// keys against 494 at 8,192). A page outside the cache: NaN rows below kv_end, no copy.
__device__ __forceinline__ void producer_paged64(const MlaAttentionParams& p, const CUtensorMap& map_tile, int b, const SeqPlan& s,
                                                 uint32_t base, uint8_t* base_ptr, int half, int st, int lane, uint32_t& ti,
                                                 uint32_t& edges, const CUtensorMap* map_q, uint32_t& qn) {
  const int c0 = half == kHalfL ? 0 : s64::kHalfLChunks, c1 = half == kHalfL ? s64::kHalfLChunks : kChunks;
  const uint64_t policy = sm90::l2_evict_first_policy();  // (see producer())
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = mla_tile_plan<kRows, kKeys>(p, s, mt);
    producer_q(map_q, p, s, tp, base, half, st, lane, ti, qn);
    for (int j = 0; j < tp.ntiles; ++j, ++ti) {
      if (static_cast<int>(ti % s64::kStages) != st) continue;
      const int pos0 = s.begin + j * kKeys, keys = min(kKeys, tp.kv_end - pos0);  // keys >= 1
      const int page = page_at(p, b, pos0 / p.page_size), row0 = pos0 % p.page_size;
      const bool valid = page >= 0 && page < p.num_pages;
      const uint32_t stage = base + s64::kOffStages + st * s64::kStageBytes, parity = ((ti / s64::kStages) & 1) ^ 1;
      if (valid && keys == kKeys) {
        if (lane == 0)
          for (int c = c0; c < c1; ++c) {
            mbar_wait(base + s64::full_bar(st, c), parity);
            mbar_arrive_expect_tx(base + s64::full_bar(st, c), s64::kChunkBytes);
          }
        __syncwarp();
        mbar_wait(base + s64::empty_bar(st, half), parity);
        if (lane == 0)
          for (int c = c0; c < c1; ++c)
            tma_load_3d_hint(stage + c * s64::kChunkBytes, &map_tile, 64 * c, row0, page, base + s64::full_bar(st, c), policy);
        continue;
      }
      mbar_wait(base + s64::empty_bar(st, half), parity);
      if (valid) {
        const uint32_t bar = base + s64::edge_bar(st, half);
        if (lane == 0) {
          mbar_arrive_expect_tx(bar, static_cast<uint32_t>(c1 - c0) * s64::kChunkBytes);
          for (int c = c0; c < c1; ++c) tma_load_3d_hint(stage + c * s64::kChunkBytes, &map_tile, 64 * c, row0, page, bar, policy);
        }
        mbar_wait(bar, edges++ & 1);  // landed: the zeros below go over it, not under
      }
      // Rows past kv_end zero; below it NaN when the page is outside the cache.
      uint8_t* const stage_ptr = base_ptr + (stage - base);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = lane + 32 * h;
        if (valid && key < keys) continue;
        const uint32_t f = key < keys ? kBf16NanPair : 0u;
        for (int c = c0; c < c1; ++c)
#pragma unroll
          for (int u = 0; u < 8; ++u)
            *reinterpret_cast<uint4*>(stage_ptr + c * s64::kChunkBytes + key * 128 + u * 16) = make_uint4(f, f, f, f);
      }
      fence_proxy_async();  // the generic writes before the consumers' wgmmas (async proxy)
      __syncwarp();
      if (lane == 0)
        for (int c = c0; c < c1; ++c) mbar_arrive(base + s64::full_bar(st, c));
    }
  }
}

// Other page sizes (tile_rows 32 or 16: boxes of that many rows; 0: one-row copies per key).
// One warp per (stage, half): chunks c0 .. c1 - 1 of the tiles that use stage `st` (every other
// tile). A warp per stage, not one per half walking the tiles in order: the halves are released
// in the order a.L, b.R, a.R, b.L, and a half producer in tile order issued b.R only after a.R
// (~2,000 cycles after its release: the copy timeline, twenty-seventh session), where warpgroup 1's
// next QK was waiting for it. The block-table lookups of a tile are made before the wait for its
// stage (a pair's time before the release in steady state).
__device__ __forceinline__ void producer(const MlaAttentionParams& p, const CUtensorMap& map_tile, const CUtensorMap& map_row,
                                         int tile_rows, int b, const SeqPlan& s, uint32_t base, uint8_t* base_ptr, int half,
                                         int st, int lane, uint32_t& ti, const CUtensorMap* map_q, uint32_t& qn) {
  const int c0 = half == kHalfL ? 0 : s64::kHalfLChunks, c1 = half == kHalfL ? s64::kHalfLChunks : kChunks;
  // Whole tiles are loaded evict-first (as FlashMLA loads its KV): the other row tile of the
  // sequence still finds them in L2 (its CTA runs beside this one), and the stream does not push
  // out what is read again. Measured with the producers per stage: 1.024x at H 128 B128 8k,
  // 1.03x at H 96, 1.01x at verify 4 (H200, twenty-seventh session). (v2 lost 3% with it.)
  const uint64_t policy = sm90::l2_evict_first_policy();
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = mla_tile_plan<kRows, kKeys>(p, s, mt);
    producer_q(map_q, p, s, tp, base, half, st, lane, ti, qn);
    for (int j = 0; j < tp.ntiles; ++j, ++ti) {
      if (static_cast<int>(ti % s64::kStages) != st) continue;
      const int pos0 = s.begin + j * kKeys;
      int page[2];
      lookup_pages(page, p, b, pos0, tp.kv_end, lane);
      bool in[2], nan[2];  // in the cache (below kv_end, a page inside it); NaN (a page outside it)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int pos = pos0 + lane + 32 * h;
        nan[h] = pos < tp.kv_end && (page[h] < 0 || page[h] >= p.num_pages);
        in[h] = pos < tp.kv_end && !nan[h];
      }
      const bool whole = tile_rows > 0 && __all_sync(0xffffffffu, in[0] && in[1]);
      const uint32_t stage = s64::kOffStages + st * s64::kStageBytes;
      if (whole && lane == 0)
        for (int c = c0; c < c1; ++c) {
          mbar_wait(base + s64::full_bar(st, c), ((ti / s64::kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(base + s64::full_bar(st, c), s64::kChunkBytes);
        }
      __syncwarp();
      mbar_wait(base + s64::empty_bar(st, half), ((ti / s64::kStages) & 1) ^ 1);
      if (whole) {
        for (int r0 = 0; r0 < kKeys; r0 += tile_rows) {
          const int pg = __shfl_sync(0xffffffffu, r0 < 32 ? page[0] : page[1], r0 % 32);
          if (lane == 0)
            for (int c = c0; c < c1; ++c)
              tma_load_3d_hint(base + stage + c * s64::kChunkBytes + r0 * 128, &map_tile, 64 * c, (pos0 + r0) % p.page_size, pg,
                               base + s64::full_bar(st, c), policy);
        }
        continue;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (in[h]) continue;
        const uint32_t f = nan[h] ? kBf16NanPair : 0u;
        const int key = lane + 32 * h;
        for (int c = c0; c < c1; ++c)
#pragma unroll
          for (int u = 0; u < 8; ++u)
            *reinterpret_cast<uint4*>(base_ptr + stage + c * s64::kChunkBytes + key * 128 + u * 16) = make_uint4(f, f, f, f);
      }
      fence_proxy_async();  // (generic writes where the async proxy wrote before and will read)
      const int copies = __popc(__ballot_sync(0xffffffffu, in[0])) + __popc(__ballot_sync(0xffffffffu, in[1]));
      __syncwarp();  // the filled rows before lane 0's arrivals (release)
      if (lane == 0)
        for (int c = c0; c < c1; ++c) mbar_arrive_expect_tx(base + s64::full_bar(st, c), static_cast<uint32_t>(copies) * 128);
      __syncwarp();  // the expected bytes are announced before any copy can complete
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!in[h]) continue;
        const int key = lane + 32 * h;
        for (int c = c0; c < c1; ++c)
          tma_load_3d(base + stage + c * s64::kChunkBytes + key * 128, &map_row, 64 * c, (pos0 + key) % p.page_size, page[h],
                      base + s64::full_bar(st, c));
      }
    }
  }
}

// ---- consumers ---------------------------------------------------------------------------------
// Thread t of a warpgroup holds rows row0 = frag_d_row(t, 0) and row0 + 8 (h = 0, 1); score
// register i is (row0 + 8 ((i / 2) % 2), key frag_d_col(t, i)), output register i the same row
// and column 256 c + frag_d_col(t, i).

// Q of the row tile into shared memory, bf16 (an fp8 q widened exactly), rows past the sequence's
// rows zero; all of a thread's 18 pieces loaded before any is stored.
template <bool kQFp8>
__device__ __forceinline__ void load_q(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp, uint8_t* base_ptr,
                                       int ct) {
  constexpr int kPieces = s64::kDqk / 8;
  constexpr int kPer = kRows * kPieces / kConsumerThreads;
  static_assert(kPer * kConsumerThreads == kRows * kPieces, "whole pieces per thread");
  ct = static_cast<int>(opaque(static_cast<uint32_t>(ct)));
  uint4 v[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    int row, piece;
    sm90::piece_of(ct + u * kConsumerThreads, kRows, row, piece);
    v[u] = row < tp.rows_here ? q_chunk<kQFp8>(p, s.qb, tp.r0 + row, 8 * piece) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    int row, piece;
    sm90::piece_of(ct + u * kConsumerThreads, kRows, row, piece);
    *reinterpret_cast<uint4*>(base_ptr + s64::kOffQ + sm90::sw128_offset(kRows, row, 8 * piece)) = v[u];
  }
}

// What a consumer thread carries through a row tile.
struct Ctx {
  uint32_t base;       // shared address of the dynamic base
  uint8_t* base_ptr;
  uint32_t ti_a;       // the pair's tile a, counted over the CTA (its stage ti_a % 2; b's the other)
  int tile_a_begin;    // KV position of tile a's first key
  int kv_end;
  int lim[2];          // causal limits of rows row0, row0 + 8 (keys < lim attended; 0 for padding)
  int full_end;        // keys below it are attended by every row of the row tile (no mask needed)
  float scale_log2;
  int t;               // thread in the warpgroup
  uint32_t ti_held;    // the row tile's last tile when o is staged in its stage (not released by
                       // the pairs: the epilogue releases it once o's copies have read it), else ~0
};

__device__ __forceinline__ uint32_t stage_of(const Ctx& x, uint32_t ti) {
  return x.base + s64::kOffStages + static_cast<uint32_t>(ti % s64::kStages) * s64::kStageBytes;
}
__device__ __forceinline__ void wait_full(const Ctx& x, uint32_t ti, int c) {
  mbar_wait(x.base + s64::full_bar(static_cast<int>(ti % s64::kStages), c), (ti / s64::kStages) & 1);
}
// Every warp of the warpgroup, once its wgmmas reading the half are retired; the held tile's halves
// wait for the epilogue (o staged there).
__device__ __forceinline__ void release(const Ctx& x, uint32_t ti, int half) {
  if (ti == x.ti_held) return;
  __syncwarp();
  if (x.t % 32 == 0) mbar_arrive(x.base + s64::empty_bar(static_cast<int>(ti % s64::kStages), half));
}

// QK of tile ti over column chunks kC0 .. kC1 - 1, one commit group per chunk, each after its
// chunk's `full`; kFirst: the first k-step overwrites the scores.
template <int kC0, int kC1, bool kFirst>
__device__ __forceinline__ void qk_chunks(float (&sc)[32], const uint32_t (&q8)[4][4], const Ctx& x, uint32_t ti) {
  const uint32_t q_lo = sw128_lo(x.base + s64::kOffQ), kv_lo = sw128_lo(stage_of(x, ti));
#pragma unroll
  for (int c = kC0; c < kC1; ++c) {
    wait_full(x, ti, c);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int kk = 4 * c + k;
      if (c < kChunks - 1) {
        sm90::wgmma_m64n64k16_ss<false>(sc, desc_of(q_lo + q_step_lo(kk)), desc_of(kv_lo + q_step_lo(kk)),
                                        kFirst && c == kC0 && k == 0 ? 0 : 1);
      } else {
        sm90::wgmma_m64n64k16_rs<false>(sc, q8[k], desc_of(kv_lo + q_step_lo(kk)), kFirst && c == kC0 && k == 0 ? 0 : 1);
      }
    }
    wgmma_commit();
  }
}

// The raw scores of a tile with masked keys -inf; mx: the row maxima (over the quad) in log2
// units (the scale is positive, so the maximum of the scaled scores is the scaled maximum). A
// tile that ends by x.full_end needs no mask (a uniform branch): only the last tiles of a split,
// and those a causal limit cuts, pay for it.
__device__ __forceinline__ void mask_and_max(float (&sc)[32], float (&mx)[2], const Ctx& x, int tile_begin) {
  mx[0] = mx[1] = -INFINITY;
  if (tile_begin + kKeys > x.full_end) {
    const int key0 = tile_begin + frag_d_col(static_cast<int>(opaque(static_cast<uint32_t>(x.t))), 0);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1, key = key0 + frag_d_col(0, i);
      if (!(key < x.kv_end && key < x.lim[h])) sc[i] = -INFINITY;
    }
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], sc[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    mx[h] *= x.scale_log2;
  }
}

// P = exp2(s scale_log2 - m) in place (m = -inf: nothing attended yet, P = 0); the thread's row sums. ex2
// (one MUFU, relative error <= 2^-22, results below 2^-126 flushed to 0: weights that small
// relative to the row maximum do not reach a bf16 P), not exp2f, which without fast math wraps
// each MUFU in a denormal-range guard (four instructions).
__device__ __forceinline__ void exponentiate(float (&sc)[32], const float (&m)[2], float (&sum)[2], float scale_log2) {
  const float mu[2] = {m[0] == -INFINITY ? 0.0f : m[0], m[1] == -INFINITY ? 0.0f : m[1]};
  sum[0] = sum[1] = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int h = (i >> 1) & 1;
    sc[i] = ex2(fmaf(sc[i], scale_log2, -mu[h]));  // raw score in, one rounding before the MUFU
    sum[h] += sc[i];
  }
}

// exp2(m_old - m_new): 0 while nothing was attended (m_old = -inf), 1 while nothing is.
__device__ __forceinline__ float rescale_factor(float m_old, float m_new) {
  return ex2(m_old - (m_new == -INFINITY ? 0.0f : m_new));
}

// P (f32 registers) times f per row, as PV's A fragments: k-step ks, register j packs score
// registers 8 ks + 2 j and + 1 (sm90::p_reg_of).
__device__ __forceinline__ void pack_p(uint32_t (&a)[4][4], const float (&sc)[32], const float (&f)[2]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 8 * ks + 2 * j, h = (i >> 1) & 1;
      a[ks][j] = pack_bf16x2(sc[i] * f[h], sc[i + 1] * f[h]);
    }
}
// The same fragments into a P buffer (Q's layout: s64::p_offset), for the other warpgroup.
__device__ __forceinline__ void store_p(uint8_t* buf, const uint32_t (&a)[4][4], int t) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 8 * ks + 2 * j;
      *reinterpret_cast<uint32_t*>(buf + s64::p_offset(frag_d_row(t, i), frag_d_col(t, i))) = a[ks][j];
    }
}

__device__ __forceinline__ void scale_o(float (&o)[128], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] *= f[(i >> 1) & 1];
}

// O += P V over one tile for the warpgroup's 256 columns: P from registers or from a P buffer.
__device__ __forceinline__ void pv_registers(float (&o)[128], const uint32_t (&a)[4][4], uint32_t stage, int c) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < s64::kPvSteps; ++ks) sm90::wgmma_m64n256k16_rs<false>(o, a[ks], s64::v_desc(stage, c, ks));
  wgmma_commit();
}
__device__ __forceinline__ void pv_shared(float (&o)[128], uint32_t p_buf, uint32_t stage, int c) {
  const uint32_t p_lo = sw128_lo(p_buf);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < s64::kPvSteps; ++ks)
    sm90::wgmma_m64n256k16_ss<false>(o, desc_of(p_lo + q_step_lo(ks)), s64::v_desc(stage, c, ks));
  wgmma_commit();
}

// Warpgroup 0's pair (see the design note). In: the scores of tile a (retired); m after the last
// tile. kLast: no next pair (else the next tile a is issued, and b exists).
template <bool kLast, bool kHasB>
__device__ __forceinline__ void pair_wg0(float (&o)[128], float (&sc)[32], const uint32_t (&q8)[4][4], float (&m)[2],
                                         float (&l)[2], const Ctx& x) {
  static_assert(kLast || kHasB, "a pair before another has both tiles");
  const int t = x.t, row0 = frag_d_row(t, 0), tq = t % 4;
  float* m_s = reinterpret_cast<float*>(x.base_ptr + s64::kOffM);
  float* sc0_s = reinterpret_cast<float*>(x.base_ptr + s64::kOffScale0);
  const float* sc1_s = reinterpret_cast<const float*>(x.base_ptr + s64::kOffScale1);
  const uint32_t tib = x.ti_a + 1;
  // Softmax of a against m.
  float mx[2], m_new[2], sc0[2], sum[2];
  mask_and_max(sc, mx, x, x.tile_a_begin);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m_new[h] = fmaxf(m[h], mx[h]);
    sc0[h] = rescale_factor(m[h], m_new[h]);
  }
  exponentiate(sc, m_new, sum, x.scale_log2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = l[h] * sc0[h] + sum[h];
    if (tq == 0) {
      m_s[row0 + 8 * h] = m_new[h];
      sc0_s[row0 + 8 * h] = sc0[h];
    }
  }
  named_bar_arrive(kBarScale0, kConsumerThreads);
  scale_o(o, sc0);
  // O += P_a V_aL from registers; then half L of a is free.
  uint32_t a[4][4];
  const float one[2] = {1.0f, 1.0f};
  pack_p(a, sc, one);
  pv_registers(o, a, stage_of(x, x.ti_a), 0);
  wgmma_wait<0>();
  fence_operands(o);
  fence_operands(a[0]); fence_operands(a[1]); fence_operands(a[2]); fence_operands(a[3]);
  release(x, x.ti_a, kHalfL);
  // b's factor: P_a rescaled to P0 for warpgroup 1, O and l rescaled.
  named_bar_sync(kBarScale1, kConsumerThreads);
  float sc1[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sc1[h] = sc1_s[row0 + 8 * h];
    m[h] = m_s[row0 + 8 * h];
  }
  pack_p(a, sc, sc1);
  store_p(x.base_ptr + s64::kOffP0, a, t);
  fence_proxy_async();
  named_bar_arrive(kBarP0, kConsumerThreads);
  if constexpr (kHasB) {
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] *= sc1[h];
    scale_o(o, sc1);
    // O += P_b V_bL from P1.
    named_bar_sync(kBarP1, kConsumerThreads);
#pragma unroll
    for (int c = 0; c < s64::kHalfLChunks; ++c) wait_full(x, tib, c);
    pv_shared(o, x.base + s64::kOffP1, stage_of(x, tib), 0);
  }
  if constexpr (!kLast) {
    // The next a: chunks 0-3 (released first), then, once P_b V_bL retired and b's half L is
    // released, chunks 4-8.
    qk_chunks<0, s64::kHalfLChunks, true>(sc, q8, x, x.ti_a + 2);
    wgmma_wait<s64::kHalfLChunks>();
    fence_operands(o);
    release(x, tib, kHalfL);
    qk_chunks<s64::kHalfLChunks, kChunks, false>(sc, q8, x, x.ti_a + 2);
    wgmma_wait<0>();
    fence_operands(sc);
  } else {
    wgmma_wait<0>();
    fence_operands(o);
    if constexpr (kHasB) release(x, tib, kHalfL);
  }
}

// Warpgroup 1's pair. In: the scores of tile b when kHasB (retired). kNextB: the next pair has a
// tile b, whose QK this pair issues.
template <bool kHasB, bool kNextB>
__device__ __forceinline__ void pair_wg1(float (&o)[128], float (&sc)[32], const uint32_t (&q8)[4][4], float (&m)[2],
                                         float (&l)[2], const Ctx& x) {
  static_assert(kHasB || !kNextB, "a pair without b is the last");
  const int t = x.t, row0 = frag_d_row(t, 0), tq = t % 4;
  float* m_s = reinterpret_cast<float*>(x.base_ptr + s64::kOffM);
  const float* sc0_s = reinterpret_cast<const float*>(x.base_ptr + s64::kOffScale0);
  float* sc1_s = reinterpret_cast<float*>(x.base_ptr + s64::kOffScale1);
  const uint32_t tib = x.ti_a + 1;
  named_bar_sync(kBarScale0, kConsumerThreads);
  float sc0[2], sc1[2] = {1.0f, 1.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sc0[h] = sc0_s[row0 + 8 * h];
    m[h] = m_s[row0 + 8 * h];  // m after a
  }
  uint32_t a[4][4];
  if constexpr (kHasB) {
    float mx[2], m_new[2], sum[2];
    mask_and_max(sc, mx, x, x.tile_a_begin + kKeys);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_new[h] = fmaxf(m[h], mx[h]);
      sc1[h] = rescale_factor(m[h], m_new[h]);
      m[h] = m_new[h];
    }
    exponentiate(sc, m_new, sum, x.scale_log2);
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * (sc0[h] * sc1[h]) + sum[h];
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] *= sc0[h];
  }
  if (tq == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sc1_s[row0 + 8 * h] = sc1[h];
      m_s[row0 + 8 * h] = m[h];
    }
  }
  named_bar_arrive(kBarScale1, kConsumerThreads);
  const float f[2] = {sc0[0] * sc1[0], sc0[1] * sc1[1]};
  scale_o(o, f);
  if constexpr (kHasB) {
    // P_b to P1 for warpgroup 0, and O += P_b V_bR from registers.
    const float one[2] = {1.0f, 1.0f};
    pack_p(a, sc, one);
    store_p(x.base_ptr + s64::kOffP1, a, t);
    pv_registers(o, a, stage_of(x, tib), 1);
    fence_proxy_async();  // P1 (generic stores) -> warpgroup 0's wgmma
  }
  // O += P_a' V_aR from P0.
  named_bar_sync(kBarP0, kConsumerThreads);
#pragma unroll
  for (int c = s64::kHalfLChunks; c < kChunks - 1; ++c) wait_full(x, x.ti_a, c);
  pv_shared(o, x.base + s64::kOffP0, stage_of(x, x.ti_a), 1);
  if constexpr (kHasB) {
    named_bar_arrive(kBarP1, kConsumerThreads);
    wgmma_wait<1>();
    fence_operands(a[0]); fence_operands(a[1]); fence_operands(a[2]); fence_operands(a[3]);
    release(x, tib, kHalfR);
  }
  wgmma_wait<0>();
  fence_operands(o);
  release(x, x.ti_a, kHalfR);
  if constexpr (kNextB) {
    // The next b: chunks 4-8 (this warpgroup released half R just now), then 0-3.
    qk_chunks<s64::kHalfLChunks, kChunks, true>(sc, q8, x, tib + 2);
    qk_chunks<0, s64::kHalfLChunks, false>(sc, q8, x, tib + 2);
    wgmma_wait<0>();
    fence_operands(sc);
  }
}

// Row `local` of the warpgroup's o (its registers of row half h) times `scale` as bf16 into its
// half of the stage: in the 4 boxes of a tensor copy (s64::o_box_offset) or in the rotated rows
// of the row copies (s64::o_stage_offset). Two loops, not one with both addresses.
template <bool kBoxes>
__device__ __forceinline__ void stage_o_row(uint8_t* o_stage, const float (&o)[128], int h, int local, int colw, float scale) {
  const uint32_t box_base = s64::o_box_base(local, colw);
#pragma unroll
  for (int k = 0; k < 32; ++k) {
    const int i = 4 * k + 2 * h, d = colw + frag_d_col(0, i);  // d = colw + 8 k
    const uint32_t at = kBoxes ? s64::o_box_at(box_base, k) : s64::o_stage_offset(local, 2u * d);
    *reinterpret_cast<uint32_t*>(o_stage + at) = pack_bf16x2(o[i] * scale, o[i + 1] * scale);
  }
}

// One item (sequence b's plan s, workspace slot `split`). q_tma: Q by tensor copy (producer_q),
// q_waits the uses of Q's barrier so far; else Q through registers (load_q) at the row tile's start.
// kOBoxes: o_map is o's tensor map, and a whole row tile's o goes out as boxes (the instantiation
// where mla_attention_seesaw64_o_boxes holds; the other keeps the row copies' code alone).
template <bool kQFp8, bool kOBoxes>
__device__ __forceinline__ void consumer(const MlaAttentionParams& p, const SeqPlan& s, int split, uint32_t base,
                                         uint8_t* base_ptr, int c, int t, uint32_t& ti_run, bool q_tma, uint32_t& q_waits,
                                         const CUtensorMap* o_map) {
  const int tq = t % 4, row0 = frag_d_row(t, 0);
  float* l_s = reinterpret_cast<float*>(base_ptr + s64::kOffL);
  Ctx x{};
  x.base = base;
  x.base_ptr = base_ptr;
  x.scale_log2 = p.scale_log2;
  x.t = t;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = mla_tile_plan<kRows, kKeys>(p, s, mt);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tp.r0 + row0 + 8 * h;
      x.lim[h] = r < s.rows_b ? s.L - s.n + r / p.H + 1 : 0;
    }
    x.kv_end = tp.kv_end;
    // Causal limits grow with the row: the tile's first row has the smallest.
    x.full_end = min(tp.kv_end, s.L - s.n + tp.r0 / p.H + 1);
    uint32_t q8[4][4];
    bool q_here = tp.ntiles > 0;
    if (q_tma) {
      if (q_here) mbar_wait(base + s64::kOffBarQ, q_waits++ & 1);  // (producer_q)
    } else {
      named_bar_sync(kBarQ, kConsumerThreads);  // the previous row tile's wgmmas (Q, P0, P1) retired
      if (q_here) {
        load_q<kQFp8>(p, s, tp, base_ptr, t + 128 * c);
        fence_proxy_async();
        named_bar_sync(kBarQ, kConsumerThreads);
      }
    }
    if (q_here) {
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j) q8[k][j] = *reinterpret_cast<const uint32_t*>(base_ptr + s64::kOffQ + s64::q8_offset(t, k, j));
    }
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float sc[32];
    x.ti_a = ti_run;
    // o staged in the last tile's stage (s64::o_stage_half): its halves held back from the producers.
    const bool staged = s.direct && p.o_vec && tp.ntiles > 0;
    x.ti_held = staged ? ti_run + static_cast<uint32_t>(tp.ntiles) - 1 : ~0u;
    // The first pair's QKs, each retired where issued.
    if (c == 0 && tp.ntiles > 0) {
      qk_chunks<0, kChunks, true>(sc, q8, x, ti_run);
      wgmma_wait<0>();
      fence_operands(sc);
    } else if (c == 1 && tp.ntiles > 1) {
      qk_chunks<s64::kHalfLChunks, kChunks, true>(sc, q8, x, ti_run + 1);
      qk_chunks<0, s64::kHalfLChunks, false>(sc, q8, x, ti_run + 1);
      wgmma_wait<0>();
      fence_operands(sc);
    }
    const int npairs = (tp.ntiles + 1) / 2;
    for (int pr = 0; pr < npairs; ++pr) {
      x.ti_a = ti_run + 2 * pr;
      x.tile_a_begin = s.begin + 2 * pr * kKeys;
      const bool has_b = 2 * pr + 1 < tp.ntiles;
      if (c == 0) {
        if (pr + 1 < npairs) {
          pair_wg0<false, true>(o, sc, q8, m, l, x);
        } else if (has_b) {
          pair_wg0<true, true>(o, sc, q8, m, l, x);
        } else {
          pair_wg0<true, false>(o, sc, q8, m, l, x);
        }
      } else {
        if (pr + 1 < npairs && 2 * pr + 3 < tp.ntiles) {
          pair_wg1<true, true>(o, sc, q8, m, l, x);
        } else if (has_b) {
          pair_wg1<true, false>(o, sc, q8, m, l, x);
        } else {
          pair_wg1<false, false>(o, sc, q8, m, l, x);
        }
      }
    }
    ti_run += static_cast<uint32_t>(max(tp.ntiles, 0));

    // Row sums: this warpgroup's tiles over the quad, then both warpgroups' (the same m).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if (tq == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) l_s[c * kRows + row0 + 8 * h] = l[h];
    }
    named_bar_sync(kBarL, kConsumerThreads);
    // Every wgmma of the row tile retired (both warpgroups): Q's region is free (o is staged in
    // the last tile's stage) for the next row tile's Q, issued under this epilogue (producer_q).
    if (q_tma && tp.ntiles > 0 && c == 0 && t == 0)
      asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(base + s64::kOffQFreed), "r"(q_waits) : "memory");
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] += l_s[(c ^ 1) * kRows + row0 + 8 * h];

    // Epilogue: normalise, write. One split with 16-byte o rows: through shared memory, each
    // row of the warpgroup's 256 columns two bulk copies, so that no thread waits on its stores
    // (64 scattered 4-byte stores a thread took ~5.5 us a row tile under the next one's first
    // copies: H 128 B128 8k ran 1.056x faster without them; thirty-first session), staged in half
    // c of the last tile's stage, which goes back to the producers once the copies have read it.
    if (staged) {
      const uint32_t stage = stage_of(x, x.ti_held) + s64::o_stage_half(c);
      uint8_t* const o_stage = base_ptr + (stage - base);
      const int colw = frag_d_col(static_cast<int>(opaque(static_cast<uint32_t>(t))), 0);  // column in the warpgroup's 256
      // A whole row tile goes out as the warpgroup's 4 boxes by tensor copy (s64::o_box_offset),
      // others row by row (kOBoxes false: a constant, the boxes' code compiled out).
      const bool boxes = kOBoxes && tp.rows_here == kRows;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int local = row0 + 8 * h;
        if (local >= tp.rows_here) continue;
        const auto [scale, lse2] = mla_row_end(s.bad_len, m[h], l[h], p.out_scale);
        if (boxes) {
          stage_o_row<true>(o_stage, o, h, local, colw, scale);
        } else {
          stage_o_row<false>(o_stage, o, h, local, colw, scale);
        }
        if (p.lse && c == 0 && tq == 0) p.lse[mla_row_offsets(p, s, split, tp.r0 + local).lse] = lse2 * kLn2;
      }
      fence_proxy_async();  // the staged rows (generic stores) before the bulk copies (async proxy) read them
      named_bar_sync(kBarO + c, 128);
      if (boxes) {
        // One thread copies the boxes and, once they are read, gives the half back for the 4 warps.
        if (t == 0) {
#pragma unroll
          for (int k = 0; k < s64::kOBoxes; ++k)
            sm90::tma_store_2d(o_map, stage + k * s64::kChunkBytes, c * (s64::kDv / 2) + k * s64::kAtomCols, s.qb * p.H + tp.r0);
          sm90::bulk_commit_group();
          sm90::bulk_wait_group_read0();  // read: the stage may be refilled
          sm90::mbar_arrive_count(base + s64::empty_bar(static_cast<int>(x.ti_held % s64::kStages), c == 0 ? kHalfL : kHalfR), 4);
        }
        continue;
      }
      if (t < tp.rows_here) {
        const MlaRowOffsets off = mla_row_offsets(p, s, split, tp.r0 + t);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const s64::OStageCopy cp = s64::o_stage_copy(t, k);
          if (cp.bytes > 0) sm90::bulk_copy_s2g(p.o + off.o + 256 * c + cp.dst / 2, stage + cp.src, cp.bytes);
        }
        sm90::bulk_commit_group();
        sm90::bulk_wait_group_read0();  // read: the stage may be refilled
      }
      __syncwarp();
      if (t % 32 == 0) mbar_arrive(base + s64::empty_bar(static_cast<int>(x.ti_held % s64::kStages), c == 0 ? kHalfL : kHalfR));
      continue;
    }
    const int col0 = c * 256 + frag_d_col(static_cast<int>(opaque(static_cast<uint32_t>(t))), 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int local = row0 + 8 * h;
      if (local >= tp.rows_here) continue;
      const auto [scale, lse2] = mla_row_end(s.bad_len, m[h], l[h], p.out_scale);
      const MlaRowOffsets off = mla_row_offsets(p, s, split, tp.r0 + local);
      if (s.direct) {
        uint16_t* orow = p.o + off.o;
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const int i = 4 * k + 2 * h, d = col0 + frag_d_col(0, i);
          const uint32_t v = pack_bf16x2(o[i] * scale, o[i + 1] * scale);
          orow[d * p.o_s2] = static_cast<uint16_t>(v & 0xffffu);  // o has an inner stride (o_vec took the staged path)
          orow[(d + 1) * p.o_s2] = static_cast<uint16_t>(v >> 16);
        }
        if (p.lse && c == 0 && tq == 0) p.lse[off.lse] = lse2 * kLn2;
      } else {
        // Written evict-last in L2, for the combine kernel that reads them next (the warp-per-row
        // one with streaming loads, which evict them first): together verify 4 B8 8k H 96
        // 1.032-1.037x, the other split shapes 1.00-1.01x (H100, forty-fourth session; the
        // writes' policy alone 1.005x).
        const uint64_t keep = sm90::l2_evict_last_policy();
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const int i = 4 * k + 2 * h, d = col0 + frag_d_col(0, i);
          sm90::st_global_f2_hint(p.ws_o + off.o + d, o[i] * scale, o[i + 1] * scale, keep);
        }
        if (c == 0 && tq == 0) p.ws_lse[off.lse] = lse2;
      }
    }
  }
}

// tile_rows: the rows of map_tile's boxes (64, 32 or 16, dividing page_size), or 0 when every key
// is copied by map_row's one-row boxes.
// The items of this CTA in order, f(b, plan, slot): with the uniform plan the sequences b =
// blockIdx.z, + gridDim.z, ... (split blockIdx.y of each, the workspace slot); with the flattened
// schedule (p.flat_run > 0) the segments of run blockIdx.z of the batch's concatenated planned
// tiles, each of sequence b in slot (run - its first run), direct when b has one segment. Producers
// and consumers walk the same items, so that both roles count the same row tiles (the stages'
// phases, Q's barrier and the freed count).
template <typename F>
__device__ __forceinline__ void for_each_item(const MlaAttentionParams& p, int batch, int split, F&& f) {
  // One loop and one call of f for both schedules (two would inline the roles twice and spill).
  // Flattened: 32-bit, the host checks batch x (tiles + lead) < 2^31. Run z holds the virtual
  // tiles [g0, g1); sequence b's real tiles are [b v + lead, b v + v) of them (MlaFlatPlan).
  const bool flat = p.flat_run > 0;
  const int tiles = flat ? p.flat_tiles : 1, lead = flat ? p.flat_lead : 0, run = flat ? p.flat_run : 1;
  const int v = tiles + lead, z = static_cast<int>(blockIdx.z);
  const int g0 = z * run, all = batch * v, g1 = g0 + run < all ? g0 + run : all;
  const int step = flat ? 1 : static_cast<int>(gridDim.z);
  for (int b = flat ? g0 / v : z; flat ? b * v + lead < g1 : b < batch; b += step) {
    SeqPlan s;
    int slot = split;
    bool ok;
    if (flat) {
      const int from = g0 - b * v - lead, to = g1 - b * v - lead;
      const int first = mla_flat_first_part(b, tiles, lead, run), segments = mla_flat_segments(b, tiles, lead, run);
      slot = z - first;
      ok = mla_seq_plan_flat<kRows, kKeys>(p, b, from > 0 ? from : 0, to < tiles ? to : tiles, segments == 1, s);
    } else {
      ok = mla_seq_plan<kRows, kKeys>(p, b, split, s);
    }
    if (ok) f(b, s, slot);
  }
}

template <bool kQFp8, bool kOBoxes>
__global__ void __launch_bounds__(kThreads, 1)
    mla_attention_seesaw64_kernel(const __grid_constant__ MlaAttentionParams p, const __grid_constant__ CUtensorMap map_tile,
                                  const __grid_constant__ CUtensorMap map_row, const __grid_constant__ CUtensorMap map_q,
                                  const __grid_constant__ CUtensorMap map_o, int tile_rows, int batch, int q_tma) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = smem_u32(smem_raw);
  if ((base & 1023u) != 0) __trap();  // the budget has no alignment slack (tools/smem_base_probe.cu)
  uint8_t* base_ptr = smem_raw;
  const int tid = static_cast<int>(threadIdx.x);
  const int split = static_cast<int>(blockIdx.y);
  if (p.combine_early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (tid == 0) {
    if (tile_rows > 0) sm90::prefetch_tensormap(&map_tile);
    sm90::prefetch_tensormap(&map_row);
    if (q_tma) sm90::prefetch_tensormap(&map_q);
    if (kOBoxes) sm90::prefetch_tensormap(&map_o);
    mbar_init(base + s64::kOffBarQ, 1);      // the issuing producer lane (+ tx bytes)
    *reinterpret_cast<uint32_t*>(smem_raw + s64::kOffQFreed) = 0u;  // (row tiles whose Q's region was freed)
    for (int st = 0; st < s64::kStages; ++st) {
      for (int c = 0; c < kChunks; ++c) mbar_init(base + s64::full_bar(st, c), 1);  // a producer lane (+ tx bytes)
      for (int h = 0; h < 2; ++h) {
        mbar_init(base + s64::empty_bar(st, h), 4);  // the 4 warps of the reader
        mbar_init(base + s64::edge_bar(st, h), 1);   // the producer lane (+ tx bytes)
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // The CTA's items in order (for_each_item): sequences b = blockIdx.z, + gridDim.z, ... (a grid
  // of one wave walks the batch), or its run of the flattened schedule; the producers fill the
  // stages with the next item's tiles while the consumers finish the last one's (the tile counts
  // run on across items).
  uint32_t ti = 0;
  if (tid >= kConsumerThreads) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    const int pw = (tid - kConsumerThreads) / 32;
    uint32_t edges = 0;  // uses of this warp's edge barrier (its parity)
    uint32_t qn = 0;     // row tiles with a Q by tensor copy so far
    const CUtensorMap* q_map = q_tma ? &map_q : nullptr;
    for_each_item(p, batch, split, [&](int b, const SeqPlan& s, int) {
      if (tile_rows == kKeys) {
        producer_paged64(p, map_tile, b, s, base, base_ptr, pw % 2, pw / 2, tid % 32, ti, edges, q_map, qn);
      } else {
        producer(p, map_tile, map_row, tile_rows, b, s, base, base_ptr, pw % 2, pw / 2, tid % 32, ti, q_map, qn);
      }
    });
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int c = __shfl_sync(0xffffffffu, tid / 128, 0);
    uint32_t q_waits = 0;
    for_each_item(p, batch, split, [&](int, const SeqPlan& s, int slot) {
      consumer<kQFp8, kOBoxes>(p, s, slot, base, base_ptr, c, tid % 128, ti, q_tma != 0, q_waits, &map_o);
    });
    sm90::bulk_wait_group_read0();  // o's staging is read before the CTA's shared memory goes
  }
}

template <bool kQFp8, bool kOBoxes>
void launch(const MlaAttentionParams& p, dim3 grid, const CUtensorMap& map_tile, const CUtensorMap& map_row,
            const CUtensorMap& map_q, bool q_tma, const CUtensorMap& map_o, int tile_rows, int batch, cudaStream_t s) {
  static const char tag = 0;
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_seesaw64_kernel<kQFp8, kOBoxes>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(s64::kSmemBytes)));
  });
  mla_attention_seesaw64_kernel<kQFp8, kOBoxes>
      <<<grid, kThreads, s64::kSmemBytes, s>>>(p, map_tile, map_row, map_q, map_o, tile_rows, batch, q_tma ? 1 : 0);
  // (the schedule and o's tensor copy in the name, so that tests can tell which ran)
#define KESTREL_S64_NAME(q) "mla_attention_seesaw64_kernel<bf16 cache, " q " q, fast P>"
  static constexpr const char* kNames[2][2] = {
      {KESTREL_S64_NAME("bf16"), KESTREL_S64_NAME("bf16") " flat runs"},
      {KESTREL_S64_NAME("fp8"), KESTREL_S64_NAME("fp8") " flat runs"}};
  static constexpr const char* kOBoxNames[2][2] = {
      {KESTREL_S64_NAME("bf16") " + o boxes by tensor copy", KESTREL_S64_NAME("bf16") " flat runs + o boxes by tensor copy"},
      {KESTREL_S64_NAME("fp8") " + o boxes by tensor copy", KESTREL_S64_NAME("fp8") " flat runs + o boxes by tensor copy"}};
#undef KESTREL_S64_NAME
  KESTREL_LAUNCHED((kOBoxes ? kOBoxNames : kNames)[kQFp8][p.flat_run > 0]);
}

}  // namespace

bool launch_mla_attention_seesaw64(const MlaAttentionParams& p, dim3 grid, int batch, bool fp8_q, cudaStream_t s) {
  const int tile_rows = p.page_size % 64 == 0 ? 64 : p.page_size % 32 == 0 ? 32 : p.page_size % 16 == 0 ? 16 : 0;
  CUtensorMap map_tile{}, map_row{};
  if (!encode_mla_bf16_cache_map(p, 1, &map_row)) return false;
  if (tile_rows > 0 && !encode_mla_bf16_cache_map(p, tile_rows, &map_tile)) return false;
  // More CTAs than SMs (one an SM: the shared memory): one wave of CTAs, each walking the batch
  // (the kernel's loop over b), so that a CTA's next sequence does not wait for a new CTA (entry,
  // barriers, tensor-map fetch) and its first tiles are copied as the last ones' stages free up
  // (1.01-1.08x on the H100, thirtieth session; a later sequence still spends ~7-8 us to its
  // first QKs and ~6.5 us in its epilogue: perf.md). Splits > 1 keep the plan's grid (the
  // combine's early launch is sized on it), and the flattened schedule its own (one wave).
  const int64_t sms = num_sms();
  if (p.flat_run == 0 && mla_attention_seesaw64_walks(batch, grid.x, p.splits, sms))
    grid.z = static_cast<unsigned>(std::max<int64_t>(1, sms / grid.x));
  // A bf16 q whose tokens are H rows apart goes by tensor copy (producer_q); others (an fp8 q,
  // widened in registers; other strides) through registers.
  CUtensorMap map_q{};
  const bool q_tma = !fp8_q && encode_mla_q_map(p, &map_q);
  // An o whose tokens are H rows apart goes out by tensor copy where a row tile is whole (one
  // thread, 4 boxes a warpgroup, against 128 row copies; others row by row), for short splits
  // (mla_attention_seesaw64_o_boxes; that kernel is its own instantiation).
  CUtensorMap map_o{};
  const int64_t kv_plan = static_cast<int64_t>(p.max_pages) * p.page_size;
  const bool o_tma = mla_attention_seesaw64_o_boxes(kv_plan, p.splits) && encode_mla_o_map(p, &map_o);
  if (fp8_q && o_tma) {
    launch<true, true>(p, grid, map_tile, map_row, map_q, q_tma, map_o, tile_rows, batch, s);
  } else if (fp8_q) {
    launch<true, false>(p, grid, map_tile, map_row, map_q, q_tma, map_o, tile_rows, batch, s);
  } else if (o_tma) {
    launch<false, true>(p, grid, map_tile, map_row, map_q, q_tma, map_o, tile_rows, batch, s);
  } else {
    launch<false, false>(p, grid, map_tile, map_row, map_q, q_tma, map_o, tile_rows, batch, s);
  }
  return true;
}

}  // namespace kestrel::ops::cuda
