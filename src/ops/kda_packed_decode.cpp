// kda_packed_decode: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/kda_packed_decode.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

bool kda_packed_decode_streaming_stores(int64_t state_bytes, int64_t l2_bytes) { return state_bytes <= 2 * l2_bytes; }

void kda_packed_decode_check(const KdaPackedDecodeArgs& a) {
  constexpr const char* op = "kda_packed_decode";
  check_rank(op, "state_indices", a.state_indices, 1, "[B] (one slot per sequence; pass a column of a slot table)");
  const int64_t B = a.state_indices.size(0);
  const KdaDims d = kda_detail::check_token_inputs(op, a.out, a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias,
                                                   a.lower_bound, B, "B (state_indices.size(0))");
  kda_detail::check_on_device_of(op, "state_pool", a.state_pool, a.out);
  kda_detail::check_on_device_of(op, "state_indices", a.state_indices, a.out);
  kda_detail::check_state_pool(op, "state_pool", a.state_pool, d);
  kda_detail::check_index_vector(op, "state_indices", a.state_indices, B, "B");
}

Support kda_packed_decode_supports(Backend b, const KdaPackedDecodeArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::kda_packed_decode_supports(a);
}

void kda_packed_decode(Backend b, const KdaPackedDecodeArgs& a, Stream stream) {
  kda_packed_decode_check(a);
  check_device("kda_packed_decode", "out", a.out, backend_device(b));
  require_support("kda_packed_decode", b, kda_packed_decode_supports(b, a));
  if (b == Backend::cpu) {
    cpu::kda_packed_decode(a);
  } else {
    cuda::kda_packed_decode(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support kda_packed_decode_supports(const KdaPackedDecodeArgs&) { return Support::no("built without CUDA"); }
void kda_packed_decode(const KdaPackedDecodeArgs&, Stream) { throw Error("kda_packed_decode: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
