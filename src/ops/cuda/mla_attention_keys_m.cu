// mla_attention, CUDA v3 (sm_90a): the fp8 cache with the keys as the wgmma M. Same op, plan
// (grid of row tiles x splits x sequences, workspace, combine kernel) and semantics as v1 / v2
// (docs/ops/mla_attention.md); taken for an fp8 cache with an fp8 query (the engine's fp8 path),
// where v2 relays every e4m3 tile into an f16 one through a producer warpgroup whose loop set
// the pace (~40% of copy). Here the e4m3 rows land in shared memory as they are and the
// consumers read them into registers as the A operand of both products:
//   QK:  S^T = K Q^T   M = 64 keys, N = 32 query rows, K-dim = 576 features
//   PV:  O^T = V^T P^T M = 512 value features (8 m-tiles), N = 32 query rows, K-dim = 64 keys
// Two instantiations (kFp8Qk): exact precision widens the keys to f16 for QK (36 k-steps of 16,
// f32 accumulation), P as hi + lo; the fast one runs QK on the e4m3 bytes as they are (18
// k-steps of 32: half the tensor work, no conversions; the fp8 path truncates its addends to 13
// bits below the largest one's, docs/ops/mla_attention.md) and rounds P once. Each has its tile
// layout (km::row_offset, key_of_position).
// With N = the query rows a decode at H = 32 has no padded rows (v2's M = 64 is half padding).
// The fast precision has a third, wide instantiation (kRows = 64, consumer_wide below): 64 query
// rows per CTA, both warpgroups on every tile, the value features split between them.
// The register and shared-memory index maps, proven on the host against the PTX ISA's fragment
// and descriptor model: mla_attention_keys_m_layout.h and its test; the barrier protocol below by
// a threaded host model (tests/ops/mla_attention_keys_m_protocol_test.cpp).
//
// Work split. One CTA per (32-row query tile, KV split, sequence), rows r = qi * H + h; a CTA
// loops over row tiles mt = blockIdx.x, + gridDim.x, ...; KV tiles of 64 positions, splits
// rounded to whole tiles.
//
// Roles (384 threads; setmaxnreg: 232 registers for the consumers, 40 for the producers):
//   warps 0-7, two consumer warpgroups c = 0, 1 that own alternate KV tiles (c takes tiles
//     c, c + 2, ...), each with its own running maxima m, sums l and O^T (512 x 32: 128 f32 per
//     thread), merged once at the end of a row tile (the split combine's formula inside the
//     CTA). Nothing passes between them per tile.
//   warps 8-11, the producers: per tile, 16 rows a warp, completing on the stage's `full`. The
//     exact layout: one cp.async.bulk per cache row into rows 608 bytes apart. The fast one
//     (km::row_offset8): the warp's 16 rows as one block, rows 576 bytes apart as in the cache,
//     block b at 9,216 b + 0 / 16 / 32 / 112 bytes (its phase); one 9,216-byte copy when the 16
//     rows lie back to back in the cache (per-row copies of the same rows streamed ~10% slower on
//     the H200: docs/perf.md), else one per row into the same places. The copies carry an L2
//     evict-first policy: the cache is read once, and the splits' f32 partials (and o) then stay
//     in L2 for the combine (H200: 1.04x at B32 8k, 1.013x at B32 32k, 1.008-1.014x on the wide
//     rows, 1.0x at B128; docs/perf.md). Rows past the end are zeros and rows of a page outside
//     the cache e4m3 NaN (0x7F), written by the producer before its arrival. (Any page size and
//     page / row strides of whole 16 bytes.)
//
// Per tile and consumer warpgroup:
//   QK  exact: 9 groups of 4 k-steps: each thread loads 16 bytes of each of its two key rows
//       (km::qk_load_offset / qk_key), widens them (16 cvt.rn.f16x2.e4m3x2) into the A
//       registers of 4 wgmma m64n32k16 (B = Q in f16, features permuted by km::q_store_col, the
//       128-byte swizzle of sm90's 32-row tile). A group's registers are reused two groups later,
//       after wait_group 1. Fast: 9 groups of 2 wgmma m64n32k32 .e4m3, A by one ldmatrix.x4 per
//       k-step (km::qk8_ldm_key / offset: the registers in the wgmma's order), B = Q's bytes in
//       natural order; the next group's loads issued right after this group's wgmma (before its
//       own, the warpgroup fence waited for them).
//   softmax along M (keys): lazy rescaling per column (m moves only when a column's maximum
//       grows by more than kRescaleSlack = 2^8 in log2 units; exact): one bar.red.or over the
//       warpgroup asks whether any score passes its column's m + slack, and only then are the
//       column maxima formed (the thread's 2 rows, the 8 lanes g by shuffles, the 4 warps
//       through shared memory and a 128-thread barrier) and O^T rescaled; P = exp2 of the scaled
//       scores into P^T (f16, K-major 128-byte swizzle; exact P also as lo = f16(p - hi), a
//       second product, as v2 does) by two stmatrix.trans (km::pt_store_row / pos). Tiles below
//       every live row's limit skip the mask.
//   PV  4 k-steps of 16 keys: each thread loads 16 bytes (km::pv_load_offset) of the 4 keys of
//       its A columns, pairs two keys' bytes with a byte permute, widens them, and issues 8 wgmma
//       m64n32k16 (one per m-tile of 64 value features, km::pv_feature) in two groups of 4; the
//       next k-step's rows are loaded while a group runs. The stage is released (empty, 4 warp
//       arrivals) as soon as the last conversion has consumed the tile's bytes: the products
//       read only registers and Q / P^T. The last group is retired by the next tile's QK, after
//       its first loads and conversions, or at the row tile's end.
//
// The wide instantiation (64 query rows, fast precision), per tile: both warpgroups wait on `full`;
// warpgroup c runs QK and the softmax above for rows 32 c .. 32 c + 31 (Q's second 32-row tile
// for c = 1), writes those rows of P^T [64 rows] in buffer j % 2 with its rescale factors and a
// flag, and after the P barrier of all 256 consumers applies both warpgroups' factors to its O^T
// and accumulates O^T over all 64 rows for value features 256 c .. (4 m-tiles, wgmma m64n64k16,
// km::pv_wide_feature: 8-byte loads, half the conversions); the stage is released by all 8 warps.
// At the end no merge: m and l of the 64 rows go through shared memory, and each warpgroup writes
// its features of every row: as 16 stores a thread, or (kOBoxes: one split, o's tokens H rows
// apart) staged in its 32 KB of the stages as
// 4 boxes of 64 rows x 64 features that one thread copies out by tensor copy (a partial row tile's
// rows by the warpgroup, out of the staging). Its Q (and the fast 32-row form's, one 32-row tile
// of 5 boxes) comes by tensor copy from the producers when
// q's tokens lie H rows apart (10 boxes of 128 bytes x 32 rows on kBarQFull, issued before the
// first KV tile), else through the consumers' registers (load_q). Forty-sixth session (H100, the
// CTA timeline, docs/perf.md): at B 128 1k the o stores took 6.2 us and Q 3.1 us of a 38 us row
// tile; with both, 2.8 and 1.9.
// The 32-row form with splits of at most 2048 keys writes a row tile's f32 partial the same way
// (kOutPartialBoxes: stage_partials, 16 boxes of 32 f32 x 32 rows in the stages, by tensor copy
// into ws_o; a partial row tile's rows copied out of the staging), where each writer thread issued
// 32 scattered 16-byte stores at the CTA's end (the forty-ninth session's probe without any: 1.19x
// at decode B8 8k H 32). Staged in the fast layout's unit order, a quarter warp's two g stored into
// the same 4 bank groups; odd g store their units in the other order (km::partial_unit_at_step).
//
// Measured (H200, docs/perf.md): decode B128 8k H32, fast, 161 us (89% of copy; v2 349), B128
// 32k 598 us (96%), nineteenth session; wide, twentieth session: H128 decode B128 8k 469 us (76%
// of the GEMM rate; 32-row 590), verify 4 at H32 B128 469 (584). What bounds the 32-row kernel:
// each warpgroup's per-tile chain (QK groups -> vote -> P^T -> PV groups), ~4,500 cycles a tile
// with two warpgroups in flight (Nsight).
//
// Shared memory (dynamic, 1024-byte-aligned base):
//   Q       [9 chunks][32 rows][128 B] f16     36,864 of 40,960 (fast: e4m3 in 5 chunks, 20,480
//                                              a 32-row tile; wide: two such tiles)
//   P^T     [2 warpgroups][hi, lo][32][128 B]  16,384 (wide: [2 buffers][64 rows][128 B])
//   stages  4 x 64 rows x 608 B                155,648 (the first 64 KB: the merge exchange; the
//                                              fast layout uses 36,976 B of each 38,912)
//   maxima  [2][4 warps][32] f32, m and l [2][2][32] f32 (wide: [m, l][64]), causal limits [64]
//   i32, wide rescale factors [2][64] f32 and flags [2][2] i32, mbarriers full[4], empty[4], Q's
//   full and empty, the lead's handover and its acknowledgement: 215,408 bytes, 216,432 with the
//   alignment slack. (The wide form's o boxes: the first 64 KB of
//   the stages, once the row tile has consumed every tile, or with the lead the stages of tiles
//   ti_end + 2 + c; the 32-row form's partial boxes the 64 KB past the exchange; see the protocol
//   for a walking CTA.)
//
// Barrier protocol (tile counter ti over every tile of the CTA, across row tiles):
//   full[ti % 4]   count 4 + tx: each producer warp's lane 0 arrive.expect_tx(576 x rows it copies)
//                  after its lanes wrote the rows that are not copies; the copies complete_tx. The
//                  owning warpgroup waits parity (ti / 4) & 1.
//   empty[ti % 4]  count 4: each warp of the owning warpgroup, after its last conversion of the
//                  tile. The producer waits parity ((ti / 4) & 1) ^ 1 before refilling.
//   Q (1, 256)     at a row tile's start (every QK of the previous one retired), and after Q is
//                  written (fence.proxy.async first).
//   vote (8 + c)   per warpgroup and tile: bar.red.or, whether the maxima must be exchanged.
//   max (2 + c)    per warpgroup: the column maxima when they are (and at the end the row sums).
//   P (4 + c)      per warpgroup: P^T written (fence.proxy.async first) before its PV is issued.
//                  P^T of tile j + 2 is written only after every warp passed vote(j + 2), i.e.
//                  after every warp's wait_group 0 that retired PV(j) (in QK(j + 2)); the maxima
//                  of tile j + 2 likewise only after every warp passed P(j), its last read of j's.
//   merge (6, 256) both warpgroups: their tiles consumed and m, l published; again after the
//                  exchange of O^T halves through the first 64 KB of the stages.
//   row tile (7, 384) the consumers arrive after a row tile's merge when the CTA has another;
//                  the producers sync before filling that one's tiles (the exchange area).
//   row tile ack (10, 384) the producers arrive once past a row-tile boundary when another
//                  follows; the consumers sync on it before they arrive at that next one (else,
//                  past a row tile without KV tiles, they could arrive twice at kBarRowTile).
// The wide instantiation: empty counts 8 (every consumer warp reads every tile); P (4, 256) after
// both warpgroups wrote their rows of P^T buffer j % 2, their factors and flags; buffer j % 2 is
// written again at tile j + 2, after P(j + 1), which every warp passes only after its QK(j + 1)
// retired its PV(j) and after its reads of the factors of j; merge (6, 256) after m and l are
// published; no exchange (the host model checks this protocol too). Q by tensor copy: qfull,
// count 1 + tx: the producers' lane 0 arrive.expect_tx(40,960) before its 10 copies; the
// consumers wait parity 0 in place of load_q (the CTA's first row tile only). o boxes: o (11 + c,
// 128) after warpgroup c staged its boxes (fence.proxy.async first); its thread 0 then copies them
// and waits for their reads; where the CTA walks on to another row tile (a sequence with more rows
// than the grid plans), the row tile and ack barriers as in the 32-row form, so that the producers
// fill the stages only after the staged o left them. The 32-row form's partial boxes: (11 + c, 64)
// after warpgroup c's two writer warps staged their 8 boxes (past the exchange, which the other
// warpgroup's writers may still read); the first writer copies them and waits for their reads
// before the row tile barrier.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "common.cuh"
#include "cp_async.cuh"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/mla_attention.h"
#include "mla_attention_common.cuh"
#include "mla_attention_keys_m_layout.h"
#include "mla_attention_keys_m_softmax.cuh"
#include "mla_attention_sm90_layout.h"
#include "mma_bf16.cuh"
#include "sm90_ptx.cuh"

