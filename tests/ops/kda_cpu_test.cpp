// KDA on the CPU, before any kernel (docs/ops/kda.md): the two forms of the op proven equal
// (chunked == token by token), the ops bound to each other (kda_recurrent with T = 1 ==
// kda_packed_decode; accepting k of n drafts == decoding k tokens; token-by-token prefill ==
// decode steps), the math checked against an independent matrix-form step, padding and
// untouched slots bit-identical, and bad input named in the error.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/ops/kda_chunk_prefill.h"
#include "kestrel/ops/kda_conv1d_prefill.h"
#include "kestrel/ops/kda_conv1d_update.h"
#include "kestrel/ops/kda_packed_decode.h"
#include "kestrel/ops/kda_recurrent.h"

namespace kestrel::ops {
namespace {

constexpr int64_t K = 128, V = 128;
constexpr Backend kCpu = Backend::cpu;

// ---- small host helpers ----

float get(const TensorView& t, int64_t i) {  // element i of a contiguous float tensor
  if (t.dtype == DType::f32) return t.ptr<float>()[i];
  return bf16_to_f32(t.ptr<uint16_t>()[i]);
}
void put(const TensorView& t, int64_t i, float v) {
  if (t.dtype == DType::f32) {
    t.ptr<float>()[i] = v;
  } else {
    t.ptr<uint16_t>()[i] = f32_to_bf16(v);
  }
}
void fill(const TensorView& t, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) put(t, i, static_cast<float>(d(rng)));
}
Tensor ints(const std::vector<int64_t>& v, DType dt = DType::i32) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::i32) {
      t.view().ptr<int32_t>()[i] = static_cast<int32_t>(v[i]);
    } else {
      t.view().ptr<int64_t>()[i] = v[i];
    }
  }
  return t;
}
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.bytes()};
}
Tensor clone(const Tensor& t) {
  const TensorView v = t.view();
  Tensor c = Tensor::empty(Shape(v.shape.begin(), v.shape.begin() + v.rank), v.dtype);
  std::memcpy(c.data(), t.data(), static_cast<size_t>(t.bytes()));
  return c;
}

// Relative L2 error and max abs error of `got` against `want` over all elements.
struct Err {
  double rel_l2 = 0, max_abs = 0;
};
Err compare(const TensorView& got, const TensorView& want) {
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = get(got, i), w = get(want, i);
    num += (g - w) * (g - w);
    den += w * w;
    mx = std::max(mx, std::fabs(g - w));
  }
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), mx};
}
bool all_zero(const TensorView& t, int64_t first_row, int64_t rows) {
  const int64_t row = t.numel() / t.size(0);
  for (int64_t i = first_row * row; i < (first_row + rows) * row; ++i)
    if (get(t, i) != 0.0f) return false;
  return true;
}
std::string slot_bytes(const Tensor& pool, int64_t slot) {
  const TensorView v = pool.view();
  const int64_t n = v.stride(0) * static_cast<int64_t>(dtype_size(v.dtype));
  return std::string(static_cast<const char*>(pool.data()) + slot * n, static_cast<size_t>(n));
}

// The per-token inputs of a KDA op for `rows` tokens and H heads, with 5 spare columns after
// q | k | v in every mixed_qkv row (the row stride is not 2HK + HV).
struct Tokens {
  int64_t H, rows;
  Tensor mixed_qkv, raw_g, raw_beta, A_log, dt_bias;
  std::optional<float> lower_bound;
  Tokens(int64_t H_, int64_t rows_, DType dt, std::mt19937_64& rng, std::optional<float> lb = std::nullopt)
      : H(H_), rows(rows_), lower_bound(lb) {
    mixed_qkv = Tensor::empty({rows, 2 * H * K + H * V + 5}, dt);
    raw_g = Tensor::empty({rows, H, K}, dt);
    raw_beta = Tensor::empty({rows, H}, dt);
    A_log = Tensor::empty({H}, DType::f32);
    dt_bias = Tensor::empty({H * K}, DType::f32);
    fill(mixed_qkv, rng, -1, 1);
    fill(raw_g, rng, -4, 2);
    fill(raw_beta, rng, -3, 3);
    fill(A_log, rng, -1, 1);
    fill(dt_bias, rng, -1, 1);
  }
  TensorView qkv() const { return mixed_qkv.view().slice(1, 0, 2 * H * K + H * V); }
  // Rows [r0, r0 + n) of every per-token input.
  template <typename Args>
  void rows_into(Args& a, int64_t r0, int64_t n) const {
    a.mixed_qkv = qkv().slice(0, r0, n);
    a.raw_g = raw_g.view().slice(0, r0, n);
    a.raw_beta = raw_beta.view().slice(0, r0, n);
    a.A_log = A_log;
    a.dt_bias = dt_bias;
    a.lower_bound = lower_bound;
  }
  // kda_packed_decode (CPU) of rows [r0, r0 + n).
  void decode(int64_t r0, int64_t n, const TensorView& out, const TensorView& pool, const TensorView& idx) const {
    KdaPackedDecodeArgs a;
    rows_into(a, r0, n);
    a.out = out;
    a.state_pool = pool;
    a.state_indices = idx;
    kda_packed_decode(kCpu, a);
  }
  // kda_recurrent (CPU) of rows [r0, r0 + n).
  void verify(int64_t r0, int64_t n, const TensorView& out, const TensorView& pool, const TensorView& table,
              const TensorView& accepted) const {
    KdaRecurrentArgs a;
    rows_into(a, r0, n);
    a.out = out;
    a.state_pool = pool;
    a.slot_table = table;
    a.num_accepted = accepted;
    kda_recurrent(kCpu, a);
  }
};

Tensor state_pool(int64_t slots, int64_t H, std::mt19937_64& rng) {
  Tensor p = Tensor::empty({slots, H, V, K}, DType::f32);
  fill(p, rng, -0.5, 0.5);
  return p;
}

KdaChunkPrefillArgs prefill_args(const Tokens& x, const Tensor& out, const Tensor& pool, const Tensor& cu,
                                 const Tensor& slots) {
  KdaChunkPrefillArgs a;
  x.rows_into(a, 0, x.rows);
  a.out = out;
  a.state_pool = pool;
  a.cu_seqlens = cu;
  a.state_indices = slots;
  return a;
}

// ---- the math itself, against an independent matrix-form step ----

