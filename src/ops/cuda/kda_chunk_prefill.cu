// kda_chunk_prefill, CUDA (sm_90a): varlen KDA prefill in chunks of 64 tokens (UT transform /
// WY form), initial states from pool slots, final states back to them, optional checkpoints after
// every full chunk. Semantics: docs/ops/kda.md; CPU reference: src/ops/cpu/kda_chunk_prefill.cpp.
// v2 (written without a GPU at hand) passed the full matrix, memcheck and racecheck on an H200
// (docs/verification.md) at e9c5392: 1.24 ms at T = 4096, H = 32, 4x its prediction and still
// slower than fla (docs/perf.md says where the time went). The intra-chunk kernel's
// two-CTAs-per-SM layout came after that run and passed the same checks at 88276b9: intra
// 701 -> 362 us, the whole op 1.24 -> 0.95 ms at T = 4096, H = 32 (state kernel: 540 us). At
// a97aa9c (integer tf32 splits, ldmatrix, balanced warps in the state kernel; vector row loads
// in the intra kernel; each step verified and timed on the H200, docs/perf.md): state 353 us,
// intra 295 us, the whole op 0.66 ms at T = 4096, H = 32 (1.5x fla), 10.2 ms at 64k (0.8x fla).
// Since then the intra kernel's MUFU math (3602b4e) and its P4 on tensor cores: intra ~245 us,
// the op 0.60 ms at T = 4096, H = 32 (at 75ea844 1.66x fla in one job), 9.5 ms at 64k (0.88x).
// Then the state kernel on bf16 tensor cores (3xBF16, c0957e6), its workspace by bulk copies
// (8e948c5) and the intra kernel's P1 without divergence (2490a75): state ~198 us, intra
// ~190-210 us, the op ~0.41 ms at T = 4096, H = 32 and ~6.3 ms at 64k (docs/perf.md). Then
// every state product on f16 tensor cores, one pass, and the workspace in f16 (71,168 bytes per
// (chunk, head), was 115,200 with bf16 hi / lo parts): at T = 16k, H = 32 state 762 -> 537 us,
// intra 822 -> 695 us, the op 1.58 -> 1.23 ms (1.25-1.28x at every shape measured).
//
// v2: two kernels. (v1, one f32 SIMT CTA per (sequence, head, 32 value columns) walking every
// chunk and redoing the state-independent work per tile, ran 2.63 ms at T = 4096, H = 32.)
//   1. kda_chunk_prefill_intra.cuh: one CTA per (chunk, head), all chunks of all sequences at
//      once: gates, cumsum, kk / qk (off-diagonal blocks on tensor cores), the UT transform;
//      writes the chunk's Qg, Kg, Kd, Tm = (I + L)^-1 diag(beta), Aqk (f16) and decay to a
//      workspace (layout in kda_chunk_prefill_common.cuh, 71,168 bytes per (chunk, head)); 112,896 bytes of
//      shared memory and <= 128 registers, so two CTAs share an SM (the layout measured at 700.8 us
//      for T = 4096, H = 32 had 151,296 bytes and 140 registers: one CTA per SM, latency-bound);
//   2. kda_chunk_prefill_state.cuh: one CTA per (sequence, head, 32 value columns), chunks in
//      order: Vn = Tm (V - Kg S), O = Qg S + Aqk Vn, S = diag(dec) S + Kd^T Vn, every product
//      on f16 tensor cores (mma.sync m16n8k16, f32 accumulation, one pass), the f32 state
//      tile in registers, the next chunk's workspace brought in by bulk copies under the compute.
// Storing Tm and Kg (instead of the WY pair W = Tm Kg, U = Tm V) keeps the workspace
// V-independent and smaller, and costs the state kernel one 64 x 64 x 32 triangular product.
// Workspace slots: chunk c of sequence n uses slot n + floor(cu_seqlens[n] / 64) + c (unique,
// below N + floor(T / 64); see chunk_slot_base), so both grids are sized from T and N alone and
// the call stays capturable; unused slots exit at once. The workspace is stream-ordered scratch
// (scratch_alloc: the device's default pool, kept mapped between calls), bounded by
// max_workspace_bytes (default kda_chunk_prefill_default_workspace_bytes: 4 GiB on an H200;
// 71,168 bytes per chunk slot and head, so a whole 64k-token batch takes 2.3 GB at H = 32, one
// window, and 7.0 GB at H = 96, two): the slots run in windows of as many as
// fit, each window launching both kernels on its chunks only (Params::slot_lo .. slot_hi); the
// state kernel starts a sequence's later windows from its slot, which holds the f32 state after
// the window before (exactly: the kernel keeps it in f32 registers), so the results do not
// depend on the window. A bf16 pool (read widened, stored rounded: final states and checkpoints)
// cannot hold that f32 state: its calls carry it in an f32 [N, H, V, K] scratch buffer instead,
// allocated only when there is more than one window.
//
// Precision: v1's algorithm (every exponential of a difference Gam_i - Gam_j with i >= j, per
// 16-row block reference points, so every factor is <= 1 however strong the decay); kernel 1
// f32 with plain tf32 kk and qk products, the solve in 3xTF32 (~f32), MUFU exponentials; its
// outputs rounded to f16 for kernel 2; kernel 2 multiplies f16 operands (the state and Y, Vn
// rounded to f16 too) with f32 accumulation, the state itself carried in f32. A host emulation
// of the products' precision (tools/kda_product_precision.py) against the f64 token recurrence
// at T = 4096 puts outputs within 2.0e-5 (1.2e-4 with weak decay) and final states within
// 1.3e-4 (1.1e-3), against the 4e-3 allowance (kda_chunk_prefill_state.cuh says why f16; with
// kk exact, 1.7e-4 (9.1e-4) on states).
// Before: 3xBF16 on the state's path and bf16 output products, 1.3e-4 (4.6e-4) / 3.0e-6
// (1.5e-5), three times the tensor work and twice the operand bytes; the tf32 kernels before
// that (emulated fragment-exactly) erred 5.2e-5 / 1.7e-6.
//
// Bytes per (chunk, head): the workspace, 71,168 written once and read by each of the V / 32
// state CTAs of the head (from L2 when they run together), plus the token inputs (~1.3 KB per
// (token, head) in bf16), the outputs, the states (K V 4 bytes each way per (sequence, head)) and
// the checkpoints (K V 4 per (chunk, head)). FLOPs per (token, head) of the chunk algorithm:
// 6 K V (Qg S, Kg S, Kd^T Vn) + 2 (C + 1) K (kk, qk, lower triangles) + 2 (C + 1) V (Tm Y,
// Aqk Vn) + ~C^2 / 3 (the solve) ~ 133 K FLOPs at K = V = 128, C = 64 (bench/kda_chunk_prefill.cpp
// uses this count); 3xTF32 triples the tensor-core work of the products it covers.
#include "kda_chunk_prefill_intra.cuh"
#include "kda_chunk_prefill_state.cuh"
#include "kestrel/ops/kda_chunk_prefill.h"

