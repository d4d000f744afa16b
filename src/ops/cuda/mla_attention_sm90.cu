// mla_attention, CUDA v2 (sm_90a): the Hopper kernel. WGMMA from shared memory, a producer
// warpgroup streaming the paged KV into a shared-memory ring with mbarriers, online softmax in
// registers. Same op, same plan (grid, split rule, workspace, combine kernel) and the same
// semantics as v1 (mla_attention.cu), which stays the path for what v2 does not support (the
// rule: mla_attention_cuda_kernel in src/ops/mla_attention.cpp; docs/ops/mla_attention.md).
// Written without a GPU and checked on the host first: the layouts and descriptors by an
// emulation against the PTX ISA tables (tests/ops/mla_attention_sm90_layout_test.cpp), the
// barrier protocol by a threaded model (tests/ops/mla_attention_sm90_protocol_test.cpp), both
// with planted bugs caught; on an sm_90 GPU MlaSm90WgmmaProbeCuda checks the wgmma layouts
// alone. It then passed the full matrix on its first H200 run (docs/verification.md).
//
// Work split. As v1: one CTA per (64-row query tile, KV split, sequence), rows r = qi * H + h,
// a CTA loops over row tiles mt = blockIdx.x, + gridDim.x, ...; KV tiles of 32 positions.
//
// Warp roles (384 threads = 3 warpgroups; setmaxnreg moves registers to the consumers):
//   WG0, producer (56 registers), in one of two modes per CTA:
//     TMA (bf16 cache, page_size % 32 == 0, every page of the split inside the cache):
//     thread 0 loads each tile with 9 tensor copies straight into the swizzled stage
//     (producer_tma; a tile ending past kv_end lands first and all 128 zero its tail).
//     relayout (otherwise): warp 0 issues 1-D cp.async.bulk copies of the chunk's cache rows
//     into a staging slot (mbarrier complete_tx; one copy when the rows lie back to back, else
//     one per row); all 128 threads then rewrite the staged rows into the 128-byte-swizzled
//     KV tile that the WGMMA descriptors read (bf16: a copy; fp8: e4m3 -> bf16, or -> f16 when
//     the query is fp8 too, both exact), fill absent rows (zeros past the split / causal end,
//     NaN for a page outside the cache), fence.proxy.async, barrier, and thread 0 arrives on
//     the tile's `full` (one arrival in both modes).
//   WG1, WG2, consumers c = 0, 1 (224 registers): both own all 64 rows; consumer c accumulates
//     O[64 x 256] for value columns c*256 .. (wgmma m64n256k16, V = the KV tile read MN-major,
//     128 f32 registers). The seesaw schedule (verified on the H200, docs/verification.md; see
//     consumer()): KV tiles go in pairs; consumer 0 computes the full QK (36 wgmma m64n32k16)
//     and softmax of the pair's tile a, consumer 1 those of tile b, so one warpgroup's softmax
//     overlaps the other's tensor work. P (hi, lo), the row maximum m and the rescale factor
//     alpha are handed over through shared memory (P K-major without swizzle: p_offset /
//     p_desc) with named-barrier pairs; each warpgroup multiplies both tiles' P into its
//     columns, P of its own tile from registers, the other's from shared memory.
//
// Why 1-D bulk copies and not a TMA tensor map: the cache is paged with any page size and any
// 16-byte page / row strides, and a row may come from a page outside the cache (NaN) or lie
// past the split (zeros); per-row copies handle all of that with no tensor map per cache and no
// driver entry point, and the fp8 cache needs a pass through registers anyway (Hopper has no
// bf16 x fp8 wgmma). For bf16 caches with page_size % 32 == 0 (and every page inside the
// cache) the TMA mode above skips the staging: that is the common case.
//
// P precision. P = exp2(s - m) in f32 is split as hi = bf16(p), lo = bf16(p - hi) and PV runs
// twice (A = hi, then A = lo): |p - hi - lo| <= 2^-8 |p - hi| <= 2^-16 p (the fp8-cache, fp8-q
// kernel splits in f16, kF16: <= 2^-22 p; p <= 256 stays in f16's range), where plain bf16 P
// would leave 2^-8 p per weight. The matrix tolerance for o is
// kv_scale max|v| eps_f32 (4 A + 8 sqrt(L) + 64): ~1.2e-5 max|v| at L = 40, A = 41 (the CI
// decode case); plain bf16 P errs by up to ~2^-8 max|v| = 3.9e-3 max|v| (~1e-3 typical with
// few keys), 100x over, and 2 bf16 ulps of o cannot absorb it because |o| << max|v| after
// averaging. So the split stays (same arithmetic as v1, same error); it costs PV tensor time
// (3.28 M instead of 2.23 M MACs per tile) and the V reads twice. MlaAttentionPrecision::fast
// asks for P rounded once, as FlashMLA and FlashInfer compute it: kSplitP = false (hi only, in
// registers and in the hand-over buffer; one PV product per k-step), with its own stated
// tolerance (+ 2^-8 kv_scale max|v| on o, docs/ops/mla_attention.md).
//
// Shared memory (dynamic, from a 1024-byte-aligned base; 232,136 B with the alignment slack,
// 312 B under the limit):
//   Q      [9 chunks][64 rows][128 B]   73,728  bf16, 128-byte swizzle (sw128_offset)
//   KV     2 stages x [9][32][128 B]    73,728  bf16, 128-byte swizzle (TMA mode: stages 3 and 4
//                                                 at raw, whose slots that mode does not use)
//   raw    2 x 36,864                   73,728  relayout modes (Staging): bf16 3 slots of 16
//                                                 rows; fp8 stage 3, then 2 slots of 32 rows
//   P      [hi, lo][64 x 32] bf16        8,192  the seesaw hand-over (K-major, no swizzle), one
//                                                 buffer written by the warpgroups in turn
//   rows   m, alpha, l [2 WG][64] f32     1,536
//   status [3 slots][32] u8, mbarriers full[4], empty[4], raw_full[3], landing, q_full.
// TMA mode has 4 stages because the seesaw holds a pair of tiles while it computes: with 3, one
// 36,864-byte tile was in flight per SM during a pair, short of what HBM latency needs (bf16
// at 68% of copy); with 4, the next pair loads while this one computes.
// Every chunk starts on a 1024-byte boundary, so the descriptors use base offset 0. Layouts
// (K-major SW128 for Q and K, MN-major SW128 for V, LBO 4096 / SBO 1024) and descriptor
// arithmetic: mla_attention_sm90_layout.h.
//
// Barrier protocol (tile counter `ti` runs over every tile the CTA processes, across row
// tiles; staged-chunk counter `q` likewise; parity = the phase being waited for):
//   (relayout mode, Staging<kFp8>: bf16 S = 3 slots, N = 2 stages; fp8 S = 2, N = 3; TMA: N = 4)
//   raw_full[q % S]  count 1 + tx: warp-0 lane 0 arrive.expect_tx(bytes of the rows copied),
//                    then the bulk copies complete_tx. Producer threads wait parity (q / S) & 1.
//                    A slot is refilled (chunk q + S) only after producer bar.sync 4 (128),
//                    i.e. after all 128 threads have read chunk q (and its status bytes).
//   full[ti % N]     count 1: relayout mode: every producer thread, after its stores of tile ti,
//                    fence.proxy.async (generic writes -> async proxy of wgmma), bar.sync 4,
//                    then thread 0 arrives; TMA mode: thread 0 arrive.expect_tx(36,864) and the
//                    tensor copies complete_tx (a tail tile: landing, zeroing, bar.sync 4,
//                    arrive). Consumers wait parity (ti / N) & 1.
//   landing          count 1 + tx (TMA mode, tail tiles only, counted by `landed`): thread 0
//                    alone waits on empty (the others, running ahead, would alias its parity).
//   empty[ti % N]    count 8: every consumer warp (lane 0 after __syncwarp) arrives once per
//                    tile, after wgmma.wait_group shows the PV of that tile done (its last
//                    reader: PV_ti is retired by wait_group 1 in tile ti + 1, after QK_ti+1 is
//                    issued, or by wait_group 0 at the end of the row tile). The producer waits
//                    parity ((ti / N) & 1) ^ 1 before filling tile ti (passes at once for the
//                    first use of each stage: the barrier's phase -1 counts as complete).
//   Each stage alternates full (producer -> consumers) and empty (consumers -> producer); a
//   side can be at most one phase ahead, so the parity never aliases.
//   empty (seesaw)   every consumer warp still arrives once per tile, after its last wgmma
//                    reading the tile retired: tile a after P_a V_a, tile b at the next pair's
//                    wait_group 0 (or the row tile's end). With the look-ahead, warpgroup 0
//                    releases tile b after the next pair's softmax (its wait_group 0) and, in
//                    the last pair, the last tile (a or b) at the row tile's end, after the
//                    dropped look-ahead QK over it retired.
//   hand-over        named barriers of 256 (128 bar.arrive + 128 bar.sync): P0 full (1;
//                    warpgroup 0 wrote P_a, m, alpha: fence.proxy.async, arrive), P1 full (2;
//                    the same for P_b the other way, only in pairs with a tile b), L (5, both
//                    sync) for the row sums. One P buffer: warpgroup 1 writes P_b after its
//                    P_a V_a retired and warpgroup 0 the next P_a after syncing on P1 full and
//                    after its P_b V_b retired, each behind its own bar.sync 6 + c (128) so that
//                    no sibling warp still reads: no separate "free" barrier. Arrivals
//                    and syncs are matched one to one within a row tile (the host model checks
//                    the whole protocol, with planted bugs).
//   Q                bar.sync 3 (256) at a row tile's start: every QK of the previous row tile
//                    is retired (wait_group 0 before the epilogue) in both warpgroups; Q is
//                    written, fence.proxy.async, bar.sync 3 again. Q by TMA (q_tma, the CTA's
//                    first row tile only): thread 0 issues it right after the sequence plan
//                    (before the block-table scan), arrive.expect_tx on q_full (count 1, one
//                    phase per launch); consumers wait parity 0 after the first bar.sync 3.
//   combine_early    every thread executes griddepcontrol.launch_dependents at the start, so
//                    the combine kernel (a programmatic dependent, griddepcontrol.wait before
//                    its first read) is resident when this grid ends; host rule
//                    mla_attention_combine_early (small grids only).
//   wgmma registers  the accumulators are touched only after wait_group retires the wgmma
//                    writing them (operand fences keep the compiler from moving the accesses).
//
// QK descriptors: each k-step's is the pair's base descriptor plus an immediate in the start
// address field (mla_attention_sm90_layout.h, sw128_lo / q_step_lo / k_step_lo; equal to q_desc
// / k_desc by the host test). Formed from scratch per k-step they cost ~13 instructions per wgmma
// and put the QK issue loop at 25% of the stall samples (Nsight, fast mode, B128 8k H32); as
// base + immediate: fast 1.04-1.06x, exact 1.01-1.03x (docs/perf.md, eighth session).
//
// Predicted and measured (H200: 4.26 TB/s copy, 132 SMs at ~1.78 GHz, gemm 812 TFLOP/s =
// ~1,700 bf16 MACs / clock / SM, shared memory 128 B / clock / SM). Per 32-key tile and CTA:
// tensor 3.28 M MACs = ~1,930 clk; shared-memory traffic ~319 KB bf16 = ~2,500 clk; HBM share
// per SM ~2,030 clk bf16. Predicted B128 8k H32 bf16 350-400 us; measured (docs/perf.md):
//   seesaw (this consumer) -> 417 us bf16 (1.30x the schedule below; H128 839 us, 1.17x),
//     fp8 823 us (1.06x: the relayout producer is the bound, consumers wait on `full` 32% of
//     the samples, the producer on `empty` 10%; see Staging for a ring that measured slower).
//   4 TMA stages (one P buffer) -> 399 us bf16; fp8 with 3 stages -> 734 us. fp8: the
//   producer then spent 47% of its samples at its own barrier, waiting for warp 0, which
//   issued 32 bulk copies a lane at a time per chunk and looked rows up just before the
//   barrier: full arrival before the refill, lookups one chunk ahead -> 692 us; one bulk copy
//   for a chunk of back-to-back rows -> 509 us (docs/perf.md).
// The schedule before the seesaw (one warpgroup per half of O, scores exchanged per tile):
//   first run 1,160 us (~7,900 clk / tile): Nsight showed the consumers waiting on `full` 62%
//     of the time, the producer latency-bound (one warp per scheduler, ~60 instructions of
//     index arithmetic per 16-byte piece): the closed-form relayout (producer_piece) -> 873 us;
//   TMA mode for bf16 (no staging, no relayout, no per-byte producer work) -> 556 us;
//   lazy rescaling -> 545 us (fp8, relayout mode: 876 us; H128: 985 us; B1 1k: 19.3 us).
// Later (fp8 q, fast P, B128 8k H32): the relayout's staging loads batched, then as 16-byte
// pieces -> 409 -> 353 us (each load's latency had been exposed: 27% of the samples).
// Plain bf16 P (kSplitP = false, PV half the tensor work) measured no faster (594 us), so the
// consumers are not tensor-bound: per tile they issue ~780 instructions per warp, and QK, the
// score exchange, the softmax and PV run one after the other (~3,800 clk / tile). Tried: in
// TMA mode a third KV stage (in the staging slots' room) and QK of tile j + 1 issued before
// the softmax of tile j; ptxas then either serialises the wgmmas (C7514, look-ahead issued
// conditionally) or spills (16 more live score registers): overlap needs fewer accumulators
// per consumer thread than 128 O + 16 S + 16 P (docs/perf.md).
// Look-ahead (seesaw, kLookahead; fourteenth session): warpgroup 0 issues the next pair's QK_a
// right after its P_a V_a (its score registers are free once P_a is packed, so no extra
// registers), i.e. while warpgroup 1 computes its softmax, instead of after P_b V_b, where it
// sat in the chain QK_a -> softmax_a -> softmax_b -> P_b V_b -> QK_a'. Its wgmma groups per
// pair: [QK_a][last P_b V_b] at the start (wait_group 1: the scores; softmax; wait_group 0),
// then [P_a V_a][QK_a'] and, with a tile b, wait_group 0 before P_b V_b. ptxas serialises
// everything (C7514-C7520) unless the look-ahead is issued unconditionally (the last pair's goes
// over its own tile and is dropped), the first QK of a row tile is waited for where it is
// issued, and the branch without a tile b waits itself (the build now fails on any of these
// reports: scripts/nvcc-wgmma-guard). Bf16 exact 1.06-1.15x, P rounded once
// at 64+ rows 1.03-1.16x (docs/perf.md); only with TMA mode's 4 stages (fp8's 3 made warpgroup
// 0 wait for a stage still being refilled) and splits of 1024+ keys (mla_attention_lookahead).
#include <cuda.h>  // CUtensorMap (a plain struct; the encoder comes from the runtime)
#include <cuda_fp8.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "common.cuh"
#include "cp_async.cuh"
#include "kestrel/ops/mla_attention.h"
#include "mla_attention_common.cuh"
#include "mla_attention_sm90_layout.h"
#include "sm90_ptx.cuh"

