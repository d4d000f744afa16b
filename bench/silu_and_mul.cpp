// silu_and_mul benchmarks: the SwiGLU activation between the up/gate and down projections,
// F = 1024 (a Kimi-Linear routed expert) and 9216 (its dense MLP).
#include "cases.h"
#include "kestrel/ops/silu_and_mul.h"

namespace kestrel::bench {

void add_silu_and_mul_benches(Registry& r) {
  for (const int64_t F : {1024, 9216}) {
    for (const int64_t T : {1, 64, 4096}) {
      Case c;
      c.name = str("silu_and_mul/T", T, "-F", F, "-bf16");
      c.buffers = {{"out", DType::bf16, {T, F}}, {"x", DType::bf16, {T, 2 * F}}};
      c.bytes = tensor_bytes(DType::bf16, {T, 2 * F}) + tensor_bytes(DType::bf16, {T, F});
      // Per output: exp, add, divide (the sigmoid), times the gate, times the up half.
      c.flops = 5.0 * T * F;
      c.run = [](const std::vector<TensorView>& b, Stream s) {
        ops::SiluAndMulArgs a;
        a.out = b[0];
        a.x = b[1];
        ops::silu_and_mul(ops::Backend::cuda, a, s);
      };
      r.add(std::move(c));
    }
  }
}

}  // namespace kestrel::bench
