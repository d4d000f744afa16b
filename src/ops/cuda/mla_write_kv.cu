// mla_write_kv, CUDA: one warp per token row t. Lane 0 of the warp resolves loc[t]; a slot
// outside the cache skips the row (counted in invalid_count when given) so nothing is ever
// written out of bounds. fp8 rows with 16-byte aligned, contiguous sources and destination
// rows take the vector row (mla_rows.cuh); everything else takes the strided row. Both are
// bit-identical to the CPU reference.
#include "kestrel/ops/mla_write_kv.h"
#include "mla_rows.cuh"

namespace kestrel::ops::cuda {

namespace {

struct MlaWriteKvParams {
  void* cache;             // [num_pages, page_size, 576], row stride 1
  const void* loc;         // [T] i32 | i64
  const uint16_t* k_nope;  // [T, 512] bf16
  const uint16_t* k_pe;    // [T, 64] bf16
  int* invalid_count;      // [1] or nullptr
  int64_t cache_s0, cache_s1, loc_s0, k_nope_s0, k_nope_s1, k_pe_s0, k_pe_s1;
  int64_t page_size, slots, T;
  mla::DivScale scale;
  bool loc_i64;
};

// 4 warps per block: decode batches have few rows, and small blocks spread them over SMs.
constexpr int kWarps = 4;

template <bool kFp8, bool kVec>
__global__ void __launch_bounds__(kWarps * 32) mla_write_kv_kernel(MlaWriteKvParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= p.T) return;
  const int64_t s = mla::load_index(p.loc, p.loc_i64, t * p.loc_s0);
  const int64_t row = mla::slot_offset_counted(s, p.page_size, p.slots, p.cache_s0, p.cache_s1, p.invalid_count, lane);
  if (row < 0) return;
  const uint16_t* nope = p.k_nope + t * p.k_nope_s0;
  const uint16_t* pe = p.k_pe + t * p.k_pe_s0;
  if constexpr (kVec) {
    mla::warp_row_fp8_vec(static_cast<uint8_t*>(p.cache) + row, nope, pe, p.scale, lane);
  } else {
    void* out = static_cast<char*>(p.cache) + row * (kFp8 ? 1 : 2);
    mla::warp_row_strided<kFp8>(out, 1, nope, p.k_nope_s1, pe, p.k_pe_s1, p.scale, lane);
  }
}

}  // namespace

Support mla_write_kv_supports(const MlaWriteKvArgs& a) {
  if ((a.loc.size(0) + kWarps - 1) / kWarps > INT32_MAX) return Support::no("T too large for the grid");
  return Support::yes();
}

void mla_write_kv(const MlaWriteKvArgs& a, Stream stream) {
  MlaWriteKvParams p{};
  p.cache = a.cache.data;
  p.loc = a.loc.data;
  p.k_nope = static_cast<const uint16_t*>(a.k_nope.data);
  p.k_pe = static_cast<const uint16_t*>(a.k_pe.data);
  p.invalid_count = a.invalid_count.defined() ? static_cast<int*>(a.invalid_count.data) : nullptr;
  p.cache_s0 = a.cache.stride(0); p.cache_s1 = a.cache.stride(1);
  p.loc_s0 = a.loc.stride(0);
  p.k_nope_s0 = a.k_nope.stride(0); p.k_nope_s1 = a.k_nope.stride(1);
  p.k_pe_s0 = a.k_pe.stride(0); p.k_pe_s1 = a.k_pe.stride(1);
  p.page_size = a.cache.size(1);
  p.slots = a.cache.size(0) * a.cache.size(1);
  p.T = a.loc.size(0);
  p.scale = mla::div_scale(a.scale);
  p.loc_i64 = a.loc.dtype == DType::i64;
  if (p.T == 0) return;
  const int blocks = static_cast<int>((p.T + kWarps - 1) / kWarps);
  const cudaStream_t s = as_cuda(stream);
  if (a.cache.dtype == DType::bf16) {
    mla_write_kv_kernel<false, false><<<blocks, kWarps * 32, 0, s>>>(p);
  } else if (mla::vector_ready(a.cache, 16) && mla::vector_ready(a.k_nope, 16) && mla::vector_ready(a.k_pe, 4)) {
    mla_write_kv_kernel<true, true><<<blocks, kWarps * 32, 0, s>>>(p);
  } else {
    mla_write_kv_kernel<true, false><<<blocks, kWarps * 32, 0, s>>>(p);
  }
  KESTREL_LAUNCHED("mla_write_kv_kernel");
}

}  // namespace kestrel::ops::cuda
