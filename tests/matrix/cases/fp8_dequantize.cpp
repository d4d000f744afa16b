// fp8_dequantize cases: rank 1..4 shapes, out dtype, layouts of (x, out), scale. Every one
// of the 256 fp8 codes appears (NaN 0x7F included), then random codes; the scales reach
// f16 subnormals (2^-20), f16 and f32 overflow (1e36) and ordinary rounding (0.0173, 3.7).
#include <random>

#include "kestrel/core/convert.h"
#include "kestrel/ops/fp8_dequantize.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

// "2x3x5x129": a readable shape for case IDs.
std::string dims_id(const Shape& s) {
  std::string out;
  for (size_t d = 0; d < s.size(); ++d) out += str(d ? "x" : "", s[d]);
  return out;
}

// The runner stores each value with the exact encoder, which maps dec(code) back to code
// for every code but 0xFF (a NaN, stored as 0x7F).
Gen every_fp8_code() {
  return Gen::with([](std::vector<double>& v, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint8_t code = i < 256 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(rng());
      v[i] = fp8_e4m3_to_f32(code);
    }
  });
}

}  // namespace

void add_fp8_dequantize_cases(Registry& r, Size size) {
  const auto& layouts = kElementwiseLayouts;
  const float scales[] = {1.0f, 0.0173f, 3.7f, 0x1p-20f, 1e36f};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  for (const ElementwiseShape& sh : kElementwiseShapes) {
    if (sh.size == Size::full && size != Size::full) continue;
    for (int di = 0; di < 3; ++di) {
      for (int li = 0; li < 4; ++li) {
        for (int si = 0; si < 5; ++si) {
          // Every scale with every dtype; layouts take turns (all four per dtype).
          if ((si + di) % 4 != li) continue;
          const float scale = scales[si];
          const DType dt = dtypes[di];
          Case c;
          c.op = "fp8_dequantize";
          c.id = str("fp8_dequantize/", dims_id(sh.shape), "-", dtype_name(dt), "-", layouts[li].name, "-s", scale);
          c.size = sh.size;
          c.buffers = {
              {"out", dt, sh.shape, Role::output, layouts[li].out, {}, Metric::bytes()},
              {"x", DType::fp8_e4m3, sh.shape, Role::input, layouts[li].x, every_fp8_code()},
          };
          auto make = [scale](const std::vector<TensorView>& v) {
            ops::Fp8DequantizeArgs a;
            a.out = v[0];
            a.x = v[1];
            a.scale = scale;
            return a;
          };
          c.supports = supports_via<ops::Fp8DequantizeArgs>(
              make, [](ops::Backend b, const ops::Fp8DequantizeArgs& a) { return ops::fp8_dequantize_supports(b, a); });
          c.run = run_via<ops::Fp8DequantizeArgs>(
              make, [](ops::Backend b, const ops::Fp8DequantizeArgs& a, Stream s) { ops::fp8_dequantize(b, a, s); });
          r.push_back(std::move(c));
        }
      }
    }
  }
}

}  // namespace kestrel::matrix
