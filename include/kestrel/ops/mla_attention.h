// mla_attention: MLA attention in the absorbed form (MQA, one latent KV head of 576, V = the
// first 512 values of the same cache row) over the paged cache, for decode (q_len 1), target
// verify (q_len 1 + drafts) and short extends, bottom-right causal. Spec:
// docs/ops/mla_attention.md.
#pragma once

#include "kestrel/ops/backend.h"
#include "kestrel/ops/mla_write_kv.h"  // kMlaNope, kMlaPe, kMlaRow

namespace kestrel::ops {

// Which CUDA kernel runs (the CPU backend ignores it). `automatic` follows the pure rule
// mla_attention_cuda_kernel below; the others force a kernel (tests cover each; a forced
// kernel the device or the dtypes cannot run is NOT_SUPPORTED with the reason).
enum class MlaAttentionKernel : uint8_t {
  automatic,
  mma_sync,  // v1: mma.sync m16n8k16, cp.async double buffer (src/ops/cuda/mla_attention.cu)
  wgmma,     // v2: sm_90a WGMMA, producer warpgroup + mbarrier ring (mla_attention_sm90.cu)
  wgmma_keys_m,  // v3: sm_90a WGMMA with the keys as M, fp8 cache and fp8 q only
                 // (mla_attention_keys_m.cu): the e4m3 rows widened in the consumers' registers
  wgmma_keys_m_wide,  // v3 with 64 query rows per CTA (the value features split between its two
                      // warpgroups): fp8 cache and fp8 q, precision fast only
  wgmma_keys_m_bf16,  // v3 for a bf16 cache (mla_attention_keys_m_bf16.cu): 32 query rows per CTA,
                      // both warpgroups on every 64-key tile; bf16 or fp8 q, precision fast only
  wgmma_seesaw64,  // v4 for a bf16 cache (mla_attention_seesaw64.cu): 64 query rows per CTA, the
                   // seesaw over 64-key tiles in FlashMLA's order; bf16 or fp8 q, precision fast only
  // (the argument check refuses values past the last: keep it there when adding one)
};

// How the softmax weights P enter the P V product on the CUDA WGMMA kernel (v2). `exact` (the
// default) carries P to about f32 accuracy (P split as hi + lo in the product dtype, two
// products): o within the op's stated tolerance. `fast` rounds P once to the product dtype
// (bf16; f16 when the cache and q are both fp8), as FlashMLA and FlashInfer do: half the P V
// tensor work, and o within a further 2^-8 * kv_scale * max|v| (docs/ops/mla_attention.md,
// "Tolerance"). The CPU backend and v1 compute exactly in both modes (inside both tolerances).
enum class MlaAttentionPrecision : uint8_t { exact, fast };

// The CUDA split combine (calls with splits > 1): `automatic` takes the warp-per-row kernel where
// mla_attention_combine_by_warps says so, else CTAs per row (mla_attention_combine_parts);
// `per_row` always the latter (tests and benchmarks compare the two: same bits).
enum class MlaAttentionCombine : uint8_t { automatic, per_row };

// The CUDA schedule of v4 (the 64-key seesaw): `automatic` the flattened runs where
// mla_attention_seesaw64_flat_wins, else the uniform splits; `uniform` the plan's splits, every
// sequence cut alike (mla_attention_seesaw64_splits); `flat` the flattened runs wherever the plan
// gives more than one part (tests and benchmarks compare them). Other kernels ignore it.
enum class MlaAttentionSchedule : uint8_t { automatic, uniform, flat };

struct MlaAttentionArgs {
  TensorView o;            // [Tq, H, 512] bf16, any strides
  TensorView lse;          // optional [Tq, H] f32, any strides: ln(sum_j exp(score_j)), natural log
  TensorView q;            // [Tq, H, 576] bf16 | fp8_e4m3, any strides
  TensorView cache;        // [num_pages, page_size, 576] bf16 | fp8_e4m3; rows contiguous
                           // (stride(2) == 1), any page and row strides
  TensorView block_table;  // [B, max_pages] i32, any strides: page of KV position p of sequence b
                           // = block_table[b, p / page_size]
  TensorView seq_lens;     // [B] i32, any stride: L_b, KV positions of sequence b (new tokens included)
  TensorView q_start;      // [B + 1] i32, any stride: queries of b are tokens q_start[b] .. q_start[b+1]-1;
                           // q_start[0] == 0, non-decreasing, q_start[B] == Tq
  float softmax_scale = 0; // score = softmax_scale * q . k, > 0 and finite
  float kv_scale = 1.0f;   // fp8 cache: value = dec(byte) * kv_scale (> 0, finite); bf16: must be 1
  float q_scale = 1.0f;    // fp8 q: value = dec(byte) * q_scale (> 0, finite); bf16 q: must be 1.
                           // Both scales are folded into the QK product:
                           // score = (softmax_scale * kv_scale * q_scale) * sum_d dec(q_d) dec(k_d)
  MlaAttentionKernel cuda_kernel = MlaAttentionKernel::automatic;  // CUDA only: see above
  MlaAttentionPrecision precision = MlaAttentionPrecision::exact;  // see above
  MlaAttentionCombine cuda_combine = MlaAttentionCombine::automatic;  // CUDA only: see above
  MlaAttentionSchedule cuda_schedule = MlaAttentionSchedule::automatic;  // CUDA v4 only: see above
  // CUDA only: 0 (the default) takes the plan's split count (mla_attention_num_splits and the
  // kernel's own rebalancing, below); n in 1 .. kMlaAttentionMaxSplits cuts every sequence into n
  // KV splits on whichever kernel runs (v4: its uniform schedule, so not with cuda_schedule flat).
  // Tests and benchmarks compare counts with it.
  int32_t cuda_splits = 0;
};

void mla_attention_check(const MlaAttentionArgs& a);
Support mla_attention_supports(Backend b, const MlaAttentionArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void mla_attention(Backend b, const MlaAttentionArgs& a, Stream stream = nullptr);

// The CUDA split count (a pure function, documented in docs/ops/mla_attention.md): how many
// KV splits per (sequence, query-row tile) so that `batch * row_tiles` CTAs, times the splits,
// fill `num_sms` one CTA each, without splits shorter than kMlaAttentionMinSplitKeys keys of
// the planning length `kv_len` (the block table's capacity max_pages * page_size); splits of
// kMlaAttentionShortSplitKeys when the grid then still leaves half the SMs free (short calls
// of one or two row tiles: the combine then still launches early).
inline constexpr int64_t kMlaAttentionMinSplitKeys = 64;
inline constexpr int64_t kMlaAttentionShortSplitKeys = 32;
inline constexpr int64_t kMlaAttentionMaxSplits = 256;
int64_t mla_attention_num_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms);

// The CUDA combine kernel's CTAs per output row (a pure function, documented in
// docs/ops/mla_attention.md): 4 (a quarter of the 512 columns each) when the call has at most
// num_sms rows (Tq * H), so that few rows with many splits still spread over the GPU; else 1.
int mla_attention_combine_parts(int64_t rows, int64_t num_sms);

// Whether the CUDA combine takes one warp per output row (a pure function, documented in
// docs/ops/mla_attention.md): for calls of more than num_sms rows (Tq * H) with at most
// kMlaAttentionCombineWarpMaxSplits splits, where a warp holds every split's partial of its
// row at once (all loads in flight, no barrier) instead of a CTA per row.
inline constexpr int64_t kMlaAttentionCombineWarpMaxSplits = 4;
constexpr bool mla_attention_combine_by_warps(int64_t rows, int64_t splits, int64_t num_sms) {
  return rows > num_sms && splits > 1 && splits <= kMlaAttentionCombineWarpMaxSplits;
}

// Whether the CUDA combine kernel launches as a programmatic dependent of the attention grid of
// `ctas` CTAs (a pure function, documented in docs/ops/mla_attention.md): when that grid leaves at
// least half the SMs free, where the combine's CTAs then wait for it.
bool mla_attention_combine_early(int64_t ctas, int64_t num_sms);

// Whether the WGMMA kernel may load a bf16 query by tensor copy (TMA; a pure function,
// documented in docs/ops/mla_attention.md): when each split holds at most
// kMlaAttentionQTensorMaxKeys keys of the planning length kv_len, i.e. when a CTA's start is a
// large part of its time.
inline constexpr int64_t kMlaAttentionQTensorMaxKeys = 2048;
bool mla_attention_q_by_tensor_copy(int64_t kv_len, int64_t splits);

// Whether the WGMMA kernel's first consumer warpgroup issues the QK of its next tile before it
// waits for the other's probabilities (the look-ahead; a pure function, documented in
// docs/ops/mla_attention.md). `split_keys` keys per split, `rows` query rows (tokens x heads) of
// a sequence, `tma_mode` a bf16 cache loaded by tensor copy (4 stages: the next pair's tile a
// has a stage of its own). Yes for splits of at least kMlaAttentionLookaheadMinKeys keys
// (shorter ones lost up to 12%: the last pair's QK is wasted and the ring starts a tile
// shorter), unless P is rounded once over at most 32 rows: that kernel streams the cache at
// ~91% of copy, and the earlier wait for a tile cost it 0.5-1%. The host asks it with the
// planned sizes to pick the kernel; each CTA asks it again with its own.
inline constexpr int64_t kMlaAttentionLookaheadMinKeys = 1024;
constexpr bool mla_attention_lookahead(bool tma_mode, bool split_p, int64_t split_keys, int64_t rows) {
  return tma_mode && split_keys >= kMlaAttentionLookaheadMinKeys && (split_p || rows > 32);
}

// The CUDA kernel choice (a pure function, documented in docs/ops/mla_attention.md): a forced
// kernel stays as asked; `automatic` is, on compute capability 9.0 (the sm_90a features: wgmma,
// setmaxnreg, cp.async.bulk with mbarrier transactions), the keys-as-M kernel (v3) for an fp8
// cache with an fp8 q: at the fast precision always, at the exact one when a sequence has more
// than 32 rows (rows: its planned query rows, tokens x heads) or the call's work, batch x kv_len
// (kv_len: the planning length), is at least kMlaAttentionKeysMMinTileKeys, else the WGMMA kernel
// (v2); v1 elsewhere (H100, forty-sixth session, the exact fp8 grid on each kernel: v3 1.08-1.34x
// faster than v2 on every shape of more rows below that work, v2 2-4% faster on the H 32 decode
// below it). v3 in its wide form (64
// query rows per CTA) when the precision is fast and either 64-row tiles carry less than a quarter
// padding (4 x (ceil(rows / 64) x 64 - rows) < ceil(rows / 64) x 64) and the work in 64-row tiles,
// batch x ceil(rows / 64) x kv_len, is at least kMlaAttentionKeysMWideMinTileKeys, or rows <= 32
// and that work is at most kMlaAttentionKeysMWideMaxShortKeys (H100, forty-fifth session, the fp8
// grid on each kernel: v2 was slower than v3 on every shape; of the 23 shapes the rule then moved,
// 22 gained 1.02-1.40x and one measured 0.97x there, 1.01x in an A/B; the bound was 32768 until the
// fifty-third session, H100: with the 32-row form's partial boxes it is 1.04-1.06x faster than the
// wide one at 32768, B 1 at 32k and B 32 at 1k, and still 3-6% slower at 8192). For a bf16 cache (any q) at the fast precision, the bf16
// keys-as-M kernel when a sequence's rows fit one 32-row tile (rows <= 32: an H 32 decode) and
// batch x kv_len >= kMlaAttentionKeysMBf16MinKeys (H200, twenty-third session: 1.04-1.17x over v2
// from B 128 x 1k and B 8 x 32k up; v2 faster below, and 1.7-2x faster with more rows, where the
// 32-row tiles read the cache once per 32 rows). For a bf16 cache at the fast precision with more
// rows (rows > 32: H 64 / 96 / 128 decode, verify blocks), v4 (the 64-key seesaw) when the cache's
// pages hold whole 64-key tiles (page_size % 64 == 0: one tensor box per 64-column chunk) and each
// CTA streams at least kMlaAttentionSeesaw64MinSplitKeys keys: kv_len / mla_attention_num_splits(
// batch, ceil(rows / 64), kv_len, num_sms) (H200 grid, twenty-seventh session, docs/perf.md: v4
// 0.99-1.11x of v2 from 4096 keys a split up, 0.94-1.01x at 2048, slower below: its two stages
// and longer prologue cost more a CTA), or, with shorter splits, when the batch has more 64-row
// tiles than there are SMs, batch x ceil(rows / 64) > num_sms (one split: v4's CTAs walk the
// batch and pay that start once; H100, thirty-second session: B 128 at 1k keys, H 96 / 128 decode
// and verify 4 / 8 at H 32, 1.07-1.17x of v2) and kv_len >= kMlaAttentionSeesaw64WalkMinKeys
// (measured down to 1k), or, without the walk, when a sequence has at least
// kMlaAttentionSeesaw64SharedMinRowTiles 64-row tiles (rows > 128: verify blocks at H 32 / 96 /
// 128) and each CTA streams at least kMlaAttentionSeesaw64SharedMinSplitKeys keys (H100,
// forty-fifth session, v4 against v2 on the bf16 grid: 1.02-1.22x on 15 of the 16 shapes this
// takes, 0.995x on the other; v2 ahead at 512 keys a split, and at two row tiles a sequence with
// 8 splits of 1024 keys, 0.95-0.96x). v2 covers every call v1 supports (same limits).
inline constexpr int64_t kMlaAttentionKeysMTileRows = 32;      // query rows per CTA of the keys-as-M kernel
inline constexpr int64_t kMlaAttentionKeysMWideTileRows = 64;  // and of its wide form
inline constexpr int64_t kMlaAttentionKeysMMinTileKeys = 24576;
inline constexpr int64_t kMlaAttentionKeysMWideMinTileKeys = 98304;
inline constexpr int64_t kMlaAttentionKeysMWideMaxShortKeys = 16384;
inline constexpr int64_t kMlaAttentionKeysMBf16MinKeys = 131072;
inline constexpr int64_t kMlaAttentionSeesaw64TileRows = 64;  // query rows per CTA of v4 (and of v2)
inline constexpr int64_t kMlaAttentionSeesaw64MinSplitKeys = 4096;
inline constexpr int64_t kMlaAttentionSeesaw64WalkMinKeys = 1024;
inline constexpr int64_t kMlaAttentionSeesaw64SharedMinSplitKeys = 640;
inline constexpr int64_t kMlaAttentionSeesaw64SharedMinRowTiles = 3;
// Whether v4 walks the batch (launch_mla_attention_seesaw64): one split and more 64-row tiles than
// SMs; its grid is then one wave, floor(num_sms / row_tiles) CTAs a row tile, each taking every
// that-many-th sequence. The kernel rule and the split count's costs use the same test.
constexpr bool mla_attention_seesaw64_walks(int64_t batch, int64_t row_tiles, int64_t splits, int64_t num_sms) {
  return splits == 1 && batch * row_tiles > num_sms;
}
// v4's split count (a pure function, documented in docs/ops/mla_attention.md): the plan's
// `plan_splits` (mla_attention_num_splits), unless another count s with splits of at least
// kMlaAttentionSeesaw64MinSplitKeys keys (kv_len / s) costs less than 15/16 of it, where a
// count's cost is its waves times the keys a CTA streams plus kMlaAttentionSeesaw64CtaCostKeys
// (a CTA's start, its o and the combine, in keys of streaming): waves = ceil(batch x row_tiles x
// s / num_sms), and for s = 1 with more row tiles than SMs the walk's, ceil(batch / floor(num_sms /
// row_tiles)). A batch whose row tiles fill 1.45 waves (B 32, H 96, verify 4: 192 tiles on 132
// SMs) takes two splits in three waves instead of two whole-sequence waves.
inline constexpr int64_t kMlaAttentionSeesaw64CtaCostKeys = 512;
int64_t mla_attention_seesaw64_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t plan_splits);
// The keys-as-M kernels' (v3, fp8 cache and q) split count (a pure function, documented in
// docs/ops/mla_attention.md): the same balance as v4's above with v3's constants, splits of at
// least kMlaAttentionKeysMMinSplitKeys keys and kMlaAttentionKeysMCtaCostKeys a CTA, and no walk
// (v3's grid is always row tiles x splits x sequences). The plan's one wave leaves a third of the
// SMs idle where a batch has 96 row tiles (B 32 H 96 decode and verify 2, B 8 H 96 verify 8) and
// a half-empty second wave at 192 (B 32 H 96 verify 4); these take 4 splits from ~11k keys and 2
// from ~3k, and 48 tiles (B 8 H 96 verify 4) 5 from ~15k. The CTA's cost, 1000 keys, is fitted to
// forced counts on an H100 (15 shapes at 8k, 16k and 32k, counts 1, 2, 4, 5, 8;
// docs/ops/mla_attention.md): more than v4's 512, so 8k keys stay one wave at 96 tiles, and less
// than the 1200 of three shape pairs, which kept B 8 H 96 verify 4 (48 tiles) at 2 splits at 16k
// where 5 measured 1.10x.
inline constexpr int64_t kMlaAttentionKeysMMinSplitKeys = 1024;
inline constexpr int64_t kMlaAttentionKeysMCtaCostKeys = 1000;
int64_t mla_attention_keys_m_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t plan_splits);
// Whether v3's wide form sends a whole 64-row tile's o out as 4 boxes a warpgroup by tensor copy
// (one thread) from the stages rather than as 16 stores a thread (where o's tokens are H rows
// apart): where the call has one split (a split's partials stay f32 rows), the kernel that has them
// (its own instantiation). Measured (H100, docs/perf.md): 1.055-1.087x at 1k keys (B 32 / 128,
// forty-sixth session, with the Q by tensor copy), 1.034x at B 8; its CTA timeline put the o
// stores at 2.8 us against 6.2. Then its tile loop ran 2% slower (4 bytes of spills) and 8k keys
// lost (0.97-0.99x), so it was bound to 2048 keys; with the stores from two bases a thread (no
// spills) it gains there too (forty-eighth session, 3 rounds against the bound: 1.009-1.021x on six
// 8k one-split wide shapes, 0.996x at decode B 128 32k H 128); the bound went in the forty-ninth,
// once its tests past 2048 keys passed on the device.
constexpr bool mla_attention_keys_m_o_boxes(int64_t splits) { return splits == 1; }
// Whether v3's 32-row form sends a whole row tile's f32 split partial out as 16 boxes by tensor copy
// from the stages (stage_partials) rather than as 32 scattered 16-byte stores a writer thread:
// where the call has splits of at most kMlaAttentionKeysMPartialBoxMaxKeys keys of the planning
// length, the kernel that has them (its own instantiation, which spills 80 / 84 bytes against the
// rows' 28 / 28). Measured (H100, fifty-second session, docs/perf.md, every fp8 fast dispatch case):
// 1.03-1.18x on the 35 shapes with splits of 32-1639 keys (decode B8 8k H 32 1.09x, verify 2 B8
// 1k H 32 1.18x), 1.008-1.014x at 2048 (B8 32k and B32 8k, H 32 decode), 0.985-0.997x from 4096
// (decode B8 32k and B32 16k / 32k at H 96, B32 32k at H 32). The wide form keeps its rows (its
// boxes measured 0.87-1.01x).
inline constexpr int64_t kMlaAttentionKeysMPartialBoxMaxKeys = 2048;
constexpr bool mla_attention_keys_m_partial_boxes(int64_t kv_len, int64_t splits) {
  return splits > 1 && (kv_len + splits - 1) / splits <= kMlaAttentionKeysMPartialBoxMaxKeys;
}
// v3 wide's walk with its lead (a pure function, docs/ops/mla_attention.md): where the call has one
// split (the o boxes) and more row tiles than SMs (batch x row_tiles > num_sms), floor(num_sms /
// row_tiles) CTAs a row tile (at least one, at most the batch), each walking every that-many-th
// sequence and loading a row tile's Q and first two KV tiles under the end of the one before; 0
// (one CTA an item, no walk) otherwise. The forty-sixth session's walk without the lead measured
// 1.007-1.047x at B 128 with 1k keys (H100): what a row tile pays beyond its tiles is inside the
// CTA (plan, Q, first tile; the o boxes), which only the lead overlaps.
int64_t mla_attention_keys_m_walkers(int64_t batch, int64_t row_tiles, int64_t splits, int64_t num_sms);
// Whether v4 sends a whole 64-row tile's o out as 4 boxes a warpgroup by tensor copy (one
// thread) rather than as 128 row copies (where o's tokens are H rows apart and a split writes o
// itself): where a split streams at most kMlaAttentionSeesaw64OBoxMaxKeys keys of the planning
// length, the kernel that has them (its own instantiation). Measured (H100, thirty-eighth session,
// docs/perf.md): 1.035-1.054x at 1k keys (B 128: decode and verify 2 / 8 at H 128, verify 4 at
// H 96; verify 8 1.067x under the power cap). With the boxes' code in the one kernel, 4k was
// neutral and 8k lost 1.6-2% (decode B 128 H 128), even where the row copies ran, so the long
// splits keep a kernel without it.
inline constexpr int64_t kMlaAttentionSeesaw64OBoxMaxKeys = 2048;
constexpr bool mla_attention_seesaw64_o_boxes(int64_t kv_len, int64_t splits) {
  return splits >= 1 && (kv_len + splits - 1) / splits <= kMlaAttentionSeesaw64OBoxMaxKeys;
}

