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
      c.buffers = {{"out", DType::bf16, {rows, H, kV}},
                   {"state_pool", DType::f32, {slots, H, kV, kK}, Fill::signed_mag(0.05, 0.5)},
                   {"mixed_qkv", DType::bf16, {rows, 2 * H * kK + H * kV}},
                   {"raw_g", DType::bf16, {rows, H, kK}},
                   {"raw_beta", DType::bf16, {rows, H}},
                   {"A_log", DType::f32, {H}},
                   {"dt_bias", DType::f32, {H * kK}},
                   {"slot_table", DType::i32, {N, S}, Fill::ints(1, N * S)},
                   {"num_accepted", DType::i32, {N}, Fill::ints(1, S)}};
      // The state read once and written to T columns; token inputs read, out written.
      c.bytes = (1 + T) * tensor_bytes(DType::f32, {N, H, kV, kK}) +
                tensor_bytes(DType::bf16, {rows, 2 * H * kK + H * kV}) + tensor_bytes(DType::bf16, {rows, H, kK}) +
                tensor_bytes(DType::bf16, {rows, H}) + tensor_bytes(DType::i32, {N, S + 1}) +
                tensor_bytes(DType::bf16, {rows, H, kV}) + tensor_bytes(DType::f32, {H + H * kK});
      c.flops = 7.0 * rows * H * kK * kV;
      const kda::DistinctSlots distinct;
      c.run = [distinct](const std::vector<TensorView>& b, Stream s) {
        distinct.ensure(b[7], s);
        ops::KdaRecurrentArgs a;
        a.out = b[0];
        a.state_pool = b[1];
        a.mixed_qkv = b[2];
        a.raw_g = b[3];
        a.raw_beta = b[4];
        a.A_log = b[5];
        a.dt_bias = b[6];
        a.slot_table = b[7];
        a.num_accepted = b[8];
        ops::kda_recurrent(ops::Backend::cuda, a, s);
      };
      r.add(std::move(c));
    }
  }
}

}  // namespace kestrel::bench