namespace kestrel::ops::cuda {

namespace {

namespace km = keys_m;
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
using sm90::named_bar_arrive;
using sm90::named_bar_sync;
using sm90::opaque;
using sm90::stmatrix_x4_trans;
using sm90::sw128_lo;
using sm90::sw128_offset;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_m64n32k16_rs;
using sm90::wgmma_m64n32k32_e4m3_rs;
using sm90::wgmma_wait;
using keys_m_softmax::col_of_slot;
using keys_m_softmax::publish_row_sums;
using keys_m_softmax::rescale_maxima;
using keys_m_softmax::row_sum;
using keys_m_softmax::slot_of_reg;
constexpr int kDqk = km::kDqk, kDv = km::kDv;

constexpr int kN = static_cast<int>(kMlaAttentionKeysMTileRows);  // query rows per CTA: the N of both products
static_assert(sm90::kKeys == kN, "Q and P^T use the 32-row swizzled arrangement of sm90's KV tile");
constexpr int kKeys = km::kKeys;  // 64 keys per tile
// A producer warpgroup: registers are granted per warpgroup (ptxas sized a kernel of one
// producer warp, 288 threads, as 384: 168 registers), and setmaxnreg moves them to the consumers.
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 128;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= sm90::setmaxnreg_pool(kThreads), "setmaxnreg budget");
constexpr int kStages = 4;
constexpr uint8_t kE4m3Nan = 0x7f;

constexpr int kWide = km::kWideRows;  // query rows per CTA of the wide instantiation
constexpr uint32_t kStageBytes = kKeys * km::kRowBytes;  // 38,912
// Q: the f16 Q of 32 rows (36,864 bytes), or up to 64 rows of e4m3 Q as 32-row tiles of 5 chunks
// (576 bytes a row: 4.5 chunks of 128) 20,480 bytes apart.
constexpr uint32_t kQTileBytes8 = 5 * kN * 128;
constexpr uint32_t kQBytes = 2 * kQTileBytes8;           // 40,960
constexpr uint32_t kPtBytes = kN * kKeys * 2;            // 4,096: one 128-byte-swizzled chunk of 32 rows
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffPt = kOffQ + kQBytes;              // [warpgroup][hi, lo]; wide: [buffer][64 rows]
constexpr uint32_t kOffStages = kOffPt + 4 * kPtBytes;
constexpr uint32_t kOffMax = kOffStages + kStages * kStageBytes;  // [2][4][32] f32
constexpr uint32_t kOffMl = kOffMax + 2 * 4 * kN * 4;            // [2][m, l][32] f32; wide: [m, l][64]
constexpr uint32_t kOffLim = kOffMl + 2 * 2 * kN * 4;         // [64] i32: each column's causal limit
constexpr uint32_t kOffAlpha = kOffLim + kWide * 4;           // wide: [2 buffers][64] f32 rescale factors,
constexpr uint32_t kOffGrew = kOffAlpha + 2 * kWide * 4;      // and [2 buffers][2 warpgroups] i32 flags
constexpr uint32_t kOffBar = kOffGrew + 4 * 4;
constexpr uint32_t kBarFull = kOffBar, kBarEmpty = kOffBar + 8 * kStages;
constexpr uint32_t kBarQFull = kBarEmpty + 8 * kStages;  // the wide form's Q by tensor copy (q_tma)
// The wide form's lead (kOutOBoxesLead, producer_lead): Q released by the consumer warps after a
// row tile's last QK, the staged o boxes handed over to the producers after their copies' reads,
// and the producers' acknowledgement of each handover.
constexpr uint32_t kBarQEmpty = kBarQFull + 8, kBarHandover = kBarQEmpty + 8, kBarHandoverAck = kBarHandover + 8;
constexpr uint32_t kSmemUsed = kBarHandoverAck + 8;
constexpr uint32_t kSmemBytes = kSmemUsed + 1024;  // slack to align the base to 1024
constexpr uint32_t kExchangeBytes = 2 * 64 * 128 * 4;  // two halves of O^T, 64 threads x 128 f32 each
// The wide form's o by tensor copy (o_boxes): warpgroup c's 256 value features of the 64 rows as 4
// boxes of 64 rows x 64 features (bf16, the 128-byte swizzle: sw128_offset(64, row, feature)) in
// the c-th 32 KB of the stages, free once both warpgroups passed the merge barrier (the row tile
// consumed every tile; the producers fill the next row tile's only past the row tile barrier).
constexpr uint32_t kOHalfBytes = kWide * (kDv / 2) * 2;  // 32,768
static_assert(kOffStages % 1024 == 0 && 2 * kOHalfBytes <= kStages * kStageBytes, "o's boxes in the stages, 1024-aligned");
// The split partials by tensor copy (kOutPartialBoxes, stage_partials): the 32-row form's whole row
// tile (f32) as km::kPartialBoxes boxes in the stages past the merge exchange (the writers stage
// while the other warpgroup's writers may still read their half of the exchange). Free for the
// same reason as o's boxes.
constexpr uint32_t kOffPartials = kOffStages + kExchangeBytes;
static_assert(kOffPartials % 1024 == 0 && kExchangeBytes + km::kPartialBoxes * km::kPartialBoxBytes <= kStages * kStageBytes,
              "the staged partials in the stages, past the exchange, 1024-aligned");
static_assert(kQTileBytes8 % 1024 == 0 && sm90::kKvBytes <= kQBytes, "Q: the f16 32-row tile or two e4m3 ones");
static_assert(kOffPt % 1024 == 0 && kPtBytes % 1024 == 0 && kOffStages % 16 == 0 && kOffBar % 8 == 0);
static_assert(kExchangeBytes <= kStages * kStageBytes && kSmemBytes == 216432 && kSmemBytes <= 232448,
              "the design note states the shared-memory size");
static_assert(km::kRowBytes % 16 == 0 && kDqk % 16 == 0, "per-row bulk copies of whole 16 bytes");
static_assert(km::row_offset8(kKeys - 1) + kDqk <= static_cast<int>(kStageBytes) && km::kBlockBytes8 % 16 == 0 &&
                  km::kBlockRows8 == 16,
              "the fast layout's 4 blocks of 16 rows (one per producer warp) fit a stage, 16-byte aligned");

constexpr int kBarQ = 1, kBarMax = 2, kBarP = 4, kBarMerge = 6, kBarRowTile = 7, kBarVote = 8, kBarRowTileAck = 10;
// How a CTA's output leaves (the kernel's kOut): row by row; the wide form's o (one split) as boxes
// by tensor copy from the stages; the 32-row form's split partials likewise (stage_partials).
// kOutOBoxesLead: the o boxes of a CTA that walks the batch (producer_lead).
constexpr int kOutRows = 0, kOutOBoxes = 1, kOutPartialBoxes = 2, kOutOBoxesLead = 3;
constexpr int kBarO = 11;  // + c: warpgroup c's o boxes (the wide form) or its writers' partial boxes (32 rows) staged

// The KV range of one (sequence, split) and per row tile (mla_attention_common.cuh): row tiles of
// kRows (32, or 64 in the wide instantiation), 64-key tiles.
using SeqPlan = MlaSeqPlan;
using TilePlan = MlaTilePlan;
template <int kRows>
__device__ __forceinline__ TilePlan tile_plan(const MlaAttentionParams& p, const SeqPlan& s, int mt) {
  return mla_tile_plan<kRows, kKeys>(p, s, mt);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// Four e4m3 bytes -> two f16x2 registers: `lo` from bytes 0, 1 and `hi` from bytes 2, 3 (first in
// the low half), exact. The halves go to cvt.rn.f16x2.e4m3x2 as b16 register halves, so no
// shift is needed for the upper pair.
__device__ __forceinline__ void fp8x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// 16 bytes at a shared-memory address (32-bit: a base register plus an immediate, where generic
// 64-bit pointers held two registers per row and made the consumers spill).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// ---- producer warpgroup ----------------------------------------------------------------------------
// The fast forms' Q by tensor copy (q_map; launch_mla_attention_keys_m): the row tile's 32-row
// tiles (two in the wide form, one in the other) as 5 boxes of 128 bytes x 32 rows each, Q's
// layout by the 128-byte swizzle, zeros past column 575 and past the last row (the rows past the
// tile's belong to the next sequence or are zeros: never stored), on kBarQFull. One thread.
template <int kRows>
__device__ __forceinline__ void load_q_by_tensor_copy(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp,
                                                      uint32_t base, const CUtensorMap* q_map) {
  mbar_arrive_expect_tx(base + kBarQFull, (kRows / kN) * kQTileBytes8);
#pragma unroll
  for (int h = 0; h < kRows / kN; ++h)
#pragma unroll
    for (int k = 0; k < 5; ++k)
      sm90::tma_load_2d(base + kOffQ + h * kQTileBytes8 + k * kN * 128, q_map, 128 * k, s.qb * p.H + tp.r0 + kN * h,
                        base + kBarQFull);
}

// Producer warp pw's quarter of tile j of the row tile (ti over the CTA's tiles): rows 16 pw ..
// 16 pw + 15 into stage ti % 4 once the consumers released it, then its arrival on `full`.
template <bool kFp8Qk>
__device__ __forceinline__ void produce_tile(const MlaAttentionParams& p, int b, const SeqPlan& s, const TilePlan& tp, int j,
                                             uint32_t ti, uint32_t base, uint8_t* base_ptr, int pw, int lane) {
  const int row = 16 * pw + (lane & 15);
  const bool mine = lane < 16;
  const int st = static_cast<int>(ti % kStages), pos = s.begin + j * kKeys + row;
  bool nan = false;
  const uint8_t* src = mine && pos < tp.kv_end ? kv_row(p, b, pos, nan) : nullptr;
  const bool copy = src != nullptr;
  mbar_wait(base + kBarEmpty + 8 * st, ((ti / kStages) & 1) ^ 1);
  if (mine && !copy) {  // past the end: zeros; a page outside the cache: e4m3 NaN
    const uint32_t f = nan ? 0x01010101u * kE4m3Nan : 0u;
    uint4* dst = reinterpret_cast<uint4*>(base_ptr + kOffStages + st * kStageBytes + km::row_offset(row, kFp8Qk));
#pragma unroll 4
    for (int u = 0; u < kDqk / 16; ++u) dst[u] = make_uint4(f, f, f, f);
    fence_proxy_async();  // (generic writes where the async proxy wrote before and will again)
  }
  const int copies = __popc(__ballot_sync(0xffffffffu, copy));
  // The fast layout keeps the warp's 16 rows as one block (km::row_offset8): when they lie
  // back to back in the cache (a page, rows 576 bytes apart), one copy takes them all.
  bool block = false;
  if constexpr (kFp8Qk) {
    const uintptr_t first = __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(src), 0);
    block = __all_sync(0xffffffffu, !mine || (copy && reinterpret_cast<uintptr_t>(src) == first + lane * kDqk));
  }
  __syncwarp();  // the filled rows before lane 0's arrival (release)
  const uint32_t full = base + kBarFull + 8 * st;
  if (lane == 0) mbar_arrive_expect_tx(full, static_cast<uint32_t>(copies) * kDqk);
  __syncwarp();  // the expected bytes are announced before any copy can complete
  const uint32_t dst = base + kOffStages + st * kStageBytes + km::row_offset(row, kFp8Qk);
  if (block) {
    if (lane == 0) bulk_copy_g2s_hint(dst, src, km::kBlockRows8 * kDqk, full, l2_evict_first_policy());
  } else if (copy) {
    bulk_copy_g2s_hint(dst, src, kDqk, full, l2_evict_first_policy());
  }
}

// Warp pw (0 .. 3) copies rows 16 pw .. 16 pw + 15 of each tile (the fast layout: as one block
// when they lie back to back in the cache, else one per lane 0 .. 15), and arrives on `full` once
// (count 4) with the bytes it copies. Per-row copies of a warp issue one lane at a time (the
// compiler loops over the active lanes): with one warp copying all 64 rows the consumers waited
// on `full` for 41% of their samples (Nsight, H200, B128 8k H32).
// kRowTileSync: the consumers use the stages at a row tile's end (the 32-row form's exchange, the wide
// form's o boxes), so the producers wait for them (kBarRowTile) before filling the next row tile's.
template <bool kFp8Qk, int kRows, bool kRowTileSync>
__device__ __forceinline__ void producer(const MlaAttentionParams& p, int b, const SeqPlan& s, uint32_t base,
                                         uint8_t* base_ptr, int pw, int lane, const CUtensorMap* q_map) {
  uint32_t ti = 0;
  bool first = true;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = tile_plan<kRows>(p, s, mt);
    // The consumers are done with the stages (the exchange area, the staged o).
    if (kRowTileSync && !first) {
      named_bar_sync(kBarRowTile, kThreads);
      // Past this boundary: the consumers may arrive at the next one (see the consumer).
      if (mt + static_cast<int>(gridDim.x) < s.row_tiles) named_bar_arrive(kBarRowTileAck, kThreads);
    }
    // The fast forms' Q by tensor copy, the CTA's first row tile: before the first KV tile, so
    // that Q lands while the block table is read.
    if (kFp8Qk && q_map != nullptr && first && tp.ntiles > 0 && pw == 0 && lane == 0)
      load_q_by_tensor_copy<kRows>(p, s, tp, base, q_map);
    first = false;
    for (int j = 0; j < tp.ntiles; ++j, ++ti) produce_tile<kFp8Qk>(p, b, s, tp, j, ti, base, base_ptr, pw, lane);
  }
}

