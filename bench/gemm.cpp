// gemm benchmarks: the Kimi-Linear projections, out [M, N] = a [M, K] @ W^T with the weight
// W [N, K] stored row-major as loaded and passed as b = W viewed [K, N], strides (1, K).
// M = 1 (decode), 64 (a small batch), 4096 (prefill); (N, K) = the square projection
// (2304, 2304), the MLP up (9216, 2304) and down (2304, 9216).
#include "cases.h"
#include "kestrel/ops/gemm.h"

namespace kestrel::bench {

void add_gemm_benches(Registry& r) {
  const std::pair<int64_t, int64_t> nks[] = {{2304, 2304}, {9216, 2304}, {2304, 9216}};
  for (const auto& [N, K] : nks) {
    for (const int64_t M : {1, 64, 4096}) {
      Case c;
      c.name = str("gemm/M", M, "-N", N, "-K", K, "-bf16");
      c.buffers = {{"c", DType::bf16, {M, N}}, {"a", DType::bf16, {M, K}}, {"w", DType::bf16, {N, K}}};
      c.bytes = tensor_bytes(DType::bf16, {M, K}) + tensor_bytes(DType::bf16, {N, K}) + tensor_bytes(DType::bf16, {M, N});
      c.flops = 2.0 * M * N * K;
      c.run = [](const std::vector<TensorView>& b, Stream s) {
        ops::GemmArgs a;
        a.c = b[0];
        a.a = b[1];
        a.b = b[2].transposed(0, 1);  // [K, N], strides (1, K)
        ops::gemm(ops::Backend::cuda, a, s);
      };
      r.add(std::move(c));
    }
  }
}

}  // namespace kestrel::bench
