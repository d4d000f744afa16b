// silu_and_mul cases: rows T, output width F, dtype, layouts of out/x.
#include "kestrel/ops/silu_and_mul.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_silu_and_mul_cases(Registry& r, Size size) {
  struct Shape2 { int64_t T, F; Size size; };
  const Shape2 shapes[] = {{1, 64, Size::ci},        {7, 1030, Size::ci},    {33, 1024, Size::ci},
                           {5, 9, Size::ci},         {1024, 1024, Size::full}, {64, 9216, Size::full},
                           {17, 2304, Size::full}};
  // Layouts of (out, x): each layout for both, and a contiguous out fed by a transposed x. The
  // full shapes cost ~0.5 s a case in the runner, so they take only contig and the mix.
  struct Layouts { const char* name; Layout out, x; bool in_full; };
  const Layouts layouts[] = {
      {"contig", Layout::contiguous, Layout::contiguous, true},
      {"padded", Layout::padded, Layout::padded, false},
      {"transposed", Layout::transposed, Layout::transposed, false},
      {"istride2", Layout::inner_strided, Layout::inner_strided, false},
      {"mixed", Layout::contiguous, Layout::transposed, true},
  };
  for (auto [T, F, sz] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (const Layouts& lay : layouts) {
        if (sz == Size::full && !lay.in_full) continue;
        Case c;
        c.op = "silu_and_mul";
        c.id = str("silu_and_mul/T", T, "-F", F, "-", dtype_name(dt), "-", lay.name);
        c.size = sz;
        c.buffers = {
            {"out", dt, {T, F}, Role::output, lay.out, {}, rounded_once(dt, 8)},
            // silu is curved on [-8, 8]; beyond it silu(a) is ~0 or ~a
            {"x", dt, {T, 2 * F}, Role::input, lay.x, Gen::uniform(-8, 8)},
        };
        auto make = [](const std::vector<TensorView>& v) {
          ops::SiluAndMulArgs a;
          a.out = v[0];
          a.x = v[1];
          return a;
        };
        c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
          return ops::silu_and_mul_supports(b, make(v));
        };
        c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
          ops::silu_and_mul(b, make(v), s);
        };
        r.push_back(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::matrix
