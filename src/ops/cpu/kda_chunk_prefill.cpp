// kda_chunk_prefill, CPU reference (docs/ops/kda.md): the chunked form (chunk 64, UT transform
// and WY representation) that defines the op, and the token-by-token form it is proven equal
// to (tests/ops/kda_cpu_test.cpp).
//
// The chunked form, per sequence and head, for a chunk of C <= 64 tokens starting from state S
// (K x V), with Gam_i = g_1 + ... + g_i the in-chunk cumulative log decay (a K-vector):
//   L[i][j]   = beta_i sum_d k_i[d] k_j[d] exp(Gam_i[d] - Gam_j[d])     j < i
//   Tm        = (I + L)^-1 diag(beta)              UT transform (forward substitution)
//   W         = Tm (exp(Gam) * K),  U = Tm V       WY representation
//   Vn        = U - W S                            the delta rule's corrected values
//   Aqk[i][j] = sum_d q_i[d] k_j[d] exp(Gam_i[d] - Gam_j[d])            j <= i
//   O         = (exp(Gam) * Q) S + Aqk Vn
//   S_next    = diag(exp(Gam_C)) S + (exp(Gam_C - Gam) * K)^T Vn
// Every exponent above is a difference Gam_i - Gam_j with i >= j (or Gam_i itself), so it is
// <= 0 and nothing overflows however strong the decay: the reference never forms exp(-Gam).
#include <algorithm>
#include <vector>

#include "kda_math.h"
#include "kestrel/ops/kda_chunk_prefill.h"

