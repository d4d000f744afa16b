// mla_attention: the argument check shared by every backend, the split-count rule, and the
// dispatch.
#include "kestrel/ops/mla_attention.h"

#include <algorithm>
#include <cmath>

#include "mla_checks.h"

namespace kestrel::ops {

void mla_attention_check(const MlaAttentionArgs& a) {
  constexpr const char* op = "mla_attention";
  // rank
  check_rank(op, "o", a.o, 3, "[Tq, H, 512]");
  if (a.lse.defined()) check_rank(op, "lse", a.lse, 2, "[Tq, H]");
  check_rank(op, "q", a.q, 3, "[Tq, H, 576]");
  check_rank(op, "cache", a.cache, 3, mla::kCacheDims);
  check_rank(op, "block_table", a.block_table, 2, "[B, max_pages]");
  check_rank(op, "seq_lens", a.seq_lens, 1, "[B]");
  check_rank(op, "q_start", a.q_start, 1, "[B + 1]");
  // device
  if (a.lse.defined()) check_same_device(op, "lse", a.lse, "o", a.o);
  check_same_device(op, "q", a.q, "o", a.o);
  check_same_device(op, "cache", a.cache, "o", a.o);
  check_same_device(op, "block_table", a.block_table, "o", a.o);
  check_same_device(op, "seq_lens", a.seq_lens, "o", a.o);
  check_same_device(op, "q_start", a.q_start, "o", a.o);
  // dtype
  check_dtype(op, "o", a.o, {DType::bf16});
  if (a.lse.defined()) check_dtype(op, "lse", a.lse, {DType::f32});
  check_dtype(op, "q", a.q, {DType::bf16, DType::fp8_e4m3});
  check_dtype(op, "cache", a.cache, {DType::bf16, DType::fp8_e4m3});
  check_dtype(op, "block_table", a.block_table, {DType::i32});
  check_dtype(op, "seq_lens", a.seq_lens, {DType::i32});
  check_dtype(op, "q_start", a.q_start, {DType::i32});
  // layout
  check_strides(op, "o", a.o);
  check_no_self_overlap(op, "o", a.o);
  if (a.lse.defined()) {
    check_strides(op, "lse", a.lse);
    check_no_self_overlap(op, "lse", a.lse);
  }
  check_strides(op, "q", a.q);
  mla::check_cache_layout(op, a.cache);
  check_strides(op, "block_table", a.block_table);
  check_strides(op, "seq_lens", a.seq_lens);
  check_strides(op, "q_start", a.q_start);
  // shapes and their relations
  const int64_t Tq = a.q.size(0), H = a.q.size(1), B = a.block_table.size(0);
  check_size(op, "q", a.q, 2, kMlaRow, "576 = c_kv 512 + k_pe 64");
  if (H < 1) fail_arg(op, "q", "H >= 1 heads", str("shape ", a.q.shape_str()));
  check_size(op, "o", a.o, 0, Tq, "Tq (q.size(0))");
  check_size(op, "o", a.o, 1, H, "H (q.size(1))");
  check_size(op, "o", a.o, 2, kMlaNope, "512 = V width (c_kv)");
  if (a.lse.defined()) {
    check_size(op, "lse", a.lse, 0, Tq, "Tq (q.size(0))");
    check_size(op, "lse", a.lse, 1, H, "H (q.size(1))");
  }
  mla::check_cache_shape(op, a.cache);
  check_size(op, "seq_lens", a.seq_lens, 0, B, "B (block_table.size(0))");
  check_size(op, "q_start", a.q_start, 0, B + 1, "B + 1 (block_table.size(0) + 1)");
  // scalars
  check_positive_finite(op, "softmax_scale", a.softmax_scale);
  mla::check_scale(op, "kv_scale", a.kv_scale, a.cache.dtype);
  check_positive_finite(op, "q_scale", a.q_scale);
  if (a.q.dtype == DType::bf16 && a.q_scale != 1.0f)
    fail_arg(op, "q_scale", "1 for a bf16 q (only an fp8 q carries a per-tensor scale)", str(a.q_scale));
  if (a.precision != MlaAttentionPrecision::exact && a.precision != MlaAttentionPrecision::fast)
    fail_arg(op, "precision", "MlaAttentionPrecision::exact or ::fast", str(static_cast<int>(a.precision)));
  if (a.cuda_combine != MlaAttentionCombine::automatic && a.cuda_combine != MlaAttentionCombine::per_row)
    fail_arg(op, "cuda_combine", "MlaAttentionCombine::automatic or ::per_row", str(static_cast<int>(a.cuda_combine)));
  if (static_cast<int>(a.cuda_schedule) > static_cast<int>(MlaAttentionSchedule::flat))
    fail_arg(op, "cuda_schedule", "MlaAttentionSchedule::automatic, ::uniform or ::flat", str(static_cast<int>(a.cuda_schedule)));
  if (a.cuda_splits < 0 || a.cuda_splits > kMlaAttentionMaxSplits)
    fail_arg(op, "cuda_splits", str("0 (the plan's count) or a count in 1 .. ", kMlaAttentionMaxSplits), str(a.cuda_splits));
  if (a.cuda_splits > 0 && a.cuda_schedule == MlaAttentionSchedule::flat)
    fail_arg(op, "cuda_splits", "0 with cuda_schedule flat (the flattened runs plan their own segments)", str(a.cuda_splits));
  // (a value outside the enum would otherwise reach the CUDA dispatch, which runs v1 for any kernel
  // it does not name)
  if (static_cast<int>(a.cuda_kernel) > static_cast<int>(MlaAttentionKernel::wgmma_seesaw64))
    fail_arg(op, "cuda_kernel",
             "a MlaAttentionKernel (automatic, mma_sync, wgmma, wgmma_keys_m, wgmma_keys_m_wide, wgmma_keys_m_bf16, "
             "wgmma_seesaw64)",
             str(static_cast<int>(a.cuda_kernel)));
}

// Fill the GPU with one wave: batch * row_tiles CTAs already exist per split; multiply them
// up to num_sms (floor: a partial second wave would not finish sooner than one longer wave),
// but never cut the planning length into splits of fewer than kMlaAttentionMinSplitKeys keys
// (64: two KV tiles). Each split writes 64 x 512 f32 partials (128 KB) and the combine reads
// them back, more bytes than 64 keys of KV; but small batches are latency-bound, not
// bandwidth-bound: on the H200 one 32-key tile costs the v1 kernel ~5.5 us, so B = 1 at 1k
// keys took 55 us as 4 splits of 256 keys (measured); it is cut into 32 splits of 32 now (below).
// Splits of one 32-key tile where the grid of them still leaves half the SMs free (then the
// combine still launches early, mla_attention_combine_early): the CTA's pair of tiles becomes
// one tile, and its start a larger part of its time. Measured on the H200 (thirteenth session,
// docs/perf.md): B = 1, 1k keys, H = 32 11.64 -> 10.81 us (fp8 cache 1.15x), H = 96 / 128 and
// verify 2 / 4 at H = 32 1.02-1.04x; where the doubled grid would pass half the SMs (verify 2 at
// H = 96 / 128, verify 8 at H = 32) it measured 0.81-0.88x, and the rule keeps 64 there.
int64_t mla_attention_num_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms) {
  const int64_t base = std::max<int64_t>(1, batch * row_tiles);
  const int64_t fill = std::max<int64_t>(1, num_sms / base);
  const int64_t by_short = std::max<int64_t>(1, kv_len / kMlaAttentionShortSplitKeys);
  if (mla_attention_combine_early(base * by_short, num_sms)) return std::min(by_short, kMlaAttentionMaxSplits);
  const int64_t by_len = std::max<int64_t>(1, kv_len / kMlaAttentionMinSplitKeys);
  return std::min({fill, by_len, kMlaAttentionMaxSplits});
}

