// mla_rope_quantize_fp8: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/mla_rope_quantize_fp8.h"

#include <utility>

#include "mla_checks.h"

namespace kestrel::ops {

void mla_rope_quantize_fp8_check(const MlaRopeQuantizeFp8Args& a) {
  constexpr const char* op = "mla_rope_quantize_fp8";
  check_rank(op, "q_out", a.q_out, 3, "[T, H, 576]");
  check_rank(op, "cache", a.cache, 3, mla::kCacheDims);
  check_rank(op, "loc", a.loc, 1, "[T]");
  check_rank(op, "q_nope", a.q_nope, 3, "[T, H, 512]");
  check_rank(op, "q_pe", a.q_pe, 3, "[T, H, 64]");
  check_rank(op, "k_nope", a.k_nope, 2, "[T, 512]");
  check_rank(op, "k_pe", a.k_pe, 2, "[T, 64]");
  check_rank(op, "cos_sin", a.cos_sin, 2, "[max_pos, 64]");
  check_rank(op, "positions", a.positions, 1, "[T]");
  mla::check_counter_rank(op, a.invalid_count);
  for (auto [arg, t] : {std::pair{"cache", &a.cache}, {"loc", &a.loc}, {"q_nope", &a.q_nope}, {"q_pe", &a.q_pe},
                        {"k_nope", &a.k_nope}, {"k_pe", &a.k_pe}, {"cos_sin", &a.cos_sin},
                        {"positions", &a.positions}})
    check_same_device(op, arg, *t, "q_out", a.q_out);
  mla::check_counter_device(op, a.invalid_count, a.q_out, "q_out");
  check_dtype(op, "q_out", a.q_out, {DType::fp8_e4m3});
  check_dtype(op, "cache", a.cache, {DType::fp8_e4m3});
  check_dtype(op, "loc", a.loc, {DType::i32, DType::i64});
  check_dtype(op, "q_nope", a.q_nope, {DType::bf16});
  check_dtype(op, "q_pe", a.q_pe, {DType::bf16});
  check_dtype(op, "k_nope", a.k_nope, {DType::bf16});
  check_dtype(op, "k_pe", a.k_pe, {DType::bf16});
  check_dtype(op, "cos_sin", a.cos_sin, {DType::f32});
  check_dtype(op, "positions", a.positions, {DType::i32, DType::i64});
  mla::check_counter_dtype(op, a.invalid_count);
  check_strides(op, "q_out", a.q_out);
  check_no_self_overlap(op, "q_out", a.q_out);
  mla::check_cache_layout(op, a.cache);
  for (auto [arg, t] : {std::pair{"loc", &a.loc}, {"q_nope", &a.q_nope}, {"q_pe", &a.q_pe}, {"k_nope", &a.k_nope},
                        {"k_pe", &a.k_pe}, {"cos_sin", &a.cos_sin}, {"positions", &a.positions}})
    check_strides(op, arg, *t);
  mla::check_counter_layout(op, a.invalid_count);
  mla::check_cache_shape(op, a.cache);
  const int64_t T = a.loc.size(0), H = a.q_nope.size(1);
  check_size(op, "q_nope", a.q_nope, 0, T, "T (loc.size(0))");
  check_size(op, "q_nope", a.q_nope, 2, kMlaNope, "512 = kv_lora_rank");
  check_size(op, "q_pe", a.q_pe, 0, T, "T (loc.size(0))");
  check_size(op, "q_pe", a.q_pe, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_pe", a.q_pe, 2, kMlaPe, "64 = qk_rope");
  check_size(op, "k_nope", a.k_nope, 0, T, "T (loc.size(0))");
  check_size(op, "k_nope", a.k_nope, 1, kMlaNope, "512 = c_kv");
  check_size(op, "k_pe", a.k_pe, 0, T, "T (loc.size(0))");
  check_size(op, "k_pe", a.k_pe, 1, kMlaPe, "64 = k_pe");
  check_size(op, "q_out", a.q_out, 0, T, "T (loc.size(0))");
  check_size(op, "q_out", a.q_out, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_out", a.q_out, 2, kMlaRow, "576 = 512 + 64");
  check_size(op, "cos_sin", a.cos_sin, 1, kMlaPe, "64 = 32 cos + 32 sin");
  check_size(op, "positions", a.positions, 0, T, "T (loc.size(0))");
  mla::check_counter_shape(op, a.invalid_count);
  mla::check_scale(op, "q_scale", a.q_scale, a.q_out.dtype);
  mla::check_scale(op, "kv_scale", a.kv_scale, a.cache.dtype);
}

Support mla_rope_quantize_fp8_supports(Backend b, const MlaRopeQuantizeFp8Args& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::mla_rope_quantize_fp8_supports(a);
}

void mla_rope_quantize_fp8(Backend b, const MlaRopeQuantizeFp8Args& a, Stream stream) {
  mla_rope_quantize_fp8_check(a);
  check_device("mla_rope_quantize_fp8", "q_out", a.q_out, backend_device(b));
  require_support("mla_rope_quantize_fp8", b, mla_rope_quantize_fp8_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_rope_quantize_fp8(a);
  } else {
    cuda::mla_rope_quantize_fp8(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support mla_rope_quantize_fp8_supports(const MlaRopeQuantizeFp8Args&) { return Support::no("built without CUDA"); }
void mla_rope_quantize_fp8(const MlaRopeQuantizeFp8Args&, Stream) {
  throw Error("mla_rope_quantize_fp8: built without CUDA");
}
}  // namespace cuda
#endif

}  // namespace kestrel::ops
