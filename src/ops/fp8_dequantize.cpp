// fp8_dequantize: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/fp8_dequantize.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void fp8_dequantize_check(const Fp8DequantizeArgs& a) {
  constexpr const char* op = "fp8_dequantize";
  check_rank_between(op, "out", a.out, 1, 4);
  check_rank(op, "x", a.x, a.out.rank, "(the rank of out)");
  check_same_device(op, "x", a.x, "out", a.out);
  check_dtype(op, "out", a.out, {DType::f32, DType::bf16, DType::f16});
  check_dtype(op, "x", a.x, {DType::fp8_e4m3});
  check_strides(op, "out", a.out);
  check_strides(op, "x", a.x);
  check_no_self_overlap(op, "out", a.out);
  for (int d = 0; d < a.out.rank; ++d) check_size(op, "x", a.x, d, a.out.size(d), "the same dim of out");
  check_positive_finite(op, "scale", a.scale);
}

Support fp8_dequantize_supports(Backend b, const Fp8DequantizeArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::fp8_dequantize_supports(a);
}

void fp8_dequantize(Backend b, const Fp8DequantizeArgs& a, Stream stream) {
  fp8_dequantize_check(a);
  check_device("fp8_dequantize", "out", a.out, backend_device(b));
  require_support("fp8_dequantize", b, fp8_dequantize_supports(b, a));
  if (b == Backend::cpu) {
    cpu::fp8_dequantize(a);
  } else {
    cuda::fp8_dequantize(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support fp8_dequantize_supports(const Fp8DequantizeArgs&) { return Support::no("built without CUDA"); }
void fp8_dequantize(const Fp8DequantizeArgs&, Stream) { throw Error("fp8_dequantize: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
