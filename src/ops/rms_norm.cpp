// rms_norm: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/rms_norm.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void rms_norm_check(const RmsNormArgs& a) {
  constexpr const char* op = "rms_norm";
  check_rank(op, "out", a.out, 2, "[T, D]");
  check_rank(op, "x", a.x, 2, "[T, D]");
  check_rank(op, "weight", a.weight, 1, "[D]");
  if (a.residual.defined()) check_rank(op, "residual", a.residual, 2, "[T, D]");
  check_same_device(op, "x", a.x, "out", a.out);
  check_same_device(op, "weight", a.weight, "out", a.out);
  if (a.residual.defined()) check_same_device(op, "residual", a.residual, "out", a.out);
  check_dtype(op, "out", a.out, {DType::bf16, DType::f16, DType::f32});
  check_same_dtype(op, "x", a.x, "out", a.out);
  check_same_dtype(op, "weight", a.weight, "out", a.out);
  if (a.residual.defined()) check_same_dtype(op, "residual", a.residual, "out", a.out);
  check_strides(op, "out", a.out);
  check_strides(op, "x", a.x);
  check_strides(op, "weight", a.weight);
  check_no_self_overlap(op, "out", a.out);
  if (a.residual.defined()) {
    check_strides(op, "residual", a.residual);
    check_no_self_overlap(op, "residual", a.residual);
  }
  const int64_t T = a.x.size(0), D = a.x.size(1);
  check_size(op, "out", a.out, 0, T, "T (x.size(0))");
  check_size(op, "out", a.out, 1, D, "D (x.size(1))");
  check_size(op, "weight", a.weight, 0, D, "D (x.size(1))");
  if (a.residual.defined()) {
    check_size(op, "residual", a.residual, 0, T, "T (x.size(0))");
    check_size(op, "residual", a.residual, 1, D, "D (x.size(1))");
  }
  if (D < 1) fail_arg(op, "x", "D >= 1 (a row to normalise)", str("shape ", a.x.shape_str()));
  if (!(a.eps > 0.0f)) fail_arg(op, "eps", "a positive number", str(a.eps));
}

Support rms_norm_supports(Backend b, const RmsNormArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::rms_norm_supports(a);
}

void rms_norm(Backend b, const RmsNormArgs& a, Stream stream) {
  rms_norm_check(a);
  check_device("rms_norm", "out", a.out, backend_device(b));
  require_support("rms_norm", b, rms_norm_supports(b, a));
  if (b == Backend::cpu) {
    cpu::rms_norm(a);
  } else {
    cuda::rms_norm(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support rms_norm_supports(const RmsNormArgs&) { return Support::no("built without CUDA"); }
void rms_norm(const RmsNormArgs&, Stream) { throw Error("rms_norm: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