// The CTA's items where it walks the batch (kOutOBoxesLead): sequences blockIdx.z, + gridDim.z, ...
// below p.walk_batch, each one's row tiles blockIdx.x, + gridDim.x, ... (both roles the same list;
// a sequence whose q_start entries are out of order is skipped by both). f(b, s, mt).
template <typename F>
__device__ __forceinline__ void for_each_walked_item(const MlaAttentionParams& p, F f) {
  for (int b = static_cast<int>(blockIdx.z); b < p.walk_batch; b += static_cast<int>(gridDim.z)) {
    SeqPlan s;
    if (!mla_seq_plan<kWide, kKeys>(p, b, 0, s)) continue;
    for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) f(b, s, mt);
  }
}

// The wide form's producers where the CTA walks the batch with its o boxes (one split, Q by tensor
// copy; kOutOBoxesLead): a row tile's Q and first two KV tiles load under the end of the row tile
// before. Row tile k's boxes are staged in the stages of its tiles ti_end + 2 and ti_end + 3
// (ti_end: the CTA's tile count after it), which the next row tile's first two tiles (stages
// ti_end, ti_end + 1) leave alone: the producers wait for the boxes' handover (kBarHandover: every
// consumer thread past its reads of the staging, the copies' reads waited) only before the next
// row tile's third tile, or at that row tile's end where it has fewer than three, and acknowledge
// each (kBarHandoverAck), so that the consumers never complete a second handover before the
// producers waited for the first. Q (one buffer) is loaded once every consumer warp's last QK of
// the row tile before released it (kBarQEmpty). The protocol model runs this
// (tests/ops/mla_attention_keys_m_protocol_test.cpp, WideBoxesLead*).
__device__ __forceinline__ void producer_lead(const MlaAttentionParams& p, uint32_t base, uint8_t* base_ptr, int pw, int lane,
                                              const CUtensorMap* q_map) {
  // The state in one register (at the producers' 40 registers, four spilled): bit 0 the parity of
  // the next Q release to wait for, bit 1 a Q loaded before, bit 2 the parity of the next
  // handover, bit 3 the row tile before's boxes not yet handed over.
  constexpr uint32_t kQParity = 1, kQBefore = 2, kHandoverParity = 4, kPending = 8;
  uint32_t ti = 0, flags = 0;
  const auto wait_handover = [&] {
    mbar_wait(base + kBarHandover, (flags / kHandoverParity) & 1);
    flags = (flags ^ kHandoverParity) & ~kPending;
    __syncwarp();
    if (lane == 0) mbar_arrive(base + kBarHandoverAck);
  };
  for_each_walked_item(p, [&](int b, const SeqPlan& s, int mt) {
    const TilePlan tp = tile_plan<kWide>(p, s, mt);
    if (tp.ntiles > 0) {
      if (pw == 0 && lane == 0) {
        if (flags & kQBefore) mbar_wait(base + kBarQEmpty, flags & kQParity);
        load_q_by_tensor_copy<kWide>(p, s, tp, base, q_map);
      }
      // (the parity of this load's release: the next load waits for it)
      flags = (flags & kQBefore) ? flags ^ kQParity : flags | kQBefore;
    }
    for (int j = 0; j < tp.ntiles; ++j, ++ti) {
      if ((flags & kPending) && j == 2) wait_handover();
      produce_tile<true>(p, b, s, tp, j, ti, base, base_ptr, pw, lane);
    }
    if (flags & kPending) wait_handover();
    flags |= kPending;
  });
}

// ---- consumers ----------------------------------------------------------------------------------
// Thread t of warpgroup c: warp w = t / 32, g = (t % 32) / 4, q4 = t % 4. Its accumulator
// registers i (S^T: 16; O^T: 16 per m-tile) hold rows 16 w + g + 8 ((i / 2) % 2) and the query
// rows (columns) n = 8 (i / 4) + 2 q4 + i % 2, i.e. column slot k = 2 (i / 4) + i % 2 of the
// thread's 8 columns n_k = 8 (k / 2) + 2 q4 + k % 2.

