// MLA cache and prepare cases: mla_write_kv, mla_build_q, mla_prepare_fp8_fused,
// mla_prepare_chain_fp8, mla_rope_quantize_fp8. Every output is bit-exact (Metric::bytes):
// the ops move or quantise values with one rounding each. The cache is an inout buffer, so
// the runner proves that rows not at loc keep their bytes and that canaries around the pool
// survive. loc puts distinct slots in pages 1.. for live rows and, for padded rows, distinct
// sink slots 0..page_size-1 of page 0; some cases add slots outside the cache, counted in
// invalid_count. The fused op runs on CUDA for contig and proj cases (16-byte aligned) and is
// NOT_SUPPORTED (with the gate's reason) for padded ones, where the chain covers. Inputs span 2^-12 .. 2^10.5 with both signs: fp8 subnormals, normals and
// saturation beyond +-448 (never NaN).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "kestrel/ops/mla_build_q.h"
#include "kestrel/ops/mla_prepare.h"
#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "kestrel/ops/mla_write_kv.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

using ops::kMlaNope;
using ops::kMlaPe;
using ops::kMlaRow;

// Values of every fp8 regime: sign * 2^u, u uniform in [-12, 10.5], one in 64 exactly zero.
Gen wide_values() {
  return Gen::with([](std::vector<double>& v, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> e(-12.0, 10.5);
    for (auto& x : v) {
      const uint64_t r = rng();
      x = (r % 64 == 0) ? 0.0 : ((r >> 8) & 1 ? -1.0 : 1.0) * std::exp2(e(rng));
    }
  });
}

struct LocPlan {
  int64_t T, page_size, num_pages, n_pad, n_invalid;
};

// A cache big enough that about a third of its live slots stay unwritten.
LocPlan plan_locs(int64_t T, int64_t page_size, int64_t n_invalid) {
  LocPlan p{T, page_size, 0, std::min<int64_t>(T / 4, page_size), n_invalid};
  const int64_t live = T - p.n_pad;
  p.num_pages = 1 + (live * 3 / 2 + page_size - 1) / page_size + 1;
  return p;
}

// Distinct slots: n_pad sink slots of page 0, live slots of pages 1.., n_invalid slots
// outside [0, slots), all shuffled over the T rows.
Gen loc_values(LocPlan p) {
  return Gen::with([p](std::vector<double>& v, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int64_t slots = p.num_pages * p.page_size;
    std::vector<int64_t> live(static_cast<size_t>(slots - p.page_size));
    std::iota(live.begin(), live.end(), p.page_size);
    std::shuffle(live.begin(), live.end(), rng);
    std::vector<int64_t> sink(static_cast<size_t>(p.page_size));
    std::iota(sink.begin(), sink.end(), 0);
    std::shuffle(sink.begin(), sink.end(), rng);
    const int64_t bad[] = {-1, slots, slots + 4096, -p.page_size, int64_t{INT32_MAX}};
    for (int64_t t = 0; t < p.T; ++t) {
      if (t < p.n_invalid) v[t] = static_cast<double>(bad[t % 5]);
      else if (t < p.n_invalid + p.n_pad) v[t] = static_cast<double>(sink[t - p.n_invalid]);
      else v[t] = static_cast<double>(live[t - p.n_invalid - p.n_pad]);
    }
    std::shuffle(v.begin(), v.end(), rng);
  });
}

// How the bf16 inputs (and q_out) are given to the op.
// The runner starts contiguous buffers 256-byte aligned and every other layout one element
// past that, so `contig` and `proj` meet the fused kernel's gate and `padded` does not (the
// fused op is then NOT_SUPPORTED on CUDA, shown with the gate's reason, and the chain runs).
enum class In : uint8_t {
  contig,  // each tensor its own contiguous buffer
  padded,  // Layout::padded: odd row strides, misaligned bases
  proj,    // slices of one contiguous projection row: [nope | 40 other columns | pe]
};
const char* in_name(In i) {
  switch (i) {
    case In::contig: return "contig";
    case In::padded: return "padded";
    case In::proj: return "proj";
  }
  return "?";
}

