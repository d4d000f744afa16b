// embedding benchmarks: the token-embedding gather over the Kimi vocabulary (V = 163840) at
// D = 2304 (Kimi-Linear) and 7168 (Kimi-K2). The table is shared by all rotation sets (it is
// far larger than the L2, and one call reads only T rows); the ids rotate, so each
// repetition gathers other rows.
#include "cases.h"
#include "kestrel/ops/embedding.h"

namespace kestrel::bench {

namespace {
constexpr int64_t kVocab = 163840;
}

void add_embedding_benches(Registry& r) {
  for (const int64_t D : {2304, 7168}) {
    for (const int64_t T : {1, 64, 4096}) {
      Case c;
      c.name = str("embedding/T", T, "-V", kVocab, "-D", D, "-bf16");
      c.buffers = {{"out", DType::bf16, {T, D}},
                   {"table", DType::bf16, {kVocab, D}, Fill::signed_mag(), /*shared=*/true},
                   {"ids", DType::i32, {T}, Fill::ints(0, kVocab - 1)}};
      // Read T ids and T table rows, write T rows.
      c.bytes = tensor_bytes(DType::i32, {T}) + 2 * tensor_bytes(DType::bf16, {T, D});
      c.flops = 0;
      c.run = [](const std::vector<TensorView>& b, Stream s) {
        ops::EmbeddingArgs a;
        a.out = b[0];
        a.table = b[1];
        a.ids = b[2];
        ops::embedding(ops::Backend::cuda, a, s);
      };
      r.add(std::move(c));
    }
  }
}

}  // namespace kestrel::bench
