// mla_write_kv, CPU reference: the definition of the op (docs/ops/mla_write_kv.md).
#include "kestrel/ops/mla_write_kv.h"

#include "mla_common.h"

namespace kestrel::ops::cpu {

void mla_write_kv(const MlaWriteKvArgs& a) {
  const int64_t T = a.loc.size(0), slots = a.cache.size(0) * a.cache.size(1);
  const int64_t bad = mla::scan_indices("mla_write_kv", "loc", a.loc, 0, slots, a.invalid_count.defined());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = mla::slot_offset(a.cache, load_index(a.loc, t * a.loc.stride(0)));
    if (row < 0) continue;
    mla::convert_run(a.cache, row, 1, a.k_nope, t * a.k_nope.stride(0), a.k_nope.stride(1), kMlaNope, a.scale);
    mla::convert_run(a.cache, row + kMlaNope, 1, a.k_pe, t * a.k_pe.stride(0), a.k_pe.stride(1), kMlaPe, a.scale);
  }
  mla::add_to_counter(a.invalid_count, bad);
}

}  // namespace kestrel::ops::cpu
