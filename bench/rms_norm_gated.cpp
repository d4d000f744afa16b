// rms_norm_gated benchmarks: the per-head output norm after KDA, H = 32 heads of D = 128.
#include "cases.h"
#include "kestrel/ops/rms_norm_gated.h"

namespace kestrel::bench {

void add_rms_norm_gated_benches(Registry& r) {
  constexpr int64_t H = 32, D = 128;
  for (const int64_t T : {1, 64, 4096}) {
    Case c;
    c.name = str("rms_norm_gated/T", T, "-H", H, "-D", D, "-bf16");
    c.buffers = {{"out", DType::bf16, {T, H, D}},
                 {"x", DType::bf16, {T, H, D}},
                 {"gate", DType::bf16, {T, H, D}},
                 {"weight", DType::bf16, {D}}};
    // Read x and gate, write out, read the weight.
    c.bytes = 3 * tensor_bytes(DType::bf16, {T, H, D}) + tensor_bytes(DType::bf16, {D});
    // Per element: square + accumulate, times rstd, times weight, the sigmoid (exp, add,
    // divide), times the gate.
    c.flops = 8.0 * T * H * D;
    c.run = [](const std::vector<TensorView>& b, Stream s) {
      ops::RmsNormGatedArgs a;
      a.out = b[0];
      a.x = b[1];
      a.gate = b[2];
      a.weight = b[3];
      ops::rms_norm_gated(ops::Backend::cuda, a, s);
    };
    r.add(std::move(c));
  }
}

}  // namespace kestrel::bench
