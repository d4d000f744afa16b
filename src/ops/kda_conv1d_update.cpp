// kda_conv1d_update: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/kda_conv1d_update.h"

#include "kestrel/ops/checks.h"
#include "kestrel/ops/kda_common.h"

namespace kestrel::ops {

void kda_conv1d_update_check(const KdaConv1dUpdateArgs& a) {
  constexpr const char* op = "kda_conv1d_update";
  check_rank(op, "state_indices", a.state_indices, 1, "[N] (one slot per sequence; pass a column of a slot table)");
  if (a.num_accepted.defined()) check_rank(op, "num_accepted", a.num_accepted, 1, "[N]");
  const KdaConvDims d = kda_detail::check_conv_inputs(op, a.out, a.conv_state, a.x, a.weight);
  kda_detail::check_on_device_of(op, "state_indices", a.state_indices, a.out);
  if (a.num_accepted.defined()) kda_detail::check_on_device_of(op, "num_accepted", a.num_accepted, a.out);
  const int64_t N = a.state_indices.size(0), rows = a.x.size(0);
  kda_detail::check_index_vector(op, "state_indices", a.state_indices, N, "N");
  if (a.num_accepted.defined())
    kda_detail::check_index_vector(op, "num_accepted", a.num_accepted, N, "N (state_indices.size(0))");
  if (N == 0 ? rows != 0 : rows % N != 0)
    fail_arg(op, "x", str("N*T rows, a multiple of N = ", N, " (state_indices.size(0))"), str("shape ", a.x.shape_str()));
  const int64_t T = N == 0 ? 0 : rows / N, E = d.R - (d.W - 1);
  if (N > 0 && T > E + 1)
    fail_arg(op, "conv_state",
             str("R = W - 1 + E rows with E + 1 >= T = ", T, " (one extra row per speculative token)"),
             str("shape ", a.conv_state.shape_str(), " with W = ", d.W));
}

Support kda_conv1d_update_supports(Backend b, const KdaConv1dUpdateArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::kda_conv1d_update_supports(a);
}

void kda_conv1d_update(Backend b, const KdaConv1dUpdateArgs& a, Stream stream) {
  kda_conv1d_update_check(a);
  check_device("kda_conv1d_update", "out", a.out, backend_device(b));
  require_support("kda_conv1d_update", b, kda_conv1d_update_supports(b, a));
  if (b == Backend::cpu) {
    cpu::kda_conv1d_update(a);
  } else {
    cuda::kda_conv1d_update(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support kda_conv1d_update_supports(const KdaConv1dUpdateArgs&) { return Support::no("built without CUDA"); }
void kda_conv1d_update(const KdaConv1dUpdateArgs&, Stream) { throw Error("kda_conv1d_update: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
