// The matrix runner; matrix.h says what it does and in which order.
#include "matrix/matrix.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"

namespace kestrel::matrix {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contig";
    case Layout::padded: return "padded";
    case Layout::transposed: return "transposed";
    case Layout::inner_strided: return "istride2";
  }
  return "?";
}

const char* status_name(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::not_supported: return "NOT_SUPPORTED";
    case Status::unavailable: return "UNAVAILABLE";
  }
  return "?";
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_str(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Calls f(linear_row_major_index, element_offset_in_view) for every element.
template <typename F>
void for_each_element(const Shape& shape, const Shape& strides, F&& f) {
  const int rank = static_cast<int>(shape.size());
  const int64_t n = numel(shape);
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
}

// Strides for `layout`, and the element offset of the view's base inside its storage.
struct Placement {
  Shape strides;
  int64_t base = 0;     // elements before the first one (canaries)
  int64_t storage = 0;  // total elements of storage
};

Placement place(const Shape& shape, Layout layout, size_t elem_size) {
  constexpr int64_t kGuard = 67;  // canary elements before and after
  const int rank = static_cast<int>(shape.size());
  Placement p;
  p.strides.assign(rank, 1);
  // memory order: dims from innermost to outermost
  std::vector<int> order;
  for (int d = rank - 1; d >= 0; --d) order.push_back(d);
  if (layout == Layout::transposed && rank >= 2) std::swap(order[0], order[1]);
  const int64_t inner = layout == Layout::inner_strided ? 2 : 1;
  const int64_t pad = layout == Layout::contiguous ? 0 : 3;
  int64_t step = inner;
  for (size_t k = 0; k < order.size(); ++k) {
    const int d = order[k];
    p.strides[d] = step;
    step = step * std::max<int64_t>(shape[d], 1) + pad;
  }
  // Contiguous views start 256-byte aligned (storage comes from cudaMalloc or a 64-byte
  // aligned host allocation), so kernels' vectorised fast paths are exercised; every other
  // layout starts one element past that, so misaligned bases are exercised too.
  const int64_t align_elems = 256 / static_cast<int64_t>(elem_size);
  p.base = (kGuard + align_elems - 1) / align_elems * align_elems + (layout == Layout::contiguous ? 0 : 1);
  int64_t extent = 0;
  if (numel(shape) > 0) {
    for (int d = 0; d < rank; ++d) extent += (shape[d] - 1) * p.strides[d];
    extent += 1;
  }
  p.storage = p.base + extent + kGuard;
  return p;
}

void store_value(uint8_t* dst, DType t, double v) {
  switch (t) {
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(dst, &f, 4); break; }
    case DType::bf16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(dst, &h, 2); break; }
    case DType::f16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(dst, &h, 2); break; }
    case DType::fp8_e4m3: *dst = f32_to_fp8_e4m3(static_cast<float>(v)); break;
    case DType::i32: { int32_t i = static_cast<int32_t>(v); std::memcpy(dst, &i, 4); break; }
    case DType::i64: { int64_t i = static_cast<int64_t>(v); std::memcpy(dst, &i, 8); break; }
  }
}

double load_value(const uint8_t* src, DType t) {
  switch (t) {
    case DType::f32: { float f; std::memcpy(&f, src, 4); return f; }
    case DType::bf16: { uint16_t h; std::memcpy(&h, src, 2); return bf16_to_f32(h); }
    case DType::f16: { uint16_t h; std::memcpy(&h, src, 2); return f16_to_f32(h); }
    case DType::fp8_e4m3: return fp8_e4m3_to_f32(*src);
    case DType::i32: { int32_t i; std::memcpy(&i, src, 4); return i; }
    case DType::i64: { int64_t i; std::memcpy(&i, src, 8); return static_cast<double>(i); }
  }
  return 0;
}

void poison(uint8_t* dst, DType t) {
  switch (t) {
    case DType::f32: { uint32_t u = 0x7fc00000u; std::memcpy(dst, &u, 4); break; }
    case DType::bf16: { uint16_t u = 0x7fc0; std::memcpy(dst, &u, 2); break; }
    case DType::f16: { uint16_t u = 0x7e00; std::memcpy(dst, &u, 2); break; }
    case DType::fp8_e4m3: *dst = 0x7f; break;
    default: std::memset(dst, 0x5a, dtype_size(t)); break;
  }
}

