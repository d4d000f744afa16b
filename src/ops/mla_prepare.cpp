// mla_prepare_fp8_fused / mla_prepare_chain_fp8: the shared argument check, the fused kernel's
// gate, the dispatch, and the one fused-or-chain decision.
#include "kestrel/ops/mla_prepare.h"

#include <cstdint>

#include "mla_checks.h"

namespace kestrel::ops {

void mla_prepare_fp8_check(const MlaPrepareFp8Args& a) {
  constexpr const char* op = "mla_prepare_fp8";
  check_rank(op, "cache", a.cache, 3, mla::kCacheDims);
  check_rank(op, "loc", a.loc, 1, "[T]");
  check_rank(op, "k_nope", a.k_nope, 2, "[T, 512]");
  check_rank(op, "k_pe", a.k_pe, 2, "[T, 64]");
  check_rank(op, "q_out", a.q_out, 3, "[T, H, 576]");
  check_rank(op, "q_nope", a.q_nope, 3, "[T, H, 512]");
  check_rank(op, "q_pe", a.q_pe, 3, "[T, H, 64]");
  mla::check_counter_rank(op, a.invalid_count);
  check_same_device(op, "loc", a.loc, "cache", a.cache);
  check_same_device(op, "k_nope", a.k_nope, "cache", a.cache);
  check_same_device(op, "k_pe", a.k_pe, "cache", a.cache);
  check_same_device(op, "q_out", a.q_out, "cache", a.cache);
  check_same_device(op, "q_nope", a.q_nope, "cache", a.cache);
  check_same_device(op, "q_pe", a.q_pe, "cache", a.cache);
  mla::check_counter_device(op, a.invalid_count, a.cache, "cache");
  check_dtype(op, "cache", a.cache, {DType::fp8_e4m3});
  check_dtype(op, "loc", a.loc, {DType::i32, DType::i64});
  check_dtype(op, "k_nope", a.k_nope, {DType::bf16});
  check_dtype(op, "k_pe", a.k_pe, {DType::bf16});
  check_dtype(op, "q_out", a.q_out, {DType::fp8_e4m3});
  check_dtype(op, "q_nope", a.q_nope, {DType::bf16});
  check_dtype(op, "q_pe", a.q_pe, {DType::bf16});
  mla::check_counter_dtype(op, a.invalid_count);
  mla::check_cache_layout(op, a.cache);
  check_strides(op, "loc", a.loc);
  check_strides(op, "k_nope", a.k_nope);
  check_strides(op, "k_pe", a.k_pe);
  check_strides(op, "q_out", a.q_out);
  check_strides(op, "q_nope", a.q_nope);
  check_strides(op, "q_pe", a.q_pe);
  check_no_self_overlap(op, "q_out", a.q_out);
  mla::check_counter_layout(op, a.invalid_count);
  mla::check_cache_shape(op, a.cache);
  const int64_t T = a.loc.size(0), H = a.q_nope.size(1);
  check_size(op, "k_nope", a.k_nope, 0, T, "T (loc.size(0))");
  check_size(op, "k_nope", a.k_nope, 1, kMlaNope, "512 = c_kv");
  check_size(op, "k_pe", a.k_pe, 0, T, "T (loc.size(0))");
  check_size(op, "k_pe", a.k_pe, 1, kMlaPe, "64 = k_pe");
  check_size(op, "q_nope", a.q_nope, 0, T, "T (loc.size(0))");
  check_size(op, "q_nope", a.q_nope, 2, kMlaNope, "512 = kv_lora_rank");
  check_size(op, "q_pe", a.q_pe, 0, T, "T (loc.size(0))");
  check_size(op, "q_pe", a.q_pe, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_pe", a.q_pe, 2, kMlaPe, "64 = qk_rope");
  check_size(op, "q_out", a.q_out, 0, T, "T (loc.size(0))");
  check_size(op, "q_out", a.q_out, 1, H, "H (q_nope.size(1))");
  check_size(op, "q_out", a.q_out, 2, kMlaRow, "576 = 512 + 64");
  mla::check_counter_shape(op, a.invalid_count);
  mla::check_scale(op, "kv_scale", a.kv_scale, a.cache.dtype);
  mla::check_scale(op, "q_scale", a.q_scale, a.q_out.dtype);
}

namespace {

// Byte-level rules of the fused kernel for one tensor: unit inner stride, base aligned to
// `align` bytes, and every outer stride (of a dim longer than 1) a multiple of `align` bytes.
Support vector_ready(const char* arg, const TensorView& t, int64_t align) {
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  if (t.stride(-1) != 1)
    return Support::no(str(arg, ": inner stride must be 1 for vector loads/stores, got strides ", t.strides_str()));
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align) != 0)
    return Support::no(str(arg, ": base address must be ", align, "-byte aligned, got ",
                           reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align), " bytes past a boundary"));
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.size(d) > 1 && (t.stride(d) * es) % align != 0)
      return Support::no(str(arg, ": stride(", d, ") must be a multiple of ", align, " bytes, got strides ",
                             t.strides_str(), " (", dtype_name(t.dtype), ")"));
  return Support::yes();
}

}  // namespace