namespace kestrel::ops::cuda {

namespace {

using namespace sm90;

constexpr int kThreads = 384;          // producer WG + 2 consumer WGs
constexpr int kStagesTma = 4;          // TMA mode: stages 3 and 4 in the staging room (unused there)
constexpr int kRawSlots = 3;           // staging slots (most of any mode: bf16 relayout)
constexpr int kRawBytes = 2 * kKvBytes;  // the staging room (relayout modes) = TMA mode's stages 3, 4
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
constexpr float kRescaleSlack = 8.0f;  // log2 units: P <= 256 between rescales (lazy rescaling)
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= setmaxnreg_pool(kThreads), "setmaxnreg budget");

// Shared-memory map, offsets from the 1024-aligned base.
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffKv = kOffQ + kQBytes;
constexpr uint32_t kOffRaw = kOffKv + 2 * kKvBytes;
constexpr uint32_t kOffP = kOffRaw + kRawBytes;  // the hand-over P: hi, then lo (both warpgroups in turn)
constexpr uint32_t kOffRows = kOffP + 2 * kPBytes;  // per row: m_pub [2][64], sc_pub [2][64], l_pub [2][64] f32
constexpr uint32_t kOffStatus = kOffRows + 6 * kRows * 4;
constexpr uint32_t kOffBar = kOffStatus + kRawSlots * 32;
constexpr uint32_t kBarFull = kOffBar, kBarEmpty = kOffBar + 8 * kStagesTma, kBarRaw = kOffBar + 16 * kStagesTma;
constexpr uint32_t kBarLanding = kBarRaw + 8 * kRawSlots;
constexpr uint32_t kBarQFull = kBarLanding + 8;  // Q by TMA landed
constexpr uint32_t kSmemUsed = kBarQFull + 8;
constexpr uint32_t kSmemBytes = kSmemUsed + 1024;  // slack to align the base to 1024
static_assert(kOffKv % 1024 == 0 && kKvBytes % 1024 == 0 && kOffRaw % 16 == 0 && kOffP % 128 == 0 && kOffBar % 8 == 0);
static_assert(kOffKv + kStagesTma * kKvBytes <= kOffP, "TMA mode's stages 3 and 4 lie in the staging room");
static_assert(kSmemBytes == 232136 && kSmemBytes <= 232448, "the design note states the shared-memory size");

// Named barriers (0 is __syncthreads). The seesaw hand-over (consumers only, 256 = 128 arriving
// + 128 syncing): P0 full (warpgroup 0's P, m and rescale of tile a, for warpgroup 1), P1 full
// (warpgroup 1's, tile b); L (both sync: the row sums at the end of a row tile). No "free"
// barriers: each warpgroup arrives on its full barrier only after its last read of P
// (warpgroup 1 after P_a V_a retired; warpgroup 0 at the pair start, after P_b V_b retired),
// so the other, which writes P only after that arrival, never writes under a reader.
// One P buffer serves both directions, so before a warpgroup writes it, all four of its warps
// must have retired their reads of the other's P: barrier kBarWgP + c (128) does that (one
// warp's wait_group says nothing about a sibling warp's wgmma).
constexpr int kBarP0Full = 1, kBarP1Full = 2, kBarQ = 3, kBarProducer = 4, kBarL = 5, kBarWgP = 6;

// The KV range of one (sequence, split) and, per row tile, the keys its rows attend
// (mla_attention_common.cuh): 64-row tiles, 32-key tiles.
using SeqPlan = MlaSeqPlan;
using TilePlan = MlaTilePlan;
__device__ __forceinline__ TilePlan tile_plan(const MlaAttentionParams& p, const SeqPlan& s, int mt) {
  return mla_tile_plan<kRows, kKeys>(p, s, mt);
}

// Q of the row tile starting at query row r0 of the sequence by TMA (q_tma: a bf16 q whose
// tokens are H rows apart, see encode_q_map): 9 boxes of 64 columns x 64 rows into the
// 128-byte-swizzled Q, completing on q_full. Box rows past the sequence's rows hold the next
// tokens' queries or zeros (past the tensor): padded rows, masked in every tile (lim = 0) and
// never stored, so their values do not matter.
__device__ __forceinline__ void issue_q(uint32_t base, const CUtensorMap& qmap, const SeqPlan& s, int H, int r0) {
  mbar_arrive_expect_tx(base + kBarQFull, kQBytes);
#pragma unroll
  for (int c = 0; c < kColChunks; ++c)
    tma_load_2d(base + kOffQ + c * kQChunkBytes, &qmap, c * kAtomCols, s.qb * H + r0, base + kBarQFull);
}

// ---- producer warpgroup ------------------------------------------------------------------------
// The relayout ring of a cache dtype: KV stages, then staging slots of 18,432 B in the staging
// room (after the third stage when there is one). bf16 (16 rows a slot, the rare fallback):
// 2 stages, 3 slots. fp8 (32 rows a slot): 3 stages, 2 slots, measured 1.05-1.13x faster than
// 2 and 3 on the H200 (the seesaw holds a pair of tiles, so with 2 stages the producer idles
// until a pair ends). Also measured (docs/perf.md): 3 stages with 2 slots of 16 fp8 rows and
// an L2 prefetch (cp.async.bulk.prefetch.L2) 4 chunks ahead, 1.43x slower (less in flight per SM);
// 4 slots of 16 fp8 rows, 0.75-0.80x (twice the per-chunk barrier and issue work); the e4m3 tile
// by TMA into its own stage, dequantised there in place (4 stages, no staging), 0.68-0.71x (the
// conversion then sits between landing and `full`, inside the stage's cycle).
template <bool kFp8>
struct Staging {
  static constexpr int kRowBytes = kFp8 ? kDqk : 2 * kDqk;  // 576 or 1,152 bytes per cache row
  static constexpr int kStages = kFp8 ? 3 : 2;              // KV tiles in the ring
  static constexpr int kSlots = kFp8 ? 2 : 3;               // staging slots
  static constexpr int kRowsPerChunk = kFp8 ? 32 : 16;      // cache rows per staging slot
  static constexpr int kSlotBytes = kRowsPerChunk * kRowBytes;  // 18,432
  static constexpr uint32_t kOffSlots = kOffRaw + (kStages - 2) * kKvBytes;
  static constexpr int kChunksPerTile = kKeys / kRowsPerChunk;  // 1 or 2
  static_assert(kSlots <= kRawSlots && kStages <= kStagesTma && kKeys % kRowsPerChunk == 0 && kRowsPerChunk <= 32);
  static_assert(kOffSlots + kSlots * kSlotBytes <= kOffRaw + kRawBytes, "the staging room");
};

enum : uint8_t { kRowZero = 0, kRowCopy = 1, kRowNan = 2 };
// The word a relayout writes over a row that is not a copy: NaN (f16 or bf16, two per word) for a
// page outside the cache, zeros for a row past the end.
__device__ __forceinline__ uint32_t row_fill(uint8_t status, bool f16) {
  return status == kRowNan ? (f16 ? 0x7e007e00u : 0x7fc07fc0u) : 0u;
}

// Warp 0 of the producer stages chunk i of the row tile (staged-chunk counter q) into slot
// q % 3 in two steps: lookup (lane r < rows-per-chunk finds the cache row of KV position
// pos0 + r: a block-table load) is issued before the relayout of an earlier chunk, so that its
// latency hides behind that work; issue (after the slot is free) records the statuses,
// announces the bytes on raw_full (lane 0) and starts the copies.
struct StagedRow {
  const uint8_t* row;
  uint8_t status;
};

template <bool kFp8>
__device__ __forceinline__ StagedRow lookup_row(const MlaAttentionParams& p, int b, const SeqPlan& s, const TilePlan& tp,
                                                int i, int lane) {
  using St = Staging<kFp8>;
  const int pos = s.begin + (i / St::kChunksPerTile) * kKeys + (i % St::kChunksPerTile) * St::kRowsPerChunk + lane;
  StagedRow r{nullptr, kRowZero};
  if (lane < St::kRowsPerChunk && pos < tp.kv_end) {
    bool nan = false;
    r.row = kv_row(p, b, pos, nan);
    r.status = nan ? kRowNan : kRowCopy;
  }
  return r;
}

template <bool kFp8>
__device__ __forceinline__ void issue_chunk(uint32_t base, uint8_t* base_ptr, const StagedRow& r, uint32_t q, int lane) {
  using St = Staging<kFp8>;
  const int slot = static_cast<int>(q % St::kSlots);
  if (lane < St::kRowsPerChunk) base_ptr[kOffStatus + slot * 32 + lane] = r.status;
  const unsigned copies = __ballot_sync(0xffffffffu, r.status == kRowCopy);
  __syncwarp();  // status bytes before lane 0's arrive (release), which the readers acquire
  const uint32_t bar = base + kBarRaw + 8 * slot;
  if (lane == 0) mbar_arrive_expect_tx(bar, static_cast<uint32_t>(__popc(copies)) * St::kRowBytes);
  __syncwarp();  // the expected bytes are announced before any copy can complete
  // Rows that lie back to back in memory (a chunk inside one page of a packed cache, the usual
  // case) go as one copy by lane 0: the warp issues bulk copies one lane at a time, and 32 of
  // them kept warp 0 behind the other producer warps at every barrier.
  const uint32_t dst = base + St::kOffSlots + slot * St::kSlotBytes + lane * St::kRowBytes;
  const uint8_t* row0 = reinterpret_cast<const uint8_t*>(
      __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(r.row), 0));
  const bool prefix = (copies & (copies + 1u)) == 0u;  // lanes 0 .. n-1 copy, the rest do not
  if (prefix && __all_sync(0xffffffffu, r.status != kRowCopy || r.row == row0 + lane * St::kRowBytes)) {
    if (lane == 0 && copies != 0u) bulk_copy_g2s(dst, row0, static_cast<uint32_t>(__popc(copies)) * St::kRowBytes, bar);
  } else if (r.status == kRowCopy) {
    bulk_copy_g2s(dst, r.row, St::kRowBytes, bar);
  }
}