// Q of the row tile (kRows rows) into shared memory: f16, feature f of row n at column
// km::q_store_col(f) of the 32-row swizzled tile, or with kFp8Qk the e4m3 bytes in natural order
// (feature f at byte column f; rows 32 .. 63 in a second 32-row tile kQTileBytes8 further); rows
// past the sequence's rows zero (masked). An fp8 q is exact in f16; q_scale stays in the softmax
// constant. A thread's pieces are all loaded before any is stored: one global latency, not one
// per piece in a row (a loop of load-then-store did that, and the row tile's first QK waited).
template <bool kFp8Qk, int kRows>
__device__ __forceinline__ void load_q(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp,
                                       uint8_t* base_ptr, int ct) {
  static_assert(kRows == kN || kFp8Qk, "64 rows of Q fit as e4m3 only");
  constexpr int kPieces = kDqk / 16;  // 16-byte pieces (features 16 u ..) per row
  constexpr int kTotal = kRows * kPieces, kPer = (kTotal + kConsumerThreads - 1) / kConsumerThreads;
  // (opaque: the pieces' addresses hoisted out of the row-tile loop made the consumers spill)
  ct = static_cast<int>(opaque(static_cast<uint32_t>(ct)));
  uint4 piece[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int idx = ct + u * kConsumerThreads;
    const int n = idx / kPieces, f0 = 16 * (idx % kPieces), r = tp.r0 + n;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (idx < kTotal && n < tp.rows_here) {
      const uint8_t* src = static_cast<const uint8_t*>(p.q) + static_cast<int64_t>(s.qb + r / p.H) * p.q_s0 +
                           static_cast<int64_t>(r % p.H) * p.q_s1 + static_cast<int64_t>(f0) * p.q_s2;
      if (p.q_vec) {
        const uint2 lo = __ldg(reinterpret_cast<const uint2*>(src)), hi = __ldg(reinterpret_cast<const uint2*>(src + 8));
        v = make_uint4(lo.x, lo.y, hi.x, hi.y);
      } else {
        uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int k = 0; k < 16; ++k) w[k / 4] |= static_cast<uint32_t>(src[k * p.q_s2]) << (8 * (k % 4));
        v = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    piece[u] = v;
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int idx = ct + u * kConsumerThreads;
    if (idx >= kTotal) break;
    const int n = idx / kPieces, f0 = 16 * (idx % kPieces);
    const uint4 v = piece[u];
    if constexpr (kFp8Qk) {  // the bytes as they are: features in natural order
      *reinterpret_cast<uint4*>(base_ptr + kOffQ + (n / kN) * kQTileBytes8 + sw128_offset(kN, n % kN, f0 / 2)) = v;
    } else {
      // Bytes 4 rr .. 4 rr + 3 of the piece are features f0 + 4 rr + j: columns c, c + 1, c + 8, c + 9.
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {
        uint32_t lo, hi;
        fp8x4_to_f16x2x2(word_of(v, rr), lo, hi);
        const int c0 = km::q_store_col(f0 + 4 * rr);
        *reinterpret_cast<uint32_t*>(base_ptr + kOffQ + sw128_offset(kN, n, c0)) = lo;
        *reinterpret_cast<uint32_t*>(base_ptr + kOffQ + sw128_offset(kN, n, c0 + 8)) = hi;
      }
    }
  }
}

// S^T of one tile into sc (retired on return, with every older wgmma of the warpgroup). The
// 36 k-steps go in 9 groups of 4 (one 16-byte load per key row each): a group's A registers are
// reused two groups later, after wait_group 1. Groups of 4 measured 1.01-1.07x faster than groups
// of 2 (H200, A/B); 2 pending groups made ptxas serialise the wgmmas (C7514), and 2 pending PV
// groups (pv_tile) spilled.
__device__ __forceinline__ void qk_tile(float (&sc)[16], uint32_t tile, uint32_t q_lo, int t) {
  const uint32_t row0 = tile + km::qk_key(t, 0) * km::kRowBytes + km::qk_load_offset(0, t);
  const uint32_t row1 = tile + km::qk_key(t, 1) * km::kRowBytes + km::qk_load_offset(0, t);
#pragma unroll
  for (int i = 0; i < 16; ++i) sc[i] = 0.0f;
  uint4 x0 = lds128(row0), x1 = lds128(row1);
#pragma unroll
  for (int q = 0; q < kDqk / 64; ++q) {
    uint32_t a[4][4];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {  // k-step 4 q + rr: registers j from half j % 2, bytes 4 rr + 2 (j / 2)
      fp8x4_to_f16x2x2(word_of(x0, rr), a[rr][0], a[rr][2]);
      fp8x4_to_f16x2x2(word_of(x1, rr), a[rr][1], a[rr][3]);
    }
    if (q + 1 < kDqk / 64) {
      x0 = lds128(row0 + km::qk_load_offset(q + 1, 0));
      x1 = lds128(row1 + km::qk_load_offset(q + 1, 0));
    }
    if (q == 0) wgmma_wait<0>();  // the previous tile's last PV group (see pv_tile)
    wgmma_fence();
#pragma unroll
    for (int rr = 0; rr < 4; ++rr)
      wgmma_m64n32k16_rs<true>(sc, a[rr], desc_of(q_lo + k_step_lo(4 * q + rr)), q + rr > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<1>();  // the group before (its A registers are reused by the next conversions)
  }
  wgmma_wait<0>();
  fence_operands(sc);
}

// S^T of one tile with e4m3 operands (the fast precision): 18 k-steps of 32 features, A = one
// ldmatrix.x4 of the key rows per k-step (km::qk8_ldm_key / qk8_ldm_offset: the wgmma's registers
// in order), B = Q's e4m3 bytes; 9 groups of 2 k-steps, a group's registers reused after
// wait_group 1, the next group's loads issued right after this group's wgmma.
__device__ __forceinline__ void qk_tile8(float (&sc)[16], uint32_t tile, uint32_t q_lo, int t) {
  const int lane = t % 32;
  const uint32_t row = tile + km::row_offset8(km::qk8_ldm_key(t / 32, lane)) + km::qk8_ldm_offset(0, lane);
  constexpr int kGroups = km::kQk8Steps / 2;
  uint32_t a[kGroups][2][4];
#pragma unroll
  for (int sp = 0; sp < 2; ++sp) ldsm_x4<false>(a[0][sp], row + km::qk8_ldm_offset(sp, 0));
#pragma unroll
  for (int q = 0; q < kGroups; ++q) {
    if (q == 0) wgmma_wait<0>();  // the previous tile's last PV group (see pv_tile)
    wgmma_fence();
#pragma unroll
    for (int sp = 0; sp < 2; ++sp) {
      const int st = 2 * q + sp;
      wgmma_m64n32k32_e4m3_rs(sc, a[q][sp], desc_of(q_lo + k_step_lo(st)), st > 0 ? 1 : 0);
    }
    wgmma_commit();
    // The next group's loads after this group's issue: the warpgroup fence (wgmma.fence) waits
    // for every pending register write, so loads issued before it were waited for at once.
    if (q + 1 < kGroups) {
#pragma unroll
      for (int sp = 0; sp < 2; ++sp) ldsm_x4<false>(a[q + 1][sp], row + km::qk8_ldm_offset(2 * (q + 1) + sp, 0));
    }
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  fence_operands(sc);
}

// PV's loads: thread t's 16 bytes (km::pv_load_offset) of the keys of its A columns: one base per
// lohi (k-step 0, half 0), the rest immediates (km::pv_step_offset). The bases are recomputed per
// tile (opaque): kept across the loop, the fast layout's made the 32-row consumer spill 40 bytes.
template <bool kFp8Qk>
__device__ __forceinline__ void pv_rows(uint32_t (&rows)[2], uint32_t tile, int t) {
#pragma unroll
  for (int lohi = 0; lohi < 2; ++lohi)
    rows[lohi] = tile + km::row_offset(km::pv_key(0, static_cast<int>(opaque(t)), 0, lohi, kFp8Qk), kFp8Qk) +
                 km::pv_load_offset(static_cast<int>(opaque(t)), kFp8Qk);
}
// x[h][lohi]: the keys of A columns 8 h + 2 q4 + lohi of k-step ks.
template <bool kFp8Qk>
__device__ __forceinline__ void pv_load(uint4 (&x)[2][2], const uint32_t (&rows)[2], int ks) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int lohi = 0; lohi < 2; ++lohi) x[h][lohi] = lds128(rows[lohi] + km::pv_step_offset(ks, h, kFp8Qk));
}

// O^T += V^T P^T over one tile (4 k-steps of 16 keys, 8 m-tiles each in two groups of 4); P^T
// hi at pt_lo's descriptor, lo kPtBytes further (kSplitP). x holds k-step 0's loads, issued by
// the caller before the softmax (issued here, after the P barrier, their latency stalled the
// first conversions). The stage is released after the last conversion.
template <bool kSplitP, bool kFp8Qk>
__device__ __forceinline__ void pv_tile(float (&o)[8][16], uint4 (&x)[2][2], const uint32_t (&rows)[2], uint32_t pt_lo,
                                        uint32_t empty, int t) {
  const int lane = t % 32;
#pragma unroll
  for (int ks = 0; ks < km::kPvSteps; ++ks) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t a[4][4];
#pragma unroll
      for (int mm = 0; mm < 4; ++mm) {
        const int mt = 4 * half + mm, b = km::pv_reg_byte(mt, 0);  // bytes b, b + 1 of each key's load
        const uint32_t sel = (b % 4) | (4 + b % 4) << 4 | (b % 4 + 1) << 8 | (5 + b % 4) << 12;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          fp8x4_to_f16x2x2(__byte_perm(word_of(x[h][0], b / 4), word_of(x[h][1], b / 4), sel), a[mm][2 * h],
                           a[mm][2 * h + 1]);
        }
      }
      // The next k-step's rows, right after this one's last use: in flight during the wgmmas and
      // the wait below (loaded at the k-step's start, their latency stalled every conversion).
      if (half == 1 && ks + 1 < km::kPvSteps) pv_load<kFp8Qk>(x, rows, ks + 1);
      if (ks == km::kPvSteps - 1 && half == 1) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);  // every byte of the tile this warp reads is in registers
      }
      wgmma_fence();
#pragma unroll
      for (int mm = 0; mm < 4; ++mm) wgmma_m64n32k16_rs<true>(o[4 * half + mm], a[mm], desc_of(pt_lo + k_step_lo(ks)), 1);
      if constexpr (kSplitP) {
#pragma unroll
        for (int mm = 0; mm < 4; ++mm)
          wgmma_m64n32k16_rs<true>(o[4 * half + mm], a[mm], desc_of(pt_lo + (kPtBytes >> 4) + k_step_lo(ks)), 1);
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
  }
  // The last group stays in flight: the next QK retires it after its first loads and
  // conversions (a wait there, before its first wgmma; one later, at its first wait_group 1,
  // made ptxas serialise every wgmma, C7514), or the row tile's end does.
}

