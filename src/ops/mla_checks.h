// Argument checks shared by the MLA cache and prepare ops (mla_write_kv, mla_build_q,
// mla_prepare_*_fp8, mla_rope_quantize_fp8). Each op's check calls these in the fixed order
// rank, device, dtype, layout, shapes (DESIGN.md rule 8).
#pragma once

#include <cmath>

#include "kestrel/ops/checks.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops::mla {

inline constexpr const char* kCacheDims = "[num_pages, page_size, 576]";

// Layout: a cache row is 576 contiguous elements; pages and rows may be strided but must not
// overlap.
inline void check_cache_layout(const char* op, const TensorView& cache) {
  check_strides(op, "cache", cache);
  if (cache.stride(2) != 1)
    fail_arg(op, "cache", "rows of 576 contiguous elements (stride(2) == 1)", str("strides ", cache.strides_str()));
  check_no_self_overlap(op, "cache", cache);
}

inline void check_cache_shape(const char* op, const TensorView& cache) {
  check_size(op, "cache", cache, 2, kMlaRow, "576 = c_kv 512 + k_pe 64");
  if (cache.size(1) < 1) fail_arg(op, "cache", "page_size >= 1", str("shape ", cache.shape_str()));
}

// A per-tensor scale: positive and finite; exactly 1 for a bf16 destination (a plain copy).
inline void check_scale(const char* op, const char* arg, float scale, DType dst) {
  check_positive_finite(op, arg, scale);
  if (dst == DType::bf16 && scale != 1.0f)
    fail_arg(op, arg, "1 for a bf16 destination (bf16 rows are plain copies)", str(scale));
}

inline void check_counter_rank(const char* op, const TensorView& c) {
  if (c.defined()) check_rank(op, "invalid_count", c, 1, "[1]");
}
inline void check_counter_device(const char* op, const TensorView& c, const TensorView& ref, const char* ref_arg) {
  if (c.defined()) check_same_device(op, "invalid_count", c, ref_arg, ref);
}
inline void check_counter_dtype(const char* op, const TensorView& c) {
  if (c.defined()) check_dtype(op, "invalid_count", c, {DType::i32});
}
inline void check_counter_layout(const char* op, const TensorView& c) {
  if (c.defined()) check_strides(op, "invalid_count", c);
}
inline void check_counter_shape(const char* op, const TensorView& c) {
  if (c.defined()) check_size(op, "invalid_count", c, 0, 1, "one counter");
}

}  // namespace kestrel::ops::mla