// bf16 staged chunk (16 rows) in `slot` -> rows kr0 .. of the swizzled tile (all 128 producer
// threads). Thread wt takes row wt / 8 and pieces u * 8 + wt % 8 (producer_piece: the
// conflict-free order, status and addresses once per row).
__device__ __forceinline__ void relayout_chunk_bf16(uint8_t* base_ptr, int slot, uint8_t* tile, int kr0, int wt) {
  using St = Staging<false>;
  static_assert(St::kRowsPerChunk == 16, "one row per 8 threads");
  const uint8_t* raw = base_ptr + St::kOffSlots + slot * St::kSlotBytes;
  int r, piece0;
  producer_piece(wt, 0, 0, r, piece0);
  const uint8_t st = base_ptr[kOffStatus + slot * 32 + r];
  const uint8_t* src = raw + r * St::kRowBytes + piece0 * 16;
  uint8_t* dst = tile + sw128_offset(kKeys, kr0 + r, piece0 * 8);  // + u * kKvChunkBytes for piece u * 8 + piece0
  if (st == kRowCopy) {
#pragma unroll
    for (int u = 0; u < kColChunks; ++u)
      *reinterpret_cast<uint4*>(dst + u * kKvChunkBytes) = *reinterpret_cast<const uint4*>(src + u * 8 * 16);
  } else {
    const uint32_t fill = row_fill(st, false);
#pragma unroll
    for (int u = 0; u < kColChunks; ++u) *reinterpret_cast<uint4*>(dst + u * kKvChunkBytes) = make_uint4(fill, fill, fill, fill);
  }
}

// fp8 staged chunk (32 rows) in `slot` -> the swizzled f16 / bf16 tile: thread wt takes row
// wt / 4 and, in each of the 9 column chunks, the 16 values 16 (wt % 4) ..: one 16-byte load and
// two 16-byte stores each (a warp reads 8 rows x 64 contiguous bytes and writes 64 granules
// over all 8 bank groups: no conflicts beyond the 4 wavefronts of 512 bytes). The loads go in
// batches of kBatch (each batch's conversions and stores after its loads): written load,
// convert, store per piece, the compiler kept that order (a store may alias a later load) and
// exposed every load's latency (Nsight at d7676b3, B128 8k H32 fp8: 27% of the kernel's samples
// in the producer's loop, on each load's first use; the consumers waited on `full` for 18%).
template <bool kF16>
__device__ __forceinline__ void relayout_chunk_fp8(uint8_t* base_ptr, int slot, uint8_t* tile, int wt) {
  using St = Staging<true>;
  static_assert(St::kRowsPerChunk == kKeys && St::kRowBytes == kDqk, "a chunk is a whole tile of fp8 rows");
  constexpr int kBatch = 3;
  static_assert(kColChunks % kBatch == 0);
  const int r = wt / 4, q = wt % 4;
  const uint8_t* src = base_ptr + St::kOffSlots + slot * St::kSlotBytes + r * St::kRowBytes + q * 16;
  const uint8_t status = base_ptr[kOffStatus + slot * 32 + r];
  uint8_t* dst = tile + sw128_offset(kKeys, r, q * 16);  // + u * kKvChunkBytes for column chunk u
  uint8_t* dst_hi = tile + sw128_offset(kKeys, r, q * 16 + 8);
  if (status == kRowCopy) {
#pragma unroll
    for (int u0 = 0; u0 < kColChunks; u0 += kBatch) {
      uint4 w[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) w[k] = *reinterpret_cast<const uint4*>(src + (u0 + k) * kAtomCols);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        *reinterpret_cast<uint4*>(dst + (u0 + k) * kKvChunkBytes) = fp8x8_dequantize<kF16>(make_uint2(w[k].x, w[k].y));
        *reinterpret_cast<uint4*>(dst_hi + (u0 + k) * kKvChunkBytes) = fp8x8_dequantize<kF16>(make_uint2(w[k].z, w[k].w));
      }
    }
  } else {
    const uint32_t fill = row_fill(status, kF16);
    const uint4 v = make_uint4(fill, fill, fill, fill);
#pragma unroll
    for (int u = 0; u < kColChunks; ++u) {
      *reinterpret_cast<uint4*>(dst + u * kKvChunkBytes) = v;
      *reinterpret_cast<uint4*>(dst_hi + u * kKvChunkBytes) = v;
    }
  }
}

