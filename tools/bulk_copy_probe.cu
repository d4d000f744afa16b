// How fast can one CTA per SM stream 64-row x 576-byte fp8 cache tiles (B128 8k's 604 MB, pages
// in random order, with repeats as the benchmark's block table has them) into a ring of 4
// shared-memory stages by cp.async.bulk, with no compute? The copy strategies mla_attention v3's
// producer could take, side by side with a device copy measured in the same run. Standalone:
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/bulk_copy_probe tools/bulk_copy_probe.cu
//   /tmp/bulk_copy_probe
//
// What it showed on the H200 (docs/perf.md, twenty-first session): per-row copies (64 a tile)
// stream ~9% slower than a few large ones, and a copy whose destination's address mod 128 differs
// from its source's by 32 or 64 bytes is slower than per-row copies; 16 bytes off costs about half
// of the large copies' gain. The rate depends on the offset, not just on whether there is one
// (twenty-second session, every block at one offset): 0 and 32 bytes off ~107-109% of copy, 16
// ~97%, 112 ~90%, 48 / 64 / 80 / 96 81-87%. The kernel's fast layout
// (src/ops/cuda/mla_attention_keys_m_layout.h) puts its blocks at 0 / 16 / 32 / 112 (~106%).
// The bf16 cases read the same bytes as 32 rows of 1,152 bytes a tile (a bf16 cache's 32 keys):
// per-row copies, and 8-row blocks at phases a conflict-free ldmatrix over two such stages would
// need (8 distinct phases mod 128: every 1,152-byte row lies at one address mod 128).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../src/ops/cuda/sm90_ptx.cuh"  // mbarriers, bulk and tensor copies (the kernels' own wrappers)

#define CK(x)                                                           \
  do {                                                                  \
    cudaError_t e = (x);                                                \
    if (e != cudaSuccess) {                                             \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e));               \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