TEST(KdaCpu, GateBetaAndNormValues) {
  // One token, one head, K = V = 128 from a zero state: o = beta (k.q) v exactly, and the
  // state is beta k v^T. Gate and beta are checked on values with known answers.
  std::mt19937_64 rng(1);
  Tokens x(1, 1, DType::f32, rng);
  Tensor pool = Tensor::empty({2, 1, V, K}, DType::f32);
  std::memset(pool.data(), 0, static_cast<size_t>(pool.bytes()));
  Tensor out = Tensor::empty({1, 1, V}, DType::f32);
  Tensor idx = ints({1});
  x.decode(0, 1, out, pool, idx);
  std::vector<double> q(K), k(K);
  double qq = 0, kk = 0;
  for (int64_t i = 0; i < K; ++i) {
    q[i] = get(x.mixed_qkv, i);
    k[i] = get(x.mixed_qkv, K + i);
    qq += q[i] * q[i];
    kk += k[i] * k[i];
  }
  double qk = 0;
  for (int64_t i = 0; i < K; ++i) qk += q[i] / std::sqrt(qq + 1e-6) * k[i] / std::sqrt(kk + 1e-6);
  const double beta = 1 / (1 + std::exp(-static_cast<double>(get(x.raw_beta, 0))));
  for (int64_t j = 0; j < V; ++j) {
    const double want = beta * qk / std::sqrt(128.0) * get(x.mixed_qkv, 2 * K + j);
    EXPECT_NEAR(get(out, j), want, 1e-6 * std::fabs(want) + 1e-9) << j;
  }
  // Gate: with v = 0 and beta -> 0 the state only decays: S'[k][v] = exp(g[k]) S[k][v].
  for (auto lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    for (float raw : {0.0f, 25.0f, -3.0f}) {
      Tokens y(1, 1, DType::f32, rng, lb);
      for (int64_t i = 0; i < 2 * K + V; ++i) put(y.mixed_qkv, i, i < K ? 1.0f : (i < 2 * K ? 1.0f : 0.0f));
      for (int64_t i = 0; i < K; ++i) put(y.raw_g, i, raw);
      put(y.raw_beta, 0, -200.0f);  // sigmoid(-200) ~ 1e-87: no update
      for (int64_t i = 0; i < K; ++i) put(y.dt_bias, i, 0.0f);
      put(y.A_log, 0, 0.0f);
      Tensor p = Tensor::empty({2, 1, V, K}, DType::f32);
      for (int64_t i = 0; i < V * K; ++i) p.view().ptr<float>()[V * K + i] = 1.0f;
      y.decode(0, 1, out, p, idx);
      const double sp = raw > 20 ? raw : std::log1p(std::exp(static_cast<double>(raw)));
      const double g = lb ? -5.0 / (1 + std::exp(-static_cast<double>(raw))) : -sp;
      EXPECT_NEAR(p.view().ptr<float>()[V * K + 3], std::exp(g), 1e-7) << "raw_g " << raw << (lb ? " lb" : "");
    }
  }
}

TEST(KdaCpu, DecodeMatchesMatrixFormStep) {
  // S_t = (I - beta k k^T) diag(exp g) S + beta k v^T, o = S_t^T q: the matrix form, written
  // here independently of src/ops/cpu/kda_math.h, on a random state.
  std::mt19937_64 rng(2);
  const int64_t H = 2;
  Tokens x(H, 1, DType::f32, rng);
  Tensor pool = state_pool(3, H, rng);
  Tensor before = clone(pool);
  Tensor out = Tensor::empty({1, H, V}, DType::f32);
  Tensor idx = ints({2});
  x.decode(0, 1, out, pool, idx);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> q(K), k(K), v(V), alpha(K);
    double qq = 0, kk = 0;
    for (int64_t i = 0; i < K; ++i) {
      q[i] = get(x.mixed_qkv, h * K + i);
      k[i] = get(x.mixed_qkv, H * K + h * K + i);
      qq += q[i] * q[i];
      kk += k[i] * k[i];
      const double aa = get(x.raw_g, h * K + i) + get(x.dt_bias, h * K + i);
      alpha[i] = std::exp(-std::exp(static_cast<double>(get(x.A_log, h))) * std::log1p(std::exp(aa)));
    }
    for (int64_t i = 0; i < K; ++i) {
      q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(128.0);
      k[i] /= std::sqrt(kk + 1e-6);
    }
    for (int64_t j = 0; j < V; ++j) v[j] = get(x.mixed_qkv, 2 * H * K + h * V + j);
    const double beta = 1 / (1 + std::exp(-static_cast<double>(get(x.raw_beta, h))));
    // D = diag(alpha) S (K x V), then S_t = D - beta k (k^T D) + beta k v^T
    std::vector<double> D(K * V), kD(V, 0.0);
    const float* s0 = before.view().ptr<float>() + (2 * H + h) * V * K;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) D[i * V + j] = alpha[i] * s0[j * K + i];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) kD[j] += k[i] * D[i * V + j];
    const float* s1 = pool.view().ptr<float>() + (2 * H + h) * V * K;
    double worst = 0;
    for (int64_t j = 0; j < V; ++j) {
      double o = 0;
      for (int64_t i = 0; i < K; ++i) {
        const double st = D[i * V + j] - beta * k[i] * kD[j] + beta * k[i] * v[j];
        worst = std::max(worst, std::fabs(st - s1[j * K + i]));
        o += st * q[i];
      }
      EXPECT_NEAR(get(out, h * V + j), o, 1e-6) << "h " << h << " v " << j;
    }
    EXPECT_LT(worst, 1e-6) << "state of head " << h;
  }
  EXPECT_EQ(slot_bytes(pool, 0), slot_bytes(before, 0));
  EXPECT_EQ(slot_bytes(pool, 1), slot_bytes(before, 1));
}

// ---- the two forms of kda_chunk_prefill ----

// Tolerances of chunked vs token by token, both f64 inside with f32 states (docs/ops/kda.md):
// the only differences are summation order and where the state is rounded to f32 (every
// token vs every 64 tokens), so f32 results agree to a few f32 ulps (measured: relative L2
// <= 3e-7, max abs <= 9e-7, the worst being weak decay where states grow largest). bf16
// outputs may land on either side of a bf16 rounding boundary: one bf16 ulp on a few elements.
constexpr double kRelL2 = 1e-6, kMaxAbs = 4e-6;
constexpr double kRelL2Bf16 = 2e-3, kMaxAbsBf16 = 1e-2;

struct FormsResult {
  Err out, state, ckpt;
};

