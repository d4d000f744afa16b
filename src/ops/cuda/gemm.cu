// gemm, CUDA: one cublasGemmEx call (bf16 operands, CUBLAS_COMPUTE_32F, bf16 out) on the
// caller's stream.
//
// cuBLAS is column-major and wants each operand with a unit stride in one dim. A row-major
// C [M, N] (unit stride in N) is a column-major C^T [N, M], so we ask cuBLAS for
// C^T = B^T A^T; a column-major C (unit stride in M) takes C = A B directly. Either way each
// operand's op (N or T) and leading dimension come from its own strides (gemm_plan below): a
// transpose is just swapped strides, and a weight W [N, K] passed as b [K, N] with strides
// (1, K) becomes op T with ld K without a copy. A size-1 dim's stride is irrelevant, so it
// never decides anything. An operand with no unit stride is answered NOT_SUPPORTED by
// gemm_supports, never copied behind the caller's back.
//
// Split-K reductions stay in fp32 (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION): the
// op promises fp32 accumulation. K = 0 writes zeros with a small kernel of our own (cuBLAS
// is not called with an empty inner dim).
#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common.cuh"
#include "kestrel/ops/gemm.h"

namespace kestrel::ops::cuda {

#define KESTREL_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                            \
    const cublasStatus_t st_ = (expr);                                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      throw ::kestrel::Error(::kestrel::str("cuBLAS error ", cublasGetStatusName(st_), " (",      \
                                            cublasGetStatusString(st_), ") in ", #expr, " at ",   \
                                            __FILE__, ":", __LINE__));                            \
  } while (0)

namespace {

// ---- the cuBLAS handle: one per (thread, device), created on first use --------------------
class CublasHandles {
 public:
  CublasHandles() = default;
  CublasHandles(const CublasHandles&) = delete;
  CublasHandles& operator=(const CublasHandles&) = delete;
  ~CublasHandles() {
    // Thread exit (or, for the main thread, process exit before the CUDA runtime's own
    // teardown); a failure here has nobody left to report to.
    for (auto& [device, h] : handles_) (void)cublasDestroy(h);
  }
  cublasHandle_t get(int device) {
    for (auto& [d, h] : handles_)
      if (d == device) return h;
    cublasHandle_t h = nullptr;
    KESTREL_CUBLAS_CHECK(cublasCreate(&h));
    handles_.emplace_back(device, h);  // owned (and destroyed) from here on
    // fp32 accumulation is the op's promise: no split-K reduction in bf16.
    KESTREL_CUBLAS_CHECK(cublasSetMathMode(
        h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    return h;
  }

 private:
  std::vector<std::pair<int, cublasHandle_t>> handles_;
};

cublasHandle_t cublas_handle() {
  thread_local CublasHandles handles;
  int device = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&device));
  return handles.get(device);
}

// ---- the row-major / column-major mapping -------------------------------------------------
// How cuBLAS sees one operand: a column-major matrix of `rows` x `cols` as given (op N) or
// the transpose of a stored column-major `cols` x `rows` one (op T), with its leading dim.
struct ColMajor {
  bool ok = false;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
};

// The operand element (r, c) lives at r * s_r + c * s_c. cuBLAS needs a unit stride in one
// dim and a leading dim at least the stored row count; a size-1 dim's stride is irrelevant.
ColMajor as_col_major(int64_t rows, int64_t cols, int64_t s_r, int64_t s_c) {
  if (s_r == 1 || rows == 1) {  // down a column: stored as is
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : s_c;
    if (ld >= std::max<int64_t>(rows, 1)) return {true, CUBLAS_OP_N, ld};
  }
  if (s_c == 1 || cols == 1) {  // along a row: the transpose of a stored cols x rows matrix
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : s_r;
    if (ld >= std::max<int64_t>(cols, 1)) return {true, CUBLAS_OP_T, ld};
  }
  return {};
}

// One cublasGemmEx call: C' (m x n, ldc) = op(first) (m x k) @ op(second) (k x n).
struct GemmPlan {
  std::string why_not;  // empty when the call is possible
  bool swapped = false;  // C' = C^T = B^T A^T; otherwise C' = C = A B
  int64_t m = 0, n = 0, k = 0;
  ColMajor first, second, out;
};

std::string no_unit_stride(const char* arg, const TensorView& t) {
  return str(arg, ": cuBLAS needs a unit stride in one dim (and the other stride at least that dim's "
                  "extent), got shape ", t.shape_str(), " strides ", t.strides_str());
}

GemmPlan gemm_plan(const GemmArgs& g) {
  const int64_t M = g.a.size(0), K = g.a.size(1), N = g.b.size(1);
  GemmPlan p;
  p.k = K;
  // Row-major C first (the common case): C^T [N, M] column-major needs c.stride(1) == 1.
  if (ColMajor ct = as_col_major(N, M, g.c.stride(1), g.c.stride(0)); ct.ok && ct.op == CUBLAS_OP_N) {
    p.swapped = true;
    p.m = N;
    p.n = M;
    p.out = ct;
    p.first = as_col_major(N, K, g.b.stride(1), g.b.stride(0));   // B^T [N, K]
    p.second = as_col_major(K, M, g.a.stride(1), g.a.stride(0));  // A^T [K, M]
  } else if (ColMajor c = as_col_major(M, N, g.c.stride(0), g.c.stride(1)); c.ok && c.op == CUBLAS_OP_N) {
    p.m = M;
    p.n = N;
    p.out = c;
    p.first = as_col_major(M, K, g.a.stride(0), g.a.stride(1));   // A [M, K]
    p.second = as_col_major(K, N, g.b.stride(0), g.b.stride(1));  // B [K, N]
  } else {
    p.why_not = no_unit_stride("c", g.c);
    return p;
  }
  // The operand's feasibility does not depend on which of the two forms was chosen.
  if (!(p.swapped ? p.second : p.first).ok) {
    p.why_not = no_unit_stride("a", g.a);
  } else if (!(p.swapped ? p.first : p.second).ok) {
    p.why_not = no_unit_stride("b", g.b);
  } else {
    for (int64_t v : {p.m, p.n, p.k, p.first.ld, p.second.ld, p.out.ld})
      if (v > INT32_MAX) p.why_not = str("sizes and leading dims must fit in int32 for cublasGemmEx, got ", v);
  }
  return p;
}

// ---- K = 0: c = 0 ---------------------------------------------------------------------------
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    gemm_zero_kernel(__nv_bfloat16* c /* [M, N] strides (s0, s1) */, int64_t M, int64_t N, int64_t s0, int64_t s1) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < M * N; i += step)
    c[(i / N) * s0 + (i % N) * s1] = __float2bfloat16_rn(0.0f);
}

}  // namespace

