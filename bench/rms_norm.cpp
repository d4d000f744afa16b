// rms_norm benchmarks: the decoder's pre-attention / pre-MLP norms at Kimi hidden sizes
// (D = 2304 Kimi-Linear, 7168 Kimi-K2), from one decode token to a long prefill chunk.
#include "cases.h"
#include "kestrel/ops/rms_norm.h"

namespace kestrel::bench {

void add_rms_norm_benches(Registry& r) {
  for (const bool residual : {false, true}) {
    for (const int64_t D : {2304, 7168}) {
      for (const int64_t T : {1, 64, 4096, 16384}) {
        Case c;
        c.name = str("rms_norm/T", T, "-D", D, "-bf16", residual ? "-residual" : "");
        c.buffers = {{"out", DType::bf16, {T, D}}, {"x", DType::bf16, {T, D}}, {"weight", DType::bf16, {D}}};
        if (residual) c.buffers.push_back({"residual", DType::bf16, {T, D}});
        // Read x and weight, write out; with the residual also read it and write h back.
        c.bytes = tensor_bytes(DType::bf16, {(residual ? 4 : 2) * T, D}) + tensor_bytes(DType::bf16, {D});
        // Per element: square + accumulate, times rstd, times weight (and the residual add).
        c.flops = static_cast<double>(T) * D * (residual ? 5 : 4);
        c.run = [residual](const std::vector<TensorView>& b, Stream s) {
          ops::RmsNormArgs a;
          a.out = b[0];
          a.x = b[1];
          a.weight = b[2];
          if (residual) a.residual = b[3];
          ops::rms_norm(ops::Backend::cuda, a, s);
        };
        r.add(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::bench