// lse of row r (one split), natural log.
__device__ __forceinline__ void store_lse(const MlaAttentionParams& p, const SeqPlan& s, int r, float lse2) {
  if (p.lse) p.lse[static_cast<int64_t>(s.qb + r / p.H) * p.lse_s0 + static_cast<int64_t>(r % p.H) * p.lse_s1] = lse2 * kLn2;
}

// One output row's kV consecutive features f0 .. f0 + kV - 1 of row r (already scaled): bf16 o and
// its lse (natural log) when the call has one split, else the split's f32 partial and base-2 lse
// for the combine kernel.
template <int kV>
__device__ __forceinline__ void store_row(const MlaAttentionParams& p, const SeqPlan& s, int split, int r, int f0,
                                          const float (&v)[kV], float lse2, bool lse_writer) {
  if (p.splits == 1) {
    uint16_t* orow = p.o + static_cast<int64_t>(s.qb + r / p.H) * p.o_s0 + static_cast<int64_t>(r % p.H) * p.o_s1;
    uint32_t pk[kV / 2];
#pragma unroll
    for (int e = 0; e < kV / 2; ++e) pk[e] = pack_bf16x2(v[2 * e], v[2 * e + 1]);
    if (p.o_vec) {
#pragma unroll
      for (int u = 0; u < kV / 8; ++u)
        *reinterpret_cast<uint4*>(orow + f0 + 8 * u) = make_uint4(pk[4 * u], pk[4 * u + 1], pk[4 * u + 2], pk[4 * u + 3]);
    } else {
#pragma unroll
      for (int e = 0; e < kV; ++e)
        orow[(f0 + e) * p.o_s2] = static_cast<uint16_t>(e % 2 == 0 ? pk[e / 2] & 0xffffu : pk[e / 2] >> 16);
    }
    if (lse_writer) store_lse(p, s, r, lse2);
  } else {
    const int64_t grow = mla_ws_row(p, s, split, r);
    float4* dst = reinterpret_cast<float4*>(p.ws_o + grow * kDv + f0);
#pragma unroll
    for (int e = 0; e < kV / 4; ++e) dst[e] = make_float4(v[4 * e], v[4 * e + 1], v[4 * e + 2], v[4 * e + 3]);
    if (lse_writer) p.ws_lse[grow] = lse2;
  }
}

// A row tile's start in either consumer: once every QK (and read of the limits, m and l) of the
// previous row tile is done, the causal limit (keys < lim) of each of the kRows rows (0 for padded
// rows) and Q, published to both warpgroups and the wgmma's async proxy. Nothing when the tile
// has no keys.
// q_tma: Q comes by tensor copy (the producer's, on kBarQFull, its phase of parity q_parity) instead.
template <bool kFp8Qk, int kRows>
__device__ __forceinline__ void begin_row_tile(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp,
                                               uint8_t* base_ptr, int* lim_s, int c, int t, uint32_t base = 0, bool q_tma = false,
                                               uint32_t q_parity = 0) {
  named_bar_sync(kBarQ, kConsumerThreads);
  if (tp.ntiles > 0) {
    if (c == 0 && t < kRows) {
      const int r = tp.r0 + t;
      lim_s[t] = r < s.rows_b ? s.L - s.n + r / p.H + 1 : 0;
    }
    if (q_tma) {
      mbar_wait(base + kBarQFull, q_parity);
    } else {
      load_q<kFp8Qk, kRows>(p, s, tp, base_ptr, t + 128 * c);
      fence_proxy_async();
    }
    named_bar_sync(kBarQ, kConsumerThreads);
  }
}

// ---- the softmax of one warpgroup's S^T (its 32 query rows are the columns) ----------------------
// The scores in log2 units, masked keys -inf (lim: the causal limit of each of the 32 columns).
// A tile below every live row's causal limit and the split's end needs no mask (padded rows then
// see their zero Q's scores: finite, never stored).
template <bool kFp8Qk>
__device__ __forceinline__ void scale_scores(float (&sc)[16], float scale_log2, int kv0, int kv_end, int lim_first,
                                             const int* lim, int w, int g, int q4) {
  if (kv0 + kKeys <= kv_end && kv0 + kKeys <= lim_first) {
#pragma unroll
    for (int i = 0; i < 16; ++i) sc[i] *= scale_log2;
  } else {
    // The thread's two keys (rows 16 w + g and + 8: both orders move the second by key 8's).
    const int key0 = kv0 + km::key_of_position(16 * w + g, kFp8Qk), key8 = key0 + km::key_of_position(8, kFp8Qk);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int key = (i / 2) % 2 ? key8 : key0;
      const bool ok = key < kv_end && key < lim[col_of_slot(q4, slot_of_reg(i))];
      sc[i] = ok ? sc[i] * scale_log2 : -INFINITY;
    }
  }
}

// P = exp2(s - m) into P^T (32 rows at pt_base; exact P's lo kPtBytes further) by two
// stmatrix.trans (km::pt_store_row / pt_store_pos): the matrices nb = 0 .. 3 of position half h,
// f16 pairs of query rows 2 q4, 2 q4 + 1; l gains the row sums.
template <bool kSplitP>
__device__ __forceinline__ void store_pt(const float (&sc)[16], const float (&m)[8], float (&l)[8], uint32_t pt_base,
                                         int w, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int i = 4 * nb + 2 * h, k = slot_of_reg(i);  // registers i, i + 1: slots k, k + 1
      const float p0 = ex2(sc[i] - (m[k] == -INFINITY ? 0.0f : m[k]));
      const float p1 = ex2(sc[i + 1] - (m[k + 1] == -INFINITY ? 0.0f : m[k + 1]));
      l[k] += p0;
      l[k + 1] += p1;
      const __half2 ph = __floats2half2_rn(p0, p1);
      hi[nb] = *reinterpret_cast<const uint32_t*>(&ph);
      if constexpr (kSplitP) {
        const __half2 pl = __floats2half2_rn(p0 - __low2float(ph), p1 - __high2float(ph));
        lo[nb] = *reinterpret_cast<const uint32_t*>(&pl);
      }
    }
    // This lane's row address, recomputed per tile (opaque): two kept across the loop spilled.
    const uint32_t row = pt_base + sw128_offset(kN, km::pt_store_row(static_cast<int>(opaque(lane))), km::pt_store_pos(w, h));
    stmatrix_x4_trans(row, hi);
    if constexpr (kSplitP) stmatrix_x4_trans(row + kPtBytes, lo);
  }
}

// The factor that moves a part's o and sum (kept relative to its maximum m, or to 0 where m is
// -inf) onto the merged maximum m_ref: 0 for a part that attended nothing (its o and sum are 0).
// (exp2(0 - m_ref) there overflowed to inf for m_ref < -128, and 0 * inf made the row NaN: a
// warpgroup without tiles beside one whose scores all lie below -128 in log2 units.)
__device__ __forceinline__ float merge_factor(float m, float m_ref) { return m == -INFINITY ? 0.0f : exp2f(m - m_ref); }

// The 32-row form's split partial of a row tile through the stages (kBoxes): writer thread t of
// warpgroup c (warps 2 c, 2 c + 1: features 256 c ..) stages its 16 features of its 8 columns
// (v_of(k, v): slot k's values, scaled) in the boxes past the exchange (km::partial_box_base /
// partial_store_offset: odd g store unit i ^ 1 at step i, so that each quarter warp's 16-byte
// stores are one wavefront), then the warpgroup's first writer copies its 8 boxes to the split's
// rows of ws_o (ws_map: [splits x Tq x H][512] f32) and waits for their reads; a partial row
// tile's rows go out of the staging by the writers (one path for both: with the rows' stores
// beside the boxes the instantiation spilled 84 bytes with 252 of reloads, now 80 / 84). Each
// writer thread issued 32 scattered 16-byte stores to global memory at the CTA's end (the
// forty-ninth session's probe without them: up to 1.19x at decode B8 8k H 32).
template <typename ValuesOf>
__device__ __forceinline__ void stage_partials(const MlaAttentionParams& p, const SeqPlan& s, const TilePlan& tp, int split,
                                               uint32_t base, uint8_t* base_ptr, const CUtensorMap* ws_map, int c, int t,
                                               ValuesOf v_of) {
  const int w = t / 32, g = (t % 32) / 4;
  const bool odd_g = (g & 1) != 0;
  uint8_t* const staged = base_ptr + kOffPartials;
  const uint32_t even = km::partial_box_base(t, 0), odd = km::partial_box_base(t, 1);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float v[16];  // features f0 + e
    v_of(k, v);
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const int i = step, j = step ^ 1;  // the unit of even g and of odd g (km::partial_unit_at_step)
      const float4 x = odd_g ? make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3])
                             : make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
      *reinterpret_cast<float4*>(staged + km::partial_store_offset(k % 2 ? odd : even, k, step)) = x;
    }
  }
  fence_proxy_async();  // the staged boxes (generic stores) before the tensor copies (async proxy) read them
  named_bar_sync(kBarO + c, 64);
  constexpr int kMine = km::kPartialBoxes / 2;
  const int row0 = static_cast<int>(mla_ws_row(p, s, split, tp.r0));  // (< 2^31: encode_mla_ws_o_map)
  if (tp.rows_here == kN) {
    if (w == 2 * c && t % 32 == 0) {
#pragma unroll
      for (int bx = kMine * c; bx < kMine * (c + 1); ++bx)
        sm90::tma_store_2d(ws_map, base + kOffPartials + bx * km::kPartialBoxBytes, km::kPartialBoxCols * bx, row0);
      sm90::bulk_commit_group();
      sm90::bulk_wait_group_read0();  // read before the stages are refilled or the CTA's shared memory goes
    }
  } else {  // a partial row tile: its rows out of the staging, 16 bytes a thread at a time (the rest is the next sequence's)
    for (int i = t - 64 * c; i < tp.rows_here * kMine * 8; i += 64) {
      const int n = i / (kMine * 8), bx = kMine * c + (i / 8) % kMine, u = i % 8;
      *reinterpret_cast<float4*>(p.ws_o + static_cast<int64_t>(row0 + n) * kDv + km::kPartialBoxCols * bx + 4 * u) =
          *reinterpret_cast<const float4*>(staged + bx * km::kPartialBoxBytes + n * 128 + ((u ^ (n % 8)) * 16));
    }
  }
}