namespace {
// A uniform split count's cost, for the balanced counts below (mla_attention_seesaw64_splits says
// how it is counted): waves x (keys a CTA streams + cta_cost_keys); with `walks`, one split over
// more row tiles than SMs is v4's walk, floor(num_sms / row_tiles) CTAs a row tile.
int64_t mla_attention_uniform_cost(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t splits,
                                   int64_t cta_cost_keys, bool walks) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t items = std::max<int64_t>(1, batch * row_tiles), sms = std::max<int64_t>(1, num_sms);
  const int64_t waves = walks && mla_attention_seesaw64_walks(batch, row_tiles, splits, sms)
                            ? ceil_div(batch, std::max<int64_t>(1, sms / row_tiles))
                            : ceil_div(items * splits, sms);
  return waves * (ceil_div(kv_len, splits) + cta_cost_keys);
}

// The plan's count unless another with splits of at least min_split_keys keys costs under 15/16 of it.
int64_t mla_attention_balanced_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t plan_splits,
                                      int64_t min_split_keys, int64_t cta_cost_keys, bool walks) {
  const auto cost = [&](int64_t s) { return mla_attention_uniform_cost(batch, row_tiles, kv_len, num_sms, s, cta_cost_keys, walks); };
  int64_t best = plan_splits, best_cost = 15 * cost(plan_splits) / 16;
  for (int64_t s = 1; s <= kMlaAttentionMaxSplits && kv_len / s >= min_split_keys; ++s) {
    if (const int64_t c = cost(s); c < best_cost) {
      best = s;
      best_cost = c;
    }
  }
  return best;
}
}  // namespace

