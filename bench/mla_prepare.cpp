// mla_prepare benchmarks (issue 3): the fp8 MLA prepare step, fused (1 launch) against the
// unfused chain (5 launches), for decode and verify batches T {1 .. 4096} at the head counts of
// Kimi-Linear (H 32) and Kimi-K3-class shapes (H 96). Each case calls the path directly
// (ops::mla_prepare_fp8_fused / ops::mla_prepare_chain_fp8), never the dispatcher, so a row is
// always the path its name says; a fused case whose inputs failed the gate would fail loudly.
//
// Inputs are laid out as the absorbed MLA forward hands them to the prepare (SGLang's
// forward_absorb, which the engine follows), all bf16:
//   q_nope  the absorbed query, the output of the per-head BMM q_nope x W_UK: [H, T, 512]
//           contiguous, seen as [T, H, 512] with strides (512, T * 512, 1);
//   q_pe    a slice of the query projection [T, H, 192] (128 nope + 64 pe per head):
//           [T, H, 64] at column 128, strides (H * 192, 192, 1);
//   k_nope  the kv_a_layernorm output: [T, 512] contiguous;
//   k_pe    a slice of the kv_a projection [T, 576] (512 c_kv + 64 k_pe): [T, 64] at column
//           512, strides (576, 1).
// Every slice starts on a 128-byte line (q_pe rows at 256 of 384 bytes, k_pe at 1024 of 1152),
// so the unread projection columns cost no DRAM traffic. All of it passes the fused gate.
// Cache: fp8 [num_pages, 64, 576], one per rotation set, 1 + ceil(2T / 64) pages; page 0 is
// the sink and is not written. loc: i64 [T] (the step buffers' dtype), T distinct random slots
// of pages 1.., drawn on the first call of each set (the harness's warm-up, before any timing).
// q_out: fp8 [T, H, 576] contiguous. kv_scale = q_scale = 1, as in production.
//
// Bytes, the fewest one call must move (both paths: the chain's temporaries are not counted,
// so its GB/s and %roof show what the extra passes cost):
//   read   q_nope + q_pe   T * H * 576 * 2   (bf16)
//          k_nope + k_pe   T * 576 * 2       (bf16)
//          loc             T * 8             (i64)
//   write  cache rows      T * 576           (fp8, 576 B per token)
//          q_out           T * H * 576       (fp8, 576 B per (token, head))
//   = T * (H + 1) * 1728 + 8 T.  E.g. T 64, H 32: 3.65 MB, 0.86 us at 4233 GB/s.
// FLOPs: 0. The work is a bf16 -> e4m3 conversion per element (a division by the scale and
// an encode); it is not counted, so every case is memory-bound and %roof is the bandwidth
// floor over the time.
//
// Timing: CUDA graph replay at every T (Timing::graph), as the engine runs decode and verify
// in a captured forward; the chain's stream-ordered temporaries (cudaMallocAsync) are legal in
// the capture. Launches per call are measured by the harness (the `launches` column).
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "cases.h"
#include "kestrel/core/device.h"
#include "kestrel/ops/mla_prepare.h"

namespace kestrel::bench {

namespace {

constexpr int64_t kPage = 64;
constexpr int64_t kQProjHead = 192;  // qk_nope_head_dim 128 + qk_rope_head_dim 64

// The harness fills loc with random integers, which may repeat; rows must be distinct (two
// tokens naming one slot would race, and would undercount the writes). The first time a run
// sees a loc buffer it writes T distinct random slots of pages 1 .. num_pages - 1 into it.
// That happens in the harness's warm-up, which runs every rotation set once before any
// timing or graph capture, so the synchronous copy is never timed or captured.
class DistinctLoc {
 public:
  explicit DistinctLoc(int64_t slots) : slots_(slots) {}
  void ensure(const TensorView& loc, Stream stream) const {
    if (!state_->seen.insert(loc.data).second) return;
    const int64_t T = loc.numel();
    std::vector<int64_t> all(static_cast<size_t>(slots_ - kPage));
    std::iota(all.begin(), all.end(), kPage);
    std::shuffle(all.begin(), all.end(), state_->rng);
    all.resize(static_cast<size_t>(T));
    stream_sync(stream);  // the fills run on the device before this copy replaces them
    memcpy_bytes(loc.data, Device::cuda, all.data(), Device::cpu, all.size() * sizeof(int64_t));
  }

 private:
  struct State {
    std::set<const void*> seen;
    std::mt19937_64 rng{0x6d6c615f70726570ull};
  };
  int64_t slots_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

void add_mla_prepare_benches(Registry& r) {
  using ops::kMlaNope, ops::kMlaPe, ops::kMlaRow;
  for (const bool fused : {true, false}) {
    for (const int64_t H : {32, 96}) {
      for (const int64_t T : {1, 4, 16, 64, 256, 1024, 4096}) {
        const int64_t num_pages = 1 + (2 * T + kPage - 1) / kPage;  // page 0: the sink
        Case c;
        c.name = str(fused ? "mla_prepare_fp8_fused" : "mla_prepare_chain_fp8", "/T", T, "-H", H);
        c.buffers = {{"cache", DType::fp8_e4m3, {num_pages, kPage, kMlaRow}},
                     {"loc", DType::i64, {T}, Fill::ints(kPage, num_pages * kPage - 1)},
                     {"kv_a", DType::bf16, {T, kMlaRow}},          // k_pe = columns 512..575
                     {"k_nope", DType::bf16, {T, kMlaNope}},       // kv_a_layernorm output
                     {"q_proj", DType::bf16, {T, H, kQProjHead}},  // q_pe = columns 128..191
                     {"q_nope", DType::bf16, {H, T, kMlaNope}},    // BMM output, head-major
                     {"q_out", DType::fp8_e4m3, {T, H, kMlaRow}}};
        c.bytes = tensor_bytes(DType::bf16, {T, H + 1, kMlaRow}) + tensor_bytes(DType::i64, {T}) +
                  tensor_bytes(DType::fp8_e4m3, {T, H + 1, kMlaRow});
        c.flops = 0;
        c.tokens = static_cast<double>(T);
        c.timing = Timing::graph;
        const DistinctLoc distinct(num_pages * kPage);
        c.run = [distinct, fused](const std::vector<TensorView>& b, Stream s) {
          distinct.ensure(b[1], s);
          ops::MlaPrepareFp8Args a;
          a.cache = b[0];
          a.loc = b[1];
          a.k_pe = b[2].slice(1, kMlaNope, kMlaPe);
          a.k_nope = b[3];
          a.q_pe = b[4].slice(2, kQProjHead - kMlaPe, kMlaPe);
          a.q_nope = b[5].transposed(0, 1);
          a.q_out = b[6];
          a.kv_scale = 1.0f;
          a.q_scale = 1.0f;
          if (fused) ops::mla_prepare_fp8_fused(ops::Backend::cuda, a, s);
          else ops::mla_prepare_chain_fp8(ops::Backend::cuda, a, s);
        };
        r.add(std::move(c));
      }
    }
  }
}

}  // namespace kestrel::bench
