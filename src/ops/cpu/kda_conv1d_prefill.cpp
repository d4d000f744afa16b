// kda_conv1d_prefill, CPU reference (docs/ops/kda.md): causal depthwise conv1d + SiLU over
// varlen sequences, continuing from and updating each sequence's conv state.
#include <vector>

#include "kda_math.h"
#include "kestrel/ops/kda_conv1d_prefill.h"

namespace kestrel::ops::cpu {

void kda_conv1d_prefill(const KdaConv1dPrefillArgs& a) {
  constexpr const char* op = "kda_conv1d_prefill";
  const int64_t N = a.state_indices.size(0), C = a.x.size(1), W = a.weight.size(1);
  // Validate every index before touching anything.
  const std::vector<int64_t> cu = kda::read_cu_seqlens(op, a.cu_seqlens, a.x.size(0));
  std::vector<int64_t> slot(N);
  kda::SlotOwners owners(op, "state_indices");
  for (int64_t n = 0; n < N; ++n) {
    slot[n] = kda::index_at(a.state_indices, n);
    if (slot[n] <= 0) continue;
    kda::check_slot_in_pool(op, "state_indices", slot[n], a.conv_state.size(0), str("sequence ", n));
    owners.claim(slot[n], n, str("sequence ", n));
  }
  const TensorView& st = a.conv_state;
  std::vector<double> seq;  // one channel of one sequence: W - 1 history rows, then the tokens
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t0 = cu[n], L = cu[n + 1] - cu[n];
    if (slot[n] <= 0) {  // padding: output zero, conv state untouched
      for (int64_t t = t0; t < t0 + L; ++t)
        for (int64_t c = 0; c < C; ++c) store_f32(a.out, t * a.out.stride(0) + c * a.out.stride(1), 0.0f);
      continue;
    }
    const bool read = !a.has_initial_state.defined() || kda::index_at(a.has_initial_state, n) != 0;
    for (int64_t c = 0; c < C; ++c) {
      seq.assign(W - 1 + L, 0.0);
      if (read)
        for (int64_t i = 0; i < W - 1; ++i) seq[i] = kda::at(st, slot[n], i, c);
      for (int64_t t = 0; t < L; ++t) seq[W - 1 + t] = kda::at(a.x, t0 + t, c);
      for (int64_t t = 0; t < L; ++t) {
        double acc = 0;
        for (int64_t i = 0; i < W; ++i) acc += static_cast<double>(kda::at(a.weight, c, i)) * seq[t + i];
        store_f32(a.out, (t0 + t) * a.out.stride(0) + c * a.out.stride(1), static_cast<float>(kda::silu(acc)));
      }
      // The last W - 1 inputs become rows 0 .. W-2 (oldest first); further rows are untouched.
      for (int64_t i = 0; i < W - 1; ++i)
        store_f32(st, slot[n] * st.stride(0) + i * st.stride(1) + c * st.stride(2), static_cast<float>(seq[L + i]));
    }
  }
}

}  // namespace kestrel::ops::cpu