namespace kestrel::ops::cpu {
namespace {

constexpr const char* kOp = "kda_chunk_prefill";

struct Plan {
  std::vector<int64_t> cu;        // [N + 1] token offsets
  std::vector<int64_t> slot;      // [N]
  std::vector<bool> read_state;   // [N]
  std::vector<int64_t> cu_ckpt;   // [N + 1] or empty
};

// Validates every index value before anything is touched.
Plan plan(const KdaChunkPrefillArgs& a) {
  Plan p;
  const int64_t N = a.state_indices.size(0);
  p.cu = kda::read_cu_seqlens(kOp, a.cu_seqlens, a.mixed_qkv.size(0));
  p.slot.resize(N);
  p.read_state.assign(N, true);
  kda::SlotOwners owners(kOp, "state_indices");
  for (int64_t n = 0; n < N; ++n) {
    p.slot[n] = kda::index_at(a.state_indices, n);
    if (a.has_initial_state.defined()) p.read_state[n] = kda::index_at(a.has_initial_state, n) != 0;
    if (p.slot[n] <= 0) continue;
    kda::check_slot_in_pool(kOp, "state_indices", p.slot[n], a.state_pool.size(0), str("sequence ", n));
    owners.claim(p.slot[n], n, str("sequence ", n));
  }
  if (a.checkpoints.defined()) {
    p.cu_ckpt.resize(N + 1);
    for (int64_t n = 0; n <= N; ++n) p.cu_ckpt[n] = kda::index_at(a.cu_checkpoints, n);
    if (p.cu_ckpt[0] < 0) fail_arg(kOp, "cu_checkpoints", "cu_checkpoints[0] >= 0", str(p.cu_ckpt[0]));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t want = (p.cu[n + 1] - p.cu[n]) / kKdaChunk, got = p.cu_ckpt[n + 1] - p.cu_ckpt[n];
      if (got != want)
        fail_arg(kOp, "cu_checkpoints", str("floor(len / 64) = ", want, " rows for sequence ", n, " (length ",
                                            p.cu[n + 1] - p.cu[n], ")"),
                 str(got, " rows"));
    }
    if (p.cu_ckpt[N] > a.checkpoints.size(0))
      fail_arg(kOp, "cu_checkpoints", str("offsets within the ", a.checkpoints.size(0), " rows of checkpoints"),
               str("cu_checkpoints[N] = ", p.cu_ckpt[N]));
  }
  return p;
}

kda::TokenInputs inputs_of(const KdaChunkPrefillArgs& a) {
  return {a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias, a.lower_bound,
          {a.raw_g.size(1), a.raw_g.size(2), a.out.size(2)}};
}

void initial_state(const KdaChunkPrefillArgs& a, const Plan& p, int64_t n, int64_t h, const KdaDims& d,
                   kda::HeadState& s) {
  if (p.read_state[n]) {
    kda::load_state(a.state_pool, p.slot[n], h, d, s);
  } else {
    s.assign(d.V * d.K, 0.0);
  }
}

void zero_outputs(const KdaChunkPrefillArgs& a, const Plan& p, int64_t n, const KdaDims& d) {
  for (int64_t t = p.cu[n]; t < p.cu[n + 1]; ++t)
    for (int64_t h = 0; h < d.H; ++h) kda::store_out(a.out, t, h, d.V, nullptr);
}

// The chunk of C tokens starting at row t0 of head h: outputs written, s advanced to the
// state after the chunk (f64, not yet rounded).
void chunk(const kda::TokenInputs& in, const TensorView& out, int64_t t0, int64_t C, int64_t h,
           kda::HeadState& s) {
  const KdaDims& d = in.d;
  const int64_t K = d.K, V = d.V;
  std::vector<kda::TokenHead> x(C);
  for (int64_t i = 0; i < C; ++i) in.load(t0 + i, h, x[i]);
  // Gam[i][d]: cumulative log decay inside the chunk.
  std::vector<double> gam(C * K);
  for (int64_t i = 0; i < C; ++i)
    for (int64_t e = 0; e < K; ++e) gam[i * K + e] = (i ? gam[(i - 1) * K + e] : 0.0) + x[i].g[e];
  // kk[i][j] = sum_d k_i k_j exp(Gam_i - Gam_j), qk[i][j] = sum_d q_i k_j exp(Gam_i - Gam_j), j <= i
  std::vector<double> kk(C * C, 0.0), qk(C * C, 0.0);
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double a_kk = 0, a_qk = 0;
      for (int64_t e = 0; e < K; ++e) {
        const double w = x[j].k[e] * std::exp(gam[i * K + e] - gam[j * K + e]);
        a_kk += x[i].k[e] * w;
        a_qk += x[i].q[e] * w;
      }
      kk[i * C + j] = a_kk;
      qk[i * C + j] = a_qk;
    }
  }
  // UT transform: Tm = (I + L)^-1 diag(beta), L[i][j] = beta_i kk[i][j] (j < i), by forward
  // substitution row by row: Tm[i][j] = beta_i delta_ij - sum_{j <= m < i} L[i][m] Tm[m][j].
  std::vector<double> tm(C * C, 0.0);
  for (int64_t i = 0; i < C; ++i) {
    tm[i * C + i] = x[i].beta;
    for (int64_t j = 0; j < i; ++j) {
      double acc = 0;
      for (int64_t m = j; m < i; ++m) acc += x[i].beta * kk[i * C + m] * tm[m * C + j];
      tm[i * C + j] = -acc;
    }
  }
  // WY representation: W = Tm (exp(Gam) * K) [C x K], U = Tm V [C x V]; then Vn = U - W S.
  std::vector<double> eg(C * K);  // exp(Gam) <= 1
  for (int64_t i = 0; i < C * K; ++i) eg[i] = std::exp(gam[i]);
  std::vector<double> vn(C * V);
  std::vector<double> w(K);
  for (int64_t i = 0; i < C; ++i) {
    std::fill(w.begin(), w.end(), 0.0);
    for (int64_t j = 0; j <= i; ++j)
      for (int64_t e = 0; e < K; ++e) w[e] += tm[i * C + j] * eg[j * K + e] * x[j].k[e];
    for (int64_t c = 0; c < V; ++c) {
      double u = 0, ws = 0;
      for (int64_t j = 0; j <= i; ++j) u += tm[i * C + j] * x[j].v[c];
      for (int64_t e = 0; e < K; ++e) ws += w[e] * s[c * K + e];
      vn[i * V + c] = u - ws;
    }
  }
  // O = (exp(Gam) * Q) S + Aqk Vn
  std::vector<double> o(V), qg(K);
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t e = 0; e < K; ++e) qg[e] = x[i].q[e] * eg[i * K + e];
    for (int64_t c = 0; c < V; ++c) {
      double acc = 0;
      for (int64_t e = 0; e < K; ++e) acc += qg[e] * s[c * K + e];
      for (int64_t j = 0; j <= i; ++j) acc += qk[i * C + j] * vn[j * V + c];
      o[c] = acc;
    }
    kda::store_out(out, t0 + i, h, V, o.data());
  }
  // S_next = diag(exp(Gam_C)) S + (exp(Gam_C - Gam) * K)^T Vn
  const double* last = gam.data() + (C - 1) * K;
  std::vector<double> kd(C * K);
  for (int64_t j = 0; j < C; ++j)
    for (int64_t e = 0; e < K; ++e) kd[j * K + e] = x[j].k[e] * std::exp(last[e] - gam[j * K + e]);
  for (int64_t c = 0; c < V; ++c) {
    for (int64_t e = 0; e < K; ++e) {
      double acc = eg[(C - 1) * K + e] * s[c * K + e];
      for (int64_t j = 0; j < C; ++j) acc += kd[j * K + e] * vn[j * V + c];
      s[c * K + e] = acc;
    }
  }
}

}  // namespace

