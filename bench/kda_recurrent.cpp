// kda_recurrent benchmarks: target verify of 1 + num_spec tokens per sequence on a Kimi-K3 KDA
// layer (H = 96, K = V = 128; K3 has MTP, Kimi-Linear has none), every draft position's state
// written to its own column. Memory-bound: the state is read once and written T times.
#include "cases.h"
#include "kda_bench.h"
#include "kestrel/ops/kda_recurrent.h"

namespace kestrel::bench {

void add_kda_recurrent_benches(Registry& r) {
  using kda::kK;
  using kda::kV;
  constexpr int64_t H = 96;
  for (const int64_t N : {32, 128}) {
    for (const int64_t spec : {1, 2, 3, 4}) {
      const int64_t S = 1 + spec, T = S, rows = N * T;
      Case c;
      c.name = str("kda_recurrent/N", N, "-T", T, "-H", H, "-K", kK, "-bf16");
      const int64_t slots = N * S + 1;  // slot 0 is the null slot
      c.buffers = kda::token_buffers(rows, slots, H, DType::f32);
      c.buffers.push_back({"slot_table", DType::i32, {N, S}, Fill::ints(1, N * S)});
      c.buffers.push_back({"num_accepted", DType::i32, {N}, Fill::ints(1, S)});
      // The state read once and written to T columns; the token inputs; table and num_accepted read.
      c.bytes = (1 + T) * tensor_bytes(DType::f32, {N, H, kV, kK}) + kda::token_bytes(rows, H) +
                tensor_bytes(DType::i32, {N, S + 1});
      c.flops = 7.0 * rows * H * kK * kV;
      c.tokens = static_cast<double>(rows);
      const FixedInts distinct = FixedInts::slots(N * S);
      c.run = [distinct](const std::vector<TensorView>& b, Stream s) {
        distinct.ensure(b[7]);
        ops::KdaRecurrentArgs a;
        kda::set_token_args(a, b);
        a.slot_table = b[7];
        a.num_accepted = b[8];
        ops::kda_recurrent(ops::Backend::cuda, a, s);
      };
      r.add(std::move(c));
    }
  }
}

}  // namespace kestrel::bench
