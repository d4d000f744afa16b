// embedding cases: rows T, vocab V, width D, dtype, ids dtype, layouts, out-of-range ids,
// with and without the invalid-id counter.
#include <cstdint>
#include <limits>
#include <random>

#include "kestrel/ops/embedding.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

// Ids uniform in [0, V); with `oob`, about one in four is replaced by an id outside [0, V):
// just outside either end, far outside, or the extremes of the id dtype.
Gen ids_gen(int64_t V, DType ids_dtype, bool oob) {
  return Gen::with([V, ids_dtype, oob](std::vector<double>& vals, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> id(0, V - 1);
    const bool i64 = ids_dtype == DType::i64;
    const int64_t lo = i64 ? -(int64_t{1} << 40) : std::numeric_limits<int32_t>::min();
    const int64_t hi = i64 ? (int64_t{1} << 40) : std::numeric_limits<int32_t>::max();
    const int64_t bad[] = {-1, V, V + 1, -V, 10 * V + 3, lo, hi};
    std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(bad)) * 4 - 1);
    for (auto& v : vals) {
      const int k = oob ? pick(rng) : static_cast<int>(std::size(bad));
      v = static_cast<double>(k < static_cast<int>(std::size(bad)) ? bad[k] : id(rng));
    }
    // at least one out-of-range id when asked for, so the zero row and the count are seen
    if (oob && !vals.empty()) vals[vals.size() / 2] = static_cast<double>(V);
  });
}

}  // namespace

void add_embedding_cases(Registry& r, Size size) {
  struct Shape3 { int64_t T, V, D; Size size; };
  const Shape3 shapes[] = {{1, 50, 64, Size::ci},         {7, 37, 2304, Size::ci},
                           {33, 100, 1030, Size::ci},      {1024, 512, 2304, Size::full},
                           {300, 163, 7168, Size::full}};
  struct Mode { const char* name; bool oob, counted; };
  const Mode modes[] = {{"", false, false}, {"-oob", true, false}, {"-count", false, true}, {"-oob-count", true, true}};
  // The full shapes cost ~0.3 s a case in the runner: there only contig and transposed, and
  // only the plain and the oob-count modes.
  auto in_full = [](Layout lay, const Mode& m) {
    return (lay == Layout::contiguous || lay == Layout::transposed) && m.oob == m.counted;
  };
  for (auto [T, V, D, sz] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (DType idt : {DType::i32, DType::i64}) {
        for (Layout lay : {Layout::contiguous, Layout::padded, Layout::transposed, Layout::inner_strided}) {
          for (const Mode& m : modes) {
            if (sz == Size::full && !in_full(lay, m)) continue;
            Case c;
            c.op = "embedding";
            c.id = str("embedding/T", T, "-V", V, "-D", D, "-", dtype_name(dt), "-", dtype_name(idt), "-",
                       layout_name(lay), m.name);
            c.size = sz;
            c.buffers = {
                {"out", dt, {T, D}, Role::output, lay, {}, Metric::bytes()},
                {"table", dt, {V, D}, Role::input, lay, Gen::uniform(-3, 3)},
                {"ids", idt, {T}, Role::input, lay == Layout::contiguous ? lay : Layout::inner_strided,
                 ids_gen(V, idt, m.oob)},
            };
            // starts at a random count so that the add is visible
            if (m.counted)
              c.buffers.push_back(
                  {"invalid_count", DType::i32, {1}, Role::inout, Layout::contiguous, Gen::ints(0, 1000), Metric::bytes()});
            const bool counted = m.counted;
            auto make = [counted](const std::vector<TensorView>& v) {
              ops::EmbeddingArgs a;
              a.out = v[0];
              a.table = v[1];
              a.ids = v[2];
              if (counted) a.invalid_count = v[3];
              return a;
            };
            c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
              return ops::embedding_supports(b, make(v));
            };
            c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
              ops::embedding(b, make(v), s);
            };
            r.push_back(std::move(c));
          }
        }
      }
    }
  }
}

}  // namespace kestrel::matrix