void kda_chunk_prefill(const KdaChunkPrefillArgs& a) {
  const Plan p = plan(a);
  const kda::TokenInputs in = inputs_of(a);
  const KdaDims& d = in.d;
  const int64_t N = a.state_indices.size(0);
  kda::HeadState s;
  for (int64_t n = 0; n < N; ++n) {
    if (p.slot[n] <= 0) {  // padding: output zero, no state read or written
      zero_outputs(a, p, n, d);
      continue;
    }
    for (int64_t h = 0; h < d.H; ++h) {
      initial_state(a, p, n, h, d, s);
      for (int64_t t0 = p.cu[n]; t0 < p.cu[n + 1]; t0 += kKdaChunk) {
        const int64_t C = std::min(kKdaChunk, p.cu[n + 1] - t0);
        chunk(in, a.out, t0, C, h, s);
        kda::round_state_f32(s);  // the state is f32 wherever it is stored: at every chunk boundary
        if (a.checkpoints.defined() && C == kKdaChunk)
          kda::store_state(a.checkpoints, p.cu_ckpt[n] + (t0 - p.cu[n]) / kKdaChunk, h, d, s);
      }
      kda::store_state(a.state_pool, p.slot[n], h, d, s);
    }
  }
}

void kda_chunk_prefill_token_by_token(const KdaChunkPrefillArgs& a) {
  kda_chunk_prefill_check(a);
  const Plan p = plan(a);
  const kda::TokenInputs in = inputs_of(a);
  const KdaDims& d = in.d;
  const int64_t N = a.state_indices.size(0);
  kda::HeadState s;
  kda::TokenHead x;
  std::vector<double> o(d.V);
  for (int64_t n = 0; n < N; ++n) {
    if (p.slot[n] <= 0) {
      zero_outputs(a, p, n, d);
      continue;
    }
    for (int64_t h = 0; h < d.H; ++h) {
      initial_state(a, p, n, h, d, s);
      for (int64_t t = p.cu[n]; t < p.cu[n + 1]; ++t) {
        in.load(t, h, x);
        kda::token_step(s, x, d, o.data(), a.state_pool.dtype);
        kda::store_out(a.out, t, h, d.V, o.data());
        const int64_t done = t + 1 - p.cu[n];
        if (a.checkpoints.defined() && done % kKdaChunk == 0)
          kda::store_state(a.checkpoints, p.cu_ckpt[n] + done / kKdaChunk - 1, h, d, s);
      }
      kda::store_state(a.state_pool, p.slot[n], h, d, s);
    }
  }
}

}  // namespace kestrel::ops::cpu