#include <algorithm>
#include <cstdint>

namespace kestrel::ops::cuda {
namespace kda_chunk {

template <typename T>
void launch(Params p, int64_t max_workspace_bytes, cudaStream_t stream) {
  static const char tag = 0;  // per instantiation: each T has its own two kernels to opt in
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(kda_chunk_prefill_intra_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(sizeof(IntraSmem))));
    // Two intra CTAs of 112,896 bytes per SM need the largest carveout (228 KB); the attribute is
    // a hint the driver may otherwise trade for L1.
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(kda_chunk_prefill_intra_kernel<T>,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(kda_chunk_prefill_state_kernel<T, false>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(sizeof(StateSmem))));
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(kda_chunk_prefill_state_kernel<T, true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(sizeof(StateSmem))));
  });
  // Windows of chunk slots whose workspace fits the bound: each runs both kernels on its chunks
  // (the state kernel resumes every sequence from its slot), so the scratch stays bounded
  // however long the batch. One window at least, so that empty sequences store their states.
  const int64_t per_slot = static_cast<int64_t>(p.H) * kWsBytes;
  const int64_t fit = max_workspace_bytes / per_slot;
  const int64_t window = std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(p.chunk_slots, 1), fit));
  p.ws = static_cast<unsigned char*>(scratch_alloc(static_cast<size_t>(window * per_slot), stream));
  // A bf16 pool cannot carry the f32 state between windows in its slots (the state kernel says
  // why): an f32 carry of every sequence's state, only when there is more than one window.
  const bool windows = p.chunk_slots > window;
  p.carry = p.pool_bf16 && windows ? static_cast<float*>(scratch_alloc(
                                         static_cast<size_t>(p.N) * p.H * p.V * kK * sizeof(float), stream))
                                   : nullptr;
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.N) * p.H * p.tiles);
  const bool roles = kda_chunk_prefill_state_roles(blocks, num_sms());
  for (int64_t lo = 0; lo == 0 || lo < p.chunk_slots; lo += window) {
    p.slot_lo = lo;
    p.slot_hi = std::min<int64_t>(p.chunk_slots, lo + window);
    if (p.slot_hi > p.slot_lo) {
      const dim3 grid(static_cast<unsigned>(p.slot_hi - p.slot_lo), static_cast<unsigned>(p.H));
      kda_chunk_prefill_intra_kernel<T><<<grid, kThreads, sizeof(IntraSmem), stream>>>(p);
      KESTREL_LAUNCHED("kda_chunk_prefill_intra_kernel");
    }
    if (roles) {
      kda_chunk_prefill_state_kernel<T, true><<<blocks, kThreads, sizeof(StateSmem), stream>>>(p);
      KESTREL_LAUNCHED("kda_chunk_prefill_state_kernel<roles>");
    } else {
      kda_chunk_prefill_state_kernel<T, false><<<blocks, kThreads, sizeof(StateSmem), stream>>>(p);
      KESTREL_LAUNCHED("kda_chunk_prefill_state_kernel<uniform>");
    }
  }
  scratch_free(p.ws, stream);
  if (p.carry != nullptr) scratch_free(p.carry, stream);
}