Support gemm_supports(const GemmArgs& g) {
  const int64_t M = g.a.size(0), K = g.a.size(1), N = g.b.size(1);
  if (M == 0 || N == 0 || K == 0) return Support::yes();  // no cuBLAS call is made
  const GemmPlan p = gemm_plan(g);
  return p.why_not.empty() ? Support::yes() : Support::no(p.why_not);
}

void gemm(const GemmArgs& g, Stream stream) {
  const int64_t M = g.a.size(0), K = g.a.size(1), N = g.b.size(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    const int blocks = static_cast<int>(std::min<int64_t>((M * N + kThreads - 1) / kThreads, 1 << 16));
    gemm_zero_kernel<<<blocks, kThreads, 0, as_cuda(stream)>>>(static_cast<__nv_bfloat16*>(g.c.data), M, N,
                                                               g.c.stride(0), g.c.stride(1));
    KESTREL_LAUNCHED("gemm_zero_kernel");
    return;
  }
  const GemmPlan p = gemm_plan(g);
  KESTREL_CHECK(p.why_not.empty(), "gemm: ", p.why_not);  // gemm_supports said yes
  const void* first = p.swapped ? g.b.data : g.a.data;
  const void* second = p.swapped ? g.a.data : g.b.data;
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: cuBLAS does not read c
  cublasHandle_t h = cublas_handle();
  KESTREL_CUBLAS_CHECK(cublasSetStream(h, as_cuda(stream)));
  KESTREL_CUBLAS_CHECK(cublasGemmEx(h, p.first.op, p.second.op, static_cast<int>(p.m), static_cast<int>(p.n),
                                    static_cast<int>(p.k), &alpha, first, CUDA_R_16BF,
                                    static_cast<int>(p.first.ld), second, CUDA_R_16BF, static_cast<int>(p.second.ld),
                                    &beta, g.c.data, CUDA_R_16BF, static_cast<int>(p.out.ld), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  KESTREL_LAUNCHED("cublasGemmEx");
}

}  // namespace kestrel::ops::cuda