// kBoxes: a split's partial of a whole row tile goes out by tensor copy (stage_partials; the host
// encoded ws_map), the fast precision only.
template <bool kSplitP, bool kFp8Qk, bool kBoxes>
__device__ __forceinline__ void consumer(const MlaAttentionParams& p, const SeqPlan& s, int split, uint32_t base,
                                         uint8_t* base_ptr, int c, int t, bool q_tma, const CUtensorMap* ws_map) {
  static_assert(!kBoxes || (kFp8Qk && !kSplitP), "the partials' boxes take the fast layout's writers");
  const int w = t / 32, lane = t % 32, g = lane / 4, q4 = lane % 4;
  float* colmax = reinterpret_cast<float*>(base_ptr + kOffMax) + c * 4 * kN;  // [4 warps][32]
  float* ml = reinterpret_cast<float*>(base_ptr + kOffMl);                     // [2][m, l][32]
  int* lim_s = reinterpret_cast<int*>(base_ptr + kOffLim);
  const uint32_t pt_base = base + kOffPt + c * 2 * kPtBytes;  // this warpgroup's P^T (hi; lo kPtBytes further)
  const uint32_t pt_lo = sw128_lo(base + kOffPt + c * 2 * kPtBytes), q_lo = sw128_lo(base + kOffQ);
  uint32_t ti_run = 0;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = tile_plan<kN>(p, s, mt);
    const int lim_first = s.L - s.n + tp.r0 / p.H + 1;  // the causal limit of the tile's first row (the least)
    begin_row_tile<kFp8Qk, kN>(p, s, tp, base_ptr, lim_s, c, t, base, kFp8Qk && q_tma && mt == static_cast<int>(blockIdx.x));

    float o[8][16];
#pragma unroll
    for (int mm = 0; mm < 8; ++mm)
#pragma unroll
      for (int i = 0; i < 16; ++i) o[mm][i] = 0.0f;
    float m[8], l[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) m[k] = -INFINITY, l[k] = 0.0f;

    for (int j = c; j < tp.ntiles; j += 2) {
      const uint32_t ti = ti_run + static_cast<uint32_t>(j);
      const int st = static_cast<int>(ti % kStages);
      mbar_wait(base + kBarFull + 8 * st, (ti / kStages) & 1);
      const uint32_t tile = base + kOffStages + st * kStageBytes;
      float sc[16];
      if constexpr (kFp8Qk) {
        qk_tile8(sc, tile, q_lo, t);
      } else {
        qk_tile(sc, tile, q_lo, t);
      }
      uint32_t pv_r[2];
      uint4 pv_x[2][2];
      pv_rows<kFp8Qk>(pv_r, tile, t);
      pv_load<kFp8Qk>(pv_x, pv_r, 0);  // PV's first loads, landing during the softmax
#pragma unroll
      for (int mm = 0; mm < 8; ++mm) fence_operands(o[mm]);

      // Softmax along the keys (base 2; masked keys -inf; m_use 0 while nothing is attended).
      scale_scores<kFp8Qk>(sc, p.scale_log2, s.begin + j * kKeys, tp.kv_end, lim_first, lim_s, w, g, q4);
      rescale_maxima<kN>(sc, m, l, colmax, kBarVote + c, 128, kBarMax + c, w, g, q4, [&](const float (&alpha)[8]) {
#pragma unroll
        for (int mm = 0; mm < 8; ++mm)
#pragma unroll
          for (int i = 0; i < 16; ++i) o[mm][i] *= alpha[slot_of_reg(i)];
      });
      store_pt<kSplitP>(sc, m, l, pt_base, w, lane);
      fence_proxy_async();  // P^T (generic stores) -> the async proxy of the wgmma
      named_bar_sync(kBarP + c, 128);
      pv_tile<kSplitP, kFp8Qk>(o, pv_x, pv_r, pt_lo, base + kBarEmpty + 8 * st, t);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mm = 0; mm < 8; ++mm) fence_operands(o[mm]);
    ti_run += static_cast<uint32_t>(max(tp.ntiles, 0));

    publish_row_sums<kN>(l, colmax, kBarMax + c, w, g, q4);
#pragma unroll
    for (int k = 0; k < 8; ++k) l[k] = row_sum<kN>(colmax, col_of_slot(q4, k));
    if (w == 0 && g == 0) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        ml[c * 2 * kN + col_of_slot(q4, k)] = m[k];
        ml[c * 2 * kN + kN + col_of_slot(q4, k)] = l[k];
      }
    }
    named_bar_sync(kBarMerge, kConsumerThreads);  // both warpgroups: tiles consumed, m and l published
    // The merge: both halves on the larger maximum. Warpgroup 0 writes features 0 .. 255 (its
    // warps 0, 1; warpgroup 1's warps 0, 1 hold the same features), warpgroup 1 features 256 ..
    float f_mine[8], m_ref[8], l_all[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int n = col_of_slot(q4, k);
      const float m_o = ml[(c ^ 1) * 2 * kN + n], l_o = ml[(c ^ 1) * 2 * kN + kN + n];
      const float m_star = fmaxf(m[k], m_o);
      m_ref[k] = m_star == -INFINITY ? 0.0f : m_star;
      f_mine[k] = merge_factor(m[k], m_ref[k]);
      l_all[k] = l[k] * f_mine[k] + l_o * merge_factor(m_o, m_ref[k]);
    }
    const bool writer = (w / 2) == c;  // this thread writes the output of its features
    float* xch = reinterpret_cast<float*>(base_ptr + kOffStages) + (w / 2) * 64 * 128;  // [128 values][64 threads]
    const int xt = t % 64;
    if (!writer) {
#pragma unroll
      for (int mm = 0; mm < 8; ++mm)
#pragma unroll
        for (int i = 0; i < 16; ++i) xch[(16 * mm + i) * 64 + xt] = o[mm][i] * f_mine[slot_of_reg(i)];
    }
    named_bar_sync(kBarMerge, kConsumerThreads);
    if (writer) {
#pragma unroll
      for (int mm = 0; mm < 8; ++mm)
#pragma unroll
        for (int i = 0; i < 16; ++i) o[mm][i] = o[mm][i] * f_mine[slot_of_reg(i)] + xch[(16 * mm + i) * 64 + xt];
      const int f0 = 16 * km::pv_unit(w, g, kFp8Qk);  // the thread's 16 features: f0 + 2 mt + (row half)
      if constexpr (kBoxes) {
        stage_partials(p, s, tp, split, base, base_ptr, ws_map, c, t, [&](int k, float (&v)[16]) {  // slot k's values, scaled
          const auto [scale, lse2] = mla_row_end(s.bad_len, m_ref[k], l_all[k], p.out_scale);
#pragma unroll
          for (int mm = 0; mm < 8; ++mm)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) v[2 * mm + hf] = o[mm][4 * (k / 2) + k % 2 + 2 * hf] * scale;
          if (c == 0 && w == 0 && g == 0 && col_of_slot(q4, k) < tp.rows_here)
            p.ws_lse[mla_ws_row(p, s, split, tp.r0 + col_of_slot(q4, k))] = lse2;
        });
      } else {  // (a loop of its own: through a lambda shared with the staging, this instantiation spilled 36 / 96 bytes, not 28 / 28)
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int n = col_of_slot(q4, k);
          if (n >= tp.rows_here) continue;
          const auto [scale, lse2] = mla_row_end(s.bad_len, m_ref[k], l_all[k], p.out_scale);
          float v[16];  // features f0 + e
#pragma unroll
          for (int mm = 0; mm < 8; ++mm)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) v[2 * mm + hf] = o[mm][4 * (k / 2) + k % 2 + 2 * hf] * scale;
          store_row(p, s, split, tp.r0 + n, f0, v, lse2, c == 0 && w == 0 && g == 0);
        }
      }
    }
    if (mt + static_cast<int>(gridDim.x) < s.row_tiles) {
      // Not before the producers passed the previous boundary: after a row tile without KV tiles
      // the consumers could otherwise arrive twice before they completed it (the host model checks
      // it). A sync at both ends of kBarRowTile would do, but the roles reach it at different
      // instructions, which bar.sync (aligned) does not allow (synccheck reports it).
      if (mt != static_cast<int>(blockIdx.x)) named_bar_sync(kBarRowTileAck, kThreads);  // (not the first)
      // The exchange area is the producer's again (generic writes, then its bulk copies).
      fence_proxy_async();
      named_bar_arrive(kBarRowTile, kThreads);
    }
  }
}

// ---- the wide instantiation: 64 query rows per CTA (fast precision) -----------------------------
// Both warpgroups take every tile. Warpgroup c computes S^T for query rows 32 c .. 32 c + 31 (Q's
// second 32-row tile for c = 1) and their softmax, writes those rows of one P^T [64 rows][64 keys]
// (two buffers, by tile parity), and accumulates O^T = V^T P^T over all 64 rows (wgmma m64n64k16)
// for its own value features 256 c .. 256 c + 255 (km::pv_wide_feature): half of a tile's value
// bytes converted per warpgroup, one tile read per 64 rows where the 32-row kernel reads it per
// 32. A column whose maximum moved is rescaled in both warpgroups' O^T: the owner publishes the
// factors of its 32 rows and a flag with P^T, and both apply them after the P barrier (256
// threads). Buffer b = j % 2 of tile j is written again at tile j + 2, after the P barrier of
// tile j + 1, which every thread passes only after QK(j + 1) retired its PV(j).

