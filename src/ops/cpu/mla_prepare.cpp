// mla_prepare_fp8_fused and mla_prepare_chain_fp8, CPU references (docs/ops/mla_prepare_fp8.md).
// The fused form is the two ops it fuses; the chain is the production fallback step by step
// (concat q, cast q, cast k_nope, cast k_pe, scatter) through temporaries, so that "fused ==
// chain" is a comparison of two different computations, not of one with itself.
#include <vector>

#include "kestrel/ops/mla_build_q.h"
#include "kestrel/ops/mla_prepare.h"
#include "mla_common.h"

namespace kestrel::ops::cpu {

void mla_prepare_fp8_fused(const MlaPrepareFp8Args& a) {
  MlaWriteKvArgs kv;
  kv.cache = a.cache;
  kv.loc = a.loc;
  kv.k_nope = a.k_nope;
  kv.k_pe = a.k_pe;
  kv.invalid_count = a.invalid_count;
  kv.scale = a.kv_scale;
  MlaBuildQArgs q;
  q.q_out = a.q_out;
  q.q_nope = a.q_nope;
  q.q_pe = a.q_pe;
  q.scale = a.q_scale;
  // loc is scanned first so that a bad loc with no counter throws before anything is written.
  mla::scan_indices("mla_prepare_fp8_fused", "loc", a.loc, 0, a.cache.size(0) * a.cache.size(1),
                    a.invalid_count.defined());
  mla_write_kv(kv);
  mla_build_q(q);
}

void mla_prepare_chain_fp8(const MlaPrepareFp8Args& a) {
  const int64_t T = a.loc.size(0), H = a.q_nope.size(1);
  const int64_t bad = mla::scan_indices("mla_prepare_chain_fp8", "loc", a.loc, 0, a.cache.size(0) * a.cache.size(1),
                                        a.invalid_count.defined());
  // 1. concat: q_cat [T, H, 576] bf16 = [q_nope | q_pe]
  std::vector<uint16_t> q_cat(static_cast<size_t>(T * H * kMlaRow));
  const TensorView qc = TensorView::contiguous(q_cat.data(), Device::cpu, DType::bf16, {T, H, kMlaRow});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = (t * H + h) * kMlaRow;
      mla::convert_run(qc, row, 1, a.q_nope, t * a.q_nope.stride(0) + h * a.q_nope.stride(1), a.q_nope.stride(2),
                       kMlaNope, 1.0f);
      mla::convert_run(qc, row + kMlaNope, 1, a.q_pe, t * a.q_pe.stride(0) + h * a.q_pe.stride(1), a.q_pe.stride(2),
                       kMlaPe, 1.0f);
    }
  // 2. cast q_cat -> q_out
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      mla::convert_run(a.q_out, t * a.q_out.stride(0) + h * a.q_out.stride(1), a.q_out.stride(2), qc,
                       (t * H + h) * kMlaRow, 1, kMlaRow, a.q_scale);
  // 3., 4. cast k_nope and k_pe into fp8 temporaries
  std::vector<uint8_t> k_nope8(static_cast<size_t>(T * kMlaNope)), k_pe8(static_cast<size_t>(T * kMlaPe));
  const TensorView kn = TensorView::contiguous(k_nope8.data(), Device::cpu, DType::fp8_e4m3, {T, kMlaNope});
  const TensorView kp = TensorView::contiguous(k_pe8.data(), Device::cpu, DType::fp8_e4m3, {T, kMlaPe});
  for (int64_t t = 0; t < T; ++t) {
    mla::convert_run(kn, t * kMlaNope, 1, a.k_nope, t * a.k_nope.stride(0), a.k_nope.stride(1), kMlaNope, a.kv_scale);
    mla::convert_run(kp, t * kMlaPe, 1, a.k_pe, t * a.k_pe.stride(0), a.k_pe.stride(1), kMlaPe, a.kv_scale);
  }
  // 5. scatter the rows into the cache
  uint8_t* cache = static_cast<uint8_t*>(a.cache.data);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = mla::slot_offset(a.cache, load_index(a.loc, t * a.loc.stride(0)));
    if (row < 0) continue;
    std::memcpy(cache + row, k_nope8.data() + t * kMlaNope, kMlaNope);
    std::memcpy(cache + row + kMlaNope, k_pe8.data() + t * kMlaPe, kMlaPe);
  }
  mla::add_to_counter(a.invalid_count, bad);
}

}  // namespace kestrel::ops::cpu
