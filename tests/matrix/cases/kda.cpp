// KDA cases: every KDA op (docs/ops/kda.md). Axes: heads H (K = V = 128), batch and lengths,
// dtype of the token inputs, gate form (softplus / lower bound -5), layout of the packed
// projection and of the other token inputs, slot tables read through a strided column, padding
// rows, speculative columns and accepted counts, varlen with empty and padding sequences,
// checkpoints. State pools are inout: slots nobody addresses must stay bit-identical (their
// allowance is exactly 0), addressed ones within the spec's tolerance; padding output rows
// must be exactly 0.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "kestrel/ops/kda_chunk_prefill.h"
#include "kestrel/ops/kda_conv1d_prefill.h"
#include "kestrel/ops/kda_conv1d_update.h"
#include "kestrel/ops/kda_packed_decode.h"
#include "kestrel/ops/kda_recurrent.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {
namespace {

constexpr int64_t K = 128, V = 128;
constexpr int64_t kSpare = 8;  // spare columns after q | k | v in every mixed_qkv row

// Tolerances (docs/ops/kda.md "Tolerances"): an absolute allowance per element on top of the
// ulps, for f32 kernels against the f64 reference.
constexpr double kDecodeOutAtol = 2e-6;    // per output element, token-step ops
constexpr double kStateAtolPerToken = 4e-6;  // per state element and token step
constexpr double kChunkAtol = 4e-3;        // kda_chunk_prefill outputs, states, checkpoints
constexpr double kConvAtol = 2e-6;         // conv outputs (inputs in [-1, 1], 4 taps)

std::string gate_name(std::optional<float> lb) { return lb ? "lb5" : "softplus"; }

// A [rows, cols] slot table: distinct slot ids from [1, slots) in random order; with `pad`, rows
// with n % 4 == 1 are padding (all 0, or all -1 for every other one).
Gen slot_table_gen(int64_t rows, int64_t cols, int64_t slots, bool pad = true) {
  return Gen::with([=](std::vector<double>& v, uint64_t seed) {
    std::vector<int64_t> ids(static_cast<size_t>(slots - 1));
    std::iota(ids.begin(), ids.end(), 1);
    std::mt19937_64 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t c = 0; c < cols; ++c)
        v[n * cols + c] = pad && n % 4 == 1 ? (n % 8 == 1 ? 0.0 : -1.0) : static_cast<double>(ids[n * cols + c]);
  });
}

// num_accepted [N] for a table of S columns: 1 + (n / 2) % S. Of rows 2m and 2m + 1 at least one
// is live (padding rows are n % 4 == 1), so N >= 2S exercises every accepted count on a live row.
Gen accepted_gen(int64_t S) {
  return Gen::with([S](std::vector<double>& v, uint64_t) {
    for (size_t n = 0; n < v.size(); ++n) v[n] = static_cast<double>(1 + (static_cast<int64_t>(n) / 2) % S);
  });
}

Gen fixed_gen(std::vector<int64_t> vals) {
  return Gen::with([vals](std::vector<double>& v, uint64_t) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(vals[i]);
  });
}

// The per-token input buffers of a KDA op, appended in this order:
// mixed_qkv, raw_g, raw_beta, A_log, dt_bias.
void add_token_buffers(Case& c, int64_t rows, int64_t H, DType dt, Layout qkv_layout, Layout other_layout) {
  c.buffers.push_back({"mixed_qkv", dt, {rows, 2 * H * K + H * V + kSpare}, Role::input, qkv_layout,
                       Gen::uniform(-1, 1)});
  c.buffers.push_back({"raw_g", dt, {rows, H, K}, Role::input, other_layout, Gen::uniform(-4, 2)});
  c.buffers.push_back({"raw_beta", dt, {rows, H}, Role::input, other_layout, Gen::uniform(-3, 3)});
  c.buffers.push_back({"A_log", DType::f32, {H}, Role::input, Layout::contiguous, Gen::uniform(-1, 1)});
  c.buffers.push_back({"dt_bias", DType::f32, {H * K}, Role::input, other_layout == Layout::contiguous
                                                                         ? Layout::contiguous
                                                                         : Layout::inner_strided,
                       Gen::uniform(-1, 1)});
}

