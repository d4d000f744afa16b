// One registration function per op, each in bench/<op>.cpp; main() calls them in this order.
#pragma once

#include "harness.h"
#include "kestrel/core/error.h"  // str()

namespace kestrel::bench {

void add_rms_norm_benches(Registry& r);
void add_rms_norm_gated_benches(Registry& r);
void add_silu_and_mul_benches(Registry& r);
void add_embedding_benches(Registry& r);
void add_fp8_quantize_benches(Registry& r);
void add_fp8_dequantize_benches(Registry& r);
void add_gemm_benches(Registry& r);
void add_kda_benches(Registry& r);  // bench/kda_benches.cpp: every KDA op
void add_mla_attention_benches(Registry& r);
void add_mla_prepare_benches(Registry& r);
void add_copy_benches(Registry& r);  // bench/copy.cpp: same-size copies, the reference for short ops

inline void add_all_benches(Registry& r) {
  add_rms_norm_benches(r);
  add_rms_norm_gated_benches(r);
  add_silu_and_mul_benches(r);
  add_embedding_benches(r);
  add_fp8_quantize_benches(r);
  add_fp8_dequantize_benches(r);
  add_gemm_benches(r);
  add_kda_benches(r);
  add_mla_attention_benches(r);
  add_mla_prepare_benches(r);
  add_copy_benches(r);
}

}  // namespace kestrel::bench
