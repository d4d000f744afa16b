// kda_packed_decode benchmarks: one decode step of a KDA layer, B sequences x H heads of
// K = V = 128 (H = 32 Kimi-Linear, 96 Kimi-K3), bf16 tokens, f32 state pool, and a bf16 state
// pool (half the bytes) at the same shapes. Memory-bound: the state is read and written once
// (64 KB f32 or 32 KB bf16 each way per head), so the target is the copy ceiling.
#include "cases.h"
#include "kda_bench.h"
#include "kestrel/ops/kda_packed_decode.h"

namespace kestrel::bench {

void add_kda_packed_decode_benches(Registry& r) {
  using kda::kK;
  using kda::kV;
  for (const DType pool : {DType::f32, DType::bf16}) {
    for (const int64_t H : {32, 96}) {
      for (const int64_t B : {1, 8, 32, 128, 256}) {
        Case c;
        c.name = str("kda_packed_decode/B", B, "-H", H, "-K", kK, "-bf16", pool == DType::bf16 ? "-bf16pool" : "");
        const int64_t slots = B + 1;  // slot 0 is the null slot
        c.buffers = kda::token_buffers(B, slots, H, pool);
        c.buffers.push_back({"state_indices", DType::i32, {B}, Fill::ints(1, B)});
        // The state read and written once; the token inputs; the indices read.
        c.bytes = 2 * tensor_bytes(pool, {B, H, kV, kK}) + kda::token_bytes(B, H) + tensor_bytes(DType::i32, {B});
        // Per state element: decay, the k dot (mul + add), the update (fma), the q dot (mul + add).
        c.flops = 7.0 * B * H * kK * kV;
        c.tokens = static_cast<double>(B);
        const FixedInts distinct = FixedInts::slots(B);
        c.run = [distinct](const std::vector<TensorView>& b, Stream s) {
          distinct.ensure(b[7]);
          ops::KdaPackedDecodeArgs a;
          kda::set_token_args(a, b);
          a.state_indices = b[7];
          ops::kda_packed_decode(ops::Backend::cuda, a, s);
        };
        r.add(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::bench