__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void pv_rows_wide(uint32_t (&rows)[2], uint32_t tile, int c, int t) {
#pragma unroll
  for (int lohi = 0; lohi < 2; ++lohi)
    rows[lohi] = tile + km::row_offset8(km::pv_key(0, t, 0, lohi, true)) + km::pv_wide_load_offset(c, t);
}
// x[h][lohi]: the 8 value bytes of warpgroup c's features in the keys of A columns 8 h + 2 q4 + lohi.
__device__ __forceinline__ void pv_load_wide(uint2 (&x)[2][2], const uint32_t (&rows)[2], int ks) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int lohi = 0; lohi < 2; ++lohi) x[h][lohi] = lds64(rows[lohi] + km::pv_step_offset(ks, h, true));
}
// O^T (this warpgroup's 4 m-tiles, 64 rows) += V^T P^T over one tile: 4 k-steps of one group of 4
// wgmma m64n64k16; the next k-step's loads in flight during the group; the stage released after
// the last conversion (8 warp arrivals).
__device__ __forceinline__ void pv_tile_wide(float (&o)[km::kPvTilesWide][32], uint2 (&x)[2][2], const uint32_t (&rows)[2],
                                             uint32_t pt_lo, uint32_t empty, int t) {
  const int lane = t % 32;
#pragma unroll
  for (int ks = 0; ks < km::kPvSteps; ++ks) {
    uint32_t a[km::kPvTilesWide][4];
#pragma unroll
    for (int mm = 0; mm < km::kPvTilesWide; ++mm) {
      const int b = km::pv_reg_byte(mm, 0);  // bytes b, b + 1 of each key's 8-byte load
      const uint32_t sel = (b % 4) | (4 + b % 4) << 4 | (b % 4 + 1) << 8 | (5 + b % 4) << 12;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t w0 = b < 4 ? x[h][0].x : x[h][0].y, w1 = b < 4 ? x[h][1].x : x[h][1].y;
        fp8x4_to_f16x2x2(__byte_perm(w0, w1, sel), a[mm][2 * h], a[mm][2 * h + 1]);
      }
    }
    if (ks + 1 < km::kPvSteps) pv_load_wide(x, rows, ks + 1);
    if (ks == km::kPvSteps - 1) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);  // every byte of the tile this warp reads is in registers
    }
    wgmma_fence();
#pragma unroll
    for (int mm = 0; mm < km::kPvTilesWide; ++mm) sm90::wgmma_m64n64k16_f16_rs(o[mm], a[mm], desc_of(pt_lo + k_step_lo(ks)));
    wgmma_commit();
    wgmma_wait<1>();
  }
  // The last group stays in flight, retired by the next QK or the row tile's end (as pv_tile).
}

// kOut: kOutOBoxes, o goes out through the stages (one split; o_map is o's tensor map);
// kOutOBoxesLead, the same where the CTA walks the batch (for_each_walked_item; s unused) with the
// producers' lead (producer_lead: Q by tensor copy every row tile, the boxes in the stages of
// tiles ti_end + 2 + c, handed over).
template <int kOut>
__device__ __forceinline__ void consumer_wide(const MlaAttentionParams& p, const SeqPlan& s_one, int split, uint32_t base,
                                              uint8_t* base_ptr, int c, int t, const CUtensorMap* o_map, bool q_tma) {
  constexpr bool kLead = kOut == kOutOBoxesLead, kOBoxes = kOut == kOutOBoxes || kLead;
  const int w = t / 32, lane = t % 32, g = lane / 4, q4 = lane % 4;
  float* colmax = reinterpret_cast<float*>(base_ptr + kOffMax) + c * 4 * kN;  // [4 warps][32]
  float* ml = reinterpret_cast<float*>(base_ptr + kOffMl);                     // [m, l][64]
  int* lim_s = reinterpret_cast<int*>(base_ptr + kOffLim);                     // [64]
  float* alpha_s = reinterpret_cast<float*>(base_ptr + kOffAlpha);             // [2][64]
  int* grew_s = reinterpret_cast<int*>(base_ptr + kOffGrew);                   // [2][2]
  const uint32_t q_lo = sw128_lo(base + kOffQ + c * kQTileBytes8);
  uint32_t ti_run = 0;
  uint32_t q_loads = 0, items = 0;  // (the lead: Q's phases, the row tiles' handovers)
  const auto item = [&](const SeqPlan& s, int mt) {
    const TilePlan tp = tile_plan<kWide>(p, s, mt);
    const int lim_first = s.L - s.n + tp.r0 / p.H + 1;  // the causal limit of the tile's first row (the least)
    begin_row_tile<true, kWide>(p, s, tp, base_ptr, lim_s, c, t, base, kLead || (q_tma && mt == static_cast<int>(blockIdx.x)),
                                q_loads & 1);
    if (kLead && tp.ntiles > 0) ++q_loads;

    float o[km::kPvTilesWide][32];
#pragma unroll
    for (int mm = 0; mm < km::kPvTilesWide; ++mm)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[mm][i] = 0.0f;
    float m[8], l[8];  // this warpgroup's 32 rows
#pragma unroll
    for (int k = 0; k < 8; ++k) m[k] = -INFINITY, l[k] = 0.0f;

    for (int j = 0; j < tp.ntiles; ++j) {
      const uint32_t ti = ti_run + static_cast<uint32_t>(j);
      const int st = static_cast<int>(ti % kStages), buf = j & 1;
      mbar_wait(base + kBarFull + 8 * st, (ti / kStages) & 1);
      const uint32_t tile = base + kOffStages + st * kStageBytes;
      float sc[16];
      qk_tile8(sc, tile, q_lo, t);
      if (kLead && j == tp.ntiles - 1) {  // the row tile's last QK retired: Q may be reloaded
        __syncwarp();
        if (lane == 0) mbar_arrive(base + kBarQEmpty);
      }
      uint32_t pv_r[2];
      uint2 pv_x[2][2];
      pv_rows_wide(pv_r, tile, c, t);
      pv_load_wide(pv_x, pv_r, 0);  // PV's first loads, landing during the softmax
#pragma unroll
      for (int mm = 0; mm < km::kPvTilesWide; ++mm) fence_operands(o[mm]);

      scale_scores<true>(sc, p.scale_log2, s.begin + j * kKeys, tp.kv_end, lim_first, lim_s + kN * c, w, g, q4);
      const bool grew = rescale_maxima<kN>(sc, m, l, colmax, kBarVote + c, 128, kBarMax + c, w, g, q4, [&](const float (&alpha)[8]) {
        if (w == 0 && g == 0) {
#pragma unroll
          for (int k = 0; k < 8; ++k) alpha_s[buf * kWide + kN * c + col_of_slot(q4, k)] = alpha[k];
        }
      });
      if (t == 0) grew_s[2 * buf + c] = grew;
      store_pt<false>(sc, m, l, base + kOffPt + buf * 2 * kPtBytes + c * kPtBytes, w, lane);
      fence_proxy_async();  // P^T (generic stores) -> the async proxy of the wgmma
      named_bar_sync(kBarP, kConsumerThreads);
      // Both warpgroups' factors on all 64 columns of this warpgroup's O^T.
      const int grew0 = grew_s[2 * buf], grew1 = grew_s[2 * buf + 1];
      if (grew0 | grew1) {
        float a[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) {
          const int n = col_of_slot(q4, k);
          a[k] = (n < kN ? grew0 : grew1) ? alpha_s[buf * kWide + n] : 1.0f;
        }
#pragma unroll
        for (int mm = 0; mm < km::kPvTilesWide; ++mm)
#pragma unroll
          for (int i = 0; i < 32; ++i) o[mm][i] *= a[slot_of_reg(i)];
      }
      pv_tile_wide(o, pv_x, pv_r, sw128_lo(base + kOffPt + buf * 2 * kPtBytes), base + kBarEmpty + 8 * st, t);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mm = 0; mm < km::kPvTilesWide; ++mm) fence_operands(o[mm]);
    ti_run += static_cast<uint32_t>(max(tp.ntiles, 0));

    // Row sums of the warpgroup's 32 rows, then m and l of all 64 rows through shared memory.
    publish_row_sums<kN>(l, colmax, kBarMax + c, w, g, q4);
    if (w == 0 && g == 0) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int n = col_of_slot(q4, k);
        ml[kN * c + n] = m[k];
        ml[kWide + kN * c + n] = row_sum<kN>(colmax, n);
      }
    }
    named_bar_sync(kBarMerge, kConsumerThreads);
    // The output: the thread's 8 features f0 .. f0 + 7 (km::pv_wide_feature: byte 2 mm + half) of
    // each of its 16 columns.
    const int f0 = 256 * c + 8 * km::pv_wide_unit(w, g);
    // Column k's 8 features times its row's scale, and that row's lse2.
    const auto row_out = [&](int k, float (&v)[8]) {
      const int n = col_of_slot(q4, k);
      const auto [scale, lse2] = mla_row_end(s.bad_len, ml[n], ml[kWide + n], p.out_scale);
#pragma unroll
      for (int mm = 0; mm < km::kPvTilesWide; ++mm)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) v[2 * mm + hf] = o[mm][4 * (k / 2) + k % 2 + 2 * hf] * scale;
      return lse2;
    };
    if constexpr (kOBoxes) {
      // o through the stages (kOHalfBytes: warpgroup c's features as 4 boxes), then a whole row
      // tile by 4 tensor copies from one thread, where the rows took 16 stores a thread (the
      // timeline: ~6.2 us a row tile at verify 8 B128 1k H 128, a sixth of the CTA); the rows of a
      // partial one by the warpgroup, a row's 512 bytes a warp (o_vec: 16-byte rows). (Rows past
      // the tile's are staged too, never copied.)
      // (the lead: in the stages of tiles ti_end + 2 + c, which the next row tile's first two leave alone)
      const uint32_t o_off = kOffStages + (kLead ? ((ti_run + 2 + c) % kStages) * kStageBytes : c * kOHalfBytes);
      uint8_t* const o_half = base_ptr + o_off;
      const uint32_t even = km::o_box_base(t, 0), odd = km::o_box_base(t, 1);
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        float v[8];
        row_out(k, v);
        *reinterpret_cast<uint4*>(o_half + km::o_box_store_offset(k % 2 ? odd : even, k)) =
            make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
      }
      if (c == 0 && t < tp.rows_here) store_lse(p, s, tp.r0 + t, mla_row_end(s.bad_len, ml[t], ml[kWide + t], p.out_scale).lse2);
      fence_proxy_async();  // the staged boxes (generic stores) before the tensor copies (async proxy) read them
      named_bar_sync(kBarO + c, 128);
      if (tp.rows_here == kWide) {
        if (t == 0) {
#pragma unroll
          for (int k = 0; k < 4; ++k)
            sm90::tma_store_2d(o_map, base + o_off + k * (kWide * 128), 256 * c + 64 * k, s.qb * p.H + tp.r0);
          sm90::bulk_commit_group();
          sm90::bulk_wait_group_read0();  // read before the CTA's shared memory goes
        }
      } else {
        uint16_t* const o_rows = p.o + static_cast<int64_t>(s.qb * p.H + tp.r0) * p.o_s1 + 256 * c;
        for (int i = t; i < tp.rows_here * 32; i += 128) {
          const int n = i / 32, u = i % 32;
          *reinterpret_cast<uint4*>(o_rows + n * p.o_s1 + 8 * u) = *reinterpret_cast<const uint4*>(o_half + sw128_offset(kWide, n, 8 * u));
        }
      }
    } else {
      const bool lse_writer = c == 0 && w == 0 && g == 0;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const int n = col_of_slot(q4, k);
        if (n >= tp.rows_here) continue;
        float v[8];
        const float lse2 = row_out(k, v);
        store_row(p, s, split, tp.r0 + n, f0, v, lse2, lse_writer);
      }
    }
    if constexpr (kLead) {
      // The staging read (this thread's copy-out, or thread 0's copies waited): hand the stages
      // over, once the producers acknowledged the row tile before's handover (no phase of
      // kBarHandover completes twice before they waited).
      if (items > 0) mbar_wait(base + kBarHandoverAck, (items - 1) & 1);
      fence_proxy_async();  // (generic writes to the staging before the producers' copies land there)
      mbar_arrive(base + kBarHandover);
      ++items;
    } else if (kOut != kOutRows && mt + static_cast<int>(gridDim.x) < s.row_tiles) {
      // The staged o is out of the stages (each copier waited for its reads): the producers may
      // fill them with the next row tile's KV (a ragged batch: a sequence with more rows than the
      // grid plans walks its row tiles). Before this the producers ran ahead into the next row
      // tile's tiles while the boxes were staged there: the matrix's verify and extend cases with
      // walking CTAs read o's bf16 bytes as keys (NaN rows), forty-seventh session. The protocol
      // is the 32-row form's (the acknowledgement: see consumer).
      if (mt != static_cast<int>(blockIdx.x)) named_bar_sync(kBarRowTileAck, kThreads);
      fence_proxy_async();
      named_bar_arrive(kBarRowTile, kThreads);
    }
  };
  if constexpr (kLead) {
    for_each_walked_item(p, [&](int, const SeqPlan& s, int mt) { item(s, mt); });
  } else {
    for (int mt = static_cast<int>(blockIdx.x); mt < s_one.row_tiles; mt += static_cast<int>(gridDim.x)) item(s_one, mt);
  }
}

