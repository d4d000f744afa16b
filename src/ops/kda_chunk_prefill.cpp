// kda_chunk_prefill: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/kda_chunk_prefill.h"

#include <algorithm>

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

// Two roles cut the state kernel's shared-memory operand reads per chunk from 184 to 131 KB (each
// S fragment read once for Qg S and Kg S) but need more registers and leave half the warps idle in
// two phases: with one CTA per SM that measured 1.03x at 16k and 64k tokens, H = 32; with more
// CTAs than SMs (H = 96: 384) uniform warps, two CTAs per SM, stay faster (roles 0.93-0.97x)
// (H200, docs/perf.md, twelfth session).
bool kda_chunk_prefill_state_roles(int64_t ctas, int64_t num_sms) { return ctas <= num_sms; }

// Each window beyond the first cost the 64k-token H = 32 call ~30 us (4577 us in three windows
// under a 1 GiB bound against 4514-4525 in one: 1.3%, H200, docs/perf.md, sixteenth session); the
// cost was not found in the intra kernel's wave tail, window sizes or a programmatic launch
// (thirteenth and sixteenth sessions), so the default lets long prompts run in one window where
// memory allows. fla's chunk_kda holds more than this at that length (bf16 per-chunk states,
// w, u, kg, Aqk: ~3 GB at 64k, H = 32). The pool keeps what a call took (scratch_alloc).
int64_t kda_chunk_prefill_default_workspace_bytes(int64_t device_memory_bytes) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  return std::clamp<int64_t>(device_memory_bytes / 32, kGiB, 4 * kGiB);
}

void kda_chunk_prefill_check(const KdaChunkPrefillArgs& a) {
  constexpr const char* op = "kda_chunk_prefill";
  check_rank(op, "cu_seqlens", a.cu_seqlens, 1, "[N + 1]");
  check_rank(op, "state_indices", a.state_indices, 1, "[N] (one slot per sequence)");
  check_rank(op, "mixed_qkv", a.mixed_qkv, 2, "[T, >= 2*H*K + H*V]");
  if (a.has_initial_state.defined()) check_rank(op, "has_initial_state", a.has_initial_state, 1, "[N]");
  if (a.checkpoints.defined()) check_rank(op, "cu_checkpoints", a.cu_checkpoints, 1, "[N + 1] (with checkpoints)");
  if (!a.checkpoints.defined() && a.cu_checkpoints.defined())
    fail_arg(op, "cu_checkpoints", "none without checkpoints", "a tensor");
  if (a.max_workspace_bytes < 0)
    fail_arg(op, "max_workspace_bytes", ">= 0 (0: the default bound)", std::to_string(a.max_workspace_bytes));
  const int64_t N = a.state_indices.size(0);
  const KdaDims d = kda_detail::check_token_inputs(op, a.out, a.mixed_qkv, a.raw_g, a.raw_beta, a.A_log, a.dt_bias,
                                                   a.lower_bound, a.mixed_qkv.size(0), "T (mixed_qkv.size(0))");
  kda_detail::check_on_device_of(op, "state_pool", a.state_pool, a.out);
  kda_detail::check_on_device_of(op, "cu_seqlens", a.cu_seqlens, a.out);
  kda_detail::check_on_device_of(op, "state_indices", a.state_indices, a.out);
  if (a.has_initial_state.defined())
    kda_detail::check_on_device_of(op, "has_initial_state", a.has_initial_state, a.out);
  if (a.checkpoints.defined()) {
    kda_detail::check_on_device_of(op, "checkpoints", a.checkpoints, a.out);
    kda_detail::check_on_device_of(op, "cu_checkpoints", a.cu_checkpoints, a.out);
  }
  kda_detail::check_state_pool(op, "state_pool", a.state_pool, d);
  if (a.checkpoints.defined()) {
    kda_detail::check_state_pool(op, "checkpoints", a.checkpoints, d);
    check_same_dtype(op, "checkpoints", a.checkpoints, "state_pool", a.state_pool);
    check_no_self_overlap(op, "checkpoints", a.checkpoints);
  }
  kda_detail::check_index_vector(op, "cu_seqlens", a.cu_seqlens, N + 1, "N + 1 (state_indices.size(0) + 1)");
  kda_detail::check_index_vector(op, "state_indices", a.state_indices, N, "N");
  if (a.has_initial_state.defined())
    kda_detail::check_index_vector(op, "has_initial_state", a.has_initial_state, N, "N (state_indices.size(0))");
  if (a.checkpoints.defined())
    kda_detail::check_index_vector(op, "cu_checkpoints", a.cu_checkpoints, N + 1, "N + 1 (state_indices.size(0) + 1)");
}

Support kda_chunk_prefill_supports(Backend b, const KdaChunkPrefillArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::kda_chunk_prefill_supports(a);
}

void kda_chunk_prefill(Backend b, const KdaChunkPrefillArgs& a, Stream stream) {
  kda_chunk_prefill_check(a);
  check_device("kda_chunk_prefill", "out", a.out, backend_device(b));
  require_support("kda_chunk_prefill", b, kda_chunk_prefill_supports(b, a));
  if (b == Backend::cpu) {
    cpu::kda_chunk_prefill(a);
  } else {
    cuda::kda_chunk_prefill(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support kda_chunk_prefill_supports(const KdaChunkPrefillArgs&) { return Support::no("built without CUDA"); }
void kda_chunk_prefill(const KdaChunkPrefillArgs&, Stream) { throw Error("kda_chunk_prefill: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
