// mla_build_q: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/mla_build_q.h"

#include "mla_checks.h"

namespace kestrel::ops {

void mla_build_q_check(const MlaBuildQArgs& a) {
  constexpr const char* op = "mla_build_q";
  check_rank(op, "q_out", a.q_out, 3, "[T, H, 576]");
  check_rank(op, "q_nope", a.q_nope, 3, "[T, H, 512]");
  check_rank(op, "q_pe", a.q_pe, 3, "[T, H, 64]");
  check_same_device(op, "q_nope", a.q_nope, "q_out", a.q_out);
  check_same_device(op, "q_pe", a.q_pe, "q_out", a.q_out);
  check_dtype(op, "q_out", a.q_out, {DType::bf16, DType::fp8_e4m3});
  check_dtype(op, "q_nope", a.q_nope, {DType::bf16});
  check_dtype(op, "q_pe", a.q_pe, {DType::bf16});
  check_strides(op, "q_out", a.q_out);
  check_strides(op, "q_nope", a.q_nope);
  check_strides(op, "q_pe", a.q_pe);
  check_no_self_overlap(op, "q_out", a.q_out);
  const int64_t T = a.q_nope.size(0), H = a.q_nope.size(1);
  check_size(op, "q_nope", a.q_nope, 2, kMlaNope, "512 = kv_lora_rank");
  check_size(op, "q_pe", a.q_pe, 0, T, "T (q_nope.size(0))");
  check_size(op, "q_pe", a.q_pe, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_pe", a.q_pe, 2, kMlaPe, "64 = qk_rope");
  check_size(op, "q_out", a.q_out, 0, T, "T (q_nope.size(0))");
  check_size(op, "q_out", a.q_out, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_out", a.q_out, 2, kMlaRow, "576 = 512 + 64");
  mla::check_scale(op, "scale", a.scale, a.q_out.dtype);
}

Support mla_build_q_supports(Backend b, const MlaBuildQArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::mla_build_q_supports(a);
}

void mla_build_q(Backend b, const MlaBuildQArgs& a, Stream stream) {
  mla_build_q_check(a);
  check_device("mla_build_q", "q_out", a.q_out, backend_device(b));
  require_support("mla_build_q", b, mla_build_q_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_build_q(a);
  } else {
    cuda::mla_build_q(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support mla_build_q_supports(const MlaBuildQArgs&) { return Support::no("built without CUDA"); }
void mla_build_q(const MlaBuildQArgs&, Stream) { throw Error("mla_build_q: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
