// fp8_quantize benchmarks: bf16 -> fp8 e4m3 per-tensor encode, at the MLA latent-cache row
// width (576 = 512 latent + 64 rope) and on an 8M-element tensor (a weight or a KV block).
#include "cases.h"
#include "kestrel/ops/fp8_quantize.h"

namespace kestrel::bench {

void add_fp8_quantize_benches(Registry& r) {
  const Shape shapes[] = {{1, 576}, {64, 576}, {4096, 576}, {2048, 4096}};
  for (const Shape& shape : shapes) {
    const int64_t T = shape[0], D = shape[1];
    Case c;
    c.name = str("fp8_quantize/T", T, "-D", D, "-bf16");
    c.buffers = {{"out", DType::fp8_e4m3, shape}, {"x", DType::bf16, shape}};
    c.bytes = tensor_bytes(DType::bf16, shape) + tensor_bytes(DType::fp8_e4m3, shape);
    c.flops = static_cast<double>(T) * D;  // one scaling per element
    c.run = [](const std::vector<TensorView>& b, Stream s) {
      ops::Fp8QuantizeArgs a;
      a.out = b[0];
      a.x = b[1];
      a.scale = 1.0f / 256.0f;  // inputs are +-[0.25, 1): encoded values +-[64, 256), inside e4m3
      ops::fp8_quantize(ops::Backend::cuda, a, s);
    };
    r.add(std::move(c));
  }
}

}  // namespace kestrel::bench
