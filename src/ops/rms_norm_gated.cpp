// rms_norm_gated: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/rms_norm_gated.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void rms_norm_gated_check(const RmsNormGatedArgs& a) {
  constexpr const char* op = "rms_norm_gated";
  check_rank(op, "out", a.out, 3, "[T, H, D]");
  check_rank(op, "x", a.x, 3, "[T, H, D]");
  check_rank(op, "gate", a.gate, 3, "[T, H, D]");
  check_rank(op, "weight", a.weight, 1, "[D]");
  check_same_device(op, "x", a.x, "out", a.out);
  check_same_device(op, "gate", a.gate, "out", a.out);
  check_same_device(op, "weight", a.weight, "out", a.out);
  check_dtype(op, "out", a.out, {DType::bf16, DType::f16, DType::f32});
  check_same_dtype(op, "x", a.x, "out", a.out);
  check_same_dtype(op, "gate", a.gate, "out", a.out);
  check_same_dtype(op, "weight", a.weight, "out", a.out);
  check_strides(op, "out", a.out);
  check_strides(op, "x", a.x);
  check_strides(op, "gate", a.gate);
  check_strides(op, "weight", a.weight);
  check_no_self_overlap(op, "out", a.out);
  const int64_t T = a.x.size(0), H = a.x.size(1), D = a.x.size(2);
  check_size(op, "out", a.out, 0, T, "T (x.size(0))");
  check_size(op, "out", a.out, 1, H, "H (x.size(1))");
  check_size(op, "out", a.out, 2, D, "D (x.size(2))");
  check_size(op, "gate", a.gate, 0, T, "T (x.size(0))");
  check_size(op, "gate", a.gate, 1, H, "H (x.size(1))");
  check_size(op, "gate", a.gate, 2, D, "D (x.size(2))");
  check_size(op, "weight", a.weight, 0, D, "D (x.size(2))");
  if (D < 1) fail_arg(op, "x", "D >= 1 (a row to normalise)", str("shape ", a.x.shape_str()));
  if (!(a.eps > 0.0f)) fail_arg(op, "eps", "a positive number", str(a.eps));
}

Support rms_norm_gated_supports(Backend b, const RmsNormGatedArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::rms_norm_gated_supports(a);
}

void rms_norm_gated(Backend b, const RmsNormGatedArgs& a, Stream stream) {
  rms_norm_gated_check(a);
  check_device("rms_norm_gated", "out", a.out, backend_device(b));
  require_support("rms_norm_gated", b, rms_norm_gated_supports(b, a));
  if (b == Backend::cpu) {
    cpu::rms_norm_gated(a);
  } else {
    cuda::rms_norm_gated(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support rms_norm_gated_supports(const RmsNormGatedArgs&) { return Support::no("built without CUDA"); }
void rms_norm_gated(const RmsNormGatedArgs&, Stream) { throw Error("rms_norm_gated: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
