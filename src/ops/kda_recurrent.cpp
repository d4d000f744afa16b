// kda_recurrent: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/kda_recurrent.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void kda_recurrent_check(const KdaRecurrentArgs& a) {
  constexpr const char* op = "kda_recurrent";
  check_rank(op, "slot_table", a.slot_table, 2, "[N, 1 + num_spec]");
  check_rank(op, "num_accepted", a.num_accepted, 1, "[N]");
  check_rank(op, "mixed_qkv", a.mixed_qkv, 2, "[N*T, >= 2*H*K + H*V]");
  const int64_t N = a.slot_table.size(0), S = a.slot_table.size(1), rows = a.mixed_qkv.size(0);
  const KdaDims d = kda_detail::check_token_inputs(op, a.out, a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias,
                                                   a.lower_bound, rows, "N*T (mixed_qkv.size(0))");
  kda_detail::check_on_device_of(op, "state_pool", a.state_pool, a.out);
  kda_detail::check_on_device_of(op, "slot_table", a.slot_table, a.out);
  kda_detail::check_on_device_of(op, "num_accepted", a.num_accepted, a.out);
  kda_detail::check_state_pool(op, "state_pool", a.state_pool, d);
  check_dtype(op, "slot_table", a.slot_table, {DType::i32, DType::i64});
  check_strides(op, "slot_table", a.slot_table);
  kda_detail::check_element_aligned(op, "slot_table", a.slot_table);
  kda_detail::check_index_vector(op, "num_accepted", a.num_accepted, N, "N (slot_table.size(0))");
  if (N == 0 ? rows != 0 : rows % N != 0)
    fail_arg(op, "mixed_qkv", str("N*T rows, a multiple of N = ", N, " (slot_table.size(0))"),
             str("shape ", a.mixed_qkv.shape_str()));
  const int64_t T = N == 0 ? 0 : rows / N;
  if (N > 0 && (T < 1 || T > S))
    fail_arg(op, "mixed_qkv", str("T = rows / N in [1, ", S, "] (slot_table.size(1) = 1 + num_spec)"),
             str("T = ", T, " (shape ", a.mixed_qkv.shape_str(), ", N = ", N, ")"));
}

Support kda_recurrent_supports(Backend b, const KdaRecurrentArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::kda_recurrent_supports(a);
}

void kda_recurrent(Backend b, const KdaRecurrentArgs& a, Stream stream) {
  kda_recurrent_check(a);
  check_device("kda_recurrent", "out", a.out, backend_device(b));
  require_support("kda_recurrent", b, kda_recurrent_supports(b, a));
  if (b == Backend::cpu) {
    cpu::kda_recurrent(a);
  } else {
    cuda::kda_recurrent(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support kda_recurrent_supports(const KdaRecurrentArgs&) { return Support::no("built without CUDA"); }
void kda_recurrent(const KdaRecurrentArgs&, Stream) { throw Error("kda_recurrent: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
