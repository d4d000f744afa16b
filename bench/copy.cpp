// copy benchmarks: device-to-device copies of the sizes an op streams, as a reference measured in
// the same run. The ceiling (bench/ceilings.cu) is one 1 GiB copy; a short op pays a ramp and a
// tail that a long copy amortises, and a copy of the op's own size says how much of its gap to
// the ceiling that is. Sizes: half the bytes of kda_packed_decode at B = 1, 8, 32, 128, 256 and
// H = 32 (the state is read and written once: a copy of half the bytes moves as many), so
// `copy/S64M-f32` (64 MiB) sits beside `kda_packed_decode/B32-H32`. Bytes = read + write, as the ceiling.
#include <cuda_runtime_api.h>

#include "cases.h"
#include "kestrel/core/cuda_check.h"

namespace kestrel::bench {

void add_copy_benches(Registry& r) {
  constexpr int64_t kStateBytes = 2 * 32 * 128 * 128 * 4;  // read + write of one H32 f32 state
  for (const int64_t B : {1, 8, 32, 128, 256}) {
    const int64_t n = B * kStateBytes / 2;  // bytes copied
    Case c;
    c.name = str("copy/S", n >> 20, "M-f32");
    c.buffers = {{"dst", DType::f32, {n / 4}}, {"src", DType::f32, {n / 4}}};
    c.bytes = 2.0 * static_cast<double>(n);
    c.run = [n](const std::vector<TensorView>& b, Stream s) {
      KESTREL_CUDA_CHECK(cudaMemcpyAsync(b[0].data, b[1].data, static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                                         static_cast<cudaStream_t>(s)));
    };
    r.add(std::move(c));
  }
}

}  // namespace kestrel::bench
