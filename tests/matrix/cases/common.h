// Helpers shared by the op case files: readable IDs and tolerance choices.
#pragma once

#include <string>

#include "kestrel/core/error.h"
#include "matrix/matrix.h"

namespace kestrel::matrix {

// Output-dtype ulps for an op whose result is a short chain of fp32 operations rounded once:
// one ulp for the narrow types (the reference and the kernel may fall on either side of a
// rounding boundary), `f32_ulps` for f32 outputs (accumulation order and special-function
// ulps show through).
inline Metric rounded_once(DType out, double f32_ulps) {
  return Metric::within_ulps(out == DType::f32 ? f32_ulps : 1.0);
}

// Dispatch helper: a case's `supports` for an op with args builder `make`.
template <typename Args, typename Make, typename Sup>
auto supports_via(Make make, Sup sup) {
  return [make, sup](ops::Backend b, const std::vector<TensorView>& v) { return sup(b, make(v)); };
}
template <typename Args, typename Make, typename Run>
auto run_via(Make make, Run run) {
  return [make, run](ops::Backend b, const std::vector<TensorView>& v, Stream s) { run(b, make(v), s); };
}

// The elementwise casts' axes (fp8_quantize, fp8_dequantize): shapes of rank 1 to 4, and the
// layouts of (x, out) that put every layout on both sides.
struct ElementwiseShape {
  Shape shape;
  Size size;
};
inline const ElementwiseShape kElementwiseShapes[] = {
    {{1000}, Size::ci},           {{33, 577}, Size::ci},         {{3, 17, 65}, Size::ci},
    {{2, 3, 5, 129}, Size::ci},   {{1, 1}, Size::ci},            {{4096, 7168}, Size::full},
    {{300, 32, 576}, Size::full}, {{2, 64, 32, 129}, Size::full}};
struct ElementwiseLayouts {
  const char* name;
  Layout x, out;
};
inline const ElementwiseLayouts kElementwiseLayouts[4] = {
    {"contig", Layout::contiguous, Layout::contiguous},
    {"padded-transposed", Layout::padded, Layout::transposed},
    {"transposed-contig", Layout::transposed, Layout::contiguous},
    {"istride2-padded", Layout::inner_strided, Layout::padded},
};

}  // namespace kestrel::matrix