FormsResult run_both_forms(const Tokens& x, const std::vector<int64_t>& cu, const std::vector<int64_t>& slots,
                           const std::vector<int64_t>& has_init, int64_t pool_slots, std::mt19937_64& rng,
                           bool checkpoints = true) {
  const int64_t N = static_cast<int64_t>(slots.size());
  Tensor pool_a = state_pool(pool_slots, x.H, rng), pool_b = clone(pool_a), pool0 = clone(pool_a);
  const DType dt = x.mixed_qkv.view().dtype;
  Tensor out_a = Tensor::empty({x.rows, x.H, V}, dt), out_b = Tensor::empty({x.rows, x.H, V}, dt);
  Tensor tcu = ints(cu), tslots = ints(slots, DType::i64), tinit = ints(has_init);
  std::vector<int64_t> cuk(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) cuk[n + 1] = cuk[n] + (cu[n + 1] - cu[n]) / kKdaChunk;
  Tensor tcuk = ints(cuk);
  Tensor ck_a = Tensor::empty({std::max<int64_t>(cuk[N], 1), x.H, V, K}, DType::f32);
  std::memset(ck_a.data(), 0, static_cast<size_t>(ck_a.bytes()));
  Tensor ck_b = clone(ck_a);
  KdaChunkPrefillArgs a = prefill_args(x, out_a, pool_a, tcu, tslots);
  a.has_initial_state = tinit;
  if (checkpoints) {
    a.checkpoints = ck_a;
    a.cu_checkpoints = tcuk;
  }
  KdaChunkPrefillArgs b = a;
  b.out = out_b;
  b.state_pool = pool_b;
  if (checkpoints) b.checkpoints = ck_b;
  kda_chunk_prefill(kCpu, a);
  cpu::kda_chunk_prefill_token_by_token(b);
  FormsResult r{compare(out_a, out_b), compare(pool_a, pool_b), compare(ck_a, ck_b)};
  // Padding sequences: output zero; slots nobody addressed: bit-identical.
  std::vector<bool> addressed(pool_slots, false);
  for (int64_t n = 0; n < N; ++n) {
    if (slots[n] > 0) {
      addressed[slots[n]] = true;
    } else {
      EXPECT_TRUE(all_zero(out_a, cu[n], cu[n + 1] - cu[n])) << "padding sequence " << n;
      EXPECT_TRUE(all_zero(out_b, cu[n], cu[n + 1] - cu[n])) << "padding sequence " << n;
    }
  }
  for (int64_t s = 0; s < pool_slots; ++s) {
    if (addressed[s]) continue;
    EXPECT_EQ(slot_bytes(pool_a, s), slot_bytes(pool0, s)) << "chunked form touched slot " << s;
    EXPECT_EQ(slot_bytes(pool_b, s), slot_bytes(pool0, s)) << "token form touched slot " << s;
  }
  return r;
}

void expect_close(const Err& e, const std::string& what, DType dt = DType::f32) {
  EXPECT_LE(e.rel_l2, dt == DType::f32 ? kRelL2 : kRelL2Bf16) << what << ": relative L2 error";
  EXPECT_LE(e.max_abs, dt == DType::f32 ? kMaxAbs : kMaxAbsBf16) << what << ": max abs error";
}

void print_forms(const std::string& what, const FormsResult& r, double ms) {
  std::printf("  chunked vs token, %-22s out rel %.2e abs %.2e | state rel %.2e abs %.2e  (%.0f ms)\n", what.c_str(),
              r.out.rel_l2, r.out.max_abs, r.state.rel_l2, r.state.max_abs, ms);
}