namespace {

using namespace kestrel::ops::cuda::sm90;

constexpr int kRows = 64, kRowBytes = 576, kStages = 4, kThreads = 160;  // 4 producer warps, 1 consumer
constexpr uint32_t kTileBytes = kRows * kRowBytes, kStageBytes = 41984;

enum Mode : int {
  kPerRow,        // 64 copies of 576 B, rows `arg` bytes apart (592: the layout before; 640 + phase below)
  kPerRowPhase,   // 64 copies, row r at 640 r + (576 r) % 128: the source's address mod 128
  kBlocks,        // copies of `arg` rows (8 or 16) as they lie in the page, blocks `stride` apart
  kBlockTable,    // four 16-row blocks, block b at 9,216 b + 16 x nibble b of `stride` (its own phase);
                  // with `arg` = 1 the odd tiles take nibble 4 + b (a bf16 64-key tile of two such
                  // stages: 8 blocks of 8 rows of 1,152 bytes at 8 phases)
  kPerRowBf16,    // the tile as 32 bf16 rows of 1,152 bytes: 32 copies, rows `arg` bytes apart
  kOneWarpRows,   // 64 per-row copies issued by one warp (the issue rate)
  kTensorRows,    // 5 tensor boxes of 64 rows x 128 B (128-byte swizzle)
  kTensorPairs,   // 9 tensor boxes of 32 row pairs x 128 B (row pairs 1,152 B: 128-aligned)
};

struct Params {
  const uint8_t* src;
  const int* page;  // tile -> page
  int tiles, mode, arg, stride;
};

__global__ void __launch_bounds__(kThreads, 1)
    probe(Params p, const __grid_constant__ CUtensorMap rows_map, const __grid_constant__ CUtensorMap pairs_map) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = base + kStages * kStageBytes, empty = full + 8 * kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full + 8 * s, 4), mbar_init(empty + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // A contiguous share of the tiles per CTA (the kernel's split of one sequence per CTA).
  const int t0 = static_cast<int>(static_cast<int64_t>(p.tiles) * blockIdx.x / gridDim.x);
  const int t1 = static_cast<int>(static_cast<int64_t>(p.tiles) * (blockIdx.x + 1) / gridDim.x);
  if (warp == 4) {  // the consumer: touches a byte of each tile and releases it
    uint32_t acc = 0;
    for (int t = t0, i = 0; t < t1; ++t, ++i) {
      const int st = i % kStages;
      mbar_wait(full + 8 * st, (i / kStages) & 1);
      acc += smem[st * kStageBytes + lane * 4];
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + 8 * st);
    }
    if (acc == 0xdeadbeef) std::printf("%u\n", acc);
    return;
  }
  for (int t = t0, i = 0; t < t1; ++t, ++i) {
    const int st = i % kStages;
    const uint32_t stage = base + st * kStageBytes, bar = full + 8 * st;
    const uint8_t* tile = p.src + static_cast<size_t>(p.page[t]) * kTileBytes;
    mbar_wait(empty + 8 * st, ((i / kStages) & 1) ^ 1);
    switch (p.mode) {
      case kPerRow:
      case kPerRowPhase: {
        if (lane == 0) mbar_arrive_expect_tx(bar, 16 * kRowBytes);
        __syncwarp();
        const int row = 16 * warp + lane;
        const uint32_t at = p.mode == kPerRow ? row * p.arg : row * 640 + (row * kRowBytes) % 128;
        if (lane < 16) bulk_copy_g2s(stage + at, tile + row * kRowBytes, kRowBytes, bar);
        break;
      }
      case kBlocks: {  // p.arg rows a block; 64 / p.arg blocks over the 4 warps
        const int per_warp = 64 / p.arg / 4;
        if (lane == 0) mbar_arrive_expect_tx(bar, 16 * kRowBytes);
        __syncwarp();
        if (lane < per_warp) {
          const int b = per_warp * warp + lane;
          bulk_copy_g2s(stage + b * p.stride, tile + b * p.arg * kRowBytes, p.arg * kRowBytes, bar);
        }
        break;
      }
      case kBlockTable: {  // warp w copies block w
        if (lane == 0) {
          mbar_arrive_expect_tx(bar, 16 * kRowBytes);
          const int nibble = warp + (p.arg == 1 && i % 2 == 1 ? 4 : 0);
          const uint32_t off = 9216u * warp + 16u * ((static_cast<uint32_t>(p.stride) >> (4 * nibble)) & 15u);
          bulk_copy_g2s(stage + off, tile + warp * 16 * kRowBytes, 16 * kRowBytes, bar);
        }
        break;
      }
      case kPerRowBf16: {  // 8 rows of 1,152 bytes a warp
        if (lane == 0) mbar_arrive_expect_tx(bar, 8 * 2 * kRowBytes);
        __syncwarp();
        const int row = 8 * warp + lane;
        if (lane < 8) bulk_copy_g2s(stage + row * p.arg, tile + row * 2 * kRowBytes, 2 * kRowBytes, bar);
        break;
      }
      case kOneWarpRows:
        if (warp == 0) {
          if (lane == 0) mbar_arrive_expect_tx(bar, kTileBytes);
          __syncwarp();
          for (int h = 0; h < 2; ++h) bulk_copy_g2s(stage + (32 * h + lane) * 592, tile + (32 * h + lane) * kRowBytes, kRowBytes, bar);
        } else if (lane == 0) {
          mbar_arrive(bar);
        }
        break;
      case kTensorRows:
      case kTensorPairs:
        if (lane == 0) {
          if (warp == 0) {
            const bool rows = p.mode == kTensorRows;
            mbar_arrive_expect_tx(bar, rows ? 5 * 8192 : 9 * 4096);
            for (int c = 0; c < (rows ? 5 : 9); ++c)
              tma_load_3d(stage + c * (rows ? 8192 : 4096), rows ? &rows_map : &pairs_map, 128 * c, 0, p.page[t], bar);
          } else {
            mbar_arrive(bar);
          }
        }
        break;
    }
  }
}

bool encode(CUtensorMap* map, void* src, uint64_t row_bytes, uint64_t rows, uint64_t pages) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return false;
  const cuuint64_t dims[3] = {row_bytes, rows, pages};
  const cuuint64_t strides[2] = {row_bytes, kTileBytes};
  const cuuint32_t boxd[3] = {128, static_cast<cuuint32_t>(rows), 1}, unit[3] = {1, 1, 1};
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
             map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, src, dims, strides, boxd, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