// The intra kernel's vector loads of a lane's 4 key dims: q and k at channel h K + 4 lane of a
// mixed_qkv row (channel stride 1), raw_g at d = 4 lane with d stride 1; every row start, and so
// every such group, aligned to 4 elements.
bool rows_vectorizable(const KdaChunkPrefillArgs& a) {
  auto aligned4 = [](const TensorView& t) {
    return reinterpret_cast<uintptr_t>(t.data) % (4 * dtype_size(t.dtype)) == 0;
  };
  const bool qkv = aligned4(a.mixed_qkv) && a.mixed_qkv.stride(0) % 4 == 0;
  const bool g = aligned4(a.raw_g) && a.raw_g.stride(2) == 1 && a.raw_g.stride(1) % 4 == 0 &&
                 a.raw_g.stride(0) % 4 == 0;
  return qkv && g;
}

// The workspace bound of a call (KdaChunkPrefillArgs::max_workspace_bytes; 0: the default).
int64_t workspace_bound(const KdaChunkPrefillArgs& a) {
  return a.max_workspace_bytes > 0 ? a.max_workspace_bytes : kda_chunk_prefill_default_workspace_bytes(device_memory_bytes());
}

// Slots (or checkpoint rows) aligned to 4 elements: base address and stride (16 bytes for f32).
bool slots_aligned(const TensorView& pool) {
  return reinterpret_cast<uintptr_t>(pool.data) % (4 * dtype_size(pool.dtype)) == 0 &&
         (pool.size(0) <= 1 || pool.stride(0) % 4 == 0);
}

}  // namespace kda_chunk

Support kda_chunk_prefill_supports(const KdaChunkPrefillArgs& a) {
  using namespace kda_chunk;
  const int64_t K = a.raw_g.size(2), V = a.out.size(2), H = a.raw_g.size(1), N = a.state_indices.size(0);
  if (K != kK) return Support::no(str("K = ", kK, " only (a state row is one float4 per lane); got K = ", K));
  if (V % kTileV != 0) return Support::no(str("V a multiple of ", kTileV, " (the value tile of a CTA); got V = ", V));
  if (a.state_pool.dtype != DType::f32 && a.state_pool.dtype != DType::bf16)
    return Support::no(str("state_pool: f32 or bf16 (got ", dtype_name(a.state_pool.dtype), ")"));
  if (!slots_aligned(a.state_pool))
    return Support::no("state_pool: slots aligned to 4 elements (base address and slot stride)");
  if (a.checkpoints.defined() && !slots_aligned(a.checkpoints))
    return Support::no("checkpoints: rows aligned to 4 elements (base address and row stride)");
  if (H > INT32_MAX || V > INT32_MAX || N > INT32_MAX) return Support::no("N, H and V must fit in int32");
  if (N * H * (V / kTileV) > INT32_MAX) return Support::no(str("N * H * V / ", kTileV, " must fit in int32 (grid size)"));
  if (H > 65535) return Support::no(str("H <= 65535 (grid.y of the intra-chunk kernel); got H = ", H));
  const int64_t chunk_slots = N + a.mixed_qkv.size(0) / kC;
  if (chunk_slots > INT32_MAX) return Support::no("N + T / 64 must fit in int32 (grid size of the intra-chunk kernel)");
  return Support::yes();
}

