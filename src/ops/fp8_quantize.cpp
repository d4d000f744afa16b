// fp8_quantize: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/fp8_quantize.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void fp8_quantize_check(const Fp8QuantizeArgs& a) {
  constexpr const char* op = "fp8_quantize";
  check_rank_between(op, "out", a.out, 1, 4);
  check_rank(op, "x", a.x, a.out.rank, "(the rank of out)");
  check_same_device(op, "x", a.x, "out", a.out);
  check_dtype(op, "out", a.out, {DType::fp8_e4m3});
  check_dtype(op, "x", a.x, {DType::f32, DType::bf16, DType::f16});
  check_strides(op, "out", a.out);
  check_strides(op, "x", a.x);
  check_no_self_overlap(op, "out", a.out);
  for (int d = 0; d < a.out.rank; ++d) check_size(op, "x", a.x, d, a.out.size(d), "the same dim of out");
  check_positive_finite(op, "scale", a.scale);
}

Support fp8_quantize_supports(Backend b, const Fp8QuantizeArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::fp8_quantize_supports(a);
}

void fp8_quantize(Backend b, const Fp8QuantizeArgs& a, Stream stream) {
  fp8_quantize_check(a);
  check_device("fp8_quantize", "out", a.out, backend_device(b));
  require_support("fp8_quantize", b, fp8_quantize_supports(b, a));
  if (b == Backend::cpu) {
    cpu::fp8_quantize(a);
  } else {
    cuda::fp8_quantize(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support fp8_quantize_supports(const Fp8QuantizeArgs&) { return Support::no("built without CUDA"); }
void fp8_quantize(const Fp8QuantizeArgs&, Stream) { throw Error("fp8_quantize: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
