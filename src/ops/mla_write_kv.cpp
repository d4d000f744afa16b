// mla_write_kv: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/mla_write_kv.h"

#include "mla_checks.h"

namespace kestrel::ops {

void mla_write_kv_check(const MlaWriteKvArgs& a) {
  constexpr const char* op = "mla_write_kv";
  check_rank(op, "cache", a.cache, 3, mla::kCacheDims);
  check_rank(op, "loc", a.loc, 1, "[T]");
  check_rank(op, "k_nope", a.k_nope, 2, "[T, 512]");
  check_rank(op, "k_pe", a.k_pe, 2, "[T, 64]");
  mla::check_counter_rank(op, a.invalid_count);
  check_same_device(op, "loc", a.loc, "cache", a.cache);
  check_same_device(op, "k_nope", a.k_nope, "cache", a.cache);
  check_same_device(op, "k_pe", a.k_pe, "cache", a.cache);
  mla::check_counter_device(op, a.invalid_count, a.cache, "cache");
  check_dtype(op, "cache", a.cache, {DType::bf16, DType::fp8_e4m3});
  check_dtype(op, "loc", a.loc, {DType::i32, DType::i64});
  check_dtype(op, "k_nope", a.k_nope, {DType::bf16});
  check_dtype(op, "k_pe", a.k_pe, {DType::bf16});
  mla::check_counter_dtype(op, a.invalid_count);
  mla::check_cache_layout(op, a.cache);
  check_strides(op, "loc", a.loc);
  check_strides(op, "k_nope", a.k_nope);
  check_strides(op, "k_pe", a.k_pe);
  mla::check_counter_layout(op, a.invalid_count);
  mla::check_cache_shape(op, a.cache);
  const int64_t T = a.loc.size(0);
  check_size(op, "k_nope", a.k_nope, 0, T, "T (loc.size(0))");
  check_size(op, "k_nope", a.k_nope, 1, kMlaNope, "512 = c_kv");
  check_size(op, "k_pe", a.k_pe, 0, T, "T (loc.size(0))");
  check_size(op, "k_pe", a.k_pe, 1, kMlaPe, "64 = k_pe");
  mla::check_counter_shape(op, a.invalid_count);
  mla::check_scale(op, "scale", a.scale, a.cache.dtype);
}

Support mla_write_kv_supports(Backend b, const MlaWriteKvArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::mla_write_kv_supports(a);
}

void mla_write_kv(Backend b, const MlaWriteKvArgs& a, Stream stream) {
  mla_write_kv_check(a);
  check_device("mla_write_kv", "cache", a.cache, backend_device(b));
  require_support("mla_write_kv", b, mla_write_kv_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_write_kv(a);
  } else {
    cuda::mla_write_kv(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support mla_write_kv_supports(const MlaWriteKvArgs&) { return Support::no("built without CUDA"); }
void mla_write_kv(const MlaWriteKvArgs&, Stream) { throw Error("mla_write_kv: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
