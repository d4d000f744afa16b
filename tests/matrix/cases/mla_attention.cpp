// mla_attention cases: ragged batches of decode (q_len 1), verify (2..8) and short extends
// (up to 16) over the paged cache, bf16 and fp8 (kv_scale != 1), page sizes 32/64/128, with
// sequences of length 0 and queries that attend nothing (L < q_len). Every block table uses
// shuffled, non-contiguous pages from 1.. (page 0 is the sink, never named), and -1 beyond the
// pages in use, which no backend may read. The "strided" variant gives every tensor a strided
// view: q padded (odd strides), o with inner stride 2, lse transposed, the block table a column
// slice of a wider table (bf16) or column-major (fp8), seq_lens and q_start strided, and the
// cache page-strided (a slice of page_size + 1 rows per page). The "nolse" variant omits lse.
// The query is bf16 (q_scale 1), or fp8 e4m3 ("-qfp8" in the id) with q_scale 0.75 (plain) or
// 2.5 (strided), values over every e4m3 regime (subnormals included), with a bf16 and with an
// fp8 cache, on a subset of the shapes.
//
// Tolerance (docs/ops/mla_attention.md): o within 2 bf16 ulps of the rounded f64 reference
// plus kv_scale * max|v| * eps_f32 * (4 A + 8 sqrt(L) + 64), A = softmax_scale * kv_scale *
// q_scale * sum_d |dec(q_d)| * max|k| (a bound on |score| and on the magnitudes in its sum); lse within
// 1e-4 absolute + 1678 f32 ulps (~1e-4 relative). The fast precision ("-fastP": P rounded once
// to bf16 / f16 before P V, as FlashMLA does) adds kv_scale * max|v| * 2^-8 to o's bound, and
// with an fp8 cache and an fp8 q (QK on the e4m3 operands) a score error delta (Qk8ScoreError,
// the fp8 path's truncation as measured): kv_scale * max|v| * (exp(2 delta) - 1) to o's, delta
// to lse's. The CI slice keeps each case under ~5e7 multiply-adds in the f64 reference; the full
// set adds 32k contexts with few heads and H = 64, 96, 128.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string_view>

#include "kestrel/ops/mla_attention.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

using ops::kMlaNope;
using ops::kMlaRow;

struct AttnShape {
  const char* tag;
  int64_t H, page_size;
  std::vector<int64_t> q_lens, seq_lens;
  Size size;
  bool fp8_q = false;  // also run with an fp8 query (both cache dtypes, plain and strided)
};

// Block table plan: pages in use per sequence, shuffled over [1, num_pages), -1 elsewhere.
struct Plan {
  int64_t B, max_pages, num_pages, Tq;
  std::vector<int64_t> table;    // [B, max_pages] logical values
  std::vector<int64_t> q_start;  // [B + 1]
  std::vector<int64_t> seq_of;   // [Tq] sequence of each token
};

Plan make_plan(const AttnShape& s, uint64_t seed) {
  Plan p;
  p.B = static_cast<int64_t>(s.q_lens.size());
  int64_t used = 0, widest = 0;
  for (int64_t L : s.seq_lens) {
    used += (L + s.page_size - 1) / s.page_size;
    widest = std::max(widest, (L + s.page_size - 1) / s.page_size);
  }
  p.max_pages = widest + 1;  // one column more than any sequence uses: always -1
  p.num_pages = 1 + used + used / 2 + 2;  // sink, live pages, and pages nobody names
  std::vector<int64_t> pages(static_cast<size_t>(p.num_pages - 1));
  std::iota(pages.begin(), pages.end(), 1);
  std::mt19937_64 rng(seed);
  std::shuffle(pages.begin(), pages.end(), rng);
  p.table.assign(static_cast<size_t>(p.B * p.max_pages), -1);
  size_t next = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t k = 0; k < (s.seq_lens[b] + s.page_size - 1) / s.page_size; ++k) p.table[b * p.max_pages + k] = pages[next++];
  p.q_start.assign(1, 0);
  for (int64_t b = 0; b < p.B; ++b) {
    p.q_start.push_back(p.q_start.back() + s.q_lens[b]);
    for (int64_t i = 0; i < s.q_lens[b]; ++i) p.seq_of.push_back(b);
  }
  p.Tq = p.q_start.back();
  return p;
}