template <typename Args>
void set_token_args(Args& a, const std::vector<TensorView>& v, size_t first, int64_t H,
                    std::optional<float> lb) {
  a.mixed_qkv = v[first].slice(1, 0, 2 * H * K + H * V);
  a.raw_g = v[first + 1];
  a.raw_beta = v[first + 2];
  a.A_log = v[first + 3];
  a.dt_bias = v[first + 4];
  a.lower_bound = lb;
}

// Allowance per element of a [slots, H, V, K] pool: `atol` in touched slots, 0 elsewhere.
std::vector<double> pool_bound(const std::set<int64_t>& touched, int64_t slots, int64_t H, double atol) {
  const int64_t per = H * V * K;
  std::vector<double> b(static_cast<size_t>(slots * per), 0.0);
  for (int64_t s : touched)
    if (s > 0 && s < slots) std::fill(b.begin() + s * per, b.begin() + (s + 1) * per, atol);
  return b;
}

// Allowance per element of a [rows, ...] output: `atol` on live rows, 0 on padding rows.
std::vector<double> row_bound(const std::vector<bool>& live, int64_t row_elems, double atol) {
  std::vector<double> b(live.size() * static_cast<size_t>(row_elems), 0.0);
  for (size_t r = 0; r < live.size(); ++r)
    if (live[r]) std::fill(b.begin() + r * row_elems, b.begin() + (r + 1) * row_elems, atol);
  return b;
}

Metric with_bound(Metric m, std::function<std::vector<double>(const HostBuffers&)> f) {
  m.bound = std::move(f);
  return m;
}

// ---- kda_packed_decode and kda_recurrent ----
// Buffers: 0 out, 1 state_pool, 2..6 token inputs, 7 slot_table [N, S] i32, (8 num_accepted).

// ulp of a bf16 value at r, as the runner measures it (tests/matrix/matrix.cpp ulp_at).
double bf16_ulp_at(double r) {
  int e = -126;
  if (r != 0 && std::isfinite(r)) e = std::max(static_cast<int>(std::floor(std::log2(std::fabs(r)))), -126);
  return std::ldexp(1.0, e - 7);
}

// One token-step case. Decode reads column 0 of a [N, S] table (S = 1: a plain vector, stride 1;
// S = 8: stride 8; S = 2 contiguous or transposed: a slot-table column); verify (T tokens)
// reads the whole table with S = 1 + num_spec columns and num_accepted = 1 + (n / 2) % S.
struct StepCase {
  int64_t N, H, S, T;
  DType dt;
  std::optional<float> lb;
  Layout lay;
  DType pool;  // f32 | bf16 state pool
  bool pad;    // padding rows (n % 4 == 1) present
  Size size;
};

