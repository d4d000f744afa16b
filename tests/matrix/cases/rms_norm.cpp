// rms_norm cases: rows T, width D, dtype, layout of x/out, fused residual or not.
#include "kestrel/ops/rms_norm.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_rms_norm_cases(Registry& r, Size size) {
  struct Shape2 { int64_t T, D; Size size; };
  const Shape2 shapes[] = {{1, 64, Size::ci}, {7, 2304, Size::ci}, {33, 1030, Size::ci}, {300, 7168, Size::full},
                           {1024, 2304, Size::full}};
  for (auto [T, D, sz] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (Layout lay : {Layout::contiguous, Layout::padded, Layout::transposed}) {
        for (bool residual : {false, true}) {
          Case c;
          c.op = "rms_norm";
          c.id = str("rms_norm/T", T, "-D", D, "-", dtype_name(dt), "-", layout_name(lay), residual ? "-res" : "");
          c.size = sz;
          c.buffers = {
              {"out", dt, {T, D}, Role::output, lay, {}, rounded_once(dt, 16)},
              {"x", dt, {T, D}, Role::input, lay, Gen::uniform(-2, 2)},
              {"weight", dt, {D}, Role::input, lay == Layout::contiguous ? lay : Layout::inner_strided,
               Gen::uniform(-1.5, 1.5)},
          };
          if (residual)
            c.buffers.push_back({"residual", dt, {T, D}, Role::inout, lay, Gen::uniform(-2, 2), Metric::bytes()});
          auto make = [residual](const std::vector<TensorView>& v) {
            ops::RmsNormArgs a;
            a.out = v[0];
            a.x = v[1];
            a.weight = v[2];
            if (residual) a.residual = v[3];
            a.eps = 1e-6f;
            return a;
          };
          c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
            return ops::rms_norm_supports(b, make(v));
          };
          c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) { ops::rms_norm(b, make(v), s); };
          r.push_back(std::move(c));
        }
      }
    }
  }
}

}  // namespace kestrel::matrix