Gen fixed(std::vector<double> values) {
  return Gen::with([values](std::vector<double>& v, uint64_t) { std::copy(values.begin(), values.end(), v.begin()); });
}

// fp8 cache (and fp8 query) values over every e4m3 regime that attention meets: sign * 2^u,
// u in [-9, 2] (encoded by the runner: subnormals below 2^-6 included).
Gen fp8_values() {
  return Gen::with([](std::vector<double>& v, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> e(-9.0, 2.0);
    for (auto& x : v) x = ((rng() >> 7) & 1 ? -1.0 : 1.0) * std::exp2(e(rng));
  });
}

enum class Variant : uint8_t { plain, strided, nolse };
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::plain: return "plain";
    case Variant::strided: return "strided";
    case Variant::nolse: return "nolse";
  }
  return "?";
}

// Buffer indices.
enum : size_t { kO, kQ, kCache, kTable, kSeqLens, kQStart, kLse };

// The fast precision with an fp8 cache and an fp8 q may run v3's QK on the e4m3 operands: 18
// wgmma k32 steps (features 32 s .. 32 s + 31 in order) on the fp8 tensor path, which keeps each
// addend of a step (its 32 products and the incoming sum) only down to 2^-13 of the largest
// one's leading bit, truncated (measured on the H200: tests/core/fp8_mma_accumulation_probe_test.cu).
// The score error is then at most, per step, the sum over its addends a of min(|a|, u), u = 2^-13
// of the largest one's leading bit, plus 2^-13 |D_s| for the result (D_s the partial sum after
// step s), times the scales.
// Returned per (t, h): the largest over the keys of the token's sequence (a superset of those it
// attends), natural-log units.
struct Qk8ScoreError {
  Plan plan;
  std::vector<int64_t> seq_lens;
  int64_t H, ps, cache_rows;
  double scale;  // softmax_scale * kv_scale * q_scale
  std::vector<double> of(const HostBuffers& in) const {
    const int64_t Tq = plan.Tq;
    std::vector<double> delta(static_cast<size_t>(Tq * H), 0.0);
    std::vector<double> q(kMlaRow);
    for (int64_t t = 0; t < Tq; ++t) {
      const int64_t b = plan.seq_of[static_cast<size_t>(t)], L = seq_lens[static_cast<size_t>(b)];
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < kMlaRow; ++d) q[static_cast<size_t>(d)] = in.value(kQ, (t * H + h) * kMlaRow + d);
        double worst = 0;
        for (int64_t j = 0; j < L; ++j) {
          const int64_t page = plan.table[static_cast<size_t>(b * plan.max_pages + j / ps)];
          const int64_t row0 = (page * cache_rows + j % ps) * kMlaRow;
          double D = 0, err = 0;
          for (int64_t st = 0; st < kMlaRow / 32; ++st) {
            double prod[32], largest = std::fabs(D);
            for (int64_t d = 0; d < 32; ++d) {
              prod[d] = q[static_cast<size_t>(32 * st + d)] * in.value(kCache, row0 + 32 * st + d);
              largest = std::max(largest, std::fabs(prod[d]));
            }
            const double unit = largest > 0 ? std::ldexp(1.0, std::ilogb(largest) - 13) : 0.0;  // 2^-13 of its leading bit
            err += std::min(std::fabs(D), unit);
            for (double x : prod) {
              err += std::min(std::fabs(x), unit);
              D += x;
            }
            err += std::ldexp(std::fabs(D), -13);
          }
          worst = std::max(worst, err);
        }
        delta[static_cast<size_t>(t * H + h)] = worst * scale;
      }
    }
    return delta;
  }
};