void add_token_step_case(Registry& r, bool recurrent, const StepCase& k) {
  const auto [N, H, S, T, dt, lb, lay, pool_dt, pad, sz] = k;
  const char* op = recurrent ? "kda_recurrent" : "kda_packed_decode";
  const int64_t slots = N * S + 3, rows = N * T;
  Case c;
  c.op = op;
  c.id = str(op, "/N", N, recurrent ? str("-T", T) : "", "-H", H, "-S", S, "-", dtype_name(dt), "-", gate_name(lb), "-",
             layout_name(lay), pool_dt == DType::bf16 ? "-bf16pool" : "", pad ? "" : "-nopad");
  c.size = sz;
  // docs/ops/kda.md "Tolerances": f32 pools: out 2e-6 T, state 4e-6 T. bf16 pools: the same
  // plus (T - 1) 2^-7 on both (a one-ulp rounding flip of a state |s| < 2 at an earlier token
  // carries into later states, and into o through ||q_hat||_1 <= 1), and 1 bf16 ulp of the state.
  const double carry = pool_dt == DType::bf16 ? static_cast<double>(T - 1) * 0x1p-7 : 0.0;
  const double out_atol = kDecodeOutAtol * static_cast<double>(T) + carry;
  const double st_atol = kStateAtolPerToken * static_cast<double>(T) + carry;
  // Which rows are live and which slots are written, from the table and accepted counts.
  auto live_and_touched = [=](const HostBuffers& in, std::vector<bool>& live, std::set<int64_t>& touched) {
    live.assign(rows, false);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t acc = recurrent ? static_cast<int64_t>(in.value(8, n)) : 1;
      if (in.value(7, n * S + acc - 1) <= 0) continue;
      for (int64_t t = 0; t < T; ++t) {
        live[n * T + t] = true;
        const auto s = static_cast<int64_t>(in.value(7, n * S + t));
        if (s > 0) touched.insert(s);
      }
    }
  };
  c.buffers.push_back({"out", dt, {rows, H, V}, Role::output, lay, Gen::uniform(0, 0),
                       with_bound(rounded_once(dt, 8), [=](const HostBuffers& in) {
                         std::vector<bool> live;
                         std::set<int64_t> touched;
                         live_and_touched(in, live, touched);
                         return row_bound(live, H * V, out_atol);
                       })});
  // f32 pool: 0 ulps + st_atol in touched slots, exactly 0 elsewhere. bf16 pool: 1 ulp at the
  // reference + st_atol in touched slots; in untouched slots the reference is the initial value,
  // so a bound of minus its ulp makes the allowance exactly 0 there too (bit-identical).
  const bool bf16_pool = pool_dt == DType::bf16;
  c.buffers.push_back(
      {"state_pool", pool_dt, {slots, H, V, K}, Role::inout, Layout::contiguous, Gen::uniform(-0.5, 0.5),
       with_bound(Metric::within_ulps(bf16_pool ? 1 : 0), [=](const HostBuffers& in) {
         std::vector<bool> live;
         std::set<int64_t> touched;
         live_and_touched(in, live, touched);
         std::vector<double> b = pool_bound(touched, slots, H, st_atol);
         if (bf16_pool)
           for (size_t i = 0; i < b.size(); ++i)
             if (b[i] == 0.0) b[i] = -bf16_ulp_at(in.value(1, static_cast<int64_t>(i)));
         return b;
       })});
  add_token_buffers(c, rows, H, dt, lay, lay == Layout::padded ? Layout::transposed : Layout::contiguous);
  // The table is read through a strided view: column 0 for decode, [N, T] for verify.
  c.buffers.push_back({"slot_table", DType::i32, {N, S}, Role::input,
                       lay == Layout::padded ? Layout::transposed : Layout::contiguous,
                       slot_table_gen(N, S, slots, pad)});
  if (recurrent) {
    c.buffers.push_back({"num_accepted", DType::i32, {N}, Role::input, lay, accepted_gen(S)});
    auto make = [=](const std::vector<TensorView>& v) {
      ops::KdaRecurrentArgs a;
      a.out = v[0];
      a.state_pool = v[1];
      set_token_args(a, v, 2, H, lb);
      a.slot_table = v[7];
      a.num_accepted = v[8];
      return a;
    };
    c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
      return ops::kda_recurrent_supports(b, make(v));
    };
    c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) { ops::kda_recurrent(b, make(v), s); };
  } else {
    auto make = [=](const std::vector<TensorView>& v) {
      ops::KdaPackedDecodeArgs a;
      a.out = v[0];
      a.state_pool = v[1];
      set_token_args(a, v, 2, H, lb);
      a.state_indices = v[7].select(1, 0);
      return a;
    };
    c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
      return ops::kda_packed_decode_supports(b, make(v));
    };
    c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
      ops::kda_packed_decode(b, make(v), s);
    };
  }
  r.push_back(std::move(c));
}