TEST(KdaCpu, ChunkedEqualsTokenByTokenPerLength) {
  std::mt19937_64 rng(3);
  for (int64_t L : {1, 63, 64, 65, 200, 1000, 4096}) {
    for (bool lb : {false, true}) {
      if (L == 4096 && lb) continue;  // CI time: the longest length once
      const int64_t H = L >= 1000 ? 1 : 2;
      const auto t0 = std::chrono::steady_clock::now();
      Tokens x(H, L, DType::f32, rng, lb ? std::optional<float>(-5.0f) : std::nullopt);
      const FormsResult r = run_both_forms(x, {0, L}, {3}, {1}, 5, rng);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::string what = "L " + std::to_string(L) + (lb ? " lower bound" : " softplus");
      expect_close(r.out, what + " out");
      expect_close(r.state, what + " final state");
      expect_close(r.ckpt, what + " checkpoints");
      print_forms(what, r, ms);
    }
  }
  // Weak decay (g ~ -1e-3: the state remembers ~1000 tokens) and strong decay (g ~ -20 per
  // token: exp(Gam) underflows inside a chunk), where the two forms differ most.
  for (auto [lo, hi, name] : {std::tuple{-12.0, -6.0, "weak decay"}, std::tuple{6.0, 12.0, "strong decay"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    Tokens x(1, 1000, DType::f32, rng);
    fill(x.raw_g, rng, lo, hi);
    const FormsResult r = run_both_forms(x, {0, 1000}, {1}, {1}, 2, rng);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::string what = std::string("L 1000 ") + name;
    expect_close(r.out, what + " out");
    expect_close(r.state, what + " final state");
    expect_close(r.ckpt, what + " checkpoints");
    print_forms(what, r, ms);
  }
}

TEST(KdaCpu, ChunkedEqualsTokenByTokenVarlen) {
  // Mixed lengths in one batch, an empty sequence, a padding sequence (slot 0 and -1), one
  // sequence starting from the zero state, bf16 inputs.
  std::mt19937_64 rng(4);
  const std::vector<int64_t> cu = {0, 7, 7, 135, 200, 328, 330};
  for (DType dt : {DType::f32, DType::bf16}) {
    Tokens x(2, cu.back(), dt, rng);
    const FormsResult r = run_both_forms(x, cu, {4, 6, 1, 0, 2, -1}, {1, 1, 0, 1, 1, 1}, 8, rng);
    expect_close(r.out, std::string("varlen out ") + dtype_name(dt), dt);
    std::printf("  chunked vs token, varlen %s: out rel %.2e abs %.2e | state rel %.2e abs %.2e\n", dtype_name(dt),
                r.out.rel_l2, r.out.max_abs, r.state.rel_l2, r.state.max_abs);
    expect_close(r.state, std::string("varlen state ") + dtype_name(dt));
    expect_close(r.ckpt, std::string("varlen checkpoints ") + dtype_name(dt));
  }
}

TEST(KdaCpu, TokenPrefillEqualsDecodeSteps) {
  // The token-by-token form is decode repeated: bit-identical outputs, states, checkpoints.
  std::mt19937_64 rng(5);
  const int64_t H = 2, L = 130;
  Tokens x(H, L, DType::bf16, rng, -5.0f);
  Tensor pool_a = state_pool(4, H, rng), pool_b = clone(pool_a);
  Tensor out_a = Tensor::empty({L, H, V}, DType::bf16), out_b = Tensor::empty({L, H, V}, DType::bf16);
  Tensor ck = Tensor::empty({2, H, V, K}, DType::f32), cu = ints({0, L}), slot = ints({2}), cuk = ints({0, 2});
  KdaChunkPrefillArgs a = prefill_args(x, out_a, pool_a, cu, slot);
  a.checkpoints = ck;
  a.cu_checkpoints = cuk;
  cpu::kda_chunk_prefill_token_by_token(a);
  for (int64_t t = 0; t < L; ++t) {
    x.decode(t, 1, out_b.view().slice(0, t, 1), pool_b, slot);
    if (t == 63 || t == 127) {
      const int64_t c = t / 64;
      EXPECT_EQ(std::memcmp(ck.view().ptr<float>() + c * H * V * K, pool_b.view().ptr<float>() + 2 * H * V * K,
                            H * V * K * 4),
                0)
          << "checkpoint " << c;
    }
  }
  EXPECT_EQ(bytes_of(out_a), bytes_of(out_b));
  EXPECT_EQ(bytes_of(pool_a), bytes_of(pool_b));
}

// ---- kda_recurrent: verify with a slot table ----

TEST(KdaCpu, RecurrentT1EqualsDecode) {
  // Slot table [N, 4] (column 0 used), num_accepted 1; padding rows 0 and -1; decode reads
  // the same column as a strided view. Bit-identical outputs and pools.
  std::mt19937_64 rng(6);
  const int64_t H = 2, N = 5, S = 4;
  Tokens x(H, N, DType::bf16, rng);
  Tensor table = Tensor::empty({N, S}, DType::i32);
  const int32_t ids[N][S] = {{3, 9, 10, 11}, {0, 0, 0, 0}, {1, 12, 13, 14}, {-1, -1, -1, -1}, {7, 15, 16, 17}};
  std::memcpy(table.data(), ids, sizeof ids);
  Tensor acc = ints({1, 1, 1, 1, 1});
  Tensor pool_a = state_pool(18, H, rng), pool_b = clone(pool_a), pool0 = clone(pool_a);
  Tensor out_a = Tensor::empty({N, H, V}, DType::bf16), out_b = Tensor::empty({N, H, V}, DType::bf16);
  x.verify(0, N, out_a, pool_a, table, acc);
  x.decode(0, N, out_b, pool_b, table.view().select(1, 0));  // column 0: stride S
  EXPECT_EQ(bytes_of(out_a), bytes_of(out_b));
  EXPECT_EQ(bytes_of(pool_a), bytes_of(pool_b));
  EXPECT_TRUE(all_zero(out_a, 1, 1));
  EXPECT_TRUE(all_zero(out_a, 3, 1));
  for (int64_t s = 0; s < 18; ++s)
    if (s != 3 && s != 1 && s != 7) {
      EXPECT_EQ(slot_bytes(pool_a, s), slot_bytes(pool0, s)) << "slot " << s;
    }
}

TEST(KdaCpu, AcceptingKOfNDraftsEqualsDecodingK) {
  // Step 1: verify T = 4 tokens from column 0 (num_accepted 1). Column t must hold the state
  // after decoding tokens 0..t one at a time. Step 2: with num_accepted = a the next verify
  // starts from column a - 1, exactly as decoding continues from a accepted tokens.
  std::mt19937_64 rng(7);
  const int64_t H = 2, N = 4, S = 4, T = 4;
  Tokens x1(H, N * T, DType::f32, rng), x2(H, N * T, DType::f32, rng, std::nullopt);
  x2.A_log = x1.A_log;  // the same layer
  x2.dt_bias = x1.dt_bias;
  Tensor table = Tensor::empty({N, S + 1}, DType::i64);  // a wider table; the op sees [N, S]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c <= S; ++c) table.view().ptr<int64_t>()[n * (S + 1) + c] = 1 + n * (S + 1) + c;
  const TensorView tab = table.view().slice(1, 0, S);
  const int64_t slots = 1 + N * (S + 1);
  Tensor pool = state_pool(slots, H, rng), pool0 = clone(pool);
  Tensor out1 = Tensor::empty({N * T, H, V}, DType::f32), out2 = Tensor::empty({N * T, H, V}, DType::f32);
  Tensor ones = ints({1, 1, 1, 1});
  x1.verify(0, N * T, out1, pool, tab, ones);
  // Decode reference: a private pool per sequence, started from the same column-0 state.
  Tensor dpool = clone(pool0);
  Tensor dout = Tensor::empty({1, H, V}, DType::f32);
  const std::vector<int64_t> accepted = {1, 2, 3, 4};
  for (int64_t n = 0; n < N; ++n) {
    const int64_t col0 = 1 + n * (S + 1);
    Tensor idx = ints({col0});
    for (int64_t t = 0; t < T; ++t) {
      x1.decode(n * T + t, 1, dout, dpool, idx);
      EXPECT_EQ(slot_bytes(pool, col0 + t), slot_bytes(dpool, col0)) << "sequence " << n << " column " << t;
      EXPECT_EQ(std::memcmp(dout.data(), out1.view().ptr<float>() + (n * T + t) * H * V, H * V * 4), 0)
          << "sequence " << n << " token " << t;
    }
    EXPECT_EQ(slot_bytes(pool, col0 + S), slot_bytes(pool0, col0 + S)) << "column beyond the table";
  }
  // Step 2 from num_accepted = a: equals decoding from the state after a accepted tokens.
  Tensor pool_step1 = clone(pool);
  Tensor acc = ints(accepted);
  x2.verify(0, N * T, out2, pool, tab, acc);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t col0 = 1 + n * (S + 1), a = accepted[n];
    Tensor spool = clone(pool_step1);
    Tensor idx = ints({col0 + a - 1});
    for (int64_t t = 0; t < T; ++t) {
      x2.decode(n * T + t, 1, dout, spool, idx);
      EXPECT_EQ(slot_bytes(pool, col0 + t), slot_bytes(spool, col0 + a - 1)) << "step 2 sequence " << n << " col " << t;
      EXPECT_EQ(std::memcmp(dout.data(), out2.view().ptr<float>() + (n * T + t) * H * V, H * V * 4), 0)
          << "step 2 sequence " << n << " token " << t;
    }
  }
}

TEST(KdaCpu, RecurrentPaddingAndSkippedColumns) {
  // A row whose start column is <= 0 is padding (output zero, nothing written even where
  // other columns are live); a live row skips writing columns <= 0.
  std::mt19937_64 rng(8);
  const int64_t H = 1, N = 2, S = 3, T = 3;
  Tokens x(H, N * T, DType::f32, rng);
  Tensor table = Tensor::empty({N, S}, DType::i32);
  const int32_t ids[N][S] = {{0, 4, 5}, {1, 0, 2}};
  std::memcpy(table.data(), ids, sizeof ids);
  Tensor acc = ints({1, 1});
  Tensor pool = state_pool(6, H, rng), pool0 = clone(pool);
  Tensor out = Tensor::empty({N * T, H, V}, DType::f32);
  x.verify(0, N * T, out, pool, table, acc);
  EXPECT_TRUE(all_zero(out, 0, T));
  EXPECT_FALSE(all_zero(out, T, T));
  for (int64_t s : {0, 3, 4, 5}) EXPECT_EQ(slot_bytes(pool, s), slot_bytes(pool0, s)) << "slot " << s;
  EXPECT_NE(slot_bytes(pool, 1), slot_bytes(pool0, 1));
  EXPECT_NE(slot_bytes(pool, 2), slot_bytes(pool0, 2));
}

// ---- bf16 state pools ----

// A bf16 pool holding `f` rounded to nearest even, and an f32 pool widened from a bf16 one.
Tensor rounded_to_bf16(const Tensor& f) {
  const TensorView v = f.view();
  Tensor b = Tensor::empty(Shape(v.shape.begin(), v.shape.begin() + v.rank), DType::bf16);
  for (int64_t i = 0; i < v.numel(); ++i) b.view().ptr<uint16_t>()[i] = f32_to_bf16(v.ptr<float>()[i]);
  return b;
}
Tensor widened_to_f32(const Tensor& b) {
  const TensorView v = b.view();
  Tensor f = Tensor::empty(Shape(v.shape.begin(), v.shape.begin() + v.rank), DType::f32);
  for (int64_t i = 0; i < v.numel(); ++i) f.view().ptr<float>()[i] = bf16_to_f32(v.ptr<uint16_t>()[i]);
  return f;
}

TEST(KdaCpu, Bf16PoolDecodeIsF32DecodeRounded) {
  // docs/ops/kda.md "State dtype": a bf16-pool step is the f32-pool step on the widened state,
  // the new state rounded to bf16 (nearest even). Token by token, bit for bit: the same output,
  // and the bf16 pool equals the f32 pool's result rounded. Padding rows and slots nobody
  // addresses are untouched.
  std::mt19937_64 rng(13);
  const int64_t H = 2, B = 4, L = 6, slots = 7;
  Tensor idx = ints({3, 0, 5, 1}, DType::i64);
  for (auto lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    Tokens x(H, B * L, DType::bf16, rng, lb);
    Tensor pool_b = rounded_to_bf16(state_pool(slots, H, rng)), pool0 = clone(pool_b);
    Tensor out_f = Tensor::empty({B, H, V}, DType::bf16), out_b = Tensor::empty({B, H, V}, DType::bf16);
    for (int64_t t = 0; t < L; ++t) {
      Tensor pool_f = widened_to_f32(pool_b);
      KdaPackedDecodeArgs a;
      x.rows_into(a, t * B, B);
      a.state_indices = idx;
      a.out = out_f;
      a.state_pool = pool_f;
      kda_packed_decode(kCpu, a);
      a.out = out_b;
      a.state_pool = pool_b;
      kda_packed_decode(kCpu, a);
      EXPECT_EQ(bytes_of(out_b), bytes_of(out_f)) << "token " << t << (lb ? " lb" : "");
      EXPECT_EQ(bytes_of(pool_b), bytes_of(rounded_to_bf16(pool_f))) << "token " << t << (lb ? " lb" : "");
      EXPECT_TRUE(all_zero(out_b, 1, 1));
    }
    for (int64_t s : {0, 2, 4, 6}) EXPECT_EQ(slot_bytes(pool_b, s), slot_bytes(pool0, s)) << "slot " << s;
    EXPECT_NE(slot_bytes(pool_b, 3), slot_bytes(pool0, 3));
  }
}

TEST(KdaCpu, Bf16PoolVerifyColumnsAreDecodeSteps) {
  // With a bf16 pool the running state of kda_recurrent is rounded to bf16 after every token,
  // so column t holds exactly the pool after t + 1 bf16 decode steps, and T = 1 is decode.
  std::mt19937_64 rng(14);
  const int64_t H = 2, N = 3, S = 4, T = 4, slots = N * S + 1;
  Tokens x(H, N * T, DType::f32, rng, -5.0f);
  Tensor table = Tensor::empty({N, S}, DType::i32);
  for (int64_t i = 0; i < N * S; ++i) table.view().ptr<int32_t>()[i] = static_cast<int32_t>(1 + i);
  Tensor acc = ints({1, 1, 1});
  Tensor pool = rounded_to_bf16(state_pool(slots, H, rng)), pool0 = clone(pool);
  Tensor out = Tensor::empty({N * T, H, V}, DType::f32), dout = Tensor::empty({1, H, V}, DType::f32);
  x.verify(0, N * T, out, pool, table, acc);
  for (int64_t n = 0; n < N; ++n) {
    Tensor dpool = clone(pool0), sidx = ints({1 + n * S});
    for (int64_t t = 0; t < T; ++t) {
      x.decode(n * T + t, 1, dout, dpool, sidx);
      EXPECT_EQ(slot_bytes(pool, 1 + n * S + t), slot_bytes(dpool, 1 + n * S)) << "sequence " << n << " column " << t;
      EXPECT_EQ(std::memcmp(dout.data(), out.view().ptr<float>() + (n * T + t) * H * V, H * V * 4), 0)
          << "sequence " << n << " token " << t;
    }
  }
}

TEST(KdaCpu, Bf16PoolPrefillIsF32PrefillRounded) {
  // The chunked form keeps its state f32 at chunk boundaries and rounds only what it stores:
  // final states and checkpoints of a bf16 pool are the f32-pool ones rounded; outputs equal.
  std::mt19937_64 rng(15);
  const int64_t H = 2;
  const std::vector<int64_t> cu = {0, 5, 5, 140, 203};
  Tokens x(H, cu.back(), DType::bf16, rng);
  Tensor pool_b = rounded_to_bf16(state_pool(6, H, rng)), pool_f = widened_to_f32(pool_b);
  Tensor ck_b = Tensor::empty({2, H, V, K}, DType::bf16), ck_f = Tensor::empty({2, H, V, K}, DType::f32);
  Tensor out_b = Tensor::empty({x.rows, H, V}, DType::bf16), out_f = Tensor::empty({x.rows, H, V}, DType::bf16);
  Tensor tcu = ints(cu), tslots = ints({2, 4, 1, -1}), tcuk = ints({0, 0, 0, 2, 2});
  KdaChunkPrefillArgs a = prefill_args(x, out_f, pool_f, tcu, tslots);
  a.checkpoints = ck_f;
  a.cu_checkpoints = tcuk;
  kda_chunk_prefill(kCpu, a);
  a.out = out_b;
  a.state_pool = pool_b;
  a.checkpoints = ck_b;
  kda_chunk_prefill(kCpu, a);
  EXPECT_EQ(bytes_of(out_b), bytes_of(out_f));
  EXPECT_EQ(bytes_of(pool_b), bytes_of(rounded_to_bf16(pool_f)));
  EXPECT_EQ(bytes_of(ck_b), bytes_of(rounded_to_bf16(ck_f)));
}

// ---- the short convolution ----

struct Conv {
  int64_t C, W = 4, E;
  Tensor weight;
  Conv(int64_t C_, int64_t E_, std::mt19937_64& rng) : C(C_), E(E_) {
    weight = Tensor::empty({C, W}, DType::f32);
    fill(weight, rng, -1, 1);
  }
};

TEST(KdaCpu, ConvPrefillSplitAndUpdateStepsAgree) {
  // One prefill of L tokens == prefill of L1 then prefill of the rest == prefill of L1 then
  // single-token updates: bit-identical outputs and conv states (same sums, same order).
  std::mt19937_64 rng(9);
  const int64_t C = 40, L = 23, L1 = 9;
  Conv cv(C, 2, rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = Tensor::empty({L, C}, dt);
    fill(x, rng, -1, 1);
    Tensor st_a = Tensor::empty({3, cv.W - 1 + cv.E, C}, dt);
    fill(st_a, rng, -1, 1);
    Tensor st_b = clone(st_a), st_c = clone(st_a);
    Tensor out_a = Tensor::empty({L, C}, dt), out_b = Tensor::empty({L, C}, dt), out_c = Tensor::empty({L, C}, dt);
    Tensor slot = ints({2});
    KdaConv1dPrefillArgs p;
    p.out = out_a;
    p.conv_state = st_a;
    p.x = x;
    p.weight = cv.weight;
    Tensor cu_all = ints({0, L});
    p.cu_seqlens = cu_all;
    p.state_indices = slot;
    kda_conv1d_prefill(kCpu, p);
    Tensor cu1 = ints({0, L1}), cu2 = ints({0, L - L1});
    for (auto [st, out, steps] : {std::tuple{&st_b, &out_b, false}, std::tuple{&st_c, &out_c, true}}) {
      KdaConv1dPrefillArgs q = p;
      q.conv_state = *st;
      q.out = out->view().slice(0, 0, L1);
      q.x = x.view().slice(0, 0, L1);
      q.cu_seqlens = cu1;
      kda_conv1d_prefill(kCpu, q);
      if (!steps) {
        q.out = out->view().slice(0, L1, L - L1);
        q.x = x.view().slice(0, L1, L - L1);
        q.cu_seqlens = cu2;
        kda_conv1d_prefill(kCpu, q);
      } else {
        for (int64_t t = L1; t < L; ++t) {
          KdaConv1dUpdateArgs u;
          u.out = out->view().slice(0, t, 1);
          u.conv_state = *st;
          u.x = x.view().slice(0, t, 1);
          u.weight = cv.weight;
          u.state_indices = slot;
          kda_conv1d_update(kCpu, u);
        }
      }
    }
    EXPECT_EQ(bytes_of(out_a), bytes_of(out_b)) << dtype_name(dt);
    EXPECT_EQ(bytes_of(out_a), bytes_of(out_c)) << dtype_name(dt);
    // The W - 1 history rows agree (single-token updates leave the E extra rows as they were
    // written, prefill does not touch them), and slots 0 and 1 are untouched.
    for (int64_t r = 0; r < cv.W - 1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (2 * (cv.W - 1 + cv.E) + r) * C + c;
        EXPECT_EQ(get(st_a, i), get(st_b, i));
        EXPECT_EQ(get(st_a, i), get(st_c, i));
      }
  }
}

TEST(KdaCpu, ConvSpeculativeAcceptEqualsReplay) {
  // Verify T = 1 + E tokens, accept a of them, then the next call with num_accepted = a must
  // produce what a conv that only ever saw the accepted tokens produces.
  std::mt19937_64 rng(10);
  const int64_t C = 24, E = 3, T = E + 1, N = 4;
  Conv cv(C, E, rng);
  const int64_t R = cv.W - 1 + E;
  Tensor st = Tensor::empty({N + 1, R, C}, DType::f32);
  fill(st, rng, -1, 1);
  Tensor st0 = clone(st);
  Tensor x1 = Tensor::empty({N * T, C}, DType::f32), x2 = Tensor::empty({N * T, C}, DType::f32);
  fill(x1, rng, -1, 1);
  fill(x2, rng, -1, 1);
  Tensor out1 = Tensor::empty({N * T, C}, DType::f32), out2 = Tensor::empty({N * T, C}, DType::f32);
  Tensor slots = ints({1, 2, 3, 4}), acc = ints({1, 2, 3, 4});
  KdaConv1dUpdateArgs u;
  u.out = out1;
  u.conv_state = st;
  u.x = x1;
  u.weight = cv.weight;
  u.state_indices = slots;
  kda_conv1d_update(kCpu, u);
  u.out = out2;
  u.x = x2;
  u.num_accepted = acc;
  kda_conv1d_update(kCpu, u);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t a = n + 1;
    // Replay: single-token updates of the a accepted tokens, then of the T new ones.
    Tensor rs = clone(st0);
    Tensor o = Tensor::empty({1, C}, DType::f32);
    Tensor one = ints({n + 1});
    auto step = [&](const Tensor& x, int64_t row) {
      KdaConv1dUpdateArgs s;
      s.out = o;
      s.conv_state = rs;
      s.x = x.view().slice(0, row, 1);
      s.weight = cv.weight;
      s.state_indices = one;
      kda_conv1d_update(kCpu, s);
    };
    for (int64_t t = 0; t < a; ++t) {
      step(x1, n * T + t);
      EXPECT_EQ(std::memcmp(o.data(), out1.view().ptr<float>() + (n * T + t) * C, C * 4), 0) << n << " " << t;
    }
    for (int64_t t = 0; t < T; ++t) {
      step(x2, n * T + t);
      EXPECT_EQ(std::memcmp(o.data(), out2.view().ptr<float>() + (n * T + t) * C, C * 4), 0)
          << "sequence " << n << " accepted " << a << " token " << t;
    }
  }
  EXPECT_EQ(std::memcmp(st.data(), st0.data(), R * C * 4), 0) << "slot 0 touched";
}