// kOut: how the output leaves (kOutRows, kOutOBoxes: the wide form's o, one split; kOutOBoxesLead:
// the same, walking the batch with the producers' lead; kOutPartialBoxes: the 32-row form's split
// partials); map_o is o's or ws_o's tensor map for the boxes.
template <bool kSplitP, bool kFp8Qk, int kRows, int kOut>
__global__ void __launch_bounds__(kThreads, 1)
    mla_attention_keys_m_kernel(const __grid_constant__ MlaAttentionParams p, const __grid_constant__ CUtensorMap map_o,
                                const __grid_constant__ CUtensorMap map_q, int q_tma) {
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
      mbar_init(base + kBarEmpty + 8 * st, kRows == kWide ? 8 : 4);  // the warps that read the tile
    }
    mbar_init(base + kBarQFull, 1);  // the producer's arrival (+ Q's bytes)
    mbar_init(base + kBarQEmpty, 8);  // the lead: each consumer warp after the row tile's last QK
    mbar_init(base + kBarHandover, kConsumerThreads);  // each consumer thread past its reads of the staged boxes
    mbar_init(base + kBarHandoverAck, 4);              // each producer warp past its wait for the handover
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if constexpr (kOut == kOutOBoxesLead) {  // the walk: the items come from for_each_walked_item
    static_assert(kRows == kWide, "the lead: the wide form's o boxes");
    if (tid >= kConsumerThreads) {
      sm90::setmaxnreg_dec<kProducerRegs>();
      producer_lead(p, base, base_ptr, (tid - kConsumerThreads) / 32, tid % 32, &map_q);
    } else {
      sm90::setmaxnreg_inc<kConsumerRegs>();
      const int c = __shfl_sync(0xffffffffu, tid / 128, 0);
      consumer_wide<kOut>(p, SeqPlan{}, 0, base, base_ptr, c, tid % 128, &map_o, true);
    }
    return;
  }

  // Sequence metadata (mla_seq_plan: bad offsets leave the rows unwritten, a bad length writes
  // NaN rows), splits of whole 64-key tiles.
  SeqPlan s;
  if (!mla_seq_plan<kRows, kKeys>(p, b, split, s)) return;

  if (tid >= kConsumerThreads) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    producer<kFp8Qk, kRows, kRows == kN || kOut != kOutRows>(p, b, s, base, base_ptr, (tid - kConsumerThreads) / 32, tid % 32,
                                                    q_tma ? &map_q : nullptr);
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    // The warpgroup index through a shuffle: the compiler then treats it as warp-uniform and keeps
    // what derives from it (the P^T descriptors) in uniform registers (as an expression of tid,
    // each PV wgmma's descriptor went through R2UR: 74 moves per tile).
    const int c = __shfl_sync(0xffffffffu, tid / 128, 0);
    if constexpr (kRows == kWide) {
      static_assert(!kSplitP && kFp8Qk, "the wide instantiation runs the fast precision");
      static_assert(kOut != kOutPartialBoxes, "partial boxes: the 32-row form only");
      consumer_wide<kOut>(p, s, split, base, base_ptr, c, tid % 128, &map_o, q_tma != 0);
    } else {
      static_assert(kOut != kOutOBoxes, "o boxes: the wide form only");
      consumer<kSplitP, kFp8Qk, kOut == kOutPartialBoxes>(p, s, split, base, base_ptr, c, tid % 128, q_tma != 0, &map_o);
    }
  }
}

template <bool kSplitP, bool kFp8Qk, int kRows, int kOut = kOutRows>
void launch(const MlaAttentionParams& p, dim3 grid, const CUtensorMap& map_o, const CUtensorMap& map_q, bool q_tma, cudaStream_t s) {
  static const char tag = 0;  // one per instantiation
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_keys_m_kernel<kSplitP, kFp8Qk, kRows, kOut>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
  });
  mla_attention_keys_m_kernel<kSplitP, kFp8Qk, kRows, kOut><<<grid, kThreads, kSmemBytes, s>>>(p, map_o, map_q, q_tma ? 1 : 0);
  // (o's path in the name, so that tests can tell which ran)
  static const std::string name =
      std::string(kSplitP ? "mla_attention_keys_m_kernel<fp8 cache, fp8 q>"
                  : kRows == kWide ? "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK, 64 rows>"
                  : kFp8Qk         ? "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK>"
                                   : "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P>") +
      (kOut == kOutOBoxes || kOut == kOutOBoxesLead ? " + o boxes by tensor copy" : "");
  // (these suffixes last: names up to "+ q by tensor copy" stay as they were)
  static const std::string tail = kOut == kOutPartialBoxes ? " + partials by tensor copy"
                                  : kOut == kOutOBoxesLead ? " walking the batch"
                                                           : "";
  static const std::string names[2] = {name + tail, name + " + q by tensor copy" + tail};
  KESTREL_LAUNCHED(names[q_tma ? 1 : 0].c_str());
}

}  // namespace

// Exact precision: f16 operands for both products, P as hi + lo. Fast: P rounded once to f16 and
// QK on the e4m3 operands as they are (the tensor core's fp8 accumulation; its bound is in
// docs/ops/mla_attention.md), in 32-row CTAs or (wide) 64-row ones.
// The 32-row form writes a whole row tile's split partial by tensor copy (stage_partials) where the
// call has splits of at most 2048 keys (mla_attention_keys_m_partial_boxes) and the driver encodes
// ws_o's map. (The wide form's, staged alike, measured 0.98-1.01x with whole row tiles and
// 0.87-0.92x at the H 32 decode's half tiles: fifty-second session, docs/perf.md; its partials go
// out row by row.)
// The wide form writes a whole row tile's o by tensor copy when the call has one split
// (mla_attention_keys_m_o_boxes) and o's tokens lie H rows apart (encode_mla_o_map), else row by
// row; past one wave, with Q by tensor copy, it walks the batch with the producers' lead
// (mla_attention_keys_m_walkers, producer_lead).
// The fast forms' Q (e4m3 bytes as they are) comes by tensor copy when q's tokens lie H rows apart
// with 16-byte rows (encode_mla_q8_map), for a CTA's first row tile (a CTA walks on to more where
// a sequence has more rows than the grid plans; those load Q through registers). (The exact form
// widens Q to f16 in load_q.)
void launch_mla_attention_keys_m(const MlaAttentionParams& p, dim3 grid, bool split_p, bool wide, cudaStream_t s) {
  CUtensorMap map_o{}, map_q{};
  const bool q_tma = !split_p && encode_mla_q8_map(p, &map_q);  // (the exact form's Q is f16)
  if (split_p) {
    launch<true, false, kN>(p, grid, map_o, map_q, false, s);
  } else if (wide && mla_attention_keys_m_o_boxes(p.splits) && encode_mla_o_map(p, &map_o)) {
    // Past one wave, with Q by tensor copy: the walk with the producers' lead (grid.z CTAs a row tile).
    const int64_t walkers = q_tma ? mla_attention_keys_m_walkers(grid.z, grid.x, p.splits, num_sms()) : 0;
    if (walkers > 0) {
      MlaAttentionParams walk = p;
      walk.walk_batch = static_cast<int>(grid.z);
      launch<false, true, kWide, kOutOBoxesLead>(walk, dim3(grid.x, 1, static_cast<unsigned>(walkers)), map_o, map_q, true, s);
    } else {
      launch<false, true, kWide, kOutOBoxes>(p, grid, map_o, map_q, q_tma, s);
    }
  } else if (wide) {
    launch<false, true, kWide>(p, grid, map_o, map_q, q_tma, s);
  } else if (mla_attention_keys_m_partial_boxes(static_cast<int64_t>(p.max_pages) * p.page_size, p.splits) &&
             encode_mla_ws_o_map(p, kN, &map_o)) {
    launch<false, true, kN, kOutPartialBoxes>(p, grid, map_o, map_q, q_tma, s);
  } else {
    launch<false, true, kN>(p, grid, map_o, map_q, q_tma, s);
  }
}

}  // namespace kestrel::ops::cuda