// TMA mode (bf16 cache, page_size % 32 == 0, a tensor map over the cache as [num_pages]
// [page_size][576]): thread 0 loads each 32-key tile (within one page) with 9 tensor copies of
// 64 columns x 32 rows, which the hardware writes 128-byte-swizzled into the stage: no
// staging, no relayout, no work per byte. The one exception is a tile that ends past kv_end
// (the last of a row tile, at most one per row tile): its rows past kv_end hold whatever the
// page holds, and P = 0 there does not cancel a NaN, so that tile lands on `landing` first,
// all 128 threads zero those rows (as the relayout path does) and thread 0 then arrives on full.
__device__ __forceinline__ void producer_tma(const MlaAttentionParams& p, const CUtensorMap& map, int b, const SeqPlan& s,
                                             uint32_t base, uint8_t* base_ptr, int wt) {
  uint32_t ti_run = 0, landed = 0;  // tiles loaded / partial tiles landed so far (over row tiles)
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = tile_plan(p, s, mt);
    if (tp.ntiles <= 0) continue;
    // The block-table entry of the next tile is looked up during this one's wait, and only when
    // the next tile starts a new page (tiles of 32 keys: a page of 64 holds two). (With the
    // tensor map's prefetch: within noise at B = 1 on the H200; kept as the simpler dependency.)
    int page_idx = s.begin / p.page_size;
    int page_next = wt == 0 ? page_at(p, b, page_idx) : 0;
    for (int j = 0; j < tp.ntiles; ++j) {
      const uint32_t ti = ti_run + j;
      const int st = static_cast<int>(ti % kStagesTma), pos = s.begin + j * kKeys, page = page_next;
      const int valid = tp.kv_end - pos;  // rows of the tile that hold data (> 0)
      const uint32_t full = base + kBarFull + 8 * st, landing = base + kBarLanding;
      if (valid >= kKeys) {  // the common case: thread 0 alone
        if (wt != 0) continue;
        if (j + 1 < tp.ntiles && (pos + kKeys) / p.page_size != page_idx) {
          page_idx = (pos + kKeys) / p.page_size;
          page_next = page_at(p, b, page_idx);  // in flight during the wait
        }
        mbar_wait(base + kBarEmpty + 8 * st, ((ti / kStagesTma) & 1) ^ 1);
        mbar_arrive_expect_tx(full, kKvBytes);
#pragma unroll
        for (int c = 0; c < kColChunks; ++c)
          tma_load_3d(base + kOffKv + st * kKvBytes + c * kKvChunkBytes, &map, c * kAtomCols, pos % p.page_size, page, full);
        continue;
      }
      if (wt == 0) {  // (the others wait on landing only: they may run ahead, and empty's parity would alias)
        mbar_wait(base + kBarEmpty + 8 * st, ((ti / kStagesTma) & 1) ^ 1);
        mbar_arrive_expect_tx(landing, kKvBytes);
#pragma unroll
        for (int c = 0; c < kColChunks; ++c)
          tma_load_3d(base + kOffKv + st * kKvBytes + c * kKvChunkBytes, &map, c * kAtomCols, pos % p.page_size, page, landing);
      }
      mbar_wait(landing, landed & 1);
      ++landed;
      uint8_t* tile = base_ptr + kOffKv + st * kKvBytes;
      for (int u = wt; u < (kKeys - valid) * kColChunks * 8; u += 128) {  // rows valid .., 16 B units
        const int row = valid + u / (kColChunks * 8), chunk = (u / 8) % kColChunks;
        *reinterpret_cast<uint4*>(tile + chunk * kKvChunkBytes + row * 128 + (u % 8) * 16) = make_uint4(0u, 0u, 0u, 0u);
      }
      fence_proxy_async();
      named_bar_sync(kBarProducer, 128);
      if (wt == 0) mbar_arrive(full);
    }
    ti_run += tp.ntiles;
  }
}

// Whether every page of this split lies inside the cache (each producer warp checks the same
// block-table entries and reaches the same answer). A page outside makes its rows NaN, which
// only the relayout path writes.
__device__ __forceinline__ bool pages_inside(const MlaAttentionParams& p, int b, const SeqPlan& s, int lane) {
  bool bad = false;
  if (s.end > s.begin)
    for (int k = s.begin / p.page_size + lane; k <= (s.end - 1) / p.page_size; k += 32) {
      const int page = page_at(p, b, k);
      bad |= page < 0 || page >= p.num_pages;
    }
  return !__any_sync(0xffffffffu, bad);
}

template <bool kFp8, bool kF16>
__device__ __forceinline__ void producer(const MlaAttentionParams& p, const CUtensorMap& map, bool tma_mode, int b,
                                         const SeqPlan& s, uint32_t base, uint8_t* base_ptr, int wt) {
  using St = Staging<kFp8>;
  if (tma_mode) {
    producer_tma(p, map, b, s, base, base_ptr, wt);
    return;
  }
  uint32_t q_run = 0, ti_run = 0;  // chunks staged / tiles filled so far (over row tiles)
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = tile_plan(p, s, mt);
    if (tp.ntiles <= 0) continue;
    const int nchunks = tp.ntiles * St::kChunksPerTile;
    // Warp 0's block-table lookups run one chunk ahead of their use (`next`, looked up during
    // the relayout before the one whose barrier precedes its copy), so their latency is never
    // in front of a barrier the other producer warps wait at.
    StagedRow next{nullptr, kRowZero};
    if (wt < 32) {
      for (int i = 0; i < min(St::kSlots, nchunks); ++i)
        issue_chunk<kFp8>(base, base_ptr, lookup_row<kFp8>(p, b, s, tp, i, wt), q_run + i, wt);
      if (St::kSlots < nchunks) next = lookup_row<kFp8>(p, b, s, tp, St::kSlots, wt);
    }
    for (int i = 0; i < nchunks; ++i) {
      const uint32_t q = q_run + i, ti = ti_run + i / St::kChunksPerTile;
      const int slot = static_cast<int>(q % St::kSlots), st = static_cast<int>(ti % St::kStages);
      const bool refill = wt < 32 && i + St::kSlots < nchunks;
      StagedRow after{nullptr, kRowZero};  // the chunk after `next`: in flight during this relayout
      if (wt < 32 && i + St::kSlots + 1 < nchunks) after = lookup_row<kFp8>(p, b, s, tp, i + St::kSlots + 1, wt);
      if (i % St::kChunksPerTile == 0) mbar_wait(base + kBarEmpty + 8 * st, ((ti / St::kStages) & 1) ^ 1);
      mbar_wait(base + kBarRaw + 8 * slot, (q / St::kSlots) & 1);
      if constexpr (kFp8) {
        relayout_chunk_fp8<kF16>(base_ptr, slot, base_ptr + kOffKv + st * kKvBytes, wt);
      } else {
        relayout_chunk_bf16(base_ptr, slot, base_ptr + kOffKv + st * kKvBytes, (i % St::kChunksPerTile) * St::kRowsPerChunk,
                            wt);
      }
      const bool tile_done = i % St::kChunksPerTile == St::kChunksPerTile - 1;
      if (tile_done) fence_proxy_async();  // this thread's tile stores -> the async proxy (wgmma)
      named_bar_sync(kBarProducer, 128);   // every thread is done with the slot (and the tile)
      // The tile goes to the consumers first, then warp 0 refills the slot.
      if (tile_done && wt == 0) mbar_arrive(base + kBarFull + 8 * st);  // for all 128 (the barrier above)
      if (refill) issue_chunk<kFp8>(base, base_ptr, next, q + St::kSlots, wt);
      next = after;
    }
    q_run += nchunks;
    ti_run += tp.ntiles;
  }
}