TEST(KdaCpu, ConvPaddingAndZeroHistory) {
  std::mt19937_64 rng(11);
  const int64_t C = 8;
  Conv cv(C, 0, rng);
  Tensor x = Tensor::empty({10, C}, DType::f32);
  fill(x, rng, -1, 1);
  Tensor st = Tensor::empty({4, 3, C}, DType::f32);
  fill(st, rng, -1, 1);
  Tensor st0 = clone(st);
  Tensor out = Tensor::empty({10, C}, DType::f32);
  Tensor cu = ints({0, 4, 7, 10}), slots = ints({1, 0, 3}), init = ints({0, 1, 1});
  KdaConv1dPrefillArgs p;
  p.out = out;
  p.conv_state = st;
  p.x = x;
  p.weight = cv.weight;
  p.cu_seqlens = cu;
  p.state_indices = slots;
  p.has_initial_state = init;
  kda_conv1d_prefill(kCpu, p);
  EXPECT_TRUE(all_zero(out, 4, 3));
  EXPECT_EQ(std::memcmp(st.view().ptr<float>() + 2 * 3 * C, st0.view().ptr<float>() + 2 * 3 * C, 3 * C * 4), 0);
  EXPECT_EQ(std::memcmp(st.data(), st0.data(), 3 * C * 4), 0);
  // Sequence 0 had no history: its first output is silu(w[c][3] x[0][c]).
  for (int64_t c = 0; c < C; ++c) {
    const double z = static_cast<double>(get(cv.weight, c * 4 + 3)) * get(x, c);
    EXPECT_FLOAT_EQ(get(out, c), static_cast<float>(z / (1 + std::exp(-z))));
  }
}

