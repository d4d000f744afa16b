// kda_conv1d_prefill: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/kda_conv1d_prefill.h"

#include "kestrel/ops/checks.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops {

void kda_conv1d_prefill_check(const KdaConv1dPrefillArgs& a) {
  constexpr const char* op = "kda_conv1d_prefill";
  check_rank(op, "cu_seqlens", a.cu_seqlens, 1, "[N + 1]");
  check_rank(op, "state_indices", a.state_indices, 1, "[N] (one slot per sequence)");
  if (a.has_initial_state.defined()) check_rank(op, "has_initial_state", a.has_initial_state, 1, "[N]");
  kda_detail::check_conv_inputs(op, a.out, a.conv_state, a.x, a.weight);
  kda_detail::check_on_device_of(op, "cu_seqlens", a.cu_seqlens, a.out);
  kda_detail::check_on_device_of(op, "state_indices", a.state_indices, a.out);
  if (a.has_initial_state.defined())
    kda_detail::check_on_device_of(op, "has_initial_state", a.has_initial_state, a.out);
  const int64_t N = a.state_indices.size(0);
  kda_detail::check_index_vector(op, "cu_seqlens", a.cu_seqlens, N + 1, "N + 1 (state_indices.size(0) + 1)");
  kda_detail::check_index_vector(op, "state_indices", a.state_indices, N, "N");
  if (a.has_initial_state.defined())
    kda_detail::check_index_vector(op, "has_initial_state", a.has_initial_state, N, "N (state_indices.size(0))");
}

Support kda_conv1d_prefill_supports(Backend b, const KdaConv1dPrefillArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::kda_conv1d_prefill_supports(a);
}

void kda_conv1d_prefill(Backend b, const KdaConv1dPrefillArgs& a, Stream stream) {
  kda_conv1d_prefill_check(a);
  check_device("kda_conv1d_prefill", "out", a.out, backend_device(b));
  require_support("kda_conv1d_prefill", b, kda_conv1d_prefill_supports(b, a));
  if (b == Backend::cpu) {
    cpu::kda_conv1d_prefill(a);
  } else {
    cuda::kda_conv1d_prefill(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support kda_conv1d_prefill_supports(const KdaConv1dPrefillArgs&) { return Support::no("built without CUDA"); }
void kda_conv1d_prefill(const KdaConv1dPrefillArgs&, Stream) { throw Error("kda_conv1d_prefill: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