// ---- consumer warpgroups: the seesaw schedule -----------------------------------------------------
// Consumer c (0, 1), thread t of its warpgroup: score register i <-> (row frag_d_row(t, i),
// key frag_d_col(t, i)); output register i <-> (row frag_d_row(t, i), column c*256 +
// frag_d_col(t, i)). The KV tiles go in pairs (a = 2 pr, b = 2 pr + 1): warpgroup 0 computes
// the whole QK of tile a and its softmax, warpgroup 1 those of tile b, so one warpgroup's
// softmax runs while the other's QK keeps the tensor cores busy. Both hold the same running
// row maximum m, handed over through shared memory with the probabilities: P_a (hi, lo),
// m after a and the rescale of a (alpha_a = exp2(m_before - m_a), 1 where unchanged) go from
// warpgroup 0 to 1; P_b, m_b and alpha_b back. Each warpgroup then multiplies P of both tiles
// into its own 256 output columns: warpgroup 0 adds P_a V_a (registers), rescales by alpha_b,
// adds P_b V_b (P from shared memory); warpgroup 1 rescales by alpha_a, adds P_a V_a (shared
// memory), rescales by alpha_b, adds P_b V_b (registers). o, l and m agree at the end of every
// pair in both; the row sums l (each warpgroup's own tiles) are added at the end.
//
// Softmax of one tile in base 2 (as v1): masked keys -inf; m_use = 0 while nothing is attended;
// lazy rescaling (m follows the row maximum only when it grows by more than kRescaleSlack, then
// the warp's rows are rescaled). In: the scores (raw) and m; out: P in sc, m and l updated (l
// *= alpha, += the row sums of this thread's columns), alpha per row, whether the warp rescaled.
// With P rounded once (kFastP) the tile's chain is shorter (twenty-sixth session: 1.3-2% at H 96
// / 128 and verify, perf.md): a tile that ends by full_end (every row of the row tile attends
// every key of it) skips the mask, a uniform branch; the maxima are taken over the raw scores and
// scaled once (the scale is positive), the scale folded into the exponent's FMA; and the
// exponentials are ex2 (one MUFU, relative error <= 2^-22, results below 2^-126 flushed to 0),
// not exp2f, which without fast math wraps each MUFU in a denormal-range guard (four
// instructions). Exact P keeps its code as it was (the same change measured 0.985x there).
template <bool kFastP>
__device__ __forceinline__ bool softmax_tile(float (&sc)[16], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             const TilePlan& tp, int tile_begin, const int (&lim)[2], int full_end,
                                             int t, float scale_log2) {
  float mx[2] = {-INFINITY, -INFINITY};
  const int key0 = tile_begin + frag_d_col(static_cast<int>(opaque(static_cast<uint32_t>(t))), 0);
  if constexpr (kFastP) {
    if (tile_begin + kKeys > full_end) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int key = key0 + frag_d_col(0, i);
        if (!(key < tp.kv_end && key < lim[(i >> 1) & 1])) sc[i] = -INFINITY;
      }
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], sc[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int h = (i >> 1) & 1;
      const int key = key0 + frag_d_col(0, i);  // frag_d_col(t, i) = frag_d_col(t, 0) + frag_d_col(0, i)
      const bool ok = key < tp.kv_end && key < lim[h];
      sc[i] = ok ? sc[i] * scale_log2 : -INFINITY;
      mx[h] = fmaxf(mx[h], sc[i]);
    }
  }
  bool grow = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    if constexpr (kFastP) mx[h] *= scale_log2;
    grow |= mx[h] > m[h] + kRescaleSlack;  // (m = -inf: any attended key)
  }
  alpha[0] = alpha[1] = 1.0f;
  const bool rescale = __any_sync(0xffffffffu, grow);
  if (rescale) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], mx[h]);
      const float d = m[h] - (m_new == -INFINITY ? 0.0f : m_new);  // alpha 0 while nothing was attended
      alpha[h] = kFastP ? ex2(d) : exp2f(d);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
  }
  const float m_use[2] = {m[0] == -INFINITY ? 0.0f : m[0], m[1] == -INFINITY ? 0.0f : m[1]};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int h = (i >> 1) & 1;
    sc[i] = kFastP ? ex2(fmaf(sc[i], scale_log2, -m_use[h])) : exp2f(sc[i] - m_use[h]);
    l[h] += sc[i];
  }
  return rescale;
}

// o and l times alpha per row (h), when some row of the warp has alpha != 1. No wgmma writing o
// may be in flight.
__device__ __forceinline__ void rescale_rows(float (&o)[128], float (&l)[2], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] *= alpha[h];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// P (in sc) as hi = bf16(p), lo = bf16(p - hi) (kF16: f16, a finer split; kSplitP false: hi
// only): the A fragments of the two PV k-steps (registers (8 ks + 2 e, 8 ks + 2 e + 1) -> .b32
// e, p_reg_of), also stored to the P buffer (hi at p_hi, lo at p_hi + kPBytes) for the other
// warpgroup.
template <bool kF16, bool kSplitP>
__device__ __forceinline__ void pack_and_publish_p(const float (&sc)[16], uint32_t (&a_hi)[2][4], uint32_t (&a_lo)[2][4],
                                                   uint8_t* p_hi, int t) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = p_reg_of(ks, 2 * e);
      const float p0 = sc[i], p1 = sc[i + 1];
      if constexpr (kF16) {
        const __half2 hi = __floats2half2_rn(p0, p1);
        a_hi[ks][e] = *reinterpret_cast<const uint32_t*>(&hi);
        if constexpr (kSplitP) a_lo[ks][e] = pack_f16x2(p0 - __low2float(hi), p1 - __high2float(hi));
      } else {
        const uint32_t hi = pack_bf16x2(p0, p1);
        a_hi[ks][e] = hi;
        if constexpr (kSplitP)
          a_lo[ks][e] = pack_bf16x2(p0 - __uint_as_float(hi << 16), p1 - __uint_as_float(hi & 0xffff0000u));
      }
      const uint32_t off = p_offset(frag_d_row(t, i), frag_d_col(t, i));
      *reinterpret_cast<uint32_t*>(p_hi + off) = a_hi[ks][e];
      if constexpr (kSplitP) *reinterpret_cast<uint32_t*>(p_hi + kPBytes + off) = a_lo[ks][e];
    }
}

// O += P V over one tile's 32 keys (2 k-steps), P split as hi then lo (see "P precision"; hi
// only when !kSplitP): P from this warpgroup's registers (its own tile) or from the shared P
// buffer at `p_smem` (the other warpgroup's tile).
template <bool kF16, bool kSplitP>
__device__ __forceinline__ void pv_from_registers(float (&o)[128], const uint32_t (&a_hi)[2][4],
                                                  const uint32_t (&a_lo)[2][4], uint32_t kv, int c) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) wgmma_m64n256k16_rs<kF16>(o, a_hi[ks], v_desc(kv, c, ks));
  if constexpr (kSplitP) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) wgmma_m64n256k16_rs<kF16>(o, a_lo[ks], v_desc(kv, c, ks));
  }
}
template <bool kF16, bool kSplitP>
__device__ __forceinline__ void pv_from_shared(float (&o)[128], uint32_t p_smem, uint32_t kv, int c) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) wgmma_m64n256k16_ss<kF16>(o, p_desc(p_smem, ks), v_desc(kv, c, ks));
  if constexpr (kSplitP) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) wgmma_m64n256k16_ss<kF16>(o, p_desc(p_smem + kPBytes, ks), v_desc(kv, c, ks));
  }
}

// QK of one tile (all 36 k-steps, scores zeroed first) into sc; the caller commits.
template <bool kF16>
__device__ __forceinline__ void issue_qk(float (&sc)[16], uint32_t q_smem, uint32_t kv) {
#pragma unroll
  for (int i = 0; i < 16; ++i) sc[i] = 0.0f;
  wgmma_fence();
  const uint32_t q_lo = sw128_lo(q_smem), k_lo = sw128_lo(kv);  // k-step descriptors: base + immediate
#pragma unroll
  for (int kk = 0; kk < kQkSteps; ++kk)
    wgmma_m64n32k16_ss<kF16>(sc, desc_of(q_lo + q_step_lo(kk)), desc_of(k_lo + k_step_lo(kk)), kk > 0 ? 1 : 0);
}

