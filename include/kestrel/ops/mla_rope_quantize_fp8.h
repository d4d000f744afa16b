// mla_rope_quantize_fp8: RoPE (fp32) on the 64 pe dims of q and k at positions[t], then the
// fp8 prepare: q_out[t, h] = enc([q_nope | rot(q_pe)] / q_scale) and cache row loc[t] =
// enc([k_nope | rot(k_pe)] / kv_scale). For rotated (DeepSeek-style) models; Kimi is NoPE and
// uses mla_prepare_fp8. Spec: docs/ops/mla_rope_quantize_fp8.md (defines the exact fp32 order).
#pragma once

#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops {

struct MlaRopeQuantizeFp8Args {
  TensorView q_out;          // [T, H, 576] fp8_e4m3, any strides, no self-overlap
  TensorView cache;          // [num_pages, page_size, 576] fp8_e4m3, rows contiguous
  TensorView loc;            // [T] i32 | i64, any stride (as mla_write_kv)
  TensorView q_nope;         // [T, H, 512] bf16, any strides
  TensorView q_pe;           // [T, H, 64]  bf16, any strides
  TensorView k_nope;         // [T, 512] bf16, any strides
  TensorView k_pe;           // [T, 64]  bf16, any strides
  TensorView cos_sin;        // [max_pos, 64] f32, any strides: [cos (32) | sin (32)] per position
  TensorView positions;      // [T] i32 | i64, any stride
  TensorView invalid_count;  // optional [1] i32: += bad loc + bad positions
  bool is_neox = true;       // true: rotate halves (i, i + 32); false: pairs (2i, 2i + 1)
  float q_scale = 1.0f;
  float kv_scale = 1.0f;
};

void mla_rope_quantize_fp8_check(const MlaRopeQuantizeFp8Args& a);
Support mla_rope_quantize_fp8_supports(Backend b, const MlaRopeQuantizeFp8Args& a);
void mla_rope_quantize_fp8(Backend b, const MlaRopeQuantizeFp8Args& a, Stream stream = nullptr);

namespace cpu {
void mla_rope_quantize_fp8(const MlaRopeQuantizeFp8Args& a);
}
namespace cuda {
Support mla_rope_quantize_fp8_supports(const MlaRopeQuantizeFp8Args& a);
void mla_rope_quantize_fp8(const MlaRopeQuantizeFp8Args& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
