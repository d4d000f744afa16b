// The per-token KDA math every CPU KDA reference uses (docs/ops/kda.md "Meaning"): gate, beta,
// q/k L2 normalisation and scale, the one-token state step, state load/store, and the
// validation of index values (slots, lengths) that only the host can read. Semantics live
// here once; kda_packed_decode, kda_recurrent, kda_chunk_prefill and both conv ops call it.
//
// Precision: every value is loaded exactly (bf16 and f32 are exact in f64) and all arithmetic
// is f64; what the op stores (outputs, states) is rounded once to its dtype. The recurrent
// state is f32 by definition: a running state is rounded to f32 after every token (the token
// forms) or at every chunk boundary (the chunked form), i.e. wherever a kernel would store it.
// A bf16 state pool holds that f32 state rounded to bf16 (nearest even): loads widen exactly,
// the step is the f32 step, and the token forms round the running state f32 -> bf16 after
// every token (so a verify column equals the decode step it replaces, bit for bit); the
// chunked form keeps f32 at chunk boundaries and rounds to bf16 where it stores.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops::cpu::kda {

inline constexpr double kL2Eps = 1e-6;           // inside the sqrt: x / sqrt(sum x^2 + eps)
inline constexpr double kSoftplusThreshold = 20;  // softplus(x) = x above it (torch's default)

inline double softplus(double x) { return x > kSoftplusThreshold ? x : std::log1p(std::exp(x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x * sigmoid(x); }

// The log-decay g of one key dim: a = raw_g + dt_bias;
//   no lower bound: g = -exp(A_log) * softplus(a)          (Kimi-Linear)
//   lower bound LB: g = LB * sigmoid(exp(A_log) * a)       (Kimi-K3, LB = -5)
inline double gate(double raw_g, double dt_bias, double A_log, std::optional<float> lower_bound) {
  const double a = raw_g + dt_bias;
  if (!lower_bound) return -std::exp(A_log) * softplus(a);
  return static_cast<double>(*lower_bound) * sigmoid(std::exp(A_log) * a);
}

inline double beta(double raw_beta) { return sigmoid(raw_beta); }

// x <- x / sqrt(sum x^2 + 1e-6) * scale
inline void l2_normalize(double* x, int64_t n, double scale) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = scale / std::sqrt(ss + kL2Eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

// Element i of a 1-D view; element (i, j) / (i, j, l) of 2-D / 3-D views.
inline float at(const TensorView& t, int64_t i) { return load_f32(t, i * t.stride(0)); }
inline float at(const TensorView& t, int64_t i, int64_t j) { return load_f32(t, i * t.stride(0) + j * t.stride(1)); }
inline float at(const TensorView& t, int64_t i, int64_t j, int64_t l) {
  return load_f32(t, i * t.stride(0) + j * t.stride(1) + l * t.stride(2));
}
inline int64_t index_at(const TensorView& t, int64_t i) { return load_index(t, i * t.stride(0)); }
inline int64_t index_at(const TensorView& t, int64_t i, int64_t j) {
  return load_index(t, i * t.stride(0) + j * t.stride(1));
}

// One token of one head, ready for the recurrence.
struct TokenHead {
  std::vector<double> q, k, v, g;  // q: normalised and scaled by 1/sqrt(K); k: normalised; g: log decay
  double beta = 0;
};

// The per-token inputs of a KDA op (what kda_detail::check_token_inputs checked).
struct TokenInputs {
  TensorView mixed_qkv, raw_g, raw_beta, A_log, dt_bias;
  std::optional<float> lower_bound;
  KdaDims d;

  // Token `row`, head `h`: q = row[h*K ...], k = row[H*K + h*K ...], v = row[2*H*K + h*V ...].
  void load(int64_t row, int64_t h, TokenHead& x) const {
    const int64_t H = d.H, K = d.K, V = d.V;
    x.q.resize(K);
    x.k.resize(K);
    x.v.resize(V);
    x.g.resize(K);
    for (int64_t i = 0; i < K; ++i) {
      x.q[i] = at(mixed_qkv, row, h * K + i);
      x.k[i] = at(mixed_qkv, row, H * K + h * K + i);
      x.g[i] = gate(at(raw_g, row, h, i), at(dt_bias, h * K + i), at(A_log, h), lower_bound);
    }
    for (int64_t j = 0; j < V; ++j) x.v[j] = at(mixed_qkv, row, 2 * H * K + h * V + j);
    l2_normalize(x.q.data(), K, 1.0 / std::sqrt(static_cast<double>(K)));
    l2_normalize(x.k.data(), K, 1.0);
    x.beta = beta(at(raw_beta, row, h));
  }
};

// A head's state in f64, laid out like a pool slot: s[v * K + k] = S[k][v].
using HeadState = std::vector<double>;

// Element offset of head h of `slot` in a [slots, H, V, K] pool (or a checkpoint tensor).
inline int64_t slot_head(const TensorView& pool, int64_t slot, int64_t h) {
  return slot * pool.stride(0) + h * pool.stride(1);
}

// The pool's state of one head, widened exactly (f32 or bf16 pool).
inline void load_state(const TensorView& pool, int64_t slot, int64_t h, const KdaDims& d, HeadState& s) {
  const int64_t off = slot_head(pool, slot, h), n = d.V * d.K;
  s.resize(static_cast<size_t>(n));
  if (pool.dtype == DType::bf16) {
    const uint16_t* p = static_cast<const uint16_t*>(pool.data) + off;
    for (int64_t i = 0; i < n; ++i) s[i] = bf16_to_f32(p[i]);
  } else {
    const float* p = static_cast<const float*>(pool.data) + off;
    s.assign(p, p + n);
  }
}

// Stores a state: f32 pools get the f32 value, bf16 pools the f32 value rounded to nearest even.
inline void store_state(const TensorView& pool, int64_t slot, int64_t h, const KdaDims& d, const HeadState& s) {
  const int64_t off = slot_head(pool, slot, h), n = d.V * d.K;
  if (pool.dtype == DType::bf16) {
    uint16_t* p = static_cast<uint16_t*>(pool.data) + off;
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(static_cast<float>(s[i]));
  } else {
    float* p = static_cast<float*>(pool.data) + off;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(s[i]);
  }
}

// The state is f32: what a store then a load would give.
inline void round_state_f32(HeadState& s) {
  for (double& x : s) x = static_cast<double>(static_cast<float>(x));
}

// What a store to a pool of `dtype` then a load would give: f32, then (bf16 pools) f32 -> bf16
// to nearest even. The double rounding is the definition: a kernel steps in f32 and rounds
// its f32 state to bf16.
inline void round_state(HeadState& s, DType dtype) {
  if (dtype != DType::bf16) return round_state_f32(s);
  for (double& x : s) x = static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(x))));
}