// kLookahead (TMA mode's 4 stages): warpgroup 0 issues the QK of the next pair's tile a right
// after its P_a V_a, before it waits for P_b, so that QK runs while warpgroup 1 computes its
// softmax and is done when the next pair starts (see the design note, "look-ahead").
template <bool kQFp8, bool kF16, bool kSplitP, bool kLookahead>
__device__ __forceinline__ void consumer(const MlaAttentionParams& p, bool q_tma, const SeqPlan& s, int split,
                                         uint32_t base, uint8_t* base_ptr, int c, int t, int nst) {
  const int lane = t % 32, tq = t % 4;
  const int row0 = frag_d_row(t, 0);  // this thread's rows: row0 and row0 + 8
  float* m_pub = reinterpret_cast<float*>(base_ptr + kOffRows);  // [2][64]: m after warpgroup c's tile
  float* sc_pub = m_pub + 2 * kRows;                              // [2][64]: its alpha
  float* l_pub = sc_pub + 2 * kRows;                              // [2][64]: row sums at the end
  // One P buffer for both: warpgroup 1 writes P_b only after its P_a V_a (its last read of P_a)
  // retired, warpgroup 0 writes the next P_a only after its P_b V_b retired (the pair start).
  uint8_t* p_mine = base_ptr + kOffP;
  const uint32_t p_other = base + kOffP;
  uint32_t ti_run = 0;
  for (int mt = static_cast<int>(blockIdx.x); mt < s.row_tiles; mt += static_cast<int>(gridDim.x)) {
    const TilePlan tp = tile_plan(p, s, mt);
    int lim[2];  // causal limit (keys < lim) of rows row0, row0 + 8; 0 for padded rows
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tp.r0 + row0 + 8 * h;
      lim[h] = r < s.rows_b ? s.L - s.n + r / p.H + 1 : 0;
    }
    const int full_end = min(tp.kv_end, s.L - s.n + tp.r0 / p.H + 1);  // the row tile's first row has the smallest limit
    named_bar_sync(kBarQ, 256);  // both warpgroups retired every wgmma reading the previous Q / P
    if (tp.ntiles > 0 && q_tma && mt == static_cast<int>(blockIdx.x)) {
      // The CTA's first row tile: its Q was issued by TMA at the kernel's start. (A CTA has one
      // row tile unless a ragged batch gives a sequence more queries than the plan's ceil(Tq /
      // B); later row tiles take the paths below.)
      mbar_wait(base + kBarQFull, 0);
    } else if (tp.ntiles > 0) {
      const int ct = static_cast<int>(opaque(static_cast<uint32_t>(t + 128 * c)));  // no hoisted offsets
      constexpr int kPieces = kRows * (kDqk / 8) / 256;  // 18 16-byte pieces per thread
      // Piece u of this thread: tile row `row` (query row r of the sequence), columns col ..
      // col + 7 (conflict-free piece order: piece_of), stored at q_dst(row, col).
      const auto q_piece = [&](int u, int& row, int& col, int& r) {
        int piece;
        piece_of(ct + u * 256, kRows, row, piece);
        col = piece * 8;
        r = tp.r0 + row;
      };
      const auto q_dst = [&](int row, int col) { return base_ptr + kOffQ + sw128_offset(kRows, row, col); };
      if (!kQFp8 && p.q_async) {
        // A bf16 q in 16-byte pieces, in a grid of at most one wave (q_async, set by the host):
        // every piece by cp.async, all 18 in flight at once (one memory round trip instead of
        // three register batches; there every CTA waits on its first Q: B = 1 decode 1.19x at
        // 1k keys, H200), held in no register. Padding rows get zeros. Each thread waits for
        // its own copies; the proxy fence and the barrier below then publish them to both
        // warpgroups' wgmma. Larger grids keep the register path (either path measured within
        // +-1.5% there, and the register path's medians were the faster ones).
#pragma unroll 6
        for (int u = 0; u < kPieces; ++u) {
          int row, col, r;
          q_piece(u, row, col, r);
          uint8_t* dst = q_dst(row, col);
          if (r < s.rows_b) {
            const int64_t at = static_cast<int64_t>(s.qb + r / p.H) * p.q_s0 + static_cast<int64_t>(r % p.H) * p.q_s1 + col;
            cp_async_16(smem_u32(dst), static_cast<const uint16_t*>(p.q) + at);
          } else {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
          }
        }
        cp_async_commit();
        cp_async_wait_all();
      } else {
#pragma unroll 6
        for (int u = 0; u < kPieces; ++u) {
          int row, col, r;
          q_piece(u, row, col, r);
          const uint4 v = r < s.rows_b ? q_chunk<kQFp8, kF16>(p, s.qb, r, col) : make_uint4(0u, 0u, 0u, 0u);
          *reinterpret_cast<uint4*>(q_dst(row, col)) = v;
        }
      }
      fence_proxy_async();
      named_bar_sync(kBarQ, 256);
    }

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    uint32_t a_hi[2][4], a_lo[2][4];
    float sc[16];  // scores of this warpgroup's tile (look-ahead: issued in the pair before)
    const int npairs = (tp.ntiles + 1) / 2;
    if (kLookahead && c == 0) {
      // The first pair's QK_a, retired here (every pair start finds at most its P_b V_b pending).
      if (tp.ntiles > 0) {
        mbar_wait(base + kBarFull + 8 * (ti_run % nst), (ti_run / nst) & 1);
        issue_qk<kF16>(sc, opaque(base + kOffQ), opaque(base + kOffKv + static_cast<int>(ti_run % nst) * kKvBytes));
        wgmma_commit();
        wgmma_wait<0>();
      }
    }

    for (int pr = 0; pr < npairs; ++pr) {
      const bool has_b = 2 * pr + 1 < tp.ntiles;
      const uint32_t tia = ti_run + 2 * pr, tib = tia + 1;
      const int sta = static_cast<int>(tia % nst), stb = static_cast<int>(tib % nst);
      const uint32_t kva = opaque(base + kOffKv + sta * kKvBytes), kvb = opaque(base + kOffKv + stb * kKvBytes);
      const uint32_t q_smem = opaque(base + kOffQ);  // per pair: the 36 descriptors are not hoisted (registers)
      float alpha[2];
      // Warpgroup `wg`'s hand-over of its tile's P (softmax done, in `pr_c`; `wg` a literal at
      // every call, so the barrier ids stay constants): once every warp of the warpgroup
      // retired its read of the other's P, P, m and alpha go to shared memory, the other
      // warpgroup is signalled (P0 / P1 full), and P V of the tile at `kv` is issued from
      // registers.
      const auto publish_then_pv = [&](const float (&pr_c)[16], uint32_t kv, int wg) {
        named_bar_sync(kBarWgP + wg, 128);
        pack_and_publish_p<kF16, kSplitP>(pr_c, a_hi, a_lo, p_mine, t);
        if (tq == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            m_pub[wg * kRows + row0 + 8 * h] = m[h];
            sc_pub[wg * kRows + row0 + 8 * h] = alpha[h];
          }
        }
        fence_proxy_async();  // P (generic stores) -> the async proxy of the other's wgmma
        named_bar_arrive(kBarP0Full + wg, 256);
        wgmma_fence();
        pv_from_registers<kF16, kSplitP>(o, a_hi, a_lo, kv, c);
        wgmma_commit();
      };
      // Warpgroup 0 takes P_b: m and alpha after b, then (P_a V_a retired: `wgmma_wait<0>`, with
      // the look-ahead QK as well) tile a released, o rescaled, P_b V_b issued from shared memory.
      const auto take_p_b_then_pv = [&] {
        named_bar_sync(kBarP1Full, 256);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          alpha[h] = sc_pub[kRows + row0 + 8 * h];
          m[h] = m_pub[kRows + row0 + 8 * h];
        }
        wgmma_wait<0>();
        fence_operands(o);
        fence_operands(a_hi[0]); fence_operands(a_hi[1]); fence_operands(a_lo[0]); fence_operands(a_lo[1]);
        __syncwarp();
        if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * sta);
        rescale_rows(o, l, alpha);
        mbar_wait(base + kBarFull + 8 * stb, (tib / nst) & 1);
        wgmma_fence();
        pv_from_shared<kF16, kSplitP>(o, p_other, kvb, c);
        wgmma_commit();  // retired at the next pair or the row tile's end
      };
      if (kLookahead && c == 0) {
        // ---- warpgroup 0 with look-ahead. Pending: [QK_a][the last pair's P_b V_b, or empty].
        wgmma_wait<1>();
        fence_operands(sc);
        float sa[16];  // the softmax works on a copy (as warpgroup 1's below: C7515)
#pragma unroll
        for (int i = 0; i < 16; ++i) sa[i] = sc[i];
        const bool rescaled = softmax_tile<!kSplitP>(sa, m, l, alpha, tp, s.begin + 2 * pr * kKeys, lim, full_end, t, p.scale_log2);
        wgmma_wait<0>();  // the last pair's P_b V_b retired: its tile b released, o may be rescaled
        fence_operands(o);
        fence_operands(a_hi[0]); fence_operands(a_hi[1]); fence_operands(a_lo[0]); fence_operands(a_lo[1]);
        if (pr > 0) {
          __syncwarp();
          if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * ((tib - 2) % nst));
        }
        if (rescaled) {
#pragma unroll
          for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];  // (l was rescaled in softmax_tile)
        }
        publish_then_pv(sa, kva, 0);
        // The look-ahead: the next pair's QK_a. The last pair issues it too, over its own tile b
        // (or a), which it holds until the row tile's end, and drops the scores: a wgmma issued
        // under a condition makes ptxas serialise them all (C7519 / C7514).
        {
          const uint32_t tin = tia + 2;
          const bool next = 2 * pr + 2 < tp.ntiles;
          if (next) mbar_wait(base + kBarFull + 8 * (tin % nst), (tin / nst) & 1);
          issue_qk<kF16>(sc, q_smem, next ? opaque(base + kOffKv + static_cast<int>(tin % nst) * kKvBytes) : has_b ? kvb : kva);
          wgmma_commit();
        }
        if (has_b) {
          // (Its wait_group 0 retires the look-ahead QK too: waiting for P_a V_a alone, ptxas
          // serialises the wgmmas, C7514; the QK was issued during warpgroup 1's softmax.)
          take_p_b_then_pv();
        } else {
          // The last pair: tile a is released at the row tile's end. (The wait only shows ptxas
          // that no group but the newest is pending where a pair would start.)
          wgmma_wait<0>();
          fence_operands(o);
        }
        continue;
      }
      // The previous pair's last wgmma (PV of its tile b) is retired (unconditionally: a wait
      // under a condition makes ptxas serialise every wgmma, C7514 / C7515); then that tile is
      // released.
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(a_hi[0]); fence_operands(a_hi[1]); fence_operands(a_lo[0]); fence_operands(a_lo[1]);
      if (pr > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * ((tib - 2) % nst));
      }
      // QK of this warpgroup's own tile (a for 0, b for 1), all 36 k-steps.
      const bool own = c == 0 || has_b;
      if (own) {
        const uint32_t ti = c == 0 ? tia : tib, kv = c == 0 ? kva : kvb;
        mbar_wait(base + kBarFull + 8 * (ti % nst), (ti / nst) & 1);
        issue_qk<kF16>(sc, q_smem, kv);
        wgmma_commit();
      }
      if (c == 0) {
        // ---- warpgroup 0: softmax of a, publish, P_a V_a, then P_b V_b.
        wgmma_wait<0>();
        fence_operands(sc);
        fence_operands(o);
        if (softmax_tile<!kSplitP>(sc, m, l, alpha, tp, s.begin + 2 * pr * kKeys, lim, full_end, t, p.scale_log2)) {
#pragma unroll
          for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];  // (l was rescaled in softmax_tile)
        }
        publish_then_pv(sc, kva, 0);  // (after every warp's P_b V_b of the last pair retired)
        if (has_b) {
          take_p_b_then_pv();
        } else {
          wgmma_wait<0>();
          fence_operands(o);
          fence_operands(a_hi[0]); fence_operands(a_hi[1]); fence_operands(a_lo[0]); fence_operands(a_lo[1]);
          __syncwarp();
          if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * sta);
        }
      } else {
        // ---- warpgroup 1: take P_a (rescale to its m), P_a V_a, softmax of b, publish, P_b V_b.
        named_bar_sync(kBarP0Full, 256);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          alpha[h] = sc_pub[row0 + 8 * h];
          m[h] = m_pub[row0 + 8 * h];
        }
        rescale_rows(o, l, alpha);  // (nothing writes o now: the pair began with wait_group 0)
        mbar_wait(base + kBarFull + 8 * sta, (tia / nst) & 1);
        wgmma_fence();
        pv_from_shared<kF16, kSplitP>(o, p_other, kva, c);
        wgmma_commit();
        if (has_b) {
          wgmma_wait<1>();  // QK of b (committed before P_a V_a) is retired
          fence_operands(sc);
          // The softmax works on a copy: the score accumulators are not redefined while P_a V_a
          // is in flight (ptxas would serialise the wgmmas, C7515).
          float sb[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) sb[i] = sc[i];
          const bool rescaled = softmax_tile<!kSplitP>(sb, m, l, alpha, tp, s.begin + (2 * pr + 1) * kKeys, lim, full_end, t, p.scale_log2);
          wgmma_wait<0>();  // P_a V_a retired: o may be rescaled, tile a and P_a released
          fence_operands(o);
          __syncwarp();
          if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * sta);
          if (rescaled) {
#pragma unroll
            for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
          }
          publish_then_pv(sb, kvb, 1);  // (after every warp's P_a V_a retired; P_b V_b retired at the next pair)
        } else {
          wgmma_wait<0>();
          fence_operands(o);
          __syncwarp();
          if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * sta);
        }
      }
    }
    wgmma_wait<0>();  // (nothing pending when the row tile had no KV tile)
    fence_operands(o);
    // The last tile: a tile b (read by both), or with look-ahead warpgroup 0's last tile a.
    if (tp.ntiles > 0 && (tp.ntiles % 2 == 0 || (kLookahead && c == 0))) {
      fence_operands(a_hi[0]); fence_operands(a_hi[1]); fence_operands(a_lo[0]); fence_operands(a_lo[1]);
      __syncwarp();
      if (lane == 0) mbar_arrive(base + kBarEmpty + 8 * ((ti_run + tp.ntiles - 1) % nst));
    }
    ti_run += static_cast<uint32_t>(max(tp.ntiles, 0));

    // Row sums: this warpgroup's tiles over the quad, then both warpgroups' added (the same m).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if (tq == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) l_pub[c * kRows + row0 + 8 * h] = l[h];
    }
    named_bar_sync(kBarL, 256);
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] += l_pub[(c ^ 1) * kRows + row0 + 8 * h];

    // Epilogue: normalise, write.
    const int col0 = c * kVColsPerWg + frag_d_col(static_cast<int>(opaque(static_cast<uint32_t>(t))), 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int local = row0 + 8 * h;
      if (local >= tp.rows_here) continue;
      const auto [scale, lse2] = mla_row_end(s.bad_len, m[h], l[h], p.out_scale);
      const int r = tp.r0 + local;
      if (p.splits == 1) {
        uint16_t* orow = p.o + static_cast<int64_t>(s.qb + r / p.H) * p.o_s0 + static_cast<int64_t>(r % p.H) * p.o_s1;
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const int i = 4 * k + 2 * h, d = col0 + frag_d_col(0, i);
          const uint32_t v = pack_bf16x2(o[i] * scale, o[i + 1] * scale);
          if (p.o_vec) {
            *reinterpret_cast<uint32_t*>(orow + d) = v;
          } else {
            orow[d * p.o_s2] = static_cast<uint16_t>(v & 0xffffu);
            orow[(d + 1) * p.o_s2] = static_cast<uint16_t>(v >> 16);
          }
        }
        if (p.lse && c == 0 && tq == 0)
          p.lse[static_cast<int64_t>(s.qb + r / p.H) * p.lse_s0 + static_cast<int64_t>(r % p.H) * p.lse_s1] = lse2 * kLn2;
      } else {
        const int64_t grow = static_cast<int64_t>(split) * p.Tq * p.H + static_cast<int64_t>(s.qb) * p.H + r;
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const int i = 4 * k + 2 * h, d = col0 + frag_d_col(0, i);
          *reinterpret_cast<float2*>(p.ws_o + grow * kDv + d) = make_float2(o[i] * scale, o[i + 1] * scale);
        }
        if (c == 0 && tq == 0) p.ws_lse[grow] = lse2;
      }
    }
  }
}