Support mla_prepare_fp8_fused_gate(const MlaPrepareFp8Args& a) {
  if (a.cache.dtype != DType::fp8_e4m3 || a.q_out.dtype != DType::fp8_e4m3)
    return Support::no("the fused kernel writes fp8 only: cache and q_out must be fp8_e4m3");
  for (const TensorView* t : {&a.k_nope, &a.k_pe, &a.q_nope, &a.q_pe})
    if (t->dtype != DType::bf16) return Support::no("the fused kernel reads bf16 k_nope, k_pe, q_nope, q_pe only");
  if (a.cache.size(2) != kMlaRow || a.k_nope.size(1) != kMlaNope || a.k_pe.size(1) != kMlaPe ||
      a.q_nope.size(2) != kMlaNope || a.q_pe.size(2) != kMlaPe)
    return Support::no("the fused kernel is built for kv_lora_rank 512 and rope dims 64");
  if (!a.loc.defined() || (a.loc.dtype != DType::i32 && a.loc.dtype != DType::i64) || a.loc.device != a.cache.device)
    return Support::no("loc: no resolvable write location (needs an i32/i64 tensor on the cache's device)");
  const struct { const char* arg; const TensorView* t; int64_t align; } rules[] = {
      {"cache", &a.cache, 16},   {"q_out", &a.q_out, 16}, {"k_nope", &a.k_nope, 16},
      {"q_nope", &a.q_nope, 16}, {"k_pe", &a.k_pe, 4},    {"q_pe", &a.q_pe, 4},
  };
  for (const auto& r : rules)
    if (Support s = vector_ready(r.arg, *r.t, r.align); !s) return s;
  const int64_t T = a.loc.size(0), H = a.q_nope.size(1);
  if (T > INT32_MAX || H > INT32_MAX || T * (H + 1) > int64_t{INT32_MAX} * 4)
    return Support::no(str("T = ", T, ", H = ", H, ": too many rows for the grid"));
  return Support::yes();
}

Support mla_prepare_fp8_fused_supports(Backend b, const MlaPrepareFp8Args& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : mla_prepare_fp8_fused_gate(a);
}

void mla_prepare_fp8_fused(Backend b, const MlaPrepareFp8Args& a, Stream stream) {
  mla_prepare_fp8_check(a);
  check_device("mla_prepare_fp8_fused", "cache", a.cache, backend_device(b));
  require_support("mla_prepare_fp8_fused", b, mla_prepare_fp8_fused_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_prepare_fp8_fused(a);
  } else {
    cuda::mla_prepare_fp8_fused(a, stream);
  }
}

Support mla_prepare_chain_fp8_supports(Backend b, const MlaPrepareFp8Args& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::mla_prepare_chain_fp8_supports(a);
}

void mla_prepare_chain_fp8(Backend b, const MlaPrepareFp8Args& a, Stream stream) {
  mla_prepare_fp8_check(a);
  check_device("mla_prepare_chain_fp8", "cache", a.cache, backend_device(b));
  require_support("mla_prepare_chain_fp8", b, mla_prepare_chain_fp8_supports(b, a));
  if (b == Backend::cpu) {
    cpu::mla_prepare_chain_fp8(a);
  } else {
    cuda::mla_prepare_chain_fp8(a, stream);
  }
}

const char* mla_prepare_path_name(MlaPreparePath p) { return p == MlaPreparePath::fused ? "fused" : "chain"; }

MlaPreparePath mla_prepare_fp8(Backend b, const MlaPrepareFp8Args& a, Stream stream) {
  mla_prepare_fp8_check(a);
  if (mla_prepare_fp8_fused_supports(b, a)) {
    mla_prepare_fp8_fused(b, a, stream);
    return MlaPreparePath::fused;
  }
  mla_prepare_chain_fp8(b, a, stream);
  return MlaPreparePath::chain;
}

#if !KESTREL_WITH_CUDA
namespace cuda {
void mla_prepare_fp8_fused(const MlaPrepareFp8Args&, Stream) { throw Error("mla_prepare_fp8_fused: built without CUDA"); }
Support mla_prepare_chain_fp8_supports(const MlaPrepareFp8Args&) { return Support::no("built without CUDA"); }
void mla_prepare_chain_fp8(const MlaPrepareFp8Args&, Stream) { throw Error("mla_prepare_chain_fp8: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
