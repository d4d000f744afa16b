// fp8_quantize cases: rank 1..4 shapes, x dtype, layouts of (x, out), scale. Inputs span
// x / scale from below the fp8 subnormal step (2^-9) to past the saturation point (448),
// with exact rounding ties, signed zeros, infinities, NaN and f32 denormals mixed in.
#include <cmath>
#include <limits>
#include <random>

#include "kestrel/ops/fp8_quantize.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

// "2x3x5x129": a readable shape for case IDs.
std::string dims_id(const Shape& s) {
  std::string out;
  for (size_t d = 0; d < s.size(); ++d) out += str(d ? "x" : "", s[d]);
  return out;
}

// Values of x for a given scale: mostly scale * (+-2^u), u uniform in [-13, 11] so that
// x / scale lands in every fp8 binade, in the subnormals, below them (rounds to 0) and past
// 448 (saturates); every 7th value is a special.
Gen fp8_quantize_inputs(float scale) {
  return Gen::with([scale](std::vector<double>& v, uint64_t seed) {
    const double inf = std::numeric_limits<double>::infinity();
    const double s = scale;
    const double specials[] = {
        0.0, -0.0, 448 * s, -448 * s, 464 * s /* tie past 448: saturates */, -465 * s, 480 * s, 1e6 * s,
        inf, -inf, std::nan(""), std::ldexp(1.0, -9) * s /* smallest subnormal */,
        std::ldexp(1.0, -10) * s /* tie -> 0 */, 3 * std::ldexp(1.0, -10) * s /* tie -> 2 * 2^-9 */,
        (std::ldexp(1.0, -6) - std::ldexp(1.0, -10)) * s, 7.5 * std::ldexp(1.0, -9) * s /* tie -> 2^-6 */,
        1.0625 * s /* tie -> 1 */, 1.1875 * s /* tie -> 1.25 */, 240 * s, 65504.0, 1e-40, -3e-39, 1e-45};
    constexpr int kSpecials = sizeof(specials) / sizeof(specials[0]);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> exponent(-13.0, 11.0);
    for (size_t i = 0; i < v.size(); ++i) {
      if (i % 7 == 3) {
        v[i] = specials[(i / 7) % kSpecials];
      } else {
        const double m = s * std::exp2(exponent(rng));
        v[i] = (rng() & 1) ? -m : m;
      }
    }
  });
}

}  // namespace

void add_fp8_quantize_cases(Registry& r, Size size) {
  const auto& layouts = kElementwiseLayouts;
  const float scales[] = {1.0f, 0.25f, 0.0173f, 3.7f};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  for (const ElementwiseShape& sh : kElementwiseShapes) {
    if (sh.size == Size::full && size != Size::full) continue;
    for (int di = 0; di < 3; ++di) {
      for (int li = 0; li < 4; ++li) {
        // Every dtype meets every scale and every layout, without the full product.
        const float scale = scales[(li + di) % 4];
        const DType dt = dtypes[di];
        Case c;
        c.op = "fp8_quantize";
        c.id = str("fp8_quantize/", dims_id(sh.shape), "-", dtype_name(dt), "-", layouts[li].name, "-s", scale);
        c.size = sh.size;
        c.buffers = {
            {"out", DType::fp8_e4m3, sh.shape, Role::output, layouts[li].out, {}, Metric::bytes()},
            {"x", dt, sh.shape, Role::input, layouts[li].x, fp8_quantize_inputs(scale)},
        };
        auto make = [scale](const std::vector<TensorView>& v) {
          ops::Fp8QuantizeArgs a;
          a.out = v[0];
          a.x = v[1];
          a.scale = scale;
          return a;
        };
        c.supports = supports_via<ops::Fp8QuantizeArgs>(
            make, [](ops::Backend b, const ops::Fp8QuantizeArgs& a) { return ops::fp8_quantize_supports(b, a); });
        c.run = run_via<ops::Fp8QuantizeArgs>(
            make, [](ops::Backend b, const ops::Fp8QuantizeArgs& a, Stream s) { ops::fp8_quantize(b, a, s); });
        r.push_back(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::matrix
