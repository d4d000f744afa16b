// kda_chunk_prefill benchmarks: prefill of one KDA layer, K = V = 128, bf16 tokens, f32 states,
// chunks of 64. B = 1 at T = 4096, 16384, 65536 for H = 32 (Kimi-Linear) and H = 96 (Kimi-K3),
// plus a varlen mix of 16 sequences and one case with checkpoints (f32 and bf16 pools). Tokens/s = T / time (T is in
// the case name). Compute-bound: FLOPs per (token, head) of the chunk algorithm
// (src/ops/cuda/kda_chunk_prefill.cu): 6 K V + 2 (C + 1) K + 2 (C + 1) V + C^2 / 3, ~133 K.
// Bytes: token inputs read once, outputs written once, each sequence's state read and written
// once (and the checkpoints written).
#include "cases.h"
#include "kda_bench.h"
#include "kestrel/ops/kda_chunk_prefill.h"

namespace kestrel::bench {
namespace {

using kda::kK;
using kda::kV;
constexpr int64_t kChunk = 64;

// FLOPs of one (token, head), see the file comment.
constexpr double flops_per_token_head() {
  return 6.0 * kK * kV + 2.0 * (kChunk + 1) * kK + 2.0 * (kChunk + 1) * kV + kChunk * kChunk / 3.0;
}

void add_case(Registry& r, const std::string& name, const std::vector<int64_t>& lens, int64_t H, bool ckpt,
              DType pool = DType::f32) {
  const int64_t N = static_cast<int64_t>(lens.size());
  std::vector<int32_t> cu(N + 1, 0), cuk(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) {
    cu[n + 1] = cu[n] + static_cast<int32_t>(lens[n]);
    cuk[n + 1] = cuk[n] + static_cast<int32_t>(lens[n] / kChunk);
  }
  const int64_t T = cu[N], slots = N + 1;  // slot 0 is the null slot
  Case c;
  c.name = name;
  c.buffers = kda::token_buffers(T, slots, H, pool);
  c.buffers.push_back({"cu_seqlens", DType::i32, {N + 1}, Fill::ints(0, 1)});
  c.buffers.push_back({"state_indices", DType::i32, {N}, Fill::ints(1, N)});
  if (ckpt) {
    c.buffers.push_back({"checkpoints", pool, {cuk[N], H, kV, kK}});
    c.buffers.push_back({"cu_checkpoints", DType::i32, {N + 1}, Fill::ints(0, 1)});
  }
  c.bytes = kda::token_bytes(T, H) + 2 * tensor_bytes(pool, {N, H, kV, kK}) + tensor_bytes(DType::i32, {2 * N + 1}) +
            (ckpt ? tensor_bytes(pool, {cuk[N], H, kV, kK}) + tensor_bytes(DType::i32, {N + 1}) : 0.0);
  c.flops = flops_per_token_head() * static_cast<double>(T) * H;
  c.tokens = static_cast<double>(T);
  const FixedInts distinct = FixedInts::slots(N), cu_fill(cu), cuk_fill(cuk);
  c.run = [=](const std::vector<TensorView>& b, Stream s) {
    distinct.ensure(b[8]);
    cu_fill.ensure(b[7]);
    ops::KdaChunkPrefillArgs a;
    kda::set_token_args(a, b);
    a.cu_seqlens = b[7];
    a.state_indices = b[8];
    if (ckpt) {
      cuk_fill.ensure(b[10]);
      a.checkpoints = b[9];
      a.cu_checkpoints = b[10];
    }
    ops::kda_chunk_prefill(ops::Backend::cuda, a, s);
  };
  r.add(std::move(c));
}

}  // namespace

void add_kda_chunk_prefill_benches(Registry& r) {
  for (const int64_t H : {32, 96})
    for (const int64_t T : {4096, 16384, 65536})
      add_case(r, str("kda_chunk_prefill/B1-T", T, "-H", H, "-K", kK, "-bf16"), {T}, H, false);
  // A serving-like batch: one long prompt, several medium, short ones, partial chunks.
  const std::vector<int64_t> mix = {6000, 3000, 2000, 1500, 1000, 800, 600, 500, 300, 200, 100, 64, 63, 17, 1, 239};
  const int64_t total = std::accumulate(mix.begin(), mix.end(), int64_t{0});
  add_case(r, str("kda_chunk_prefill/varlen16-T", total, "-H32-K", kK, "-bf16"), mix, 32, false);
  add_case(r, str("kda_chunk_prefill/B1-T16384-H32-K", kK, "-bf16-ckpt"), {16384}, 32, true);
  add_case(r, str("kda_chunk_prefill/B1-T16384-H32-K", kK, "-bf16-ckpt-bf16pool"), {16384}, 32, true, DType::bf16);
}

}  // namespace kestrel::bench