int64_t mla_attention_seesaw64_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t plan_splits) {
  return mla_attention_balanced_splits(batch, row_tiles, kv_len, num_sms, plan_splits, kMlaAttentionSeesaw64MinSplitKeys,
                                       kMlaAttentionSeesaw64CtaCostKeys, /*walks=*/true);
}

int64_t mla_attention_keys_m_splits(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms, int64_t plan_splits) {
  return mla_attention_balanced_splits(batch, row_tiles, kv_len, num_sms, plan_splits, kMlaAttentionKeysMMinSplitKeys,
                                       kMlaAttentionKeysMCtaCostKeys, /*walks=*/false);
}

int64_t mla_attention_keys_m_walkers(int64_t batch, int64_t row_tiles, int64_t splits, int64_t num_sms) {
  if (splits != 1 || batch < 1 || row_tiles < 1 || batch * row_tiles <= num_sms) return 0;
  return std::min(batch, std::max<int64_t>(1, num_sms / row_tiles));
}

MlaFlatPlan mla_attention_seesaw64_flat_plan(int64_t batch, int64_t row_tiles, int64_t kv_len, int64_t num_sms) {
  MlaFlatPlan f;
  if (batch < 1 || row_tiles < 1 || kv_len < 1) return f;
  const int64_t tiles = (kv_len + 63) / 64;
  const int64_t parts = std::min(std::max<int64_t>(1, num_sms) / row_tiles, batch * tiles);
  if (parts < 2) return f;
  // The leads only where a run is longer than a lead, so that every run holds a real tile (no CTA
  // goes without an item).
  int64_t lead = kMlaAttentionSeesaw64FlatLeadTiles;
  int64_t run = (batch * (tiles + lead) + parts - 1) / parts;
  if (run <= lead) {
    lead = 0;
    run = (batch * tiles + parts - 1) / parts;
  }
  const int64_t total = batch * (tiles + lead);
  int64_t slots = 1;
  for (int64_t b = 0; b < batch; ++b) slots = std::max(slots, mla_flat_segments(b, tiles, lead, run));
  if (slots < 2) return f;
  f.parts = (total + run - 1) / run;  // (fewer than `parts` where run rounds up)
  f.tiles = tiles;
  f.run = run;
  f.slots = slots;
  f.lead = lead;
  return f;
}

// Few rows (B = 1 decode and verify: H to 4H rows) with many splits leave most SMs idle when a
// CTA merges a whole row, and the combine is then latency-bound (H200, B = 1, H = 32, 8k keys:
// 24 us of the op's 29); a quarter row per CTA gave 1.1-1.3x on those calls and cost up to 1.5x
// where the rows fill the GPU already (B = 32, H = 128: 4096 rows), hence the cut at num_sms.
int mla_attention_combine_parts(int64_t rows, int64_t num_sms) { return rows <= num_sms ? 4 : 1; }

// A combine launched as a programmatic dependent has its CTAs resident and waiting before the
// attention grid ends, which hides its launch at B = 1; where the attention grid fills the GPU
// those CTAs take the few free SMs and then do all the merging from there (H200, sixth session:
// B = 1 at 32k keys, 128 CTAs, 39.7 -> 49.4 us). Hence only grids that leave half the SMs free.
bool mla_attention_combine_early(int64_t ctas, int64_t num_sms) { return 2 * ctas <= num_sms; }

// Q by tensor copy starts a CTA's first QK ~2 us sooner at B = 1 (its Q lands while the block
// table is read) and gave 1.07-1.26x on short splits; a CTA that then streams thousands of keys
// gains nothing from that and measured slower with it (H200, same job: B = 128, H = 128, 8k keys
// 757 -> 794 us exact, 629 -> 655 fast P; B = 32 at 32k fast P 330 -> 339), so long splits keep
// the cp.async / register paths.
bool mla_attention_q_by_tensor_copy(int64_t kv_len, int64_t splits) {
  return (kv_len + splits - 1) / splits <= kMlaAttentionQTensorMaxKeys;
}