// ---- bad input: an error that names the argument ----

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The CUDA state kernel's layout rule (pure, docs/ops/kda.md): two roles while the grid has at
// most one CTA per SM, uniform warps beyond.
TEST(KdaCpu, StateKernelLayoutRule) {
  EXPECT_TRUE(ops::kda_chunk_prefill_state_roles(128, 132));  // one sequence, H = 32
  EXPECT_TRUE(ops::kda_chunk_prefill_state_roles(132, 132));
  EXPECT_FALSE(ops::kda_chunk_prefill_state_roles(133, 132));
  EXPECT_FALSE(ops::kda_chunk_prefill_state_roles(384, 132));  // H = 96
}

// The CUDA prefill's default workspace bound (pure, docs/ops/kda.md): a 32nd of the device's
// memory, clamped to [1 GiB, 4 GiB].
TEST(KdaCpu, DefaultWorkspaceBoundRule) {
  const int64_t gib = int64_t{1} << 30, gb = 1000 * 1000 * 1000;
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(141 * gb), 4 * gib);  // H200
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(80 * gb), 80 * gb / 32);  // H100: 2.5 GB
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(128 * gib), 4 * gib);
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(128 * gib + 32), 4 * gib);
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(32 * gib), gib);
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(16 * gb), gib);
  EXPECT_EQ(ops::kda_chunk_prefill_default_workspace_bytes(0), gib);
  // A 64k-token sequence at H = 32 takes one window on an H200, three under a 1 GiB bound.
  const int64_t per_slot = 32 * ops::kKdaChunkWorkspaceBytesPerSlotHead, slots = 65536 / 64 + 1;
  EXPECT_GE(ops::kda_chunk_prefill_default_workspace_bytes(141 * gb) / per_slot, slots);
  EXPECT_LT(gib / per_slot * 2, slots);
}