// Width of a projection row holding [nope (512) | 40 other columns | pe (64)].
constexpr int64_t kProjGap = 40, kProjWidth = kMlaNope + kProjGap + kMlaPe;

// Adds the buffers for an input pair (nope [lead..., 512], pe [lead..., 64]) and returns a
// function that turns the views (starting at index `first`) into the two tensors.
using PairFn = std::function<std::pair<TensorView, TensorView>(const std::vector<TensorView>&)>;
PairFn add_pair(std::vector<BufferSpec>& bufs, const std::string& stem, const Shape& lead, In in) {
  const size_t first = bufs.size();
  auto with = [&](int64_t last) {
    Shape s = lead;
    s.push_back(last);
    return s;
  };
  const int last_dim = static_cast<int>(lead.size());
  switch (in) {
    case In::contig:
    case In::padded: {
      const Layout lay = in == In::contig ? Layout::contiguous : Layout::padded;
      bufs.push_back({stem + "_nope", DType::bf16, with(kMlaNope), Role::input, lay, wide_values()});
      bufs.push_back({stem + "_pe", DType::bf16, with(kMlaPe), Role::input, lay, wide_values()});
      return [first](const std::vector<TensorView>& v) { return std::pair{v[first], v[first + 1]}; };
    }
    case In::proj:
      bufs.push_back({stem + "_proj", DType::bf16, with(kProjWidth), Role::input, Layout::contiguous, wide_values()});
      return [first, last_dim](const std::vector<TensorView>& v) {
        return std::pair{v[first].slice(last_dim, 0, kMlaNope), v[first].slice(last_dim, kMlaNope + kProjGap, kMlaPe)};
      };
  }
  return {};
}

using ViewFn = std::function<TensorView(const std::vector<TensorView>&)>;

ViewFn add_tensor(std::vector<BufferSpec>& bufs, BufferSpec spec) {
  const size_t i = bufs.size();
  bufs.push_back(std::move(spec));
  return [i](const std::vector<TensorView>& v) { return v[i]; };
}

Gen cache_values(DType dt) { return dt == DType::bf16 ? Gen::uniform(-4, 4) : Gen::uniform(-448, 448); }

// The cache, loc and (optional) counter of a case.
struct KvBuffers {
  ViewFn cache, loc, counter;
};
KvBuffers add_kv(std::vector<BufferSpec>& bufs, DType cache_dt, const LocPlan& lp, DType loc_dt, bool cache_padded) {
  KvBuffers k;
  k.cache = add_tensor(bufs,
                       {"cache", cache_dt, {lp.num_pages, lp.page_size, kMlaRow}, Role::inout,
                        cache_padded ? Layout::padded : Layout::contiguous, cache_values(cache_dt), Metric::bytes()});
  // loc with stride 2 beside a padded cache: write locations are often a column of a table.
  k.loc = add_tensor(bufs, {"loc", loc_dt, {lp.T}, Role::input, cache_padded ? Layout::inner_strided : Layout::contiguous,
                            loc_values(lp)});
  if (lp.n_invalid > 0) {
    k.counter = add_tensor(bufs, {"invalid_count", DType::i32, {1}, Role::inout, Layout::contiguous, Gen::ints(0, 9),
                                  Metric::bytes()});
  } else {
    k.counter = [](const std::vector<TensorView>&) { return TensorView(); };
  }
  return k;
}

std::string loc_tag(const LocPlan& lp, DType loc_dt) {
  return str("P", lp.page_size, "-", dtype_name(loc_dt), lp.n_invalid ? str("-bad", lp.n_invalid) : std::string());
}

struct TShape {
  int64_t T, H, page_size;
  Size size;
};

std::vector<TShape> shapes(Size size) {
  std::vector<TShape> s = {{1, 32, 64, Size::ci}, {7, 96, 32, Size::ci}, {64, 32, 128, Size::ci},
                           {257, 32, 64, Size::ci}, {64, 96, 64, Size::ci}};
  if (size == Size::full) {
    s.push_back({257, 96, 64, Size::full});
    // The CPU reference compares every byte of T * H * 576: keep the largest T to few heads.
    s.push_back({1024, 32, 128, Size::full});
    s.push_back({4096, 16, 64, Size::full});
  }
  return s;
}