// One token (DESIGN.md 4.3), f64, then the state rounded to the pool's dtype (round_state):
//   S' = diag(exp(g)) S;  u = beta (v - S'^T k);  S = S' + k u^T;  o = S^T q
// The output uses the updated state before that rounding (a kernel's registers).
inline void token_step(HeadState& s, const TokenHead& x, const KdaDims& d, double* o, DType state_dtype) {
  const int64_t K = d.K, V = d.V;
  std::vector<double> decay(K);
  for (int64_t i = 0; i < K; ++i) decay[i] = std::exp(x.g[i]);
  for (int64_t j = 0; j < V; ++j) {
    double* col = s.data() + j * K;  // S[:, j]
    double sk = 0;
    for (int64_t i = 0; i < K; ++i) {
      col[i] *= decay[i];
      sk += col[i] * x.k[i];
    }
    const double u = x.beta * (x.v[j] - sk);
    double oq = 0;
    for (int64_t i = 0; i < K; ++i) {
      col[i] += x.k[i] * u;
      oq += col[i] * x.q[i];
    }
    o[j] = oq;
  }
  round_state(s, state_dtype);
}

// Writes an output row [V] of head h (or zeros for padding).
inline void store_out(const TensorView& out, int64_t row, int64_t h, int64_t V, const double* o) {
  for (int64_t j = 0; j < V; ++j)
    store_f32(out, row * out.stride(0) + h * out.stride(1) + j * out.stride(2), o ? static_cast<float>(o[j]) : 0.0f);
}

// ---- index values: only the host can read them, so the CPU reference validates them ----

// A live slot (> 0) must lie in the pool.
inline void check_slot_in_pool(const char* op, const char* arg, int64_t slot, int64_t slots, const std::string& where) {
  if (slot >= slots)
    fail_arg(op, arg, str("slot ids in [1, ", slots - 1, "] (or <= 0 for padding) for a pool of ", slots, " slots"),
             str(slot, " at ", where));
}

// Distinct sequences must not share a slot they write (their results would depend on order).
class SlotOwners {
 public:
  SlotOwners(const char* op, const char* arg) : op_(op), arg_(arg) {}
  void claim(int64_t slot, int64_t seq, const std::string& where) {
    auto [it, fresh] = owner_.emplace(slot, std::pair{seq, where});
    if (!fresh && it->second.first != seq)
      fail_arg(op_, arg_, "distinct slots for distinct sequences",
               str("slot ", slot, " at ", it->second.second, " and at ", where));
  }

 private:
  const char* op_;
  const char* arg_;
  std::map<int64_t, std::pair<int64_t, std::string>> owner_;
};

// cu_seqlens: 0 = c0 <= c1 <= ... <= cN = T. Returns the offsets.
inline std::vector<int64_t> read_cu_seqlens(const char* op, const TensorView& cu, int64_t T) {
  const int64_t n1 = cu.size(0);
  std::vector<int64_t> c(n1);
  for (int64_t i = 0; i < n1; ++i) c[i] = index_at(cu, i);
  if (c[0] != 0) fail_arg(op, "cu_seqlens", "cu_seqlens[0] = 0", str(c[0]));
  for (int64_t i = 1; i < n1; ++i)
    if (c[i] < c[i - 1]) fail_arg(op, "cu_seqlens", "non-decreasing offsets", str(c[i - 1], " then ", c[i], " at ", i));
  if (c[n1 - 1] != T) fail_arg(op, "cu_seqlens", str("cu_seqlens[N] = T = ", T, " (rows of the inputs)"), str(c[n1 - 1]));
  return c;
}

}  // namespace kestrel::ops::cpu::kda
