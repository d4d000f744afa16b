// gemm cases: M, N, K (odd sizes on purpose), layouts of a, b and c. Every
// (a, b) pair of contiguous / transposed / padded on the CI shapes; c padded and transposed;
// inner-stride-2 operands, which cuBLAS cannot take (NOT_SUPPORTED on CUDA, shown as such).
// Bigger, model-like shapes (a weight W [N, K] is b transposed) are Size::full.
#include <cmath>
#include <utility>
#include <vector>

#include "kestrel/ops/gemm.h"
#include "matrix/cases/common.h"

namespace kestrel::matrix {

namespace {

// The fp32-accumulation allowance of docs/ops/gemm.md, per element of c:
// K * 2^-24 * sum_k |a[m, k] * b[k, n]| (buffers: 0 c, 1 a, 2 b).
std::vector<double> gemm_bound(const HostBuffers& in, int64_t M, int64_t N, int64_t K) {
  std::vector<double> abs_a(static_cast<size_t>(M * K)), abs_bt(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < M * K; ++i) abs_a[i] = std::fabs(in.value(1, i));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) abs_bt[n * K + k] = std::fabs(in.value(2, k * N + n));
  std::vector<double> bound(static_cast<size_t>(M * N));
  const double per_term = static_cast<double>(K) * std::ldexp(1.0, -24);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += abs_a[m * K + k] * abs_bt[n * K + k];
      bound[m * N + n] = per_term * s;
    }
  return bound;
}

void add_gemm_case(Registry& r, int64_t M, int64_t N, int64_t K, Layout la, Layout lb, Layout lc, Size sz) {
  Case c;
  c.op = "gemm";
  c.id = str("gemm/M", M, "-N", N, "-K", K, "-a_", layout_name(la), "-b_", layout_name(lb), "-c_", layout_name(lc));
  c.size = sz;
  Metric metric = Metric::within_ulps(1);
  metric.bound = [M, N, K](const HostBuffers& in) { return gemm_bound(in, M, N, K); };
  c.buffers.push_back({"c", DType::bf16, {M, N}, Role::output, lc, Gen{}, std::move(metric)});
  c.buffers.push_back({"a", DType::bf16, {M, K}, Role::input, la, Gen::uniform(-1, 1)});
  c.buffers.push_back({"b", DType::bf16, {K, N}, Role::input, lb, Gen::uniform(-1, 1)});
  auto make = [](const std::vector<TensorView>& v) {
    ops::GemmArgs a;
    a.c = v[0];
    a.a = v[1];
    a.b = v[2];
    return a;
  };
  c.supports = supports_via<ops::GemmArgs>(make, [](ops::Backend b, const ops::GemmArgs& a) { return ops::gemm_supports(b, a); });
  c.run = run_via<ops::GemmArgs>(make, [](ops::Backend b, const ops::GemmArgs& a, Stream s) { ops::gemm(b, a, s); });
  r.push_back(std::move(c));
}

}  // namespace

void add_gemm_cases(Registry& r, Size size) {
  constexpr Layout contig = Layout::contiguous, padded = Layout::padded, transposed = Layout::transposed,
                   istride2 = Layout::inner_strided;
  // CI: the CPU reference (f64, one thread) stays fast: M * N * K <= ~1.7e7 per case.
  struct Mnk { int64_t M, N, K; };
  const Mnk ci[] = {{1, 1, 1},     {1, 7, 33},        {7, 33, 64},      {33, 64, 257},
                    {7, 1000, 257}, {64, 257, 1000},   {257, 33, 1000},  {1000, 64, 257}};
  for (auto [M, N, K] : ci)
    for (Layout la : {contig, transposed, padded})
      for (Layout lb : {contig, transposed, padded}) add_gemm_case(r, M, N, K, la, lb, contig, Size::ci);
  // c in other layouts (cuBLAS then computes C = A B instead of C^T = B^T A^T).
  for (Layout lc : {padded, transposed}) {
    add_gemm_case(r, 33, 64, 257, contig, transposed, lc, Size::ci);
    add_gemm_case(r, 257, 33, 1000, transposed, padded, lc, Size::ci);
    add_gemm_case(r, 1, 7, 33, transposed, contig, lc, Size::ci);
  }
  // No unit stride in a, b or c: the CPU reference runs them, CUDA answers NOT_SUPPORTED.
  add_gemm_case(r, 7, 33, 64, istride2, contig, contig, Size::ci);
  add_gemm_case(r, 7, 33, 64, contig, istride2, contig, Size::ci);
  add_gemm_case(r, 7, 33, 64, contig, contig, istride2, Size::ci);
  // K = 0: c is all zeros (an empty sum), on every backend.
  add_gemm_case(r, 5, 3, 0, contig, contig, contig, Size::ci);
  if (size != Size::full) return;
  // Full (the reference box has 16 cores; each case is one reference thread).
  add_gemm_case(r, 1000, 1000, 1000, contig, contig, contig, Size::full);
  add_gemm_case(r, 1000, 1000, 1000, transposed, transposed, contig, Size::full);
  add_gemm_case(r, 257, 2304, 2304, contig, transposed, contig, Size::full);   // x @ W^T, W [2304, 2304]
  add_gemm_case(r, 33, 9216, 2304, padded, transposed, contig, Size::full);    // dense MLP up projection
  add_gemm_case(r, 4097, 129, 1000, contig, padded, transposed, Size::full);
}

}  // namespace kestrel::matrix