// v4's flattened schedule (a pure plan, documented in docs/ops/mla_attention.md): every sequence
// planned at T = ceil(kv_len / 64) tiles and charged `lead` tiles more for the start of an item
// (kMlaAttentionSeesaw64FlatLeadTiles), so that sequence b holds the virtual tiles [b V, b V + V),
// V = T + lead, its real tile k at b V + lead + k. The batch's B x V virtual tiles in order are
// cut into `parts` runs of `run` (the last shorter), one run per (row tile, part) CTA: grid
// (row_tiles, 1, parts), parts <= floor(num_sms / row_tiles). A run that takes a sequence's start
// pays its lead out of its tiles, so CTAs of two items stream fewer keys than CTAs of one.
// Sequence b's tiles fall to parts mla_flat_first_part(b) .. + mla_flat_segments(b) - 1; a
// sequence of one segment writes o itself, one of more writes a partial per segment into
// workspace slot (part - first part), `slots` the most any sequence has, and the combine merges
// those. parts = 0: not taken (fewer than two parts, or no sequence cut: the uniform plan then
// does the same).
struct MlaFlatPlan {
  int64_t parts = 0, tiles = 0, run = 0, slots = 0, lead = 0;
};
// An item's start and end beside its keys, in 64-key tiles: the forty-third session's timeline at
// verify 4 B8 8k H 96 (H100) put a CTA's second item at ~7.8 us more than its pairs, 1.71 us a
// tile, so ~4.6 tiles; with lead 0 the CTAs of two items ended ~9 us after those of one.
inline constexpr int64_t kMlaAttentionSeesaw64FlatLeadTiles = 5;
MlaFlatPlan mla_attention_seesaw64_flat_plan(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms);
// The keys a run of plan f streams on average (an even cut of the batch's tiles, without the
// leads): the size the rule below was measured at.
constexpr int64_t mla_flat_run_keys(int64_t batch, const MlaFlatPlan& f) {
  return f.parts > 0 ? 64 * ((batch * f.tiles + f.parts - 1) / f.parts) : 0;
}
// Whether `automatic` takes the flattened plan f over v4's uniform split count `splits`, as
// measured (H100; docs/perf.md), in two regions:
// - the uniform grid runs more than one wave of CTAs without walking the batch (batch x row_tiles
//   x splits > num_sms, splits > 1), and each run streams at least kMlaAttentionSeesaw64MinSplitKeys
//   keys: 1.07-1.15x (thirty-third session; B 8 / 32 at 8k / 32k, H 96: 384 CTAs in 2.9 waves);
// - the uniform grid is one wave that leaves at least an eighth of the SMs idle (8 x CTAs <= 7 x
//   num_sms; B 8 verify 4 / 8 and B 32 verify 2 at H 96: 96 CTAs of 132), and each run streams at
//   least kMlaAttentionSeesaw64MinSplitKeys keys, or kMlaAttentionSeesaw64FlatIdleMinKeys where
//   the uniform grid splits already (it pays a combine too): forty-second session, 1.01-1.10x at
//   8k (runs of 6016 keys; verify 4 B8, 2 splits against runs of 3008: 1.085x) and 1.09-1.16x at
//   16k, but 0.89-0.95x at 4k (one split of 4096 keys against runs of 3008 and the combine).
// Elsewhere the uniform splits stay: on a nearly full wave the flattened runs measured 0.83-1.05x
// (thirty-third session), against a walked batch 0.74-1.10x, and with runs of ~1k keys 0.59-0.86x.
inline constexpr int64_t kMlaAttentionSeesaw64FlatIdleMinKeys = 2048;
constexpr bool mla_attention_seesaw64_flat_wins(int64_t batch, int64_t row_tiles, int64_t splits, int64_t num_sms,
                                                const MlaFlatPlan& f) {
  if (f.parts <= 0) return false;
  const int64_t ctas = batch * row_tiles * splits, run_keys = mla_flat_run_keys(batch, f);
  if (splits > 1 && ctas > num_sms) return run_keys >= kMlaAttentionSeesaw64MinSplitKeys;
  if (8 * ctas > 7 * num_sms) return false;  // (one wave, so no walk)
  return run_keys >= (splits > 1 ? kMlaAttentionSeesaw64FlatIdleMinKeys : kMlaAttentionSeesaw64MinSplitKeys);
}
// In the callers' integer type: int64_t on the host, int in the kernels (the host checks batch x
// (tiles + lead) < 2^31 before it takes the plan), one definition for both.
template <typename I>
constexpr I mla_flat_first_part(I b, I tiles, I lead, I run) {
  return (b * (tiles + lead) + lead) / run;
}
template <typename I>
constexpr I mla_flat_segments(I b, I tiles, I lead, I run) {
  return (b * (tiles + lead) + lead + tiles - 1) / run - mla_flat_first_part(b, tiles, lead, run) + 1;
}

// (page_size and num_sms: the defaults are the engine's page and an H200's SMs, for the tests)
MlaAttentionKernel mla_attention_cuda_kernel(MlaAttentionKernel requested, int cc_major, int cc_minor,
                                             bool fp8_cache_and_q, int64_t rows, int64_t batch, int64_t kv_len,
                                             bool fast_precision, bool bf16_cache = false, int64_t page_size = 64,
                                             int64_t num_sms = 132);

namespace cpu {
void mla_attention(const MlaAttentionArgs& a);
}
namespace cuda {
Support mla_attention_supports(const MlaAttentionArgs& a);
void mla_attention(const MlaAttentionArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
