// Pieces shared by the CPU references of the MLA cache and prepare ops: slot resolution, the
// invalid-location rule, and the one row conversion [nope (512) | pe (64)] -> bf16 or fp8.
#pragma once

#include <cstdint>
#include <cstring>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops::cpu::mla {

// Element offset of slot s's row in the cache, or -1 when s is outside [0, num_pages * page_size).
inline int64_t slot_offset(const TensorView& cache, int64_t s) {
  const int64_t page_size = cache.size(1), slots = cache.size(0) * page_size;
  if (s < 0 || s >= slots) return -1;
  return (s / page_size) * cache.stride(0) + (s % page_size) * cache.stride(1);
}

// A bad index is the caller's error. With no counter the reference stops before writing
// anything and names it; with a counter it is counted and its row skipped (what every
// backend does). Returns the number of bad entries.
inline int64_t scan_indices(const char* op, const char* arg, const TensorView& idx, int64_t lo, int64_t hi,
                            bool counted) {
  int64_t bad = 0;
  for (int64_t t = 0; t < idx.size(0); ++t) {
    const int64_t v = load_index(idx, t * idx.stride(0));
    if (v >= lo && v < hi) continue;
    if (!counted)
      fail_arg(op, arg, str("values in [", lo, ", ", hi, ") (or pass invalid_count to skip and count such rows)"),
               str(arg, "[", t, "] = ", v));
    ++bad;
  }
  return bad;
}

// invalid_count += n, as an i32 that wraps like CUDA's atomicAdd.
inline void add_to_counter(const TensorView& counter, int64_t n) {
  if (!counter.defined() || n == 0) return;
  uint32_t c;
  std::memcpy(&c, counter.data, 4);
  c += static_cast<uint32_t>(n);
  std::memcpy(counter.data, &c, 4);
}

// dst[dst_off + j * dst_s] for j in [0, n) <- src[src_off + j * src_s] (bf16): a raw copy for a
// bf16 destination, enc(x / scale) for fp8.
inline void convert_run(const TensorView& dst, int64_t dst_off, int64_t dst_s, const TensorView& src,
                        int64_t src_off, int64_t src_s, int64_t n, float scale) {
  uint8_t* d = static_cast<uint8_t*>(dst.data);
  const uint8_t* s = static_cast<const uint8_t*>(src.data);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* from = s + (src_off + j * src_s) * 2;
    if (dst.dtype == DType::bf16) {
      std::memcpy(d + (dst_off + j * dst_s) * 2, from, 2);
    } else {
      uint16_t h;
      std::memcpy(&h, from, 2);
      d[dst_off + j * dst_s] = f32_to_fp8_e4m3(bf16_to_f32(h) / scale);
    }
  }
}

}  // namespace kestrel::ops::cpu::mla