// kFp8: the cache is fp8 (else bf16); kQFp8: the query is fp8 (else bf16). With both fp8 (the
// engine's fp8 path: the fused prepare writes an fp8 query), every product runs in f16 (kF16):
// Q, K and V are exact in f16 as in bf16, and the producer's dequantisation is one instruction
// per two values instead of four (e4m3 -> f16 is native; bf16 went through f32); P is split in
// f16 (hi + lo carry 22 bits instead of 16).
// tma: `map` describes the bf16 cache (TMA mode, see producer_tma); else it is unused.
template <bool kFp8, bool kQFp8, bool kSplitP, bool kLookahead>
__global__ void __launch_bounds__(kThreads, 1)
    mla_attention_sm90_kernel(const __grid_constant__ MlaAttentionParams p, const __grid_constant__ CUtensorMap map,
                              const __grid_constant__ CUtensorMap qmap, int tma, int q_tma) {
  constexpr bool kF16 = kFp8 && kQFp8;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_u32(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  uint8_t* base_ptr = smem_raw + (base - raw_addr);
  // wg by a broadcast from lane 0: ptxas then knows it is warp-uniform, and the consumers' stage
  // addresses and wgmma descriptors that depend on it stay in uniform registers.
  const int tid = static_cast<int>(threadIdx.x), wg = __shfl_sync(0xffffffffu, tid / 128, 0), wt = tid % 128;
  const int b = static_cast<int>(blockIdx.z), split = static_cast<int>(blockIdx.y);
  // Q by tensor copy (the host's q_tma; never for an fp8 q, which is dequantised in registers:
  // known at compile time, so those instantiations carry none of its code).
  const bool q_by_tma = !kQFp8 && q_tma != 0;
  // A small grid lets the combine kernel launch now: its CTAs wait (griddepcontrol.wait) on
  // SMs this grid leaves free, and start the moment it completes (combine_early, host rule).
  if (p.combine_early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  if (tid == 0) {
    // The tensor map's first use would otherwise fetch it on the copies' path.
    if (tma != 0) prefetch_tensormap(&map);
    if (q_by_tma) prefetch_tensormap(&qmap);
    for (int st = 0; st < kStagesTma; ++st) {
      mbar_init(base + kBarFull + 8 * st, 1);    // one producer thread (+ transaction bytes in TMA mode)
      mbar_init(base + kBarEmpty + 8 * st, 8);   // every consumer warp
    }
    for (int r = 0; r < kRawSlots; ++r) mbar_init(base + kBarRaw + 8 * r, 1);  // + transaction bytes
    mbar_init(base + kBarLanding, 1);                                          // + transaction bytes
    mbar_init(base + kBarQFull, 1);                                            // + transaction bytes
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Sequence metadata (mla_seq_plan: bad offsets leave the rows unwritten, a bad length writes
  // NaN rows). Uniform over the CTA.
  SeqPlan s;
  if (!mla_seq_plan<kRows, kKeys>(p, b, split, s)) return;

  // The first row tile's Q by TMA, in flight while the block table is scanned below.
  if (q_by_tma && tid == 0 && static_cast<int>(blockIdx.x) < s.row_tiles) {
    const TilePlan tp = tile_plan(p, s, static_cast<int>(blockIdx.x));
    if (tp.ntiles > 0) issue_q(base, qmap, s, p.H, tp.r0);
  }

  // TMA mode (and its 3 stages) for this CTA: every warp scans the same block-table entries
  // and reaches the same answer, so producer and consumers agree on the ring.
  const bool tma_mode = !kFp8 && tma != 0 && pages_inside(p, b, s, tid % 32);
  const int nst = tma_mode ? kStagesTma : Staging<kFp8>::kStages;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    producer<kFp8, kF16>(p, map, tma_mode, b, s, base, base_ptr, wt);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    // The look-ahead (the host's rule, asked again with this CTA's split and rows) needs TMA
    // mode's 4 stages: the next pair's tile a in a stage of its own.
    if constexpr (kLookahead) {
      if (mla_attention_lookahead(tma_mode, kSplitP, s.end - s.begin, s.rows_b)) {
        consumer<kQFp8, kF16, kSplitP, true>(p, q_by_tma, s, split, base, base_ptr, wg - 1, wt, nst);
        return;
      }
    }
    consumer<kQFp8, kF16, kSplitP, false>(p, q_by_tma, s, split, base, base_ptr, wg - 1, wt, nst);
  }
}

// The driver's cuTensorMapEncodeTiled, or nullptr when the driver does not offer it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The tensor map of a bf16 cache for TMA mode: the cache as [num_pages][page_size][576] with
// its page and row strides, boxes of 64 columns x 32 rows x 1 page, 128-byte swizzle (the
// layout the descriptors read). False when TMA mode does not apply (page_size not a multiple of
// 32, so a tile would straddle pages) or the driver refuses the map; the relayout path then
// runs, with the same results.
bool encode_kv_map(const MlaAttentionParams& p, CUtensorMap* map) {
  if (p.page_size % kKeys != 0) return false;
  return encode_mla_bf16_cache_map(p, kKeys, map);
}

// The tensor map of a bf16 query for Q by TMA: q as [Tq * H rows][576] (a token's heads
// consecutive rows, tokens H rows apart: q_s0 == H q_s1, q_vec's 16-byte alignment), boxes of
// 64 columns x 64 rows, 128-byte swizzle (Q's layout), zeros past the last row. One thread
// issues the 9 boxes, and the first row tile's load starts before the block-table scan; the
// register and cp.async paths took ~5,500 cycles for a tile at B = 1 on the H200 (clock64
// stamps), the longest step before the first QK. False (those paths run) for an fp8 q
// (dequantised in registers), long splits (q_tensor: the host rule
// mla_attention_q_by_tensor_copy), other strides, or a map the driver refuses.
bool encode_q_map(const MlaAttentionParams& p, bool q_fp8, CUtensorMap* map) {
  return !q_fp8 && p.q_tensor && encode_mla_q_map(p, map);
}

// A 2-D tensor map of `rows` rows of `cols` elements (`elem_bytes` each, `row_stride` elements
// apart), boxes of box_cols x box_rows, 128-byte swizzle; false when the driver offers no encoder
// or refuses the map.
bool encode_row_boxes(CUtensorMapDataType dtype, int elem_bytes, void* base, int64_t cols, int64_t rows, int64_t row_stride,
                      int box_cols, int box_rows, CUtensorMapL2promotion l2, CUtensorMap* map) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * static_cast<cuuint64_t>(elem_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t unit[2] = {1u, 1u};
  return encode(map, dtype, 2, base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// q's and o's bf16 tensor maps: boxes of 64 columns x 64 rows (Q's layout).
bool encode_bf16_row_boxes(void* base, int64_t cols, int64_t rows, int64_t row_stride, CUtensorMapL2promotion l2,
                           CUtensorMap* map) {
  return encode_row_boxes(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, cols, rows, row_stride, kAtomCols, kRows, l2, map);
}

}  // namespace

bool encode_mla_q_map(const MlaAttentionParams& p, CUtensorMap* map) {
  if (!p.q_vec || p.q_s0 != static_cast<int64_t>(p.H) * p.q_s1) return false;
  return encode_bf16_row_boxes(const_cast<void*>(p.q), kDqk, p.Tq * p.H, p.q_s1, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, map);
}

bool encode_mla_q8_map(const MlaAttentionParams& p, CUtensorMap* map) {
  if (p.q_s2 != 1 || p.q_s1 % 16 != 0 || p.q_s0 != static_cast<int64_t>(p.H) * p.q_s1 ||
      reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || p.Tq * p.H > INT32_MAX)
    return false;
  return encode_row_boxes(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, const_cast<void*>(p.q), kDqk, p.Tq * p.H, p.q_s1, 128, 32,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, map);
}

bool encode_mla_o_map(const MlaAttentionParams& p, CUtensorMap* map) {
  // o_vec: o_s2 == 1, a 16-byte aligned base and row strides; the box origin is an int.
  if (!p.o_vec || p.o_s0 != static_cast<int64_t>(p.H) * p.o_s1 || p.Tq * p.H > INT32_MAX) return false;
  return encode_bf16_row_boxes(p.o, kDv, p.Tq * p.H, p.o_s1, CU_TENSOR_MAP_L2_PROMOTION_NONE, map);
}

bool encode_mla_ws_o_map(const MlaAttentionParams& p, int box_rows, CUtensorMap* map) {
  // The workspace's rows: 2,048 bytes apart, its base from scratch_alloc (16-byte aligned at least).
  const int64_t rows = static_cast<int64_t>(p.splits) * p.Tq * p.H;
  if (p.ws_o == nullptr || reinterpret_cast<uintptr_t>(p.ws_o) % 16 != 0 || rows > INT32_MAX) return false;
  return encode_row_boxes(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, p.ws_o, kDv, rows, kDv, 32, box_rows, CU_TENSOR_MAP_L2_PROMOTION_NONE, map);
}

namespace {

// The kernel's name in the launch log (tests read it to prove the path taken): the cache and
// query dtypes, TMA mode, and ", fast P" when P is rounded once (MlaAttentionPrecision::fast).
std::string kernel_name(bool fp8, bool q_fp8, bool tma, bool split_p, bool lookahead) {
  return str("mla_attention_sm90_kernel<", fp8 ? "fp8" : "bf16", " cache, ", q_fp8 ? "fp8" : "bf16", " q",
             tma ? ", tma" : "", split_p ? "" : ", fast P", lookahead ? ", look-ahead" : "", ">");
}

template <bool kFp8, bool kQFp8, bool kSplitP, bool kLookahead>
void launch_kernel(const MlaAttentionParams& p, dim3 grid, const CUtensorMap& map, const CUtensorMap& qmap, bool tma,
                   bool q_tma, cudaStream_t s) {
  static const char tag = 0;  // one per instantiation
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_sm90_kernel<kFp8, kQFp8, kSplitP, kLookahead>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
  });
  // Names by (KV by TMA, Q by TMA); tests read them to prove the path taken.
  static const std::string names[2][2] = {
      {kernel_name(kFp8, kQFp8, false, kSplitP, kLookahead),
       kernel_name(kFp8, kQFp8, false, kSplitP, kLookahead) + " + q by tensor copy"},
      {kernel_name(kFp8, kQFp8, true, kSplitP, kLookahead),
       kernel_name(kFp8, kQFp8, true, kSplitP, kLookahead) + " + q by tensor copy"}};
  mla_attention_sm90_kernel<kFp8, kQFp8, kSplitP, kLookahead>
      <<<grid, kThreads, kSmemBytes, s>>>(p, map, qmap, tma ? 1 : 0, q_tma ? 1 : 0);
  KESTREL_LAUNCHED(names[tma][q_tma].c_str());
}

// The look-ahead is its own instantiation (bf16 caches only: it needs TMA mode's 4 stages), so
// the kernels without it keep their code size (small grids, where a CTA runs its code once,
// measured 1-2% slower with both schedules in one kernel).
template <bool kFp8, bool kQFp8, bool kSplitP>
void launch(const MlaAttentionParams& p, dim3 grid, bool lookahead, cudaStream_t s) {
  CUtensorMap map{}, qmap{};
  const bool tma = !kFp8 && encode_kv_map(p, &map);
  const bool q_tma = encode_q_map(p, kQFp8, &qmap);
  if constexpr (!kFp8) {
    if (lookahead && tma) return launch_kernel<kFp8, kQFp8, kSplitP, true>(p, grid, map, qmap, tma, q_tma, s);
  }
  launch_kernel<kFp8, kQFp8, kSplitP, false>(p, grid, map, qmap, tma, q_tma, s);
}

template <bool kSplitP>
void launch_by_dtype(const MlaAttentionParams& p, dim3 grid, bool fp8_cache, bool fp8_q, bool lookahead,
                     cudaStream_t s) {
  if (fp8_cache && fp8_q) {
    launch<true, true, kSplitP>(p, grid, lookahead, s);
  } else if (fp8_cache) {
    launch<true, false, kSplitP>(p, grid, lookahead, s);
  } else if (fp8_q) {
    launch<false, true, kSplitP>(p, grid, lookahead, s);
  } else {
    launch<false, false, kSplitP>(p, grid, lookahead, s);
  }
}

}  // namespace

bool encode_mla_bf16_cache_map(const MlaAttentionParams& p, int box_rows, CUtensorMap* map) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(kDqk), static_cast<cuuint64_t>(p.page_size),
                              static_cast<cuuint64_t>(p.num_pages)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.row_bytes), static_cast<cuuint64_t>(p.page_bytes)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kAtomCols), static_cast<cuuint32_t>(box_rows), 1u};
  const cuuint32_t unit[3] = {1u, 1u, 1u};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<uint8_t*>(p.cache), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

void launch_mla_attention_sm90(const MlaAttentionParams& p, dim3 grid, bool fp8_cache, bool fp8_q, bool split_p,
                               bool lookahead, cudaStream_t s) {
  if (split_p) {
    launch_by_dtype<true>(p, grid, fp8_cache, fp8_q, lookahead, s);
  } else {
    launch_by_dtype<false>(p, grid, fp8_cache, fp8_q, lookahead, s);
  }
}

}  // namespace kestrel::ops::cuda