void add_write_kv(Registry& r, const TShape& sh) {
  for (DType dt : {DType::bf16, DType::fp8_e4m3}) {
    for (In in : {In::contig, In::padded, In::proj}) {
      for (int64_t n_invalid : {int64_t{0}, std::min<int64_t>(3, sh.T)}) {
        if (n_invalid && in != In::padded) continue;
        const DType loc_dt = in == In::proj ? DType::i64 : DType::i32;
        const float scale = dt == DType::bf16 ? 1.0f : (in == In::padded ? 0.75f : 1.0f);
        const LocPlan lp = plan_locs(sh.T, sh.page_size, n_invalid);
        Case c;
        c.op = "mla_write_kv";
        c.id = str("mla_write_kv/T", sh.T, "-", loc_tag(lp, loc_dt), "-", dtype_name(dt), "-", in_name(in),
                   scale != 1.0f ? "-scaled" : "");
        c.size = sh.size;
        const KvBuffers kv = add_kv(c.buffers, dt, lp, loc_dt, in == In::padded);
        const PairFn k = add_pair(c.buffers, "k", {sh.T}, in);
        auto make = [kv, k, scale](const std::vector<TensorView>& v) {
          ops::MlaWriteKvArgs a;
          a.cache = kv.cache(v);
          a.loc = kv.loc(v);
          std::tie(a.k_nope, a.k_pe) = k(v);
          a.invalid_count = kv.counter(v);
          a.scale = scale;
          return a;
        };
        c.supports = supports_via<ops::MlaWriteKvArgs>(make, [](ops::Backend b, const ops::MlaWriteKvArgs& a) {
          return ops::mla_write_kv_supports(b, a);
        });
        c.run = run_via<ops::MlaWriteKvArgs>(make, [](ops::Backend b, const ops::MlaWriteKvArgs& a, Stream s) {
          ops::mla_write_kv(b, a, s);
        });
        r.push_back(std::move(c));
      }
    }
  }
}

void add_build_q(Registry& r, const TShape& sh) {
  for (DType dt : {DType::bf16, DType::fp8_e4m3}) {
    for (In in : {In::contig, In::padded, In::proj}) {
      const float scale = dt == DType::bf16 ? 1.0f : (in == In::proj ? 2.5f : 1.0f);
      Case c;
      c.op = "mla_build_q";
      c.id = str("mla_build_q/T", sh.T, "-H", sh.H, "-", dtype_name(dt), "-", in_name(in), scale != 1.0f ? "-scaled" : "");
      c.size = sh.size;
      // q_out: padded rows for padded/proj inputs, head-strided (transposed last dims) never:
      // the destination of the attention kernel is row-major; inner stride 2 once, to prove
      // "any strides".
      const Layout out_lay = in == In::padded ? Layout::inner_strided : in == In::proj ? Layout::padded : Layout::contiguous;
      const ViewFn q_out = add_tensor(c.buffers,
                                      {"q_out", dt, {sh.T, sh.H, kMlaRow}, Role::output, out_lay, {}, Metric::bytes()});
      const PairFn q = add_pair(c.buffers, "q", {sh.T, sh.H}, in);
      auto make = [q_out, q, scale](const std::vector<TensorView>& v) {
        ops::MlaBuildQArgs a;
        a.q_out = q_out(v);
        std::tie(a.q_nope, a.q_pe) = q(v);
        a.scale = scale;
        return a;
      };
      c.supports = supports_via<ops::MlaBuildQArgs>(make, [](ops::Backend b, const ops::MlaBuildQArgs& a) {
        return ops::mla_build_q_supports(b, a);
      });
      c.run = run_via<ops::MlaBuildQArgs>(make, [](ops::Backend b, const ops::MlaBuildQArgs& a, Stream s) {
        ops::mla_build_q(b, a, s);
      });
      r.push_back(std::move(c));
    }
  }
}

