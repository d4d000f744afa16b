// mla_attention benchmarks: absorbed MLA over the paged cache (page_size 64) for decode
// (q_len 1) and target verify (q_len 2, 4, 8), B sequences of one context length each, at the
// head counts of Kimi-Linear (32) and K3-class per-GPU shapes (96 on two GPUs, 128 on one),
// bf16 and fp8 caches.
// Bytes: the KV rows read (B * ctx * 576 * element size) + q + o; FLOPs: 2 * H * (576 + 512)
// per attended key per query (bottom-right causal: query i of n attends ctx - n + i + 1 keys).
// "-qfp8" cases: an fp8 query (q_scale 0.75) with the fp8 cache, as the engine's fp8 decode and
// verify paths call it (compare with the same case without the suffix: the bf16 query).
// "-fastP" cases: MlaAttentionPrecision::fast (P rounded once before P V, as FlashMLA computes
// it): the bf16 cache over the whole grid (FlashMLA's shapes) and the fp8 cache with an fp8 query
// over the same grid; compare with the same case without the suffix (exact, the default).
#include <utility>
#include <vector>

#include "cases.h"
#include "fixed_ints.h"
#include "kestrel/ops/mla_attention.h"

namespace kestrel::bench {

namespace {
constexpr int64_t kPage = 64;
}

void add_mla_attention_benches(Registry& r) {
  // (cache, q): an fp8 q only with the fp8 cache, the engine's fp8-cache path.
  const std::pair<DType, DType> dtypes[] = {
      {DType::bf16, DType::bf16}, {DType::fp8_e4m3, DType::bf16}, {DType::fp8_e4m3, DType::fp8_e4m3}};
  // One case; `kernel` forces a CUDA kernel ("mla_attention_v1/..." for v1, mma.sync, to compare
  // with the automatic choice, the WGMMA kernel on an H200).
  auto add = [&r](DType dt, DType q_dt, int64_t H, int64_t q_len, int64_t B, int64_t ctx,
                  ops::MlaAttentionKernel kernel,
                  ops::MlaAttentionPrecision precision = ops::MlaAttentionPrecision::exact,
                  ops::MlaAttentionSchedule schedule = ops::MlaAttentionSchedule::automatic, int32_t splits = 0) {
    const bool fast = precision == ops::MlaAttentionPrecision::fast;
    const bool fp8_q = q_dt == DType::fp8_e4m3;
    const int64_t Tq = B * q_len, max_pages = (ctx + kPage - 1) / kPage;
    const int64_t num_pages = 1 + B * max_pages;  // page 0 is the sink
    Case c;
    c.name = str(splits > 0                                          ? "mla_attention_splits/"
                 : schedule == ops::MlaAttentionSchedule::flat        ? "mla_attention_s64flat/"
                 : schedule == ops::MlaAttentionSchedule::uniform ? "mla_attention_s64uniform/"
                 : kernel == ops::MlaAttentionKernel::mma_sync       ? "mla_attention_v1/"
                 : kernel == ops::MlaAttentionKernel::wgmma_keys_m ? "mla_attention_km/"
                 : kernel == ops::MlaAttentionKernel::wgmma_keys_m_wide ? "mla_attention_kmw/"
                 : kernel == ops::MlaAttentionKernel::wgmma_keys_m_bf16 ? "mla_attention_kmb/"
                 : kernel == ops::MlaAttentionKernel::wgmma_seesaw64    ? "mla_attention_s64/"
                 : kernel == ops::MlaAttentionKernel::wgmma        ? "mla_attention_v2/"
                                                                   : "mla_attention/",
                 q_len == 1 ? "decode" : str("verify", q_len), "-B", B, "-ctx", ctx, "-H", H, "-", dtype_name(dt),
                 fp8_q ? "-qfp8" : "", fast ? "-fastP" : "", splits > 0 ? str("-sp", splits) : std::string());
    c.buffers = {{"o", DType::bf16, {Tq, H, ops::kMlaNope}},
                 {"lse", DType::f32, {Tq, H}},
                 {"q", q_dt, {Tq, H, ops::kMlaRow}},
                 {"cache", dt, {num_pages, kPage, ops::kMlaRow}},
                 // Random live pages: non-contiguous like a real pool (repeats are harmless).
                 {"block_table", DType::i32, {B, max_pages}, Fill::ints(1, num_pages - 1)},
                 {"seq_lens", DType::i32, {B}, Fill::ints(ctx, ctx)},
                 // Cumulative offsets cannot come from a random fill: written on first use.
                 {"q_start", DType::i32, {B + 1}, Fill::ints(0, 0)}};
    const double keys = static_cast<double>(B) * (q_len * ctx - q_len * (q_len - 1) / 2);
    c.bytes = static_cast<double>(B) * ctx * ops::kMlaRow * static_cast<double>(dtype_size(dt)) +
              tensor_bytes(q_dt, {Tq, H, ops::kMlaRow}) + tensor_bytes(DType::bf16, {Tq, H, ops::kMlaNope});
    c.flops = 2.0 * static_cast<double>(H) * (ops::kMlaRow + ops::kMlaNope) * keys;
    c.tokens = static_cast<double>(Tq);
    std::vector<int32_t> starts(static_cast<size_t>(B + 1));
    for (int64_t i = 0; i <= B; ++i) starts[i] = static_cast<int32_t>(i * q_len);
    const FixedInts q_start(std::move(starts));
    c.run = [q_start, dt, fp8_q, kernel, precision, schedule, splits](const std::vector<TensorView>& b, Stream s) {
      q_start.ensure(b[6]);
      ops::MlaAttentionArgs a;
      a.o = b[0];
      a.lse = b[1];
      a.q = b[2];
      a.cache = b[3];
      a.block_table = b[4];
      a.seq_lens = b[5];
      a.q_start = b[6];
      a.softmax_scale = 0.0721687836f;  // 192^-0.5 (Kimi MLA)
      a.kv_scale = dt == DType::fp8_e4m3 ? 0.5f : 1.0f;
      a.q_scale = fp8_q ? 0.75f : 1.0f;
      a.cuda_kernel = kernel;
      a.precision = precision;
      a.cuda_schedule = schedule;
      a.cuda_splits = splits;
      ops::mla_attention(ops::Backend::cuda, a, s);
    };
    r.add(std::move(c));
  };
  for (const auto& dtype_pair : dtypes) {
    const DType dt = dtype_pair.first, q_dt = dtype_pair.second;
    for (const int64_t H : {32, 96, 128})
      for (const int64_t q_len : {1, 2, 4, 8})
        for (const int64_t B : {1, 8, 32, 128})
          for (const int64_t ctx : {1024, 8192, 32768}) add(dt, q_dt, H, q_len, B, ctx, ops::MlaAttentionKernel::automatic);
  }
  // The fast precision (P rounded once, as FlashMLA computes it) with the bf16 cache over the
  // whole grid: the cases `.peers/flashmla-bench --grid` runs (bench/peers/flashmla_dense.cu),
  // compared by scripts/flashmla-compare. Then the fp8 cache with an fp8 query at B 128 8k
  // (decode and verify 4, H 32 and 128).
  constexpr auto fast = ops::MlaAttentionPrecision::fast;
  constexpr auto automatic = ops::MlaAttentionKernel::automatic;
  for (const int64_t H : {32, 96, 128})
    for (const int64_t q_len : {1, 2, 4, 8})
      for (const int64_t B : {1, 8, 32, 128})
        for (const int64_t ctx : {1024, 8192, 32768}) add(DType::bf16, DType::bf16, H, q_len, B, ctx, automatic, fast);
  // A context that ends inside its last page (as 63 in 64 do): the tile there is the kernels' edge
  // path (v4 copied it row by row until the twenty-eighth session: 551 us against 494).
  add(DType::bf16, DType::bf16, 128, 1, 128, 8191, automatic, fast);
  // H 128 at half and twice the context: the slope is the cost of a 64-key tile, the intercept a
  // CTA's fixed cost (B 128: two waves of one CTA an SM, one split).
  for (const int64_t ctx : {4096, 16384}) add(DType::bf16, DType::bf16, 128, 1, 128, ctx, automatic, fast);
  // The fp8 cache with an fp8 query (the engine's fp8 path: the fused prepare writes that query) at
  // the fast precision over the whole grid: the fp8 goals, % of copy / of the GEMM rate.
  for (const int64_t H : {32, 96, 128})
    for (const int64_t q_len : {1, 2, 4, 8})
      for (const int64_t B : {1, 8, 32, 128})
        for (const int64_t ctx : {1024, 8192, 32768}) add(DType::fp8_e4m3, DType::fp8_e4m3, H, q_len, B, ctx, automatic, fast);
  // The fp8 cache with an fp8 query on each of its kernels forced over the whole grid: v3, v3 wide
  // and v2 at the fast precision, v3 and v2 at the exact one (the wide form runs the fast precision
  // only); beside the automatic cases above, the measurement behind the automatic choice for an
  // fp8 cache (mla_attention_cuda_kernel), as the v4 / v2 grids below are for a bf16 one.
  for (const auto precision : {fast, ops::MlaAttentionPrecision::exact})
    for (const auto kernel : {ops::MlaAttentionKernel::wgmma_keys_m, ops::MlaAttentionKernel::wgmma_keys_m_wide,
                              ops::MlaAttentionKernel::wgmma}) {
      if (kernel == ops::MlaAttentionKernel::wgmma_keys_m_wide && precision != fast) continue;
      for (const int64_t H : {32, 96, 128})
        for (const int64_t q_len : {1, 2, 4, 8})
          for (const int64_t B : {1, 8, 32, 128})
            for (const int64_t ctx : {1024, 8192, 32768}) add(DType::fp8_e4m3, DType::fp8_e4m3, H, q_len, B, ctx, kernel, precision);
    }
  // The H 32 decode between the grid's batch x kv_len of 8192 and 32768, where the automatic choice
  // between v3's two forms changes (kMlaAttentionKeysMWideMaxShortKeys): 16384 and 24576 tile-keys
  // as one long sequence, a few and many short ones; automatic and each form forced.
  const std::pair<int64_t, int64_t> h32_short_work[] = {{1, 16384}, {2, 8192}, {16, 1024}, {1, 24576}, {3, 8192}, {24, 1024}};
  for (const auto& [B, ctx] : h32_short_work)
    for (const auto kernel : {automatic, ops::MlaAttentionKernel::wgmma_keys_m, ops::MlaAttentionKernel::wgmma_keys_m_wide})
      add(DType::fp8_e4m3, DType::fp8_e4m3, 32, 1, B, ctx, kernel, fast);
  // The bf16-cache keys-as-M kernel beside v2, both forced, P rounded once: the H 32 decode over
  // the batch and context grid, H 96 / 128 and verify 2 / 4 / 8 at B 128 8k.
  for (const auto kernel : {ops::MlaAttentionKernel::wgmma_keys_m_bf16, ops::MlaAttentionKernel::wgmma}) {
    for (const int64_t B : {1, 8, 32, 128})
      for (const int64_t ctx : {1024, 8192, 32768}) add(DType::bf16, DType::bf16, 32, 1, B, ctx, kernel, fast);
    for (const int64_t H : {96, 128}) add(DType::bf16, DType::bf16, H, 1, 128, 8192, kernel, fast);
    for (const int64_t q_len : {2, 4, 8}) add(DType::bf16, DType::bf16, 32, q_len, 128, 8192, kernel, fast);
  }
  // v4 (the 64-key seesaw) beside v2, both forced, P rounded once, over the whole grid
  // (H 32 / 96 / 128, decode and verify 2 / 4 / 8, B 1-128, 1k-32k) and the H 64 decode: where
  // automatic takes v4 (mla_attention_cuda_kernel). v2's H 32 decode and its B 128 8k rows of H 96
  // / 128 decode and verify at H 32 are registered above.
  std::vector<std::pair<int64_t, int64_t>> head_qlen = {{64, 1}};
  for (const int64_t H : {32, 96, 128})
    for (const int64_t q_len : {1, 2, 4, 8}) head_qlen.emplace_back(H, q_len);
  for (const auto& [H, q_len] : head_qlen)
    for (const int64_t B : {1, 8, 32, 128})
      for (const int64_t ctx : {1024, 8192, 32768}) {
        add(DType::bf16, DType::bf16, H, q_len, B, ctx, ops::MlaAttentionKernel::wgmma_seesaw64, fast);
        const bool above = (H == 32 && q_len == 1) ||
                           (B == 128 && ctx == 8192 && ((q_len == 1 && H != 64) || (H == 32 && q_len > 1)));
        if (!above) add(DType::bf16, DType::bf16, H, q_len, B, ctx, ops::MlaAttentionKernel::wgmma, fast);
      }
  // v4 with each schedule forced (flattened runs, uniform splits) wherever a sequence has more
  // than one 64-row tile: the measurement behind mla_attention_seesaw64_flat_wins. (Where the
  // flattened plan cuts no sequence, mla_attention_seesaw64_flat_plan gives none and both names run
  // the uniform splits.)
  for (const int64_t H : {32, 96, 128})
    for (const int64_t q_len : {1, 2, 4, 8})
      for (const int64_t B : {1, 8, 32, 128})
        for (const int64_t ctx : {1024, 8192, 32768}) {
          if (H * q_len <= 64) continue;
          for (const auto schedule : {ops::MlaAttentionSchedule::flat, ops::MlaAttentionSchedule::uniform})
            add(DType::bf16, DType::bf16, H, q_len, B, ctx, ops::MlaAttentionKernel::wgmma_seesaw64, fast, schedule);
        }
  // And at 4k and 16k on the H 96 batches whose uniform grid is one wave of 96 CTAs (B 32 verify 2,
  // B 8 verify 4 and 8): where the one-wave region of mla_attention_seesaw64_flat_wins ends.
  for (const auto& [q_len, B] : {std::pair<int64_t, int64_t>{2, 32}, {4, 8}, {8, 8}})
    for (const int64_t ctx : {4096, 16384})
      for (const auto schedule : {ops::MlaAttentionSchedule::flat, ops::MlaAttentionSchedule::uniform})
        add(DType::bf16, DType::bf16, 96, q_len, B, ctx, ops::MlaAttentionKernel::wgmma_seesaw64, fast, schedule);
  // v3 (fp8 cache and q, P rounded once) at forced split counts ("mla_attention_splits/...-sp<n>")
  // on the H 96 batches whose row tiles leave SMs idle in the plan's one wave: the measurement
  // behind mla_attention_keys_m_splits (its choices at 8k / 16k / 32k: 1 / 4 / 4 splits for B 32
  // decode and verify 2 and B 8 verify 8, 2 for B 32 verify 4, 2 / 5 / 5 for B 8 verify 4).
  const std::pair<int64_t, int64_t> h96_batches[] = {{1, 32}, {2, 32}, {4, 32}, {4, 8}, {8, 8}};  // (q_len, B)
  for (const auto& [q_len, B] : h96_batches)
    for (const int64_t ctx : {8192, 16384, 32768})
      for (const int32_t splits : {1, 2, 4, 5, 8})
        add(DType::fp8_e4m3, DType::fp8_e4m3, 96, q_len, B, ctx, automatic, fast, ops::MlaAttentionSchedule::automatic, splits);
  // Their automatic count at 16k, off the grid (8k and 32k are on it), beside the forced ones.
  for (const auto& [q_len, B] : h96_batches) add(DType::fp8_e4m3, DType::fp8_e4m3, 96, q_len, B, 16384, automatic, fast);
  // v4 (the bf16 cache) at forced counts on the one-wave H 96 shapes at 8k, where its own balance
  // keeps splits of 4096+ keys (96 CTAs at verify 4 B8): how short a split pays on v4. (These
  // shapes now take the flattened runs: mla_attention_seesaw64_flat_wins.)
  const std::pair<int64_t, int64_t> h96_bf16[] = {{1, 32}, {2, 32}, {4, 8}, {8, 8}};  // (q_len, B)
  for (const auto& [q_len, B] : h96_bf16)
    for (const int32_t splits : {1, 2, 3, 4, 5, 8})
      add(DType::bf16, DType::bf16, 96, q_len, B, 8192, automatic, fast, ops::MlaAttentionSchedule::automatic, splits);
  // v1 beside v2 on the shapes of docs/perf.md's MLA discussion.
  for (const DType dt : {DType::bf16, DType::fp8_e4m3})
    for (const int64_t H : {32, 128}) {
      add(dt, DType::bf16, H, 1, 1, 1024, ops::MlaAttentionKernel::mma_sync);
      add(dt, DType::bf16, H, 1, 128, 8192, ops::MlaAttentionKernel::mma_sync);
      add(dt, DType::bf16, H, 4, 128, 8192, ops::MlaAttentionKernel::mma_sync);
    }
}

}  // namespace kestrel::bench
