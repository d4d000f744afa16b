// Named-barrier hand-over probe: one warpgroup writes shared memory and signals with bar.arrive,
// the other waits with bar.sync and reads, then the roles swap; rounds repeat on the same
// buffer, so each write of round k + 1 must also wait for the other's reads of round k (the
// other's arrival after its reads). The mla_attention v2 seesaw hands P, the row maximum and
// the rescale factor over exactly so (sm90::named_bar_arrive / named_bar_sync). The check of
// the values is the test; its purpose is racecheck: the pattern is ordered by the PTX barrier
// semantics, and whether compute-sanitizer racecheck reports it tells a tool limitation
// (hazards here too) from a real race in the kernel (none here). Needs a CUDA GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../src/ops/cuda/sm90_ptx.cuh"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"

namespace kestrel {
namespace {

namespace sm = ops::cuda::sm90;

constexpr int kRounds = 8;

// out[r][t]: what thread t read in round r (the other warpgroup's value for this round).
__global__ void __launch_bounds__(256) handover_kernel(int* out) {
  __shared__ int box[2][128];
  const int t = static_cast<int>(threadIdx.x), wg = t / 128, i = t % 128;
  for (int r = 0; r < kRounds; ++r) {
    // Round r: warpgroup w = r % 2 writes box[w], arrives on barrier 1 + w; the other syncs there
    // and reads. Before writing again (round r + 2) the writer syncs on the other's barrier of
    // round r + 1, which the other arrives on only after its reads of round r.
    const int w = r % 2;
    if (wg == w) {
      box[w][i] = 1000 * r + t;
      sm::named_bar_arrive(1 + w, 256);
    } else {
      sm::named_bar_sync(1 + w, 256);
      out[r * 256 + t] = box[w][(i + 37) % 128];
    }
  }
}

TEST(NamedBarrierProbeCuda, ArriveSyncHandOverIsOrdered) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, kRounds * 256 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0xff, kRounds * 256 * sizeof(int)), cudaSuccess);  // poison
  handover_kernel<<<4, 256>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(kRounds * 256);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (int r = 0; r < kRounds; ++r)
    for (int t = 0; t < 256; ++t) {
      const int w = r % 2;
      if (t / 128 == w) continue;  // the writer reads nothing this round
      const int want = 1000 * r + w * 128 + (t % 128 + 37) % 128;
      ASSERT_EQ(h[r * 256 + t], want) << "round " << r << " thread " << t;
    }
}

}  // namespace
}  // namespace kestrel
