// gemm: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/gemm.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void gemm_check(const GemmArgs& a) {
  constexpr const char* op = "gemm";
  check_rank(op, "c", a.c, 2, "[M, N]");
  check_rank(op, "a", a.a, 2, "[M, K]");
  check_rank(op, "b", a.b, 2, "[K, N]");
  check_same_device(op, "a", a.a, "c", a.c);
  check_same_device(op, "b", a.b, "c", a.c);
  check_dtype(op, "c", a.c, {DType::bf16});
  check_dtype(op, "a", a.a, {DType::bf16});
  check_dtype(op, "b", a.b, {DType::bf16});
  check_strides(op, "c", a.c);
  check_strides(op, "a", a.a);
  check_strides(op, "b", a.b);
  check_no_self_overlap(op, "c", a.c);
  const int64_t M = a.a.size(0), K = a.a.size(1), N = a.b.size(1);
  check_size(op, "b", a.b, 0, K, "K (a.size(1))");
  check_size(op, "c", a.c, 0, M, "M (a.size(0))");
  check_size(op, "c", a.c, 1, N, "N (b.size(1))");
}

Support gemm_supports(Backend b, const GemmArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::gemm_supports(a);
}

void gemm(Backend b, const GemmArgs& a, Stream stream) {
  gemm_check(a);
  check_device("gemm", "c", a.c, backend_device(b));
  require_support("gemm", b, gemm_supports(b, a));
  if (b == Backend::cpu) {
    cpu::gemm(a);
  } else {
    cuda::gemm(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support gemm_supports(const GemmArgs&) { return Support::no("built without CUDA"); }
void gemm(const GemmArgs&, Stream) { throw Error("gemm: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