void add_case(Registry& r, const AttnShape& s, DType dt, Variant var, uint64_t plan_seed, DType q_dt = DType::bf16,
              ops::MlaAttentionKernel kernel = ops::MlaAttentionKernel::automatic,
              ops::MlaAttentionPrecision precision = ops::MlaAttentionPrecision::exact,
              ops::MlaAttentionSchedule schedule = ops::MlaAttentionSchedule::automatic, int32_t splits = 0) {
  const bool fast = precision == ops::MlaAttentionPrecision::fast;
  const Plan plan = make_plan(s, plan_seed);
  const bool strided = var == Variant::strided, with_lse = var != Variant::nolse;
  const bool fp8_q = q_dt == DType::fp8_e4m3;
  const int64_t H = s.H, Tq = plan.Tq, B = plan.B, ps = s.page_size;
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(192.0));
  const float kv_scale = dt == DType::bf16 ? 1.0f : (strided ? 1.75f : 0.375f);
  const float q_scale = fp8_q ? (strided ? 2.5f : 0.75f) : 1.0f;
  // Cache: page-strided when strided (page_size + 1 rows per page, the last one never viewed).
  const int64_t cache_rows = strided ? ps + 1 : ps;
  // Block table: a column slice [:, 2 : 2 + max_pages] of a wider table when strided bf16.
  const bool table_slice = strided && dt == DType::bf16;
  const int64_t table_cols = table_slice ? plan.max_pages + 3 : plan.max_pages;

  Case c;
  c.op = "mla_attention";
  c.id = str("mla_attention/", s.tag, "-B", B, "-H", H, "-P", ps, "-", dtype_name(dt), fp8_q ? "-qfp8" : "", "-",
             variant_name(var), kernel == ops::MlaAttentionKernel::mma_sync ? "-v1" : "",
             kernel == ops::MlaAttentionKernel::wgmma_keys_m        ? "-km"
             : kernel == ops::MlaAttentionKernel::wgmma_keys_m_wide ? "-kmw"
             : kernel == ops::MlaAttentionKernel::wgmma_keys_m_bf16 ? "-kmb"
             : kernel == ops::MlaAttentionKernel::wgmma_seesaw64    ? "-s64"
                                                                    : "",
             schedule == ops::MlaAttentionSchedule::flat ? "-flat" : "", fast ? "-fastP" : "",
             splits > 0 ? str("-sp", splits) : std::string());
  c.size = s.size;

  std::vector<double> table_vals(static_cast<size_t>(B * table_cols), -7.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < plan.max_pages; ++k)
      table_vals[b * table_cols + (table_slice ? 2 : 0) + k] = static_cast<double>(plan.table[b * plan.max_pages + k]);
  std::vector<double> sl(s.seq_lens.begin(), s.seq_lens.end()), qs(plan.q_start.begin(), plan.q_start.end());

  // o's bound: per (t, h), from q, the cache's largest |k| and |v|, and L of t's sequence.
  const std::vector<int64_t> seq_of = plan.seq_of, seq_lens = s.seq_lens;
  // With QK on e4m3 operands possible: each score off by up to delta (natural log units), so
  // every weight by a factor within exp(+-2 delta): o moves by at most max|v| (exp(2 delta) - 1),
  // lse by delta.
  const bool fp8_qk = fast && dt == DType::fp8_e4m3 && fp8_q;
  const auto qk8 = std::make_shared<const Qk8ScoreError>(Qk8ScoreError{
      plan, s.seq_lens, H, ps, strided ? ps + 1 : ps, static_cast<double>(softmax_scale) * kv_scale * q_scale});
  Metric o_metric = Metric::within_ulps(2);
  o_metric.bound = [=](const HostBuffers& in) {
    double max_k = 0, max_v = 0;
    const std::vector<double> delta = fp8_qk ? qk8->of(in) : std::vector<double>();
    const int64_t cache_n = static_cast<int64_t>(in.bytes[kCache].size() / dtype_size(in.dtypes[kCache]));
    for (int64_t i = 0; i < cache_n; ++i) {
      const double a = std::fabs(in.value(kCache, i));
      if (std::isnan(a)) continue;  // the rows past a sequence's length (never attended)
      max_k = std::max(max_k, a);
      if (i % kMlaRow < kMlaNope) max_v = std::max(max_v, a);
    }
    const double eps = std::ldexp(1.0, -23);
    const double p_rounding = fast ? std::ldexp(1.0, -8) : 0.0;  // P rounded once: 2^-8 per weight
    std::vector<double> bound(static_cast<size_t>(Tq * H * kMlaNope));
    for (int64_t t = 0; t < Tq; ++t)
      for (int64_t h = 0; h < H; ++h) {
        double q1 = 0;
        for (int64_t d = 0; d < kMlaRow; ++d) q1 += std::fabs(in.value(kQ, (t * H + h) * kMlaRow + d));
        const double A = static_cast<double>(softmax_scale) * kv_scale * q_scale * q1 * max_k;
        const double L = static_cast<double>(seq_lens[seq_of[t]]);
        const double qk = fp8_qk ? std::expm1(2.0 * delta[static_cast<size_t>(t * H + h)]) : 0.0;
        const double e = kv_scale * max_v * (eps * (4.0 * A + 8.0 * std::sqrt(L) + 64.0) + p_rounding + qk);
        std::fill_n(bound.begin() + (t * H + h) * kMlaNope, kMlaNope, e);
      }
    return bound;
  };
  Metric lse_metric = Metric::within_ulps(1678);  // 1e-4 * 2^24: ~1e-4 relative
  lse_metric.bound = [Tq, H, fp8_qk, qk8](const HostBuffers& in) {
    std::vector<double> bound(static_cast<size_t>(Tq * H), 1e-4);
    if (fp8_qk) {
      const std::vector<double> delta = qk8->of(in);
      for (size_t i = 0; i < bound.size(); ++i) bound[i] += delta[i];
    }
    return bound;
  };

  // One push_back per buffer, in the order of the k* indices.
  // The rows past each sequence's length in its last page hold NaN: a kernel may copy them with
  // the page (their keys masked, their weights 0), but 0 * NaN is NaN in P V, so whatever reads
  // them must keep them out (v4 copies such a tile whole and zeroes those rows).
  std::vector<int64_t> nan_rows;  // first element of each poisoned row
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = s.seq_lens[b];
    if (L <= 0 || L % ps == 0) continue;
    const int64_t page = plan.table[b * plan.max_pages + (L - 1) / ps];
    for (int64_t r = L % ps; r < ps; ++r) nan_rows.push_back((page * cache_rows + r) * kMlaRow);
  }
  const Gen values = dt == DType::bf16 ? Gen::uniform(-1, 1) : fp8_values();
  const Gen cache_gen = Gen::with([values, nan_rows](std::vector<double>& v, uint64_t seed) {
    v = generate(values, static_cast<int64_t>(v.size()), seed);
    for (const int64_t r : nan_rows) std::fill_n(v.begin() + r, kMlaRow, std::nan(""));
  });
  c.buffers.push_back({"o", DType::bf16, {Tq, H, kMlaNope}, Role::output,
                       strided ? Layout::inner_strided : Layout::contiguous, Gen(), o_metric});
  c.buffers.push_back({"q", q_dt, {Tq, H, kMlaRow}, Role::input, strided ? Layout::padded : Layout::contiguous,
                       fp8_q ? fp8_values() : Gen::uniform(-2, 2), Metric()});
  c.buffers.push_back({"cache", dt, {plan.num_pages, cache_rows, kMlaRow}, Role::input, Layout::contiguous, cache_gen,
                       Metric()});
  c.buffers.push_back({"block_table", DType::i32, {B, table_cols}, Role::input,
                       strided && !table_slice ? Layout::transposed : Layout::contiguous, fixed(table_vals), Metric()});
  c.buffers.push_back({"seq_lens", DType::i32, {B}, Role::input, strided ? Layout::inner_strided : Layout::contiguous,
                       fixed(sl), Metric()});
  c.buffers.push_back({"q_start", DType::i32, {B + 1}, Role::input, strided ? Layout::padded : Layout::contiguous,
                       fixed(qs), Metric()});
  if (with_lse)
    c.buffers.push_back({"lse", DType::f32, {Tq, H}, Role::output, strided ? Layout::transposed : Layout::contiguous,
                         Gen(), lse_metric});

  const int64_t max_pages = plan.max_pages;
  auto make = [=](const std::vector<TensorView>& v) {
    ops::MlaAttentionArgs a;
    a.o = v[kO];
    a.q = v[kQ];
    a.cache = strided ? v[kCache].slice(1, 0, ps) : v[kCache];
    a.block_table = table_slice ? v[kTable].slice(1, 2, max_pages) : v[kTable];
    a.seq_lens = v[kSeqLens];
    a.q_start = v[kQStart];
    if (with_lse) a.lse = v[kLse];
    a.softmax_scale = softmax_scale;
    a.kv_scale = kv_scale;
    a.q_scale = q_scale;
    a.cuda_kernel = kernel;
    a.precision = precision;
    a.cuda_schedule = schedule;
    a.cuda_splits = splits;
    return a;
  };
  c.supports = supports_via<ops::MlaAttentionArgs>(
      make, [](ops::Backend b, const ops::MlaAttentionArgs& a) { return ops::mla_attention_supports(b, a); });
  c.run = run_via<ops::MlaAttentionArgs>(
      make, [](ops::Backend b, const ops::MlaAttentionArgs& a, Stream st) { ops::mla_attention(b, a, st); });
  r.push_back(std::move(c));
}

