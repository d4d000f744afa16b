// embedding, CUDA: one block per output row t. Thread 0 of the block validates ids[t] and, for
// an id outside [0, V), adds 1 to *invalid_count; every thread copies its share of the row.
// A gather changes no value, so elements move as raw bits in units U: 16 bytes (uint4) when
// both rows are contiguous, 16-byte aligned and a whole number of units long, else one
// element (uint16_t or uint32_t) with any strides. Bit-identical to the CPU reference.
#include <cstdint>

#include "common.cuh"
#include "kestrel/ops/embedding.h"

namespace kestrel::ops::cuda {

namespace {

struct EmbeddingParams {
  void* out;            // [T, D]
  const void* table;    // [V, D]
  const void* ids;      // [T] i32 or i64
  int* invalid_count;   // [1] or nullptr
  int64_t out_s0, out_s1, table_s0, table_s1;  // in units U
  int64_t ids_s0;                              // in elements of ids
  int64_t V;
  int units;  // units U per row
  bool ids_i64;
};

// 128 threads: a 2304-wide bf16 row is 288 16-byte units, ~2 per thread.
constexpr int kThreads = 128;

template <typename U>
__global__ void __launch_bounds__(kThreads) embedding_kernel(EmbeddingParams p) {
  const int64_t t = blockIdx.x;
  const int64_t id = p.ids_i64 ? static_cast<const int64_t*>(p.ids)[t * p.ids_s0]
                               : static_cast<int64_t>(static_cast<const int32_t*>(p.ids)[t * p.ids_s0]);
  const bool valid = id >= 0 && id < p.V;
  if (!valid && threadIdx.x == 0 && p.invalid_count) atomicAdd(p.invalid_count, 1);
  U* out = static_cast<U*>(p.out) + t * p.out_s0;
  if (valid) {
    const U* src = static_cast<const U*>(p.table) + id * p.table_s0;
    for (int u = threadIdx.x; u < p.units; u += kThreads) out[u * p.out_s1] = src[u * p.table_s1];
  } else {
    for (int u = threadIdx.x; u < p.units; u += kThreads) out[u * p.out_s1] = U{};
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

Support embedding_supports(const EmbeddingArgs& a) {
  if (a.ids.size(0) > INT32_MAX) return Support::no("T must fit in int32 (grid size)");
  return Support::yes();
}

void embedding(const EmbeddingArgs& a, Stream stream) {
  const int64_t T = a.ids.size(0), D = a.table.size(1);
  const int64_t es = static_cast<int64_t>(dtype_size(a.out.dtype));
  if (T == 0) return;
  EmbeddingParams p{};
  p.out = a.out.data;
  p.table = a.table.data;
  p.ids = a.ids.data;
  p.invalid_count = a.invalid_count.defined() ? static_cast<int*>(a.invalid_count.data) : nullptr;
  p.ids_s0 = a.ids.stride(0);
  p.ids_i64 = a.ids.dtype == DType::i64;
  p.V = a.table.size(0);
  const bool vec = a.out.stride(1) == 1 && a.table.stride(1) == 1 && (D * es) % 16 == 0 &&
                   (a.out.stride(0) * es) % 16 == 0 && (a.table.stride(0) * es) % 16 == 0 &&
                   aligned16(a.out.data) && aligned16(a.table.data);
  const int64_t per_unit = vec ? 16 / es : 1;  // elements per unit
  p.units = checked_int(D / per_unit, "embedding", "D");
  p.out_s0 = a.out.stride(0) / per_unit;
  p.out_s1 = vec ? 1 : a.out.stride(1);
  p.table_s0 = a.table.stride(0) / per_unit;
  p.table_s1 = vec ? 1 : a.table.stride(1);
  const int blocks = static_cast<int>(T);
  auto launch = [&]<typename U>() {
    embedding_kernel<U><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    KESTREL_LAUNCHED("embedding_kernel");
  };
  if (vec) {
    launch.template operator()<uint4>();
  } else if (es == 2) {
    launch.template operator()<uint16_t>();
  } else {
    launch.template operator()<uint32_t>();
  }
}

}  // namespace kestrel::ops::cuda