// The fused op and the chain on the same cases: each is compared with the CPU reference,
// which is the same bytes for both (tests/ops/mla_prepare_test.cpp proves fused == chain).
void add_prepare(Registry& r, const TShape& sh) {
  for (bool fused : {true, false}) {
    for (In in : {In::contig, In::padded, In::proj}) {
      for (int64_t n_invalid : {int64_t{0}, std::min<int64_t>(2, sh.T)}) {
        if (n_invalid && in != In::contig) continue;
        const DType loc_dt = in == In::proj ? DType::i32 : DType::i64;
        const float kv_scale = in == In::padded ? 1.5f : 1.0f, q_scale = in == In::padded ? 0.5f : 1.0f;
        const LocPlan lp = plan_locs(sh.T, sh.page_size, n_invalid);
        const char* op = fused ? "mla_prepare_fp8_fused" : "mla_prepare_chain_fp8";
        Case c;
        c.op = op;
        c.id = str(op, "/T", sh.T, "-H", sh.H, "-", loc_tag(lp, loc_dt), "-", in_name(in),
                   kv_scale != 1.0f ? "-scaled" : "");
        c.size = sh.size;
        const KvBuffers kv = add_kv(c.buffers, DType::fp8_e4m3, lp, loc_dt, in == In::padded);
        const ViewFn q_out = add_tensor(
            c.buffers,
            {"q_out", DType::fp8_e4m3, {sh.T, sh.H, kMlaRow}, Role::output, in == In::padded ? Layout::padded : Layout::contiguous, {},
             Metric::bytes()});
        const PairFn k = add_pair(c.buffers, "k", {sh.T}, in);
        const PairFn q = add_pair(c.buffers, "q", {sh.T, sh.H}, in);
        auto make = [kv, q_out, k, q, kv_scale, q_scale](const std::vector<TensorView>& v) {
          ops::MlaPrepareFp8Args a;
          a.cache = kv.cache(v);
          a.loc = kv.loc(v);
          std::tie(a.k_nope, a.k_pe) = k(v);
          a.q_out = q_out(v);
          std::tie(a.q_nope, a.q_pe) = q(v);
          a.invalid_count = kv.counter(v);
          a.kv_scale = kv_scale;
          a.q_scale = q_scale;
          return a;
        };
        if (fused) {
          c.supports = supports_via<ops::MlaPrepareFp8Args>(make, [](ops::Backend b, const ops::MlaPrepareFp8Args& a) {
            return ops::mla_prepare_fp8_fused_supports(b, a);
          });
          c.run = run_via<ops::MlaPrepareFp8Args>(make, [](ops::Backend b, const ops::MlaPrepareFp8Args& a, Stream s) {
            ops::mla_prepare_fp8_fused(b, a, s);
          });
        } else {
          c.supports = supports_via<ops::MlaPrepareFp8Args>(make, [](ops::Backend b, const ops::MlaPrepareFp8Args& a) {
            return ops::mla_prepare_chain_fp8_supports(b, a);
          });
          c.run = run_via<ops::MlaPrepareFp8Args>(make, [](ops::Backend b, const ops::MlaPrepareFp8Args& a, Stream s) {
            ops::mla_prepare_chain_fp8(b, a, s);
          });
        }
        r.push_back(std::move(c));
      }
    }
  }
}

// cos|sin table of a rotary embedding with base 10000 over 64 dims, rounded to f32.
Gen cos_sin_values(int64_t max_pos) {
  return Gen::with([max_pos](std::vector<double>& v, uint64_t) {
    for (int64_t p = 0; p < max_pos; ++p)
      for (int64_t i = 0; i < kMlaPe / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / kMlaPe);
        v[p * kMlaPe + i] = std::cos(angle);
        v[p * kMlaPe + kMlaPe / 2 + i] = std::sin(angle);
      }
  });
}

