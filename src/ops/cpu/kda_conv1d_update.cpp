// kda_conv1d_update, CPU reference (docs/ops/kda.md): causal depthwise conv1d + SiLU for T new
// tokens per sequence against the conv state, with rows kept for speculative tokens.
#include <vector>

#include "kda_math.h"
#include "kestrel/ops/kda_conv1d_update.h"

namespace kestrel::ops::cpu {

void kda_conv1d_update(const KdaConv1dUpdateArgs& a) {
  constexpr const char* op = "kda_conv1d_update";
  const int64_t N = a.state_indices.size(0), C = a.x.size(1), W = a.weight.size(1);
  const int64_t T = N == 0 ? 0 : a.x.size(0) / N, E = a.conv_state.size(1) - (W - 1);
  // Validate every index before touching anything.
  std::vector<int64_t> slot(N), acc(N, 1);
  kda::SlotOwners owners(op, "state_indices");
  for (int64_t n = 0; n < N; ++n) {
    if (a.num_accepted.defined()) {
      acc[n] = kda::index_at(a.num_accepted, n);
      if (acc[n] < 1 || acc[n] > E + 1)
        fail_arg(op, "num_accepted", str("values in [1, E + 1 = ", E + 1, "] (conv_state rows R - (W - 1) + 1)"),
                 str(acc[n], " at row ", n));
    }
    slot[n] = kda::index_at(a.state_indices, n);
    if (slot[n] <= 0) continue;
    kda::check_slot_in_pool(op, "state_indices", slot[n], a.conv_state.size(0), str("row ", n));
    owners.claim(slot[n], n, str("row ", n));
  }
  const TensorView& st = a.conv_state;
  std::vector<double> seq(W - 1 + T);  // one channel: the W - 1 inputs before the first new token, then T tokens
  for (int64_t n = 0; n < N; ++n) {
    if (slot[n] <= 0) {  // padding: output zero, conv state untouched
      for (int64_t t = n * T; t < n * T + T; ++t)
        for (int64_t c = 0; c < C; ++c) store_f32(a.out, t * a.out.stride(0) + c * a.out.stride(1), 0.0f);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) {
      // The last accepted input of the previous call sits at row W - 2 + (num_accepted - 1).
      for (int64_t i = 0; i < W - 1; ++i) seq[i] = kda::at(st, slot[n], acc[n] - 1 + i, c);
      for (int64_t t = 0; t < T; ++t) seq[W - 1 + t] = kda::at(a.x, n * T + t, c);
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0;
        for (int64_t i = 0; i < W; ++i) sum += static_cast<double>(kda::at(a.weight, c, i)) * seq[t + i];
        store_f32(a.out, (n * T + t) * a.out.stride(0) + c * a.out.stride(1), static_cast<float>(kda::silu(sum)));
      }
      // Row r <- seq[r + 1] for r < W - 2 + T: the window's last W - 2 inputs, then token t at
      // row W - 2 + t. Rows from W - 2 + T on are untouched.
      for (int64_t r = 0; r < W - 2 + T; ++r)
        store_f32(st, slot[n] * st.stride(0) + r * st.stride(1) + c * st.stride(2), static_cast<float>(seq[r + 1]));
    }
  }
}

}  // namespace kestrel::ops::cpu