void kda_chunk_prefill(const KdaChunkPrefillArgs& a, Stream stream) {
  using namespace kda_chunk;
  Params p{};
  p.out = a.out.data;
  p.pool = a.state_pool.data;
  p.ckpt = a.checkpoints.defined() ? a.checkpoints.data : nullptr;
  p.pool_bf16 = a.state_pool.dtype == DType::bf16;
  p.qkv = a.mixed_qkv.data;
  p.raw_g = a.raw_g.data;
  p.raw_beta = a.raw_beta.data;
  p.A_log = static_cast<const float*>(a.A_log.data);
  p.dt_bias = static_cast<const float*>(a.dt_bias.data);
  p.cu_seqlens = a.cu_seqlens.data;
  p.slots = a.state_indices.data;
  p.has_init = a.has_initial_state.defined() ? a.has_initial_state.data : nullptr;
  p.cu_ckpt = a.checkpoints.defined() ? a.cu_checkpoints.data : nullptr;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1); p.out_s2 = a.out.stride(2);
  p.qkv_s0 = a.mixed_qkv.stride(0);
  p.g_s0 = a.raw_g.stride(0); p.g_s1 = a.raw_g.stride(1); p.g_s2 = a.raw_g.stride(2);
  p.beta_s0 = a.raw_beta.stride(0); p.beta_s1 = a.raw_beta.stride(1);
  p.alog_s0 = a.A_log.stride(0);
  p.dt_s0 = a.dt_bias.stride(0);
  p.pool_s0 = a.state_pool.stride(0);
  p.ckpt_s0 = a.checkpoints.defined() ? a.checkpoints.stride(0) : 0;
  p.cu_s0 = a.cu_seqlens.stride(0);
  p.slot_s0 = a.state_indices.stride(0);
  p.init_s0 = a.has_initial_state.defined() ? a.has_initial_state.stride(0) : 0;
  p.cuk_s0 = a.checkpoints.defined() ? a.cu_checkpoints.stride(0) : 0;
  p.N = static_cast<int>(a.state_indices.size(0));
  p.H = static_cast<int>(a.raw_g.size(1));
  p.V = static_cast<int>(a.out.size(2));
  p.tiles = p.V / kTileV;
  p.chunk_slots = a.state_indices.size(0) + a.mixed_qkv.size(0) / kC;
  p.g_bf16 = a.raw_g.dtype == DType::bf16;
  p.beta_bf16 = a.raw_beta.dtype == DType::bf16;
  p.cu64 = a.cu_seqlens.dtype == DType::i64;
  p.slot64 = a.state_indices.dtype == DType::i64;
  p.init64 = a.has_initial_state.defined() && a.has_initial_state.dtype == DType::i64;
  p.cuk64 = a.checkpoints.defined() && a.cu_checkpoints.dtype == DType::i64;
  p.has_lb = a.lower_bound.has_value();
  p.vec_rows = rows_vectorizable(a);
  p.lb = a.lower_bound.value_or(0.0f);
  if (p.N == 0 || p.H == 0 || p.tiles == 0) return;
  switch (a.out.dtype) {
    case DType::f32: launch<float>(p, workspace_bound(a), as_cuda(stream)); break;
    case DType::bf16: launch<__nv_bfloat16>(p, workspace_bound(a), as_cuda(stream)); break;
    default: throw Error(str("kda_chunk_prefill: no CUDA kernel for dtype ", dtype_name(a.out.dtype)));
  }
}

}  // namespace kestrel::ops::cuda