// Spacing of representable values of `t` at magnitude |r|.
double ulp_at(double r, DType t) {
  int mant = 23, min_exp = -126;
  switch (t) {
    case DType::f32: mant = 23; min_exp = -126; break;
    case DType::bf16: mant = 7; min_exp = -126; break;
    case DType::f16: mant = 10; min_exp = -14; break;
    case DType::fp8_e4m3: mant = 3; min_exp = -6; break;
    default: return 1.0;  // integers: one unit
  }
  int e = min_exp;
  if (r != 0 && std::isfinite(r)) e = std::max(static_cast<int>(std::floor(std::log2(std::fabs(r)))), min_exp);
  return std::ldexp(1.0, e - mant);
}

struct Placed {
  Placement p;
  std::vector<uint8_t> storage;  // host image of the whole storage, canaries included
  Tensor device;                 // the same on the backend's device
};

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::vector<double> generate(const Gen& gen, int64_t n, uint64_t seed) {
  std::vector<double> vals(static_cast<size_t>(n));
  if (gen.custom) {
    gen.custom(vals, seed);
    return vals;
  }
  std::mt19937_64 rng(seed);
  if (gen.integer) {
    std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(gen.lo), static_cast<int64_t>(gen.hi));
    for (auto& v : vals) v = static_cast<double>(d(rng));
  } else {
    std::uniform_real_distribution<double> d(gen.lo, gen.hi);
    for (auto& v : vals) v = d(rng);
  }
  return vals;
}

double HostBuffers::value(size_t buffer, int64_t i) const {
  const size_t es = dtype_size(dtypes[buffer]);
  return load_value(bytes[buffer].data() + i * es, dtypes[buffer]);
}

Size requested_size() {
  const char* s = std::getenv("KESTREL_MATRIX");
  return (s && std::string(s) == "full") ? Size::full : Size::ci;
}