void add_token_step_cases(Registry& r, Size size, bool recurrent) {
  const std::optional<float> none, lb5 = -5.0f;
  constexpr DType f32 = DType::f32, bf16 = DType::bf16;
  auto add = [&](const StepCase& k) {
    if (k.size == Size::full && size != Size::full) return;
    add_token_step_case(r, recurrent, k);
  };
  // The base grid: token dtype x gate x layout, f32 and bf16 pools.
  struct Shape { int64_t N, H, S, T; Size size; };
  const std::vector<Shape> grid =
      recurrent ? std::vector<Shape>{{3, 2, 4, 1, Size::ci}, {5, 2, 4, 4, Size::ci}, {16, 8, 4, 4, Size::full},
                                     {6, 32, 4, 3, Size::full}}
                : std::vector<Shape>{{1, 2, 2, 1, Size::ci}, {6, 3, 2, 1, Size::ci}, {33, 8, 2, 1, Size::full},
                                     {12, 32, 2, 1, Size::full}};
  for (const auto& [N, H, S, T, sz] : grid)
    for (DType pool : {f32, bf16})
      for (DType dt : {bf16, f32})
        for (std::optional<float> lb : {none, lb5})
          for (Layout lay : {Layout::contiguous, Layout::padded}) {
            if (sz == Size::ci && lay == Layout::padded && lb) continue;  // keep the CI slice small
            if (sz == Size::ci && pool == bf16 && dt == f32) continue;
            add({N, H, S, T, dt, lb, lay, pool, true, sz});
          }
  // Issue 4's axes, one case each: N in {1, 7, 8, 32, 33, 256}; H in {32, 96}; index stride 1
  // (S = 1), 8 (S = 8) and a table column; padding rows absent; bf16 pools at scale.
  const Layout cont = Layout::contiguous, padded = Layout::padded;
  if (!recurrent) {
    add({7, 2, 1, 1, bf16, none, cont, f32, true, Size::ci});     // stride 1
    add({8, 2, 8, 1, bf16, lb5, cont, bf16, true, Size::ci});     // stride 8, bf16 pool
    add({7, 2, 2, 1, f32, lb5, padded, f32, false, Size::ci});    // no padding rows
    add({1, 32, 2, 1, bf16, lb5, cont, bf16, false, Size::ci});   // H = 32, one sequence
    add({32, 4, 8, 1, bf16, none, padded, bf16, true, Size::full});
    add({33, 32, 1, 1, bf16, lb5, cont, bf16, true, Size::full});
    add({256, 2, 1, 1, bf16, none, cont, f32, true, Size::full});
    add({256, 2, 2, 1, f32, lb5, padded, bf16, false, Size::full});
    add({7, 96, 1, 1, bf16, lb5, cont, f32, true, Size::full});   // Kimi-K3 heads
    add({8, 96, 2, 1, bf16, none, padded, bf16, false, Size::full});
  } else {
    // num_spec 1 .. 4 (S = 2 .. 5), T = S, N = 2S: every num_accepted on a live row.
    for (int64_t spec = 1; spec <= 4; ++spec)
      add({2 * (1 + spec), 2, 1 + spec, 1 + spec, bf16, spec % 2 ? lb5 : none, cont, spec <= 2 ? f32 : bf16, true,
           Size::ci});
    add({4, 2, 3, 2, f32, none, padded, bf16, false, Size::ci});  // T < S, no padding rows
    add({1, 2, 5, 5, bf16, lb5, cont, bf16, false, Size::ci});   // N = 1
    add({7, 8, 2, 2, bf16, none, padded, bf16, true, Size::full});
    add({8, 8, 5, 5, f32, lb5, padded, f32, true, Size::full});
    add({32, 4, 4, 4, bf16, lb5, cont, bf16, true, Size::full});
    add({33, 2, 3, 3, bf16, none, cont, f32, false, Size::full});
    add({10, 32, 5, 5, bf16, lb5, cont, bf16, true, Size::full});
    add({4, 96, 4, 4, bf16, none, cont, bf16, true, Size::full});  // Kimi-K3 heads, verify
    add({4, 96, 2, 2, bf16, lb5, padded, f32, false, Size::full});
  }
}

