// kda_recurrent, CPU reference: T token steps per sequence with per-position state columns
// (docs/ops/kda.md).
#include <set>
#include <vector>

#include "kda_math.h"
#include "kestrel/ops/kda_recurrent.h"

namespace kestrel::ops::cpu {

void kda_recurrent(const KdaRecurrentArgs& a) {
  constexpr const char* op = "kda_recurrent";
  const kda::TokenInputs in{a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias, a.lower_bound,
                            {a.raw_g.size(1), a.raw_g.size(2), a.out.size(2)}};
  const KdaDims& d = in.d;
  const int64_t N = a.slot_table.size(0), S = a.slot_table.size(1);
  const int64_t T = N == 0 ? 0 : a.mixed_qkv.size(0) / N;
  const int64_t slots = a.state_pool.size(0);
  // Validate every index before touching anything.
  std::vector<int64_t> start(N);
  kda::SlotOwners owners(op, "slot_table");
  for (int64_t n = 0; n < N; ++n) {
    const int64_t acc = kda::index_at(a.num_accepted, n);
    if (acc < 1 || acc > S)
      fail_arg(op, "num_accepted", str("values in [1, ", S, "] (slot_table.size(1))"), str(acc, " at row ", n));
    start[n] = kda::index_at(a.slot_table, n, acc - 1);
    if (start[n] <= 0) continue;  // padding sequence
    kda::check_slot_in_pool(op, "slot_table", start[n], slots, str("[", n, ", ", acc - 1, "]"));
    owners.claim(start[n], n, str("[", n, ", ", acc - 1, "]"));
    std::set<int64_t> written;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t c = kda::index_at(a.slot_table, n, t);
      if (c <= 0) continue;
      kda::check_slot_in_pool(op, "slot_table", c, slots, str("[", n, ", ", t, "]"));
      if (!written.insert(c).second)
        fail_arg(op, "slot_table", "distinct slots in the columns a sequence writes",
                 str("slot ", c, " twice in row ", n));
      owners.claim(c, n, str("[", n, ", ", t, "]"));
    }
  }
  kda::TokenHead x;
  kda::HeadState s;
  std::vector<double> o(d.V);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < d.H; ++h) {
      if (start[n] <= 0) {
        for (int64_t t = 0; t < T; ++t) kda::store_out(a.out, n * T + t, h, d.V, nullptr);
        continue;
      }
      kda::load_state(a.state_pool, start[n], h, d, s);
      for (int64_t t = 0; t < T; ++t) {
        in.load(n * T + t, h, x);
        kda::token_step(s, x, d, o.data(), a.state_pool.dtype);
        kda::store_out(a.out, n * T + t, h, d.V, o.data());
        const int64_t c = kda::index_at(a.slot_table, n, t);
        if (c > 0) kda::store_state(a.state_pool, c, h, d, s);
      }
    }
  }
}

}  // namespace kestrel::ops::cpu