void add_rope(Registry& r, const TShape& sh) {
  constexpr int64_t kMaxPos = 4096;
  for (bool neox : {true, false}) {
    for (In in : {In::contig, In::padded}) {
      for (int64_t n_invalid : {int64_t{0}, std::min<int64_t>(3, sh.T)}) {
        if (n_invalid && in != In::padded) continue;
        const DType idx_dt = neox ? DType::i64 : DType::i32;
        const float kv_scale = in == In::padded ? 2.0f : 1.0f, q_scale = in == In::padded ? 0.625f : 1.0f;
        const LocPlan lp = plan_locs(sh.T, sh.page_size, n_invalid);
        Case c;
        c.op = "mla_rope_quantize_fp8";
        c.id = str("mla_rope_quantize_fp8/T", sh.T, "-H", sh.H, "-", loc_tag(lp, idx_dt), "-",
                   neox ? "neox" : "interleaved", "-", in_name(in), kv_scale != 1.0f ? "-scaled" : "");
        c.size = sh.size;
        const KvBuffers kv = add_kv(c.buffers, DType::fp8_e4m3, lp, idx_dt, in == In::padded);
        const ViewFn q_out = add_tensor(c.buffers,
                                        {"q_out", DType::fp8_e4m3, {sh.T, sh.H, kMlaRow}, Role::output,
                                         in == In::padded ? Layout::padded : Layout::contiguous, {}, Metric::bytes()});
        const PairFn k = add_pair(c.buffers, "k", {sh.T}, in);
        const PairFn q = add_pair(c.buffers, "q", {sh.T, sh.H}, in);
        const ViewFn cos_sin = add_tensor(c.buffers,
                                          {"cos_sin", DType::f32, {kMaxPos, kMlaPe}, Role::input,
                                           in == In::padded ? Layout::padded : Layout::contiguous, cos_sin_values(kMaxPos)});
        // Positions: in range; with bad ones, the first n_invalid rows get -1 or kMaxPos.
        const int64_t T = sh.T;
        const ViewFn positions = add_tensor(
            c.buffers,
            {"positions", idx_dt, {T}, Role::input, Layout::inner_strided,
             Gen::with([T, n_invalid](std::vector<double>& v, uint64_t seed) {
               std::mt19937_64 rng(seed);
               for (int64_t t = 0; t < T; ++t)
                 v[t] = t < n_invalid ? (t % 2 ? -1.0 : static_cast<double>(kMaxPos))
                                      : static_cast<double>(rng() % kMaxPos);
               std::shuffle(v.begin(), v.end(), rng);
             })});
        auto make = [kv, q_out, k, q, cos_sin, positions, neox, kv_scale, q_scale](const std::vector<TensorView>& v) {
          ops::MlaRopeQuantizeFp8Args a;
          a.q_out = q_out(v);
          a.cache = kv.cache(v);
          a.loc = kv.loc(v);
          std::tie(a.q_nope, a.q_pe) = q(v);
          std::tie(a.k_nope, a.k_pe) = k(v);
          a.cos_sin = cos_sin(v);
          a.positions = positions(v);
          a.invalid_count = kv.counter(v);
          a.is_neox = neox;
          a.q_scale = q_scale;
          a.kv_scale = kv_scale;
          return a;
        };
        c.supports = supports_via<ops::MlaRopeQuantizeFp8Args>(
            make, [](ops::Backend b, const ops::MlaRopeQuantizeFp8Args& a) { return ops::mla_rope_quantize_fp8_supports(b, a); });
        c.run = run_via<ops::MlaRopeQuantizeFp8Args>(
            make, [](ops::Backend b, const ops::MlaRopeQuantizeFp8Args& a, Stream s) { ops::mla_rope_quantize_fp8(b, a, s); });
        r.push_back(std::move(c));
      }
    }
  }
}

}  // namespace

void add_mla_cases(Registry& r, Size size) {
  std::set<std::pair<int64_t, int64_t>> kv_seen;  // mla_write_kv has no H: one set per (T, page_size)
  for (const TShape& sh : shapes(size)) {
    if (kv_seen.insert({sh.T, sh.page_size}).second) add_write_kv(r, sh);
    add_build_q(r, sh);
    add_prepare(r, sh);
    add_rope(r, sh);
  }
}

}  // namespace kestrel::matrix
