// kda_conv1d_prefill, CUDA (sm_90a): the short conv (causal depthwise, W taps, no bias) + SiLU
// over varlen sequences, from and back to each sequence's conv state. Design note:
// - one CTA of 8 warps per (sequence n, group of 32 channels); lane = channel (consecutive
//   lanes, consecutive channels: one contiguous run per warp access with channel stride 1),
//   warp w = the w-th of 8 contiguous slices of the sequence's tokens. Each thread slides a
//   register window of the last W - 1 inputs over its slice: one read of x per token, the
//   f32 fmaf sum oldest tap first (the reference sums in f64), silu, one write of out;
//   inputs are read in batches of 4 tokens before the 4 outputs are written, for overlap;
// - phase 1, before one __syncthreads: each warp loads the W - 1 inputs before its slice (from
//   x, or from the history rows 0 .. W-2 of the slot, or zeros without initial state), and
//   warp 0 loads the sequence's last W - 1 inputs, the new conv state. Phase 2, after it: the
//   outputs, and warp 0 stores the new state rows 0 .. W-2 (copies of the inputs, bit-exact).
//   The barrier orders every read of the history rows before their overwrite, and, when out
//   is x itself, every read of an input by another warp (window, tail) before its row is
//   overwritten with output; within a slice a thread reads x[t] before it writes out[t].
//   Registers only are shared (no shared memory); the barrier is reached by every thread of a
//   live CTA (channels past C only skip their loads and stores);
// - the window is a register array indexed only by compile-time constants (`d < W`
//   predicates), sized kMaxW = 4 (Kimi) or 8: W in [2, 8];
// - padding sequences (slot <= 0): the CTA writes zero outputs and touches no state.
// Bytes: x read once, out written once (T * C each), plus per (sequence, channel) W - 1 history
// reads, W - 1 state writes and 8 (W - 1) window re-reads (L1/L2-resident).
#include "kda_common.cuh"
#include "kestrel/ops/kda_conv1d_prefill.h"

namespace kestrel::ops::cuda {

namespace {

struct Conv1dPrefillParams {
  void* out;             // [T, C] dtype of x, any strides; may be x
  void* state;           // [slots, R, C] dtype of x, any strides
  const void* x;         // [T, C]
  const void* weight;    // [C, W] bf16 | f32
  const void* cu;        // [N + 1] i32 | i64
  const void* slots;     // [N] i32 | i64
  const void* has_init;  // [N] i32 | i64, or nullptr (every sequence has one)
  int64_t out_s0, out_s1, st_s0, st_s1, st_s2, x_s0, x_s1, w_s0, w_s1, cu_s0, slot_s0, init_s0;
  int N, C, W;
  int cgroups;  // ceil(C / 32)
  bool w_bf16, cu64, slot64, init64;
};

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBatch = 4;  // tokens whose inputs are loaded before their outputs are computed

template <typename T, int kMaxW>
__global__ void __launch_bounds__(kThreads) kda_conv1d_prefill_kernel(const Conv1dPrefillParams p) {
  const int64_t n = blockIdx.x / static_cast<unsigned>(p.cgroups);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.cgroups)) * 32 + lane;
  const bool active = c < p.C;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t t0 = kda::load_index(p.cu, p.cu64, n * p.cu_s0);
  const int64_t L = kda::load_index(p.cu, p.cu64, (n + 1) * p.cu_s0) - t0;
  const int64_t slot = kda::load_index(p.slots, p.slot64, n * p.slot_s0);
  if (slot <= 0) {  // padding (uniform over the CTA): zero output, conv state untouched
    if (active)
      for (int64_t t = warp; t < L; t += kWarps) out[(t0 + t) * p.out_s0 + c * p.out_s1] = from_f32<T>(0.0f);
    return;
  }
  const bool read_hist = p.has_init == nullptr || kda::load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  T* st = static_cast<T*>(p.state) + slot * p.st_s0 + static_cast<int64_t>(c) * p.st_s2;
  // Input at sequence position j (j < 0: history row W - 1 + j, or zero).
  auto input_at = [&](int64_t j) -> T {
    if (j >= 0) return x[(t0 + j) * p.x_s0 + c * p.x_s1];
    return read_hist ? st[(p.W - 1 + j) * p.st_s1] : from_f32<T>(0.0f);
  };
  const int64_t chunk = (L + kWarps - 1) / kWarps;
  const int64_t p0 = warp * chunk, p1 = p0 + chunk < L ? p0 + chunk : L;
  float wr[kMaxW];  // wr[d] multiplies the input d tokens back: weight[c][W - 1 - d]
  T win[kMaxW];     // win[kMaxW - 1 - e]: the input e + 1 tokens before the next one
  T tail[kMaxW - 1];  // warp 0: tail[r] = the new state row r = input at position L - (W - 1) + r
#pragma unroll
  for (int d = 0; d < kMaxW; ++d) {
    wr[d] = 0.0f;
    win[d] = from_f32<T>(0.0f);
  }
#pragma unroll
  for (int r = 0; r < kMaxW - 1; ++r) tail[r] = from_f32<T>(0.0f);
  // ---- phase 1: everything read from the state rows or from other warps' inputs ----
  if (active) {
#pragma unroll
    for (int d = 0; d < kMaxW; ++d)
      if (d < p.W) wr[d] = kda::load_real(p.weight, p.w_bf16, c * p.w_s0 + (p.W - 1 - d) * p.w_s1);
    if (p0 < p1) {
#pragma unroll
      for (int e = 0; e < kMaxW - 1; ++e)
        if (e <= p.W - 2) win[kMaxW - 1 - e] = input_at(p0 - 1 - e);
    }
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < kMaxW - 1; ++r)
        if (r <= p.W - 2) tail[r] = input_at(L - (p.W - 1) + r);
    }
  }
  __syncthreads();
  // ---- phase 2: outputs of this warp's slice, then the new state ----
  if (active) {
    for (int64_t b = p0; b < p1; b += kBatch) {
      T xb[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) xb[i] = b + i < p1 ? x[(t0 + b + i) * p.x_s0 + c * p.x_s1] : from_f32<T>(0.0f);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if (b + i < p1) {
#pragma unroll
          for (int k = 0; k < kMaxW - 1; ++k) win[k] = win[k + 1];
          win[kMaxW - 1] = xb[i];
          float sum = 0.0f;
#pragma unroll
          for (int d = kMaxW - 1; d >= 0; --d)  // oldest tap first, as the reference
            if (d < p.W) sum = fmaf(wr[d], to_f32(win[kMaxW - 1 - d]), sum);
          out[(t0 + b + i) * p.out_s0 + c * p.out_s1] = from_f32<T>(kda::silu(sum));
        }
      }
    }
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < kMaxW - 1; ++r)
        if (r <= p.W - 2) st[r * p.st_s1] = tail[r];
    }
  }
}