// The keys-as-M kernel runs the fp8 cache with an fp8 q 1.07-2.0x faster than v2 wherever the
// call has work enough (H 32 decode B 128 at 8k: 177 against 355 us with P rounded once; H 96 B
// 128 1.40x; H 96 / 128 and verify 2 / 4 / 8 at 8k keys 1.07-1.17x from B 1 up, B 1 H 96 1.11x);
// with less work v2's shorter start wins (H 32 decode B 1 at 1k-8k, B 8 at 1k: 0.88-0.94x; B 1 at
// 32k and B 32 at 1k about even). H200, docs/perf.md (eighteenth session).
// Its wide form (64 query rows per CTA, fast precision) ran 1.09-1.27x faster than the 32-row one
// wherever 64-row tiles are full and the call has work enough (H 128 decode and verify 4 / 8 at
// H 32 from B 8 up, verify 2 from B 32; B 128 8k: H 128 590 -> 469 us, verify 4 584 -> 469), and
// 0.95-0.97x at B 1 (8k keys) and at H 96 with B 8 / 128 (a 64-row tile of its 96 rows is half
// padding; B 32 1.10x). H200, docs/perf.md (twentieth session).
MlaAttentionKernel mla_attention_cuda_kernel(MlaAttentionKernel requested, int cc_major, int cc_minor,
                                             bool fp8_cache_and_q, int64_t rows, int64_t batch, int64_t kv_len,
                                             bool fast_precision, bool bf16_cache, int64_t page_size, int64_t num_sms) {
  if (requested != MlaAttentionKernel::automatic) return requested;
  if (!(cc_major == 9 && cc_minor == 0)) return MlaAttentionKernel::mma_sync;
  if (bf16_cache && fast_precision && rows <= kMlaAttentionKeysMTileRows && batch * kv_len >= kMlaAttentionKeysMBf16MinKeys)
    return MlaAttentionKernel::wgmma_keys_m_bf16;
  if (bf16_cache && fast_precision && rows > kMlaAttentionKeysMTileRows && page_size % 64 == 0) {
    const int64_t tiles = (rows + kMlaAttentionSeesaw64TileRows - 1) / kMlaAttentionSeesaw64TileRows;
    const int64_t splits = mla_attention_num_splits(batch, tiles, kv_len, num_sms);
    if (kv_len / splits >= kMlaAttentionSeesaw64MinSplitKeys) return MlaAttentionKernel::wgmma_seesaw64;
    // More row tiles than SMs (then one split): v4's CTAs walk the batch, paying their start once.
    const bool walks = mla_attention_seesaw64_walks(batch, tiles, splits, num_sms);
    if (walks && kv_len >= kMlaAttentionSeesaw64WalkMinKeys) return MlaAttentionKernel::wgmma_seesaw64;
    // Without the walk, three or more row tiles a sequence from splits of 640 keys (measured: v4
    // ahead of v2 there; v2 ahead at 512-key splits, and at two row tiles a sequence with splits).
    if (!walks && tiles >= kMlaAttentionSeesaw64SharedMinRowTiles && kv_len / splits >= kMlaAttentionSeesaw64SharedMinSplitKeys)
      return MlaAttentionKernel::wgmma_seesaw64;
  }
  if (!fp8_cache_and_q) return MlaAttentionKernel::wgmma;
  const int64_t tiles = (rows + kMlaAttentionKeysMTileRows - 1) / kMlaAttentionKeysMTileRows;
  // At the fast precision v3 at any size (v2 was slower on every grid shape); the exact one too,
  // but for the little work of a sequence of at most 32 rows (the H 32 decode), where v2's start
  // is shorter (forty-sixth session: v2 2-4% faster there, v3 1.08-1.34x faster with more rows).
  if (!fast_precision && rows <= kMlaAttentionKeysMTileRows && batch * tiles * kv_len < kMlaAttentionKeysMMinTileKeys)
    return MlaAttentionKernel::wgmma;
  const int64_t wide_tiles = (rows + kMlaAttentionKeysMWideTileRows - 1) / kMlaAttentionKeysMWideTileRows;
  const int64_t wide_rows = wide_tiles * kMlaAttentionKeysMWideTileRows;
  const int64_t wide_work = batch * wide_tiles * kv_len;
  // Wide where its tiles are nearly full and the work large, and for the little work of a
  // sequence of at most 32 rows (the H 32 decode: 3-6% faster wide at 8192, B 1 at 8k and B 8 at
  // 1k, half its tile padding and all; at 32768 the 32-row form with its partial boxes is 4-6%
  // faster; between the two not measured).
  const bool wide = fast_precision && ((4 * (wide_rows - rows) < wide_rows && wide_work >= kMlaAttentionKeysMWideMinTileKeys) ||
                                       (rows <= kMlaAttentionKeysMTileRows && wide_work <= kMlaAttentionKeysMWideMaxShortKeys));
  return wide ? MlaAttentionKernel::wgmma_keys_m_wide : MlaAttentionKernel::wgmma_keys_m;
}

Support mla_attention_supports(Backend b, const MlaAttentionArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::mla_attention_supports(a);
}

void mla_attention(Backend b, const MlaAttentionArgs& a, Stream stream) {
  mla_attention_check(a);
  check_device("mla_attention", "o", a.o, backend_device(b));
  require_support("mla_attention", b, mla_attention_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_attention(a);
  } else {
    cuda::mla_attention(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support mla_attention_supports(const MlaAttentionArgs&) { return Support::no("built without CUDA"); }
void mla_attention(const MlaAttentionArgs&, Stream) { throw Error("mla_attention: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