// ---- kda_chunk_prefill ----
// Buffers: 0 out, 1 state_pool, 2 checkpoints, 3..7 token inputs, 8 cu_seqlens,
// 9 slot table [N, 2] (column 0 used), 10 has_initial_state, 11 cu_checkpoints.

// The decay a prefill case's gate inputs give every full 16-row block of every key dim, against
// the CUDA intra kernel's bound for tensor-core diagonal blocks (e^70, kDiagMaxDrop2):
// - any: the token generators (raw_g in [-4, 2], A_log and dt_bias in [-1, 1]), mostly below;
// - steep: every block falls by more than e^70, so the running-product path (P3a) takes those
//   chunks: raw_g in [2, 6], A_log in [1.5, 2.5]; softplus gate <= -5.9 per token (16 rows:
//   <= -94), lower bound -5: <= -4.94 (<= -79);
// - mid: every block falls by e^40 .. e^70, the tensor-core path with its largest factors (what
//   the bound admits beyond e^40, the bound before the seventeenth session): A_log in +-0.01,
//   dt_bias in +-0.05; softplus: raw_g in [2.6, 3.2], -g in [2.60, 3.32] per token (16 rows:
//   41.6 .. 53.1); lower bound -5: raw_g in [0.3, 1.6], -g in [2.81, 4.21] (44.9 .. 67.3).
enum class Decay { any, steep, mid };