constexpr int kMaxTaps = 8;

}  // namespace

Support kda_conv1d_prefill_supports(const KdaConv1dPrefillArgs& a) {
  const int64_t N = a.state_indices.size(0), C = a.x.size(1), W = a.weight.size(1);
  if (W > kMaxTaps) return Support::no(str("W <= ", kMaxTaps, " taps (the window lives in registers); got W = ", W));
  if (C > INT32_MAX || N > INT32_MAX) return Support::no("N and C must fit in int32");
  if (N * ((C + 31) / 32) > INT32_MAX) return Support::no("N * ceil(C / 32) must fit in int32 (grid size)");
  return Support::yes();
}

void kda_conv1d_prefill(const KdaConv1dPrefillArgs& a, Stream stream) {
  constexpr const char* op = "kda_conv1d_prefill";
  Conv1dPrefillParams p{};
  p.out = a.out.data;
  p.state = a.conv_state.data;
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.cu = a.cu_seqlens.data;
  p.slots = a.state_indices.data;
  p.has_init = a.has_initial_state.defined() ? a.has_initial_state.data : nullptr;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1);
  p.st_s0 = a.conv_state.stride(0); p.st_s1 = a.conv_state.stride(1); p.st_s2 = a.conv_state.stride(2);
  p.x_s0 = a.x.stride(0); p.x_s1 = a.x.stride(1);
  p.w_s0 = a.weight.stride(0); p.w_s1 = a.weight.stride(1);
  p.cu_s0 = a.cu_seqlens.stride(0);
  p.slot_s0 = a.state_indices.stride(0);
  p.init_s0 = a.has_initial_state.defined() ? a.has_initial_state.stride(0) : 0;
  p.N = checked_int(a.state_indices.size(0), op, "N");
  p.C = checked_int(a.x.size(1), op, "C");
  p.W = checked_int(a.weight.size(1), op, "W");
  p.cgroups = (p.C + 31) / 32;
  p.w_bf16 = a.weight.dtype == DType::bf16;
  p.cu64 = a.cu_seqlens.dtype == DType::i64;
  p.slot64 = a.state_indices.dtype == DType::i64;
  p.init64 = a.has_initial_state.defined() && a.has_initial_state.dtype == DType::i64;
  if (p.N == 0 || p.C == 0) return;
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.N) * p.cgroups);
  auto launch = [&]<typename T>() {
    if (p.W <= 4) kda_conv1d_prefill_kernel<T, 4><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    else kda_conv1d_prefill_kernel<T, kMaxTaps><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    KESTREL_LAUNCHED("kda_conv1d_prefill_kernel");
  };
  switch (a.x.dtype) {
    case DType::f32: launch.template operator()<float>(); break;
    case DType::bf16: launch.template operator()<__nv_bfloat16>(); break;
    default: throw Error(str(op, ": no CUDA kernel for dtype ", dtype_name(a.x.dtype)));
  }
}

}  // namespace kestrel::ops::cuda