int main() {
  const int tiles = 128 * 128;  // B = 128 sequences of 8192 keys
  const size_t bytes = static_cast<size_t>(tiles) * kTileBytes;
  uint8_t* src;
  int* pages;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMemset(src, 1, bytes));
  CK(cudaMalloc(&pages, sizeof(int) * tiles));
  std::vector<int> order(tiles);
  uint32_t x = 12345;
  for (int& v : order) v = static_cast<int>(((x = x * 1664525u + 1013904223u) >> 8) % tiles);
  CK(cudaMemcpy(pages, order.data(), sizeof(int) * tiles, cudaMemcpyHostToDevice));
  CUtensorMap rows_map{}, pairs_map{};
  if (!encode(&rows_map, src, kRowBytes, kRows, tiles) || !encode(&pairs_map, src, 2 * kRowBytes, kRows / 2, tiles)) {
    std::printf("cuTensorMapEncodeTiled failed\n");
    return 1;
  }
  uint8_t *ca, *cb;
  const size_t cbytes = size_t{1} << 30;
  CK(cudaMalloc(&ca, cbytes));
  CK(cudaMalloc(&cb, cbytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const auto median_us = [&](auto&& launch) {
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> v;
    for (int i = 0; i < 15; ++i) {
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      v.push_back(ms * 1e3f);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double copy_gbs = 2.0 * cbytes / median_us([&] { CK(cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice)); }) / 1e3;
  std::printf("device copy %.1f GB/s (read + write); %zu MB of tiles, 128 CTAs, %d stages\n", copy_gbs, bytes >> 20, kStages);
  const size_t smem = kStages * kStageBytes + 16 * kStages;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  struct Case {
    const char* what;
    int mode, arg, stride;
  };
  const Case cases[] = {
      {"per-row copies, rows 592 B apart (v3's layout before)", kPerRow, 592, 0},
      {"per-row copies at the source's address mod 128", kPerRowPhase, 0, 0},
      {"per-row copies from one warp", kOneWarpRows, 0, 0},
      {"16-row blocks 9,216 B apart (dense: mod 128 kept)", kBlocks, 16, 9216},
      {"16-row blocks 9,232 B apart (16 off: the fast layout)", kBlocks, 16, 9232},
      {"16-row blocks 9,248 B apart (32 off)", kBlocks, 16, 9248},
      {"16-row blocks 9,280 B apart (64 off)", kBlocks, 16, 9280},
      {"8-row blocks 4,608 B apart (dense)", kBlocks, 8, 4608},
      {"8-row blocks 4,624 B apart (16 off)", kBlocks, 8, 4624},
      // Per-block offsets in 16-byte units (nibble b: block b), each block its own phase.
      {"blocks at +0 / 16 / 32 / 48 B (= 9,232 apart)", kBlockTable, 16, 0x3210},
      {"blocks at +0 / 16 / 48 / 80 B (no 32 / 64 / 96)", kBlockTable, 16, 0x5310},
      {"blocks at +0 / 16 / 48 / 112 B", kBlockTable, 16, 0x7310},
      {"blocks at +0 / 16 / 32 / 112 B", kBlockTable, 16, 0x7210},
      {"blocks all at +16 B", kBlockTable, 16, 0x1111},
      {"blocks all at +32 B", kBlockTable, 16, 0x2222},
      {"blocks all at +48 B", kBlockTable, 16, 0x3333},
      {"blocks all at +64 B", kBlockTable, 16, 0x4444},
      {"blocks all at +80 B", kBlockTable, 16, 0x5555},
      {"blocks all at +96 B", kBlockTable, 16, 0x6666},
      {"blocks all at +112 B", kBlockTable, 16, 0x7777},
      {"blocks all at +0 B (dense)", kBlockTable, 16, 0x0000},
      // A bf16 tile read as the same bytes: 32 rows of 1,152 B (rows all at one address mod 128).
      {"bf16: 8-row blocks at 0/16/32/112, odd tiles 48/64/80/96", kBlockTable, 1, 0x65437210},
      {"bf16: 8-row blocks at 0/16/32/112, odd tiles 0/16/32/112", kBlockTable, 1, 0x72107210},
      {"bf16: per-row copies, rows 1,168 B apart", kPerRowBf16, 1168, 0},
      {"bf16: per-row copies, rows 1,152 B apart (dense)", kPerRowBf16, 1152, 0},
      {"tensor boxes, 64 rows x 128 B", kTensorRows, 0, 0},
      {"tensor boxes, 32 row pairs x 128 B", kTensorPairs, 0, 0},
  };
  for (const Case& c : cases) {
    const Params p{src, pages, tiles, c.mode, c.arg, c.stride};
    const float us = median_us([&] { probe<<<128, kThreads, smem>>>(p, rows_map, pairs_map); });
    CK(cudaGetLastError());
    const double gbs = bytes / us / 1e3;
    std::printf("%-56s %8.2f us %7.1f GB/s %6.1f%% of copy\n", c.what, us, gbs, 100 * gbs / copy_gbs);
  }
  return 0;
}
