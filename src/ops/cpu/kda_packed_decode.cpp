// kda_packed_decode, CPU reference: one token step per sequence (docs/ops/kda.md).
#include <vector>

#include "kda_math.h"
#include "kestrel/ops/kda_packed_decode.h"

namespace kestrel::ops::cpu {

void kda_packed_decode(const KdaPackedDecodeArgs& a) {
  constexpr const char* op = "kda_packed_decode";
  const kda::TokenInputs in{a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias, a.lower_bound,
                            {a.raw_g.size(1), a.raw_g.size(2), a.out.size(2)}};
  const KdaDims& d = in.d;
  const int64_t B = a.state_indices.size(0);
  // Validate every index before touching anything.
  std::vector<int64_t> slot(B);
  kda::SlotOwners owners(op, "state_indices");
  for (int64_t b = 0; b < B; ++b) {
    slot[b] = kda::index_at(a.state_indices, b);
    if (slot[b] <= 0) continue;
    kda::check_slot_in_pool(op, "state_indices", slot[b], a.state_pool.size(0), str("row ", b));
    owners.claim(slot[b], b, str("row ", b));
  }
  kda::TokenHead x;
  kda::HeadState s;
  std::vector<double> o(d.V);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      if (slot[b] <= 0) {  // padding: output zero, state untouched
        kda::store_out(a.out, b, h, d.V, nullptr);
        continue;
      }
      in.load(b, h, x);
      kda::load_state(a.state_pool, slot[b], h, d, s);
      kda::token_step(s, x, d, o.data(), a.state_pool.dtype);
      kda::store_state(a.state_pool, slot[b], h, d, s);
      kda::store_out(a.out, b, h, d.V, o.data());
    }
  }
}

}  // namespace kestrel::ops::cpu
