// fp8_dequantize benchmarks: fp8 e4m3 -> bf16 per-tensor decode, at the MLA latent-cache row
// width (576) and on an 8M-element tensor.
#include "cases.h"
#include "kestrel/ops/fp8_dequantize.h"

namespace kestrel::bench {

void add_fp8_dequantize_benches(Registry& r) {
  const Shape shapes[] = {{1, 576}, {64, 576}, {4096, 576}, {2048, 4096}};
  for (const Shape& shape : shapes) {
    const int64_t T = shape[0], D = shape[1];
    Case c;
    c.name = str("fp8_dequantize/T", T, "-D", D, "-bf16");
    c.buffers = {{"out", DType::bf16, shape}, {"x", DType::fp8_e4m3, shape}};
    c.bytes = tensor_bytes(DType::fp8_e4m3, shape) + tensor_bytes(DType::bf16, shape);
    c.flops = static_cast<double>(T) * D;  // one scaling per element
    c.run = [](const std::vector<TensorView>& b, Stream s) {
      ops::Fp8DequantizeArgs a;
      a.out = b[0];
      a.x = b[1];
      a.scale = 0.5f;
      ops::fp8_dequantize(ops::Backend::cuda, a, s);
    };
    r.add(std::move(c));
  }
}

}  // namespace kestrel::bench