// Multiply-adds of the f64 reference: sum over queries of attended keys, times H * (576 + 512).
double reference_macs(const AttnShape& s) {
  double keys = 0;
  for (size_t b = 0; b < s.q_lens.size(); ++b)
    for (int64_t i = 0; i < s.q_lens[b]; ++i) keys += static_cast<double>(std::max<int64_t>(0, s.seq_lens[b] - s.q_lens[b] + i + 1));
  return keys * static_cast<double>(s.H) * (kMlaRow + kMlaNope);
}

std::vector<AttnShape> shapes(Size size) {
  std::vector<AttnShape> s = {
      // decode, ragged, one empty sequence: splits > 1 on CUDA
      {"decode", 32, 64, {1, 1, 1, 1, 1}, {1, 37, 300, 0, 900}, Size::ci, true},
      // decode, long with one head (split-KV over ~2000 positions)
      {"decode", 1, 32, {1, 1, 1}, {2000, 1999, 129}, Size::ci},
      // decode with B = 132, one head: one row tile per sequence fills 132 SMs, so one split
      {"decode", 1, 64, std::vector<int64_t>(132, 1), {}, Size::ci},
      // verify 2, 4, 8
      {"verify", 32, 128, {2, 4, 8}, {70, 40, 100}, Size::ci, true},
      {"verify", 1, 64, {4, 8}, {1800, 1200}, Size::ci},
      // short extends; the first spans 8 row tiles of 64 rows, more than the grid plans
      {"extend", 32, 32, {16, 2}, {40, 30}, Size::ci},
      {"extend", 1, 64, {16, 9, 1, 12}, {2000, 16, 5, 500}, Size::ci, true},
      // nothing to attend: L = 0 with queries, L < q_len, a sequence with no queries
      {"masked", 32, 64, {3, 2, 0, 4}, {0, 1, 5, 2}, Size::ci, true},
  };
  // B = 132 decode lengths: 1 .. 300, deterministic.
  for (int64_t b = 0; b < 132; ++b) s[2].seq_lens.push_back(1 + (b * 37) % 300);
  if (size == Size::full) {
    s.push_back({"decode", 4, 64, {1}, {32768}, Size::full, true});
    s.push_back({"verify", 2, 64, {1, 4}, {32768, 20000}, Size::full});
    s.push_back({"extend", 1, 128, {16, 3}, {32768, 9000}, Size::full});
    for (int64_t H : {32, 64, 96, 128})
      s.push_back({"verify", H, 64, {1, 2, 4, 8}, {300, 150, 257, 100}, Size::full, H == 128});
    s.push_back({"decode", 128, 64, std::vector<int64_t>(70, 1), {}, Size::full});
    for (int64_t b = 0; b < 70; ++b) s.back().seq_lens.push_back(1 + (b * 53) % 128);
  }
  return s;
}

}  // namespace

