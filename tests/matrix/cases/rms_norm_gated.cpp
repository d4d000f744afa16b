// rms_norm_gated cases: rows T, heads H, head width D, dtype, layouts of out/x/gate.
#include "kestrel/ops/rms_norm_gated.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_rms_norm_gated_cases(Registry& r, Size size) {
  struct Shape3 { int64_t T, H, D; Size size; };
  const Shape3 shapes[] = {
      // the CUDA kernel's register tiers are D <= 64, 128, 256 and wider: each is covered
      {1, 1, 64, Size::ci},        {4, 2, 20, Size::ci},       {7, 32, 128, Size::ci},
      {5, 3, 200, Size::ci},       {33, 3, 1030, Size::ci},    {2, 1, 2304, Size::ci},
      {512, 32, 128, Size::full},  {64, 96, 128, Size::full},  {129, 3, 2304, Size::full},
  };
  // Layouts of (out, x, gate): each layout for all three, and one mix where every tensor has
  // its own strides (a head-strided x next to a packed gate, as in a fused projection). The
  // full shapes cost ~0.5 s a case in the runner, so they take only contig and the mix.
  struct Layouts { const char* name; Layout out, x, gate; bool in_full; };
  const Layouts layouts[] = {
      {"contig", Layout::contiguous, Layout::contiguous, Layout::contiguous, true},
      {"padded", Layout::padded, Layout::padded, Layout::padded, false},
      {"transposed", Layout::transposed, Layout::transposed, Layout::transposed, false},
      {"istride2", Layout::inner_strided, Layout::inner_strided, Layout::inner_strided, false},
      {"mixed", Layout::padded, Layout::transposed, Layout::inner_strided, true},
  };
  for (auto [T, H, D, sz] : shapes) {
    if (sz == Size::full && size != Size::full) continue;
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (const Layouts& lay : layouts) {
        if (sz == Size::full && !lay.in_full) continue;
        const bool all_contig = lay.out == Layout::contiguous && lay.x == Layout::contiguous;
        Case c;
        c.op = "rms_norm_gated";
        c.id = str("rms_norm_gated/T", T, "-H", H, "-D", D, "-", dtype_name(dt), "-", lay.name);
        c.size = sz;
        c.buffers = {
            {"out", dt, {T, H, D}, Role::output, lay.out, {}, rounded_once(dt, 16)},
            {"x", dt, {T, H, D}, Role::input, lay.x, Gen::uniform(-2, 2)},
            // sigmoid from ~0.0003 to ~0.9997: both saturating tails and the middle
            {"gate", dt, {T, H, D}, Role::input, lay.gate, Gen::uniform(-8, 8)},
            {"weight", dt, {D}, Role::input, all_contig ? Layout::contiguous : Layout::inner_strided,
             Gen::uniform(-1.5, 1.5)},
        };
        auto make = [](const std::vector<TensorView>& v) {
          ops::RmsNormGatedArgs a;
          a.out = v[0];
          a.x = v[1];
          a.gate = v[2];
          a.weight = v[3];
          a.eps = 1e-5f;
          return a;
        };
        c.supports = [make](ops::Backend b, const std::vector<TensorView>& v) {
          return ops::rms_norm_gated_supports(b, make(v));
        };
        c.run = [make](ops::Backend b, const std::vector<TensorView>& v, Stream s) {
          ops::rms_norm_gated(b, make(v), s);
        };
        r.push_back(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::matrix
