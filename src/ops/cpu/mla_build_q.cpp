// mla_build_q, CPU reference: the definition of the op (docs/ops/mla_build_q.md).
#include "kestrel/ops/mla_build_q.h"

#include "mla_common.h"

namespace kestrel::ops::cpu {

void mla_build_q(const MlaBuildQArgs& a) {
  const int64_t T = a.q_out.size(0), H = a.q_out.size(1);
  const TensorView &o = a.q_out, &n = a.q_nope, &p = a.q_pe;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * o.stride(0) + h * o.stride(1);
      mla::convert_run(o, row, o.stride(2), n, t * n.stride(0) + h * n.stride(1), n.stride(2), kMlaNope, a.scale);
      mla::convert_run(o, row + kMlaNope * o.stride(2), o.stride(2), p, t * p.stride(0) + h * p.stride(1),
                       p.stride(2), kMlaPe, a.scale);
    }
  }
}

}  // namespace kestrel::ops::cpu