void add_chunk_prefill_cases(Registry& r, Size size) {
  // grid: crossed with token dtype x gate x layout; else one case (bf16 tokens, lower bound,
  // contiguous). pool: the state pool's (and checkpoints') dtype; pad: padding sequences present;
  // win: a workspace bound of this many chunk slots (CUDA runs the chunks in windows of that
  // size, the states carried through the slots; 0: the default bound, one window here).
  struct Shape {
    std::vector<int64_t> lens;
    int64_t H;
    Size size;
    bool grid = true;
    DType pool = DType::f32;
    bool pad = true;
    int64_t win = 0;
    Decay decay = Decay::any;
  };
  const std::vector<Shape> shapes = {
      {{1, 70, 0, 130}, 2, Size::ci},
      {{64, 5}, 1, Size::ci},
      {{1}, 1, Size::ci, false},
      {{63}, 1, Size::ci, false},
      {{65}, 1, Size::ci, false},
      {{1, 70, 0, 130}, 2, Size::ci, false, DType::bf16},
      {{7, 64, 0, 129}, 1, Size::ci, false, DType::f32, false},
      {{1000, 63, 64, 65, 1, 200}, 4, Size::full},
      // 6 x 8 x 4 = 192 state CTAs: more than an H200's 132 SMs, so the state kernel's uniform
      // layout runs (the cases above have at most 96: two roles; kda_chunk_prefill_state_roles).
      {{1000, 63, 64, 65, 1, 200}, 8, Size::full, false},
      {{4096}, 2, Size::full},
      {{1000}, 2, Size::full, false, DType::bf16, false},
      {{65, 1, 300, 64, 0, 63, 128}, 2, Size::full, false, DType::bf16},
      {{1, 70, 0, 130}, 2, Size::ci, false, DType::f32, true, 1},
      {{1000, 63, 64, 65, 1, 200}, 4, Size::full, false, DType::bf16, true, 3},
      {{4096}, 2, Size::full, false, DType::f32, false, 7},
      {{200, 64, 1}, 2, Size::ci, true, DType::f32, true, 0, Decay::steep},
      {{1000, 63, 64, 65, 1, 200}, 4, Size::full, false, DType::f32, true, 0, Decay::steep},
      {{200, 64, 1}, 2, Size::ci, true, DType::f32, true, 0, Decay::mid},
      {{1000, 63, 64, 65, 1, 200}, 4, Size::full, false, DType::f32, true, 0, Decay::mid},
  };
  for (const auto& [lens, H, sz, grid, pool_dt, pad, win, decay] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    const int64_t N = static_cast<int64_t>(lens.size());
    std::vector<int64_t> cu(N + 1, 0), cuk(N + 1, 0);
    for (int64_t n = 0; n < N; ++n) {
      cu[n + 1] = cu[n] + lens[n];
      cuk[n + 1] = cuk[n] + lens[n] / ops::kKdaChunk;
    }
    const int64_t T = cu[N], slots = 2 * N + 3, P = std::max<int64_t>(cuk[N], 1);
    std::string lens_id;
    for (int64_t l : lens) lens_id += str(lens_id.empty() ? "" : "_", l);
    for (DType dt : {DType::bf16, DType::f32}) {
      for (std::optional<float> lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
        for (Layout lay : {Layout::contiguous, Layout::padded}) {
          if (sz == Size::ci && lay == Layout::padded && lb) continue;
          if (!grid && (dt != DType::bf16 || !lb || lay != Layout::contiguous)) continue;
          const bool bf16_pool = pool_dt == DType::bf16;
          Case c;
          c.op = "kda_chunk_prefill";
          c.id = str("kda_chunk_prefill/L", lens_id, "-H", H, "-", dtype_name(dt), "-", gate_name(lb), "-",
                     layout_name(lay), bf16_pool ? "-bf16pool" : "", pad ? "" : "-nopad",
                     win > 0 ? str("-win", win) : std::string(),
                     decay == Decay::steep ? "-steep" : decay == Decay::mid ? "-middecay" : "");
          c.size = sz;
          // Live sequences and their slots, from the slot table (column 0).
          auto live_of = [=](const HostBuffers& in, std::vector<bool>& live_rows, std::set<int64_t>& touched,
                             std::vector<bool>& live_seq) {
            live_rows.assign(T, false);
            live_seq.assign(N, false);
            for (int64_t n = 0; n < N; ++n) {
              const auto s = static_cast<int64_t>(in.value(9, n * 2));
              if (s <= 0) continue;
              live_seq[n] = true;
              touched.insert(s);
              for (int64_t t = cu[n]; t < cu[n + 1]; ++t) live_rows[t] = true;
            }
          };
          c.buffers.push_back(
              {"out", dt, {T, H, V}, Role::output, lay, Gen::uniform(0, 0),
               with_bound(rounded_once(dt, 8),
                          [=](const HostBuffers& in) {
                            std::vector<bool> rows, seq;
                            std::set<int64_t> touched;
                            live_of(in, rows, touched, seq);
                            return row_bound(rows, H * V, kChunkAtol);
                          })});
          // bf16 pools: 1 bf16 ulp on top, exactly 0 in untouched slots (as the token-step cases).
          c.buffers.push_back(
              {"state_pool", pool_dt, {slots, H, V, K}, Role::inout, Layout::contiguous, Gen::uniform(-0.5, 0.5),
               with_bound(Metric::within_ulps(bf16_pool ? 1 : 0),
                          [=](const HostBuffers& in) {
                            std::vector<bool> rows, seq;
                            std::set<int64_t> touched;
                            live_of(in, rows, touched, seq);
                            std::vector<double> b = pool_bound(touched, slots, H, kChunkAtol);
                            if (bf16_pool)
                              for (size_t i = 0; i < b.size(); ++i)
                                if (b[i] == 0.0) b[i] = -bf16_ulp_at(in.value(1, static_cast<int64_t>(i)));
                            return b;
                          })});
          // Rows of padding sequences stay poisoned (NaN) on both sides.
          c.buffers.push_back({"checkpoints", pool_dt, {P, H, V, K}, Role::output, Layout::contiguous,
                               Gen::uniform(0, 0),
                               with_bound(Metric::within_ulps(bf16_pool ? 1 : 0), [=](const HostBuffers&) {
                                 return std::vector<double>(static_cast<size_t>(P * H * V * K), kChunkAtol);
                               })});
          add_token_buffers(c, T, H, dt, lay, lay == Layout::padded ? Layout::transposed : Layout::contiguous);
          for (BufferSpec& b : c.buffers) {
            if (decay == Decay::steep) {
              if (b.name == "raw_g") b.gen = Gen::uniform(2, 6);
              if (b.name == "A_log") b.gen = Gen::uniform(1.5, 2.5);
            } else if (decay == Decay::mid) {
              if (b.name == "raw_g") b.gen = lb ? Gen::uniform(0.3, 1.6) : Gen::uniform(2.6, 3.2);
              if (b.name == "A_log") b.gen = Gen::uniform(-0.01, 0.01);
              if (b.name == "dt_bias") b.gen = Gen::uniform(-0.05, 0.05);
            }
          }
          c.buffers.push_back({"cu_seqlens", DType::i32, {N + 1}, Role::input, lay, fixed_gen(cu)});
          c.buffers.push_back({"slot_table", DType::i32, {N, 2}, Role::input, lay, slot_table_gen(N, 2, slots, pad)});
          c.buffers.push_back({"has_initial_state", DType::i32, {N}, Role::input, Layout::contiguous, Gen::ints(0, 1)});
          c.buffers.push_back({"cu_checkpoints", DType::i64, {N + 1}, Role::input, Layout::contiguous, fixed_gen(cuk)});
          const bool with_ckpt = cuk[N] > 0;
          auto make = [=](const std::vector<TensorView>& v) {
            ops::KdaChunkPrefillArgs a;
            a.out = v[0];
            a.state_pool = v[1];
            if (with_ckpt) {
              a.checkpoints = v[2];
              a.cu_checkpoints = v[11];
            }
            set_token_args(a, v, 3, H, lb);
            a.cu_seqlens = v[8];
            a.state_indices = v[9].select(1, 0);
            a.has_initial_state = v[10];
            a.max_workspace_bytes = win * H * ops::kKdaChunkWorkspaceBytesPerSlotHead;
            return a;
          };
          c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
            return ops::kda_chunk_prefill_supports(b, make(v));
          };
          c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
            ops::kda_chunk_prefill(b, make(v), s);
          };
          r.push_back(std::move(c));
        }
      }
    }
  }
}