uint64_t base_seed() {
  static uint64_t seed = [] {
    uint64_t s;
    if (const char* e = std::getenv("KESTREL_SEED")) {
      s = std::strtoull(e, nullptr, 0);
    } else {
      std::random_device rd;
      s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    std::fprintf(stderr, "kestrel matrix: seed %llu (replay with KESTREL_SEED=%llu)\n",
                 static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

Result run_case(const Case& c, ops::Backend backend, uint64_t seed0) {
  Result res;
  const ops::Support avail = ops::backend_available(backend);
  if (!avail.ok) return {Status::unavailable, str("backend ", ops::backend_name(backend), ": ", avail.reason)};

  const uint64_t seed = splitmix(seed0 ^ hash_str(c.id));
  const Device dev = ops::backend_device(backend);
  const size_t nb = c.buffers.size();

  // 1. logical host data: inputs random, outputs poisoned
  HostBuffers initial;
  for (size_t b = 0; b < nb; ++b) {
    const BufferSpec& s = c.buffers[b];
    const int64_t n = numel(s.shape);
    const size_t es = dtype_size(s.dtype);
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * es);
    if (s.role == Role::output) {
      for (int64_t i = 0; i < n; ++i) poison(bytes.data() + i * es, s.dtype);
    } else {
      const std::vector<double> vals = generate(s.gen, n, splitmix(seed + 0x1000 * (b + 1)));
      for (int64_t i = 0; i < n; ++i) store_value(bytes.data() + i * es, s.dtype, vals[i]);
    }
    initial.bytes.push_back(std::move(bytes));
    initial.dtypes.push_back(s.dtype);
    initial.shapes.push_back(s.shape);
  }

  // 2. place every buffer on the backend's device, canaries around and between elements
  std::vector<Placed> placed(nb);
  std::vector<TensorView> views(nb);
  auto upload = [&]() {
    for (size_t b = 0; b < nb; ++b) {
      const BufferSpec& s = c.buffers[b];
      Placed& pl = placed[b];
      const size_t es = dtype_size(s.dtype);
      if (pl.storage.empty()) {
        pl.p = place(s.shape, s.layout, es);
        pl.storage.resize(static_cast<size_t>(pl.p.storage) * es);
        std::mt19937_64 crng(splitmix(seed + 77 * (b + 1)));
        for (auto& byte : pl.storage) byte = static_cast<uint8_t>(crng() | 0x21);  // never all-zero bytes
        for_each_element(s.shape, pl.p.strides, [&](int64_t i, int64_t off) {
          std::memcpy(pl.storage.data() + (pl.p.base + off) * es, initial.bytes[b].data() + i * es, es);
        });
        pl.device = Tensor::storage(pl.p.storage, s.dtype, dev);
      }
      memcpy_bytes(pl.device.data(), dev, pl.storage.data(), Device::cpu, pl.storage.size());
      views[b] = TensorView(static_cast<uint8_t*>(pl.device.data()) + pl.p.base * es, dev, s.dtype, s.shape,
                            pl.p.strides);
    }
  };
  upload();

  // 3. does the backend take this call?
  const ops::Support sup = c.supports(backend, views);
  if (!sup.ok) return {Status::not_supported, sup.reason};

  // 4. run twice from fresh uploads; check canaries, inputs and run-to-run equality
  std::vector<std::vector<uint8_t>> after(nb);
  for (int rep = 0; rep < 2; ++rep) {
    if (rep) upload();
    try {
      c.run(backend, views, nullptr);
      if (dev == Device::cuda) device_sync();
    } catch (const Error& e) {
      return {Status::fail, str("the op threw: ", e.what())};
    }
    for (size_t b = 0; b < nb; ++b) {
      std::vector<uint8_t> back(placed[b].storage.size());
      memcpy_bytes(back.data(), Device::cpu, placed[b].device.data(), dev, back.size());
      if (rep == 0) {
        after[b] = std::move(back);
      } else if (back != after[b]) {
        return {Status::fail, str(c.buffers[b].name, ": two runs on the same inputs differ (a race?)")};
      }
    }
  }
  HostBuffers got = initial;
  for (size_t b = 0; b < nb; ++b) {
    const BufferSpec& s = c.buffers[b];
    const size_t es = dtype_size(s.dtype);
    std::vector<uint8_t> touched(placed[b].storage.size(), 0);
    for_each_element(s.shape, placed[b].p.strides, [&](int64_t i, int64_t off) {
      const size_t at = static_cast<size_t>((placed[b].p.base + off)) * es;
      std::memcpy(got.bytes[b].data() + i * es, after[b].data() + at, es);
      std::memset(touched.data() + at, 1, es);
    });
    for (size_t k = 0; k < touched.size(); ++k) {
      if (!touched[k] && after[b][k] != placed[b].storage[k]) {
        const int64_t rel = static_cast<int64_t>(k / es) - placed[b].p.base;
        return {Status::fail,
                str(s.name, ": canary overwritten at element offset ", rel, " from the view's base (layout ",
                    layout_name(s.layout), ", strides ", views[b].strides_str(), ")")};
      }
    }
    if (s.role == Role::input && got.bytes[b] != initial.bytes[b])
      return {Status::fail, str(s.name, ": an input was modified by the op")};
  }

  // 5. the CPU reference on contiguous host copies, allocated only now
  std::vector<std::vector<uint8_t>> ref_bytes = initial.bytes;
  std::vector<TensorView> ref_views(nb);
  for (size_t b = 0; b < nb; ++b) ref_bytes[b].reserve(8);  // empty tensors still get a real pointer
  for (size_t b = 0; b < nb; ++b)
    ref_views[b] = TensorView::contiguous(ref_bytes[b].data(), Device::cpu, c.buffers[b].dtype, c.buffers[b].shape);
  try {
    c.run(ops::Backend::cpu, ref_views, nullptr);
  } catch (const Error& e) {
    return {Status::fail, str("the CPU reference threw: ", e.what())};
  }

  // 6. compare
  for (size_t b = 0; b < nb; ++b) {
    const BufferSpec& s = c.buffers[b];
    if (s.role == Role::input) continue;
    const size_t es = dtype_size(s.dtype);
    const int64_t n = numel(s.shape);
    std::vector<double> bound;
    if (s.metric.bound) bound = s.metric.bound(initial);
    int64_t bad = 0;
    double share = 0;
    std::string first;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* g = got.bytes[b].data() + i * es;
      const uint8_t* r = ref_bytes[b].data() + i * es;
      bool ok;
      double err = 0;
      const double gv = load_value(g, s.dtype), rv = load_value(r, s.dtype);
      if (s.metric.kind == Metric::exact || !dtype_is_float(s.dtype)) {
        ok = std::memcmp(g, r, es) == 0;
      } else if (std::isnan(rv) || std::isinf(rv) || std::isnan(gv) || std::isinf(gv)) {
        ok = (std::isnan(rv) && std::isnan(gv)) || (rv == gv);  // same class, same sign
      } else {
        err = std::fabs(gv - rv);
        const double allowed = s.metric.max_ulps * ulp_at(rv, s.dtype) + (bound.empty() ? 0.0 : bound[i]);
        ok = err <= allowed;
        res.worst = std::max(res.worst, err / ulp_at(rv, s.dtype));
        if (allowed > 0) share = std::max(share, err / allowed);
      }
      if (!ok) {
        if (bad < 4)
          first += str("\n    ", s.name, "[", i, "]: got ", fmt_double(gv), ", expected ", fmt_double(rv));
        ++bad;
      }
    }
    res.worst_share = std::max(res.worst_share, share);
    res.shares += str(res.shares.empty() ? "" : " ", s.name, " ", fmt_double(share));
    if (bad) {
      const char* how = s.metric.kind == Metric::exact ? "bytes differ" : "outside tolerance";
      res.status = Status::fail;
      res.message += str(s.name, ": ", bad, " of ", n, " elements ", how,
                         s.metric.kind == Metric::ulps ? str(" (", s.metric.max_ulps, " ulp", s.metric.bound ? " + bound" : "", ")") : "",
                         first, "\n");
    }
  }
  if (res.status == Status::fail)
    res.message += str("  worst error: ", res.worst_share, " of the bound\n  replay: KESTREL_SEED=", seed0, " case ", c.id);
  return res;
}

double time_case(const Case& c, ops::Backend backend, int reps, double* bytes) {
  const Device dev = ops::backend_device(backend);
  std::vector<Tensor> store;
  std::vector<TensorView> views;
  double total = 0;
  for (size_t b = 0; b < c.buffers.size(); ++b) {
    const BufferSpec& s = c.buffers[b];
    const int64_t n = numel(s.shape);
    const size_t es = dtype_size(s.dtype);
    std::vector<uint8_t> host(static_cast<size_t>(n) * es);
    const std::vector<double> vals = generate(s.gen, n, 1234 + b);
    for (int64_t i = 0; i < n; ++i) store_value(host.data() + i * es, s.dtype, vals[i]);
    store.push_back(Tensor::storage(std::max<int64_t>(n, 1), s.dtype, dev));
    memcpy_bytes(store.back().data(), dev, host.data(), Device::cpu, host.size());
    views.push_back(TensorView::contiguous(store.back().data(), dev, s.dtype, s.shape));
    total += static_cast<double>(host.size()) * (s.role == Role::inout ? 2 : 1);
  }
  if (bytes) *bytes = total;
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    c.run(backend, views, nullptr);
    if (dev == Device::cuda) device_sync();
    const auto t1 = std::chrono::steady_clock::now();
    if (r) times.push_back(std::chrono::duration<double>(t1 - t0).count());  // the first is warm-up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

const std::vector<Case>& all_cases(Size size) {
  static std::once_flag once[2];
  static std::vector<Case> cases[2];
  const int k = size == Size::full ? 1 : 0;
  std::call_once(once[k], [&] {
    Registry& r = cases[k];
    add_rms_norm_cases(r, size);
    add_rms_norm_gated_cases(r, size);
    add_silu_and_mul_cases(r, size);
    add_embedding_cases(r, size);
    add_fp8_quantize_cases(r, size);
    add_fp8_dequantize_cases(r, size);
    add_gemm_cases(r, size);
    add_kda_cases(r, size);
    add_mla_cases(r, size);
    add_mla_attention_cases(r, size);
    // Every case ID is unique: a duplicate would hide a case from filters and replays.
    std::vector<std::string> ids;
    for (const Case& c : r) ids.push_back(c.id);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 1; i < ids.size(); ++i)
      KESTREL_CHECK(ids[i] != ids[i - 1], "matrix: duplicate case id ", ids[i]);
  });
  return cases[k];
}

}  // namespace kestrel::matrix