// The CUDA decode's store rule (pure, docs/ops/kda.md): streaming stores up to twice the L2 of
// state, plain stores beyond.
TEST(KdaCpu, DecodeStreamingStoreRule) {
  const int64_t mib = int64_t{1} << 20, l2 = 60 * mib;  // the H200's L2
  const int64_t per_seq = 32 * 128 * 128 * 4;             // H = 32, f32 state
  EXPECT_TRUE(ops::kda_packed_decode_streaming_stores(1 * per_seq, l2));
  EXPECT_TRUE(ops::kda_packed_decode_streaming_stores(32 * per_seq, l2));   // 64 MiB
  EXPECT_TRUE(ops::kda_packed_decode_streaming_stores(120 * mib, l2));
  EXPECT_FALSE(ops::kda_packed_decode_streaming_stores(120 * mib + 1, l2));
  EXPECT_FALSE(ops::kda_packed_decode_streaming_stores(128 * per_seq, l2));  // 256 MiB
}

TEST(KdaCpu, BadInputNamesTheArgument) {
  std::mt19937_64 rng(12);
  const int64_t H = 2, B = 3;
  Tokens x(H, B, DType::bf16, rng);
  Tensor pool = state_pool(4, H, rng);
  Tensor out = Tensor::empty({B, H, V}, DType::bf16);
  Tensor idx = ints({1, 2, 3});
  KdaPackedDecodeArgs good;
  x.rows_into(good, 0, B);
  good.out = out;
  good.state_pool = pool;
  good.state_indices = idx;
  kda_packed_decode(kCpu, good);

  Tensor table = Tensor::empty({B, 2}, DType::i32);
  expect_error([&] { auto a = good; a.state_indices = table; kda_packed_decode(kCpu, a); },
               "kda_packed_decode: state_indices: expected rank 1");
  Tensor past = ints({1, 4, 2});
  expect_error([&] { auto a = good; a.state_indices = past; kda_packed_decode(kCpu, a); },
               "state_indices: expected slot ids in [1, 3]");
  Tensor dup = ints({2, 0, 2});
  expect_error([&] { auto a = good; a.state_indices = dup; kda_packed_decode(kCpu, a); },
               "state_indices: expected distinct slots");
  Tensor fidx = Tensor::empty({B}, DType::f32);
  expect_error([&] { auto a = good; a.state_indices = fidx; kda_packed_decode(kCpu, a); },
               "state_indices: expected dtype i32 or i64");
  Tensor alog3 = Tensor::empty({H + 1}, DType::f32);
  expect_error([&] { auto a = good; a.A_log = alog3; kda_packed_decode(kCpu, a); }, "A_log: expected size 2");
  Tensor pool_k = Tensor::empty({4, H, V, 64}, DType::f32);
  expect_error([&] { auto a = good; a.state_pool = pool_k; kda_packed_decode(kCpu, a); }, "state_pool: expected size 128");
  Tensor pool_h = Tensor::empty({4, H + 1, V, K}, DType::f32);
  expect_error([&] { auto a = good; a.state_pool = pool_h; kda_packed_decode(kCpu, a); }, "state_pool: expected size 2");
  Tensor out_v = Tensor::empty({B, H, 64}, DType::bf16);
  expect_error([&] { auto a = good; a.out = out_v; kda_packed_decode(kCpu, a); }, "state_pool: expected size 64");
  Tensor pool_f16 = Tensor::empty({4, H, V, K}, DType::f16);
  expect_error([&] { auto a = good; a.state_pool = pool_f16; kda_packed_decode(kCpu, a); },
               "state_pool: expected dtype f32 or bf16");
  // Misaligned: a pool (or raw_g) whose data pointer is off the element grid.
  const TensorView pool_odd(static_cast<char*>(pool.data()) + 2, Device::cpu, DType::f32, {3, H, V, K},
                            {H * V * K, V * K, K, 1});
  expect_error([&] { auto a = good; a.state_pool = pool_odd; kda_packed_decode(kCpu, a); },
               "state_pool: expected a data pointer aligned");
  const TensorView g_odd(static_cast<char*>(x.raw_g.data()) + 1, Device::cpu, DType::bf16, {B, H, K},
                         {H * K, K, 1});
  expect_error([&] { auto a = good; a.raw_g = g_odd; kda_packed_decode(kCpu, a); }, "raw_g: expected a data pointer aligned");
  // H / K mismatch between the token inputs themselves.
  Tensor g_k = Tensor::empty({B, H, 64}, DType::bf16);
  expect_error([&] { auto a = good; a.raw_g = g_k; kda_packed_decode(kCpu, a); }, "dt_bias: expected size 128");
  Tensor beta_h = Tensor::empty({B, H + 1}, DType::bf16);
  expect_error([&] { auto a = good; a.raw_beta = beta_h; kda_packed_decode(kCpu, a); }, "raw_beta: expected size 2 in dim 1");
  Tensor dt_k = Tensor::empty({H * K + 1}, DType::f32);
  expect_error([&] { auto a = good; a.dt_bias = dt_k; kda_packed_decode(kCpu, a); }, "dt_bias: expected size 256");
  expect_error([&] { auto a = good; a.state_pool = pool.view().transposed(2, 3); kda_packed_decode(kCpu, a); },
               "state_pool: expected each slot contiguous");
  // Misaligned rows: channel stride 2, and a row start off the element grid.
  Tensor wide = Tensor::empty({B, 2 * (2 * H * K + H * V)}, DType::bf16);
  const TensorView strided(wide.data(), Device::cpu, DType::bf16, {B, 2 * H * K + H * V},
                           {2 * (2 * H * K + H * V), 2});
  expect_error([&] { auto a = good; a.mixed_qkv = strided; kda_packed_decode(kCpu, a); },
               "mixed_qkv: expected rows with channel stride 1");
  const TensorView odd(static_cast<char*>(wide.data()) + 1, Device::cpu, DType::bf16, {B, 2 * H * K + H * V},
                       {2 * H * K + H * V, 1});
  expect_error([&] { auto a = good; a.mixed_qkv = odd; kda_packed_decode(kCpu, a); },
               "mixed_qkv: expected a data pointer aligned");
  expect_error([&] { auto a = good; a.lower_bound = 1.0f; kda_packed_decode(kCpu, a); }, "lower_bound: expected");
  expect_error([&] { kda_packed_decode(Backend::cuda, good); }, "kda_packed_decode");

  // kda_recurrent
  Tensor tab = Tensor::empty({B, 2}, DType::i32);
  const int32_t ids[B][2] = {{1, 2}, {3, 0}, {0, 0}};
  std::memcpy(tab.data(), ids, sizeof ids);
  Tensor acc_bad = ints({1, 3, 1});
  KdaRecurrentArgs r;
  x.rows_into(r, 0, B);
  r.out = out;
  r.state_pool = pool;
  r.slot_table = tab;
  Tensor acc_ok = ints({1, 1, 1});
  r.num_accepted = acc_ok;
  kda_recurrent(kCpu, r);
  expect_error([&] { auto a = r; a.num_accepted = acc_bad; kda_recurrent(kCpu, a); },
               "kda_recurrent: num_accepted: expected values in [1, 2]");
  expect_error([&] { auto a = r; a.slot_table = idx; kda_recurrent(kCpu, a); }, "slot_table: expected rank 2");
  Tensor acc2d = Tensor::empty({B, 1}, DType::i32);
  expect_error([&] { auto a = r; a.num_accepted = acc2d; kda_recurrent(kCpu, a); }, "num_accepted: expected rank 1");
  Tensor tab_past = Tensor::empty({B, 2}, DType::i32);
  const int32_t past_ids[B][2] = {{4, 2}, {3, 0}, {0, 0}};
  std::memcpy(tab_past.data(), past_ids, sizeof past_ids);
  expect_error([&] { auto a = r; a.slot_table = tab_past; kda_recurrent(kCpu, a); },
               "slot_table: expected slot ids in [1, 3]");
  Tensor pool_bf = Tensor::empty({4, H, V, K}, DType::bf16);
  std::memset(pool_bf.data(), 0, static_cast<size_t>(pool_bf.bytes()));
  kda_recurrent(kCpu, [&] { auto a = r; a.state_pool = pool_bf; return a; }());  // a bf16 pool is legal
  Tensor tab1 = Tensor::empty({1, 2}, DType::i32);
  Tensor acc1 = ints({1});
  expect_error([&] { auto a = r; a.slot_table = tab1; a.num_accepted = acc1; kda_recurrent(kCpu, a); },
               "mixed_qkv: expected T = rows / N in [1, 2]");
  Tensor tab_share = Tensor::empty({B, 2}, DType::i32);
  const int32_t sh[B][2] = {{1, 2}, {3, 2}, {0, 0}};
  std::memcpy(tab_share.data(), sh, sizeof sh);
  Tensor acc_share = ints({2, 2, 1});
  expect_error([&] { auto a = r; a.slot_table = tab_share; a.num_accepted = acc_share; kda_recurrent(kCpu, a); },
               "slot_table: expected distinct slots for distinct sequences");

  // kda_chunk_prefill
  Tensor cu_bad = ints({0, 2, 1, 3}), cu_ok = ints({0, 1, 3, 3}), sl = ints({1, 2, 3});
  KdaChunkPrefillArgs c = prefill_args(x, out, pool, cu_ok, sl);
  kda_chunk_prefill(kCpu, c);
  expect_error([&] { auto a = c; a.cu_seqlens = cu_bad; kda_chunk_prefill(kCpu, a); },
               "kda_chunk_prefill: cu_seqlens: expected non-decreasing");
  expect_error([&] { auto a = c; a.max_workspace_bytes = -1; kda_chunk_prefill(kCpu, a); },
               "kda_chunk_prefill: max_workspace_bytes: expected >= 0 (0: the default bound)");
  Tensor cu_short = ints({0, 3});
  expect_error([&] { auto a = c; a.cu_seqlens = cu_short; kda_chunk_prefill(kCpu, a); },
               "cu_seqlens: expected size 4 in dim 0");
  Tensor ck = Tensor::empty({1, H, V, K}, DType::f32), cuk = ints({0, 0, 1, 1});
  expect_error([&] { auto a = c; a.checkpoints = ck; a.cu_checkpoints = cuk; kda_chunk_prefill(kCpu, a); },
               "cu_checkpoints: expected floor(len / 64) = 0 rows for sequence 1");
  expect_error([&] { auto a = c; a.checkpoints = ck; kda_chunk_prefill(kCpu, a); }, "cu_checkpoints: expected");
  // All pools of a call share one dtype: bf16 checkpoints with an f32 pool are an error.
  Tensor ck_bf = Tensor::empty({1, H, V, K}, DType::bf16), cuk0 = ints({0, 0, 0, 0});
  expect_error([&] { auto a = c; a.checkpoints = ck_bf; a.cu_checkpoints = cuk0; kda_chunk_prefill(kCpu, a); },
               "checkpoints: expected the dtype of state_pool (f32)");
  Tensor sl_past = ints({1, 2, 4}), sl_2d = Tensor::empty({3, 1}, DType::i32);
  expect_error([&] { auto a = c; a.state_indices = sl_past; kda_chunk_prefill(kCpu, a); },
               "kda_chunk_prefill: state_indices: expected slot ids in [1, 3]");
  expect_error([&] { auto a = c; a.state_indices = sl_2d; kda_chunk_prefill(kCpu, a); },
               "state_indices: expected rank 1");

  // conv
  Tensor cx = Tensor::empty({4, 16}, DType::f32), cw = Tensor::empty({16, 4}, DType::f32);
  Tensor cst = Tensor::empty({3, 3, 16}, DType::f32), cout = Tensor::empty({4, 16}, DType::f32);
  fill(cx, rng, -1, 1);
  fill(cw, rng, -1, 1);
  fill(cst, rng, -1, 1);
  KdaConv1dUpdateArgs u;
  u.out = cout;
  u.conv_state = cst;
  u.x = cx;
  u.weight = cw;
  Tensor two = ints({1, 2});
  u.state_indices = two;
  expect_error([&] { kda_conv1d_update(kCpu, u); }, "kda_conv1d_update: conv_state: expected R = W - 1 + E rows");
  Tensor four = ints({1, 2, 0, -1});
  u.state_indices = four;
  kda_conv1d_update(kCpu, u);
  Tensor acc2 = ints({1, 2, 1, 1});
  expect_error([&] { auto a = u; a.num_accepted = acc2; kda_conv1d_update(kCpu, a); },
               "num_accepted: expected values in [1, E + 1 = 1]");
  Tensor cw_bad = Tensor::empty({15, 4}, DType::f32);
  expect_error([&] { auto a = u; a.weight = cw_bad; kda_conv1d_update(kCpu, a); }, "weight: expected size 16");
  Tensor cst_bf = Tensor::empty({3, 3, 16}, DType::bf16);
  expect_error([&] { auto a = u; a.conv_state = cst_bf; kda_conv1d_update(kCpu, a); },
               "conv_state: expected the dtype of x");
  KdaConv1dPrefillArgs p;
  p.out = cout;
  p.conv_state = cst;
  p.x = cx;
  p.weight = cw;
  Tensor pcu = ints({0, 4}), pslot = ints({3});
  p.cu_seqlens = pcu;
  p.state_indices = pslot;
  expect_error([&] { kda_conv1d_prefill(kCpu, p); }, "kda_conv1d_prefill: state_indices: expected slot ids in [1, 2]");
}

}  // namespace
}  // namespace kestrel::ops