// ---- kda_conv1d_prefill / kda_conv1d_update ----
// Buffers: 0 out, 1 conv_state, 2 x, 3 weight, 4 slot table [N, 2] (column 0 used),
// prefill: 5 cu_seqlens, 6 has_initial_state; update: 5 num_accepted.

void add_conv_cases(Registry& r, Size size, bool update) {
  struct Shape { std::vector<int64_t> lens; int64_t H, E; Size size; };  // update: lens = {N, T}
  const std::vector<Shape> shapes =
      update ? std::vector<Shape>{{{3, 1}, 2, 0, Size::ci}, {{5, 4}, 1, 3, Size::ci}, {{64, 1}, 32, 0, Size::full},
                                  {{16, 8}, 8, 7, Size::full}}
             : std::vector<Shape>{{{1, 9, 0, 4}, 1, 0, Size::ci}, {{30, 2, 7}, 2, 3, Size::ci},
                                  {{1000, 3, 64}, 32, 3, Size::full}};
  const char* op = update ? "kda_conv1d_update" : "kda_conv1d_prefill";
  const int64_t W = 4;
  for (const auto& [lens, H, E, sz] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    const int64_t C = 2 * H * K + H * V, R = W - 1 + E;
    const int64_t N = update ? lens[0] : static_cast<int64_t>(lens.size());
    const int64_t T_upd = update ? lens[1] : 0;
    std::vector<int64_t> cu(N + 1, 0);
    if (!update)
      for (int64_t n = 0; n < N; ++n) cu[n + 1] = cu[n] + lens[n];
    const int64_t rows = update ? N * T_upd : cu[N], slots = 2 * N + 2;
    for (DType dt : {DType::bf16, DType::f32}) {
      for (Layout lay : {Layout::contiguous, Layout::padded, Layout::transposed}) {
        if (sz == Size::ci && lay == Layout::transposed && dt == DType::f32) continue;
        Case c;
        c.op = op;
        c.id = update ? str(op, "/N", N, "-T", T_upd, "-C", C, "-E", E, "-", dtype_name(dt), "-", layout_name(lay))
                      : str(op, "/N", N, "-T", rows, "-C", C, "-E", E, "-", dtype_name(dt), "-", layout_name(lay));
        c.size = sz;
        auto live_rows = [=](const HostBuffers& in) {
          std::vector<bool> live(rows, false);
          for (int64_t n = 0; n < N; ++n) {
            if (in.value(4, n * 2) <= 0) continue;
            const int64_t r0 = update ? n * T_upd : cu[n], r1 = update ? (n + 1) * T_upd : cu[n + 1];
            for (int64_t t = r0; t < r1; ++t) live[t] = true;
          }
          return live;
        };
        c.buffers.push_back({"out", dt, {rows, C}, Role::output, lay, Gen::uniform(0, 0),
                             with_bound(rounded_once(dt, 4), [=](const HostBuffers& in) {
                               return row_bound(live_rows(in), C, kConvAtol);
                             })});
        c.buffers.push_back({"conv_state", dt, {slots, R, C}, Role::inout, lay, Gen::uniform(-1, 1), Metric::bytes()});
        c.buffers.push_back({"x", dt, {rows, C}, Role::input, lay, Gen::uniform(-1, 1)});
        c.buffers.push_back({"weight", dt, {C, W}, Role::input, lay, Gen::uniform(-1, 1)});
        c.buffers.push_back({"slot_table", DType::i32, {N, 2}, Role::input, lay, slot_table_gen(N, 2, slots)});
        if (update) {
          c.buffers.push_back({"num_accepted", DType::i64, {N}, Role::input, lay, Gen::ints(1, E + 1)});
          auto make = [](const std::vector<TensorView>& v) {
            ops::KdaConv1dUpdateArgs a;
            a.out = v[0];
            a.conv_state = v[1];
            a.x = v[2];
            a.weight = v[3];
            a.state_indices = v[4].select(1, 0);
            a.num_accepted = v[5];
            return a;
          };
          c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
            return ops::kda_conv1d_update_supports(b, make(v));
          };
          c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
            ops::kda_conv1d_update(b, make(v), s);
          };
        } else {
          c.buffers.push_back({"cu_seqlens", DType::i64, {N + 1}, Role::input, lay, fixed_gen(cu)});
          c.buffers.push_back({"has_initial_state", DType::i32, {N}, Role::input, lay, Gen::ints(0, 1)});
          auto make = [](const std::vector<TensorView>& v) {
            ops::KdaConv1dPrefillArgs a;
            a.out = v[0];
            a.conv_state = v[1];
            a.x = v[2];
            a.weight = v[3];
            a.state_indices = v[4].select(1, 0);
            a.cu_seqlens = v[5];
            a.has_initial_state = v[6];
            return a;
          };
          c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
            return ops::kda_conv1d_prefill_supports(b, make(v));
          };
          c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
            ops::kda_conv1d_prefill(b, make(v), s);
          };
        }
        r.push_back(std::move(c));
      }
    }
  }
}

}  // namespace

void add_kda_cases(Registry& r, Size size) {
  add_conv_cases(r, size, /*update=*/false);
  add_conv_cases(r, size, /*update=*/true);
  add_token_step_cases(r, size, /*recurrent=*/false);
  add_token_step_cases(r, size, /*recurrent=*/true);
  add_chunk_prefill_cases(r, size);
}

}  // namespace kestrel::matrix
