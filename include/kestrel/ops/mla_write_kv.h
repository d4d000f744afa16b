// mla_write_kv: row loc[t] of the paged MLA cache <- [k_nope[t] | k_pe[t]], quantised for an
// fp8 cache. Only the T rows at loc change. Spec: docs/ops/mla_write_kv.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

// The MLA cache row: [c_kv (512) | k_pe (64)] (DESIGN.md 4.2).
inline constexpr int64_t kMlaNope = 512;
inline constexpr int64_t kMlaPe = 64;
inline constexpr int64_t kMlaRow = kMlaNope + kMlaPe;

struct MlaWriteKvArgs {
  TensorView cache;          // [num_pages, page_size, 576] bf16 | fp8_e4m3; rows contiguous
                             // (stride(2) == 1), any page and row strides, rows must not overlap
  TensorView loc;            // [T] i32 | i64, any stride: slot s = row s % page_size of page
                             // s / page_size; s outside [0, num_pages * page_size) is skipped
  TensorView k_nope;         // [T, 512] bf16, any strides
  TensorView k_pe;           // [T, 64]  bf16, any strides
  TensorView invalid_count;  // optional [1] i32: += the number of loc outside the cache
  float scale = 1.0f;        // fp8 cache: stored = enc(x / scale), > 0 and finite;
                             // bf16 cache: must be 1 (a plain copy)
};

void mla_write_kv_check(const MlaWriteKvArgs& a);
Support mla_write_kv_supports(Backend b, const MlaWriteKvArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void mla_write_kv(Backend b, const MlaWriteKvArgs& a, Stream stream = nullptr);

namespace cpu {
void mla_write_kv(const MlaWriteKvArgs& a);
}
namespace cuda {
Support mla_write_kv_supports(const MlaWriteKvArgs& a);
void mla_write_kv(const MlaWriteKvArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
