// Named-barrier hand-over probes: warpgroups hand shared-memory values to each other with
// bar.arrive / bar.sync pairs, as the mla_attention v2 seesaw hands over P, the row maximum and
// the rescale factor (sm90::named_bar_arrive / named_bar_sync). Each kernel's order holds by
// the PTX barrier semantics and its values are checked. Their other purpose is the sanitizers:
// on the H200 (CUDA 13.0) compute-sanitizer racecheck reports hazards on the seesaw-shape probe
// in every run (also with every bar.arrive made a bar.sync) and on the two-warpgroup one in
// some runs, and synccheck reports none; so racecheck's reports on
// the v2 kernel's hand-over are the tool's, and gpu-check runs those cases apart
// (docs/verification.md). The hand-over protocol itself is checked by the host model
// (MlaAttentionSm90Protocol). Needs a CUDA GPU.
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

// The seesaw's shape (mla_attention_sm90.cu, consumer()): 384 threads, warpgroup 0 (the
// producer there) idle, warpgroups 1 and 2 (consumers c = 0, 1) hand values over per pair k:
// c0 syncs its own barrier 6 (128), writes box[0], arrives on 1; c1 syncs on 1, reads box[0],
// syncs its barrier 7, writes box[1], arrives on 2 (pairs but the last); c0 syncs on 2 and
// reads box[1]. At the end both write their row sums, sync on 5 (256) and read the other's.
// out[k][c][i]: box value read in pair k by thread i of consumer c; out[kPairs][c][i]: sums.
constexpr int kPairs = 5;
__global__ void __launch_bounds__(384) seesaw_shape_kernel(int* out) {
  __shared__ int box[2][128], sums[2][128];
  const int t = static_cast<int>(threadIdx.x), wg = t / 128, i = t % 128, j = (i + 37) % 128;
  if (wg == 0) return;
  const int c = wg - 1;
  for (int k = 0; k < kPairs; ++k) {
    const bool has_b = k + 1 < kPairs;
    if (c == 0) {
      sm::named_bar_sync(6, 128);
      box[0][i] = 1000 * k + i;
      sm::named_bar_arrive(1, 256);
      if (has_b) {
        sm::named_bar_sync(2, 256);
        out[(k * 2 + 0) * 128 + i] = box[1][j];
      }
    } else {
      sm::named_bar_sync(1, 256);
      out[(k * 2 + 1) * 128 + i] = box[0][j];
      if (has_b) {
        sm::named_bar_sync(7, 128);
        box[1][i] = 1000 * k + 500 + i;
        sm::named_bar_arrive(2, 256);
      }
    }
  }
  sums[c][i] = 7 * i + c;
  sm::named_bar_sync(5, 256);
  out[(kPairs * 2 + c) * 128 + i] = sums[c ^ 1][j];
}

TEST(NamedBarrierProbeCuda, SeesawShapeHandOverIsOrdered) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const int n = (kPairs * 2 + 2) * 128;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0xff, n * sizeof(int)), cudaSuccess);  // poison
  seesaw_shape_kernel<<<4, 384>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (int i = 0; i < 128; ++i) {
    const int j = (i + 37) % 128;
    for (int k = 0; k < kPairs; ++k) {
      if (k + 1 < kPairs) ASSERT_EQ(h[(k * 2 + 0) * 128 + i], 1000 * k + 500 + j) << "pair " << k << " consumer 0";
      ASSERT_EQ(h[(k * 2 + 1) * 128 + i], 1000 * k + j) << "pair " << k << " consumer 1";
    }
    for (int c = 0; c < 2; ++c) ASSERT_EQ(h[(kPairs * 2 + c) * 128 + i], 7 * j + (c ^ 1)) << "sums, consumer " << c;
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
