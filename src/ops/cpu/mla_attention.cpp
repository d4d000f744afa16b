// mla_attention, CPU reference: the definition of the op (docs/ops/mla_attention.md). Plain
// softmax(scale * q K^T) V per (query, head) in f64 over exactly the keys the query attends,
// after checking the device-side metadata (q_start, seq_lens, block_table) that no host check
// can see. q and the cache enter as their exact decoded values (bf16 or e4m3, widened); the
// per-tensor scales q_scale and kv_scale enter only through one f64 factor on each score
// (and kv_scale once more on o), so an fp8 q with q_scale 1 gives the bits of a bf16 q holding
// the same values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/mla_attention.h"

namespace kestrel::ops::cpu {

namespace {

int64_t at1(const TensorView& t, int64_t i) { return load_index(t, i * t.stride(0)); }
int64_t at2(const TensorView& t, int64_t i, int64_t j) { return load_index(t, i * t.stride(0) + j * t.stride(1)); }

// The metadata rules of the spec; a violation is the caller's error, named here.
void check_metadata(const MlaAttentionArgs& a) {
  constexpr const char* op = "mla_attention";
  const int64_t B = a.block_table.size(0), max_pages = a.block_table.size(1), Tq = a.q.size(0);
  const int64_t num_pages = a.cache.size(0), page_size = a.cache.size(1);
  if (at1(a.q_start, 0) != 0) fail_arg(op, "q_start", "q_start[0] == 0", str("q_start[0] = ", at1(a.q_start, 0)));
  if (at1(a.q_start, B) != Tq)
    fail_arg(op, "q_start", str("q_start[B] == Tq = ", Tq), str("q_start[", B, "] = ", at1(a.q_start, B)));
  for (int64_t b = 0; b < B; ++b) {
    if (at1(a.q_start, b + 1) < at1(a.q_start, b))
      fail_arg(op, "q_start", "non-decreasing offsets",
               str("q_start[", b, "] = ", at1(a.q_start, b), " > q_start[", b + 1, "] = ", at1(a.q_start, b + 1)));
    const int64_t L = at1(a.seq_lens, b);
    if (L < 0 || L > max_pages * page_size)
      fail_arg(op, "seq_lens", str("values in [0, max_pages * page_size = ", max_pages * page_size, "]"),
               str("seq_lens[", b, "] = ", L));
    for (int64_t p = 0; p < (L + page_size - 1) / page_size; ++p) {
      const int64_t page = at2(a.block_table, b, p);
      if (page < 0 || page >= num_pages)
        fail_arg(op, "block_table", str("pages in [0, num_pages = ", num_pages, ") for the ", L, " positions in use"),
                 str("block_table[", b, ", ", p, "] = ", page));
    }
  }
}

}  // namespace

void mla_attention(const MlaAttentionArgs& a) {
  check_metadata(a);
  const int64_t B = a.block_table.size(0), H = a.q.size(1), page_size = a.cache.size(1);
  const double kv_scale = a.kv_scale;
  // The QK factor, left to right in f64 from the three f32 scalars (the first product is exact:
  // 24 + 24 significant bits): (softmax_scale * kv_scale) * q_scale.
  const double qk_scale = static_cast<double>(a.softmax_scale) * kv_scale * static_cast<double>(a.q_scale);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<float> kv;       // [L, 576]: dec(stored) exactly (bf16 or fp8 widened to f32)
  std::vector<double> qrow(kMlaRow), s, acc(kMlaNope);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t0 = at1(a.q_start, b), n = at1(a.q_start, b + 1) - t0, L = at1(a.seq_lens, b);
    if (n == 0) continue;
    kv.assign(static_cast<size_t>(L * kMlaRow), 0.0f);
    for (int64_t p = 0; p < L; ++p) {
      const int64_t page = at2(a.block_table, b, p / page_size);
      const int64_t row = page * a.cache.stride(0) + (p % page_size) * a.cache.stride(1);
      for (int64_t d = 0; d < kMlaRow; ++d) kv[p * kMlaRow + d] = load_f32(a.cache, row + d);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = t0 + i;
      const int64_t keys = L - n + i + 1;  // bottom-right causal: positions 0 .. L - n + i
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o_row = t * a.o.stride(0) + h * a.o.stride(1);
        const int64_t lse_at = a.lse.defined() ? t * a.lse.stride(0) + h * a.lse.stride(1) : 0;
        if (keys <= 0) {  // nothing to attend
          for (int64_t d = 0; d < kMlaNope; ++d) store_f32(a.o, o_row + d * a.o.stride(2), 0.0f);
          if (a.lse.defined()) store_f32(a.lse, lse_at, -std::numeric_limits<float>::infinity());
          continue;
        }
        for (int64_t d = 0; d < kMlaRow; ++d)  // dec(q) exactly: bf16 or e4m3 widened (q_scale is in qk_scale)
          qrow[d] = load_f32(a.q, t * a.q.stride(0) + h * a.q.stride(1) + d * a.q.stride(2));
        s.assign(static_cast<size_t>(keys), 0.0);
        double m = kNegInf;
        for (int64_t j = 0; j < keys; ++j) {
          const float* k = &kv[j * kMlaRow];
          double dot = 0;
          for (int64_t d = 0; d < kMlaRow; ++d) dot += qrow[d] * k[d];
          s[j] = qk_scale * dot;  // (dec(q) * q_scale) . (dec(k) * kv_scale) * softmax_scale, scales folded
          m = std::max(m, s[j]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const double w = std::exp(s[j] - m);
          l += w;
          const float* v = &kv[j * kMlaRow];  // V = the first 512 values of the row
          for (int64_t d = 0; d < kMlaNope; ++d) acc[d] += w * v[d];
        }
        for (int64_t d = 0; d < kMlaNope; ++d)
          store_f32(a.o, o_row + d * a.o.stride(2), static_cast<float>(kv_scale * acc[d] / l));
        if (a.lse.defined()) store_f32(a.lse, lse_at, static_cast<float>(m + std::log(l)));
      }
    }
  }
}

}  // namespace kestrel::ops::cpu
