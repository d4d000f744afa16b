// silu_and_mul: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/silu_and_mul.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void silu_and_mul_check(const SiluAndMulArgs& a) {
  constexpr const char* op = "silu_and_mul";
  check_rank(op, "out", a.out, 2, "[T, F]");
  check_rank(op, "x", a.x, 2, "[T, 2F]");
  check_same_device(op, "x", a.x, "out", a.out);
  check_dtype(op, "out", a.out, {DType::bf16, DType::f16, DType::f32});
  check_same_dtype(op, "x", a.x, "out", a.out);
  check_strides(op, "out", a.out);
  check_strides(op, "x", a.x);
  check_no_self_overlap(op, "out", a.out);
  const int64_t T = a.x.size(0), F2 = a.x.size(1);
  if (F2 % 2 != 0) fail_arg(op, "x", "an even size in dim 1 (2F)", str("shape ", a.x.shape_str()));
  check_size(op, "out", a.out, 0, T, "T (x.size(0))");
  check_size(op, "out", a.out, 1, F2 / 2, "F (x.size(1) / 2)");
}

Support silu_and_mul_supports(Backend b, const SiluAndMulArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::silu_and_mul_supports(a);
}

void silu_and_mul(Backend b, const SiluAndMulArgs& a, Stream stream) {
  silu_and_mul_check(a);
  check_device("silu_and_mul", "out", a.out, backend_device(b));
  require_support("silu_and_mul", b, silu_and_mul_supports(b, a));
  if (b == Backend::cpu) {
    cpu::silu_and_mul(a);
  } else {
    cuda::silu_and_mul(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support silu_and_mul_supports(const SiluAndMulArgs&) { return Support::no("built without CUDA"); }
void silu_and_mul(const SiluAndMulArgs&, Stream) { throw Error("silu_and_mul: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