void add_mla_attention_cases(Registry& r, Size size) {
  uint64_t plan_seed = 0x6d6c61;  // the plans (page order) are part of a case: fixed per case
  for (const AttnShape& s : shapes(size)) {
    KESTREL_CHECK(s.size == Size::full || reference_macs(s) <= 6e7, "mla_attention case ", s.tag, " H", s.H,
                  " is too big for the CI slice: ", reference_macs(s), " multiply-adds");
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      for (Variant var : {Variant::plain, Variant::strided}) add_case(r, s, dt, var, ++plan_seed);
  }
  const std::vector<AttnShape> ci = shapes(Size::ci);
  add_case(r, ci[3], DType::fp8_e4m3, Variant::nolse, ++plan_seed);
  // fp8 queries (q_scale != 1) with both caches; seeded after every bf16-q case, so those keep
  // their plans.
  for (const AttnShape& s : shapes(size)) {
    if (!s.fp8_q) continue;
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      for (Variant var : {Variant::plain, Variant::strided}) add_case(r, s, dt, var, ++plan_seed, DType::fp8_e4m3);
  }
  // Both CUDA kernels: every case above takes the automatic choice (the WGMMA kernel, v2, on
  // an H200); these force v1 (mma.sync) on the CI shapes that cover its paths: ragged decode
  // with splits (H 32), verify (H 32), an extend over 8 row tiles, the masked batch, and the
  // H 1 extend with an fp8 q and every tensor strided.
  for (size_t k : {size_t{0}, size_t{3}, size_t{5}, size_t{7}})
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      add_case(r, ci[k], dt, Variant::plain, ++plan_seed, DType::bf16, ops::MlaAttentionKernel::mma_sync);
  add_case(r, ci[6], DType::fp8_e4m3, Variant::strided, ++plan_seed, DType::fp8_e4m3, ops::MlaAttentionKernel::mma_sync);
  // Odd page sizes (rows of one KV tile from up to 11 pages; v2 copies row by row) and a
  // sequence ending inside a page, both dtypes, plain and strided.
  const AttnShape odd_pages = {"mixed", 32, 3, {1, 1, 1, 2}, {50, 7, 130, 33}, Size::ci, false};
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    for (Variant var : {Variant::plain, Variant::strided}) add_case(r, odd_pages, dt, var, ++plan_seed);
  // The fast precision (P rounded once on v2, its own tolerance; "-fastP"): the CI shapes that
  // cover the seesaw's paths (ragged decode with splits, verify, an extend over 8 row tiles, the
  // masked batch) with both caches, the ragged decode also with an fp8 query (the fp8 cache then
  // runs the f16 instantiation) and every tensor strided; the full set adds the H 128 verify.
  constexpr auto fastp = ops::MlaAttentionPrecision::fast;
  constexpr auto automatic = ops::MlaAttentionKernel::automatic;
  for (size_t k : {size_t{0}, size_t{3}, size_t{5}, size_t{7}})
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      add_case(r, ci[k], dt, Variant::plain, ++plan_seed, DType::bf16, automatic, fastp);
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    add_case(r, ci[0], dt, Variant::strided, ++plan_seed, DType::fp8_e4m3, automatic, fastp);
  for (const AttnShape& s : shapes(size)) {
    if (s.size != Size::full || std::string_view(s.tag) != "verify" || s.H != 128) continue;
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      for (DType q_dt : {DType::bf16, DType::fp8_e4m3}) add_case(r, s, dt, Variant::plain, ++plan_seed, q_dt, automatic, fastp);
  }
  // The keys-as-M kernel (v3, "-km"; fp8 cache with an fp8 q only, NOT_SUPPORTED otherwise):
  // every shape, plain and strided, exact P; P rounded once on the shapes that cover its paths
  // (ragged decode with splits, verify over several 32-row tiles, an extend looping over row
  // tiles, the masked batch) and strided; the odd page sizes (64-key tiles from up to 22 pages).
  constexpr auto keys_m = ops::MlaAttentionKernel::wgmma_keys_m;
  constexpr DType fp8 = DType::fp8_e4m3;
  for (const AttnShape& s : shapes(size))
    for (Variant var : {Variant::plain, Variant::strided}) add_case(r, s, fp8, var, ++plan_seed, fp8, keys_m);
  for (size_t k : {size_t{0}, size_t{3}, size_t{5}, size_t{7}})
    add_case(r, ci[k], fp8, Variant::plain, ++plan_seed, fp8, keys_m, fastp);
  add_case(r, ci[0], fp8, Variant::strided, ++plan_seed, fp8, keys_m, fastp);
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, odd_pages, fp8, var, ++plan_seed, fp8, keys_m);
  // Its wide form ("-kmw": 64 query rows per CTA, the fast precision only): every shape, plain and
  // strided (H 32 decode: half the rows padding; verify and extend: several 64-row tiles, causal
  // limits inside a tile), and the odd page sizes.
  constexpr auto wide = ops::MlaAttentionKernel::wgmma_keys_m_wide;
  for (const AttnShape& s : shapes(size))
    for (Variant var : {Variant::plain, Variant::strided}) add_case(r, s, fp8, var, ++plan_seed, fp8, wide, fastp);
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, odd_pages, fp8, var, ++plan_seed, fp8, wide, fastp);
  // The bf16-cache keys-as-M kernel ("-kmb": 32 query rows per CTA, the fast precision only,
  // NOT_SUPPORTED otherwise): every shape, plain and strided, with a bf16 q; an fp8 q on the
  // shapes that have fp8-q cases; the odd page sizes (64-key tiles from up to 22 pages).
  constexpr auto keys_m_bf16 = ops::MlaAttentionKernel::wgmma_keys_m_bf16;
  constexpr DType bf16 = DType::bf16;
  for (const AttnShape& s : shapes(size))
    for (Variant var : {Variant::plain, Variant::strided}) {
      add_case(r, s, bf16, var, ++plan_seed, bf16, keys_m_bf16, fastp);
      if (s.fp8_q) add_case(r, s, bf16, var, ++plan_seed, fp8, keys_m_bf16, fastp);
    }
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, odd_pages, bf16, var, ++plan_seed, bf16, keys_m_bf16, fastp);
  // Without lse (its epilogue writes lse from the threads that hold each row's sums, only when
  // asked); seeded last, so every case above keeps its plan.
  add_case(r, ci[3], bf16, Variant::nolse, ++plan_seed, bf16, keys_m_bf16, fastp);
  // v4, the 64-key seesaw ("-s64"): every shape, plain and strided, an fp8 q where the shape has
  // fp8-q cases, the odd page sizes (one-row boxes) and a case without lse; seeded after the
  // cases above, so that each of those keeps its plan.
  constexpr auto seesaw64 = ops::MlaAttentionKernel::wgmma_seesaw64;
  for (const AttnShape& s : shapes(size))
    for (Variant var : {Variant::plain, Variant::strided}) {
      add_case(r, s, bf16, var, ++plan_seed, bf16, seesaw64, fastp);
      if (s.fp8_q) add_case(r, s, bf16, var, ++plan_seed, fp8, seesaw64, fastp);
    }
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, odd_pages, bf16, var, ++plan_seed, bf16, seesaw64, fastp);
  add_case(r, ci[3], bf16, Variant::nolse, ++plan_seed, bf16, seesaw64, fastp);
  // A verify block whose 64-key tile ends between two of its rows' causal limits: at H 32 a row
  // tile holds tokens 0 and 1 of sequence 0 (limits 63 and 64 of 70 keys), and the tile [0, 64)
  // must mask key 63 for token 0 (v4 skips the mask only on tiles that end by the first row's limit).
  const AttnShape tile_edge = {"verify", 32, 64, {8, 4, 8}, {70, 130, 200}, Size::ci, false};
  add_case(r, tile_edge, bf16, Variant::plain, ++plan_seed, bf16, seesaw64, fastp);
  add_case(r, tile_edge, bf16, Variant::plain, ++plan_seed, bf16, ops::MlaAttentionKernel::automatic, fastp);
  // v4 with the flattened schedule forced ("-s64-flat"): every shape, plain and strided. On these
  // small batches the plan cuts most sequences into runs of a tile or two (each part a CTA of
  // its own), so whole sequences, cut ones, empty segments past a short sequence's end and the
  // combine's skip of whole sequences all occur; seeded last, so every case above keeps its plan.
  constexpr auto flat = ops::MlaAttentionSchedule::flat;
  for (const AttnShape& s : shapes(size))
    for (Variant var : {Variant::plain, Variant::strided}) add_case(r, s, bf16, var, ++plan_seed, bf16, seesaw64, fastp, flat);
  add_case(r, tile_edge, bf16, Variant::plain, ++plan_seed, bf16, seesaw64, fastp, flat);
  // v4's staged epilogue (o through shared memory, a bulk copy a row) needs one split and 16-byte
  // o rows; above, only the B 132 H 1 decode takes it, with one row a tile. 140 sequences of 16
  // rows walk the batch with 16 rows a tile. Seeded last.
  AttnShape walk16 = {"decode", 16, 64, std::vector<int64_t>(140, 1), {}, Size::ci, false};
  for (int64_t b = 0; b < 140; ++b) walk16.seq_lens.push_back(1 + (b * 7) % 40);
  add_case(r, walk16, bf16, Variant::plain, ++plan_seed, bf16, seesaw64, fastp);
  // Its o boxes (a whole 64-row tile's o by tensor copy, o's tokens H rows apart): 140 sequences
  // at H 96 walk the batch in one split, the first 64 rows of each sequence a whole tile (boxes),
  // the last 32 row by row; strided, o's inner stride takes neither. Seeded last.
  AttnShape boxes96 = {"decode", 96, 64, std::vector<int64_t>(140, 1), {}, Size::ci, false};
  for (int64_t b = 0; b < 140; ++b) boxes96.seq_lens.push_back(1 + (b * 29) % 200);
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, boxes96, bf16, var, ++plan_seed, bf16, seesaw64, fastp);
  // Forced split counts ("-sp<n>": cuda_splits), more than the plan's: v3 (32-row and wide) on the
  // ragged decode, the verify and the extend over 8 row tiles, v4's uniform schedule and v2 on
  // the verify; each sequence's keys cut n ways, empty splits past the short ones. Seeded last.
  const ops::MlaAttentionSchedule auto_schedule = ops::MlaAttentionSchedule::automatic;
  add_case(r, ci[0], fp8, Variant::plain, ++plan_seed, fp8, keys_m, fastp, auto_schedule, 3);
  add_case(r, ci[3], fp8, Variant::strided, ++plan_seed, fp8, keys_m, fastp, auto_schedule, 6);
  add_case(r, ci[3], fp8, Variant::plain, ++plan_seed, fp8, wide, fastp, auto_schedule, 2);
  add_case(r, ci[5], fp8, Variant::plain, ++plan_seed, fp8, wide, fastp, auto_schedule, 7);
  add_case(r, ci[3], bf16, Variant::plain, ++plan_seed, bf16, seesaw64, fastp, auto_schedule, 3);
  add_case(r, ci[3], bf16, Variant::plain, ++plan_seed, bf16, ops::MlaAttentionKernel::wgmma, ops::MlaAttentionPrecision::exact,
           auto_schedule, 5);
  // v3's split partials staged as boxes: whole 32-row tiles by tensor copy, partial ones copied out
  // of the staging: the H 1 decode (every row tile partial, the plan's splits) and the H 32 extend
  // over 16 whole row tiles with 4 splits (most of them empty: 40 keys). Seeded last.
  add_case(r, ci[1], fp8, Variant::plain, ++plan_seed, fp8, keys_m, fastp);
  add_case(r, ci[5], fp8, Variant::strided, ++plan_seed, fp8, keys_m, fastp, auto_schedule, 4);
  // v3 wide past one wave with one split: its CTAs walk the batch with the producers' lead (the o
  // boxes; strided o takes the rows, no walk): 140 sequences at H 96 (two row tiles each, the
  // second 32 rows), and 160 at H 16 with 1-7 queries (16-112 rows: one or two row tiles, causal
  // limits inside them), keys 1-200 and 7-96. Seeded last.
  for (Variant var : {Variant::plain, Variant::strided}) add_case(r, boxes96, fp8, var, ++plan_seed, fp8, wide, fastp);
  AttnShape walk16v = {"verify", 16, 64, {}, {}, Size::ci, false};
  for (int64_t b = 0; b < 160; ++b) {
    walk16v.q_lens.push_back(1 + (b * 5) % 7);
    walk16v.seq_lens.push_back(7 + (b * 37) % 90);
  }
  add_case(r, walk16v, fp8, Variant::plain, ++plan_seed, fp8, wide, fastp);
}

}  // namespace kestrel::matrix
