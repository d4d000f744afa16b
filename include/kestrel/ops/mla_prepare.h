// The MLA prepare step for an fp8 cache: mla_write_kv + mla_build_q, two ways with one result.
//   mla_prepare_fp8_fused  one launch (KV rows and (token, head) Q rows in one kernel), taken
//                          only when mla_prepare_fp8_fused_gate holds;
//   mla_prepare_chain_fp8  the unfused production chain, 5 launches on CUDA (concat q, cast q,
//                          cast k_nope, cast k_pe, scatter): the complete fallback.
// Both produce the same bytes (DESIGN.md rule 3). Spec: docs/ops/mla_prepare_fp8.md.
#pragma once

#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops {

struct MlaPrepareFp8Args {
  TensorView cache;          // [num_pages, page_size, 576] fp8_e4m3, rows contiguous
  TensorView loc;            // [T] i32 | i64, any stride (as mla_write_kv)
  TensorView k_nope;         // [T, 512] bf16, any strides
  TensorView k_pe;           // [T, 64]  bf16, any strides
  TensorView q_out;          // [T, H, 576] fp8_e4m3, any strides, no self-overlap
  TensorView q_nope;         // [T, H, 512] bf16, any strides
  TensorView q_pe;           // [T, H, 64]  bf16, any strides
  TensorView invalid_count;  // optional [1] i32: += the number of loc outside the cache
  float kv_scale = 1.0f;     // cache row = enc(k / kv_scale)
  float q_scale = 1.0f;      // q_out     = enc(q / q_scale)
};

void mla_prepare_fp8_check(const MlaPrepareFp8Args& a);

// What the fused CUDA kernel needs beyond the check: dtypes (fp8 cache and q_out, bf16
// inputs), dims 512/64, unit inner strides, 16-byte aligned bases and outer strides for the
// cache rows, q_out, k_nope and q_nope, 4-byte for k_pe and q_pe, a resolvable loc (a
// device tensor of i32/i64), and sizes that fit the grid. "no" names the first failing rule.
// It does not ask whether a GPU is present (mla_prepare_fp8_fused_supports does).
Support mla_prepare_fp8_fused_gate(const MlaPrepareFp8Args& a);

Support mla_prepare_fp8_fused_supports(Backend b, const MlaPrepareFp8Args& a);
void mla_prepare_fp8_fused(Backend b, const MlaPrepareFp8Args& a, Stream stream = nullptr);

Support mla_prepare_chain_fp8_supports(Backend b, const MlaPrepareFp8Args& a);
void mla_prepare_chain_fp8(Backend b, const MlaPrepareFp8Args& a, Stream stream = nullptr);

// The one decision (DESIGN.md rule 3): the fused kernel when the backend takes it, else the
// whole chain. Returns the path that ran, so callers and tests can prove it.
enum class MlaPreparePath : uint8_t { fused, chain };
const char* mla_prepare_path_name(MlaPreparePath p);
MlaPreparePath mla_prepare_fp8(Backend b, const MlaPrepareFp8Args& a, Stream stream = nullptr);

namespace cpu {
void mla_prepare_fp8_fused(const MlaPrepareFp8Args& a);
void mla_prepare_chain_fp8(const MlaPrepareFp8Args& a);
}  // namespace cpu
namespace cuda {
void mla_prepare_fp8_fused(const MlaPrepareFp8Args& a, Stream stream);
Support mla_prepare_chain_fp8_supports(const MlaPrepareFp8Args& a);
void mla_prepare_chain_fp8(const MlaPrepareFp8Args& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
