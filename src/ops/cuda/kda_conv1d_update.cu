// kda_conv1d_update, CUDA (sm_90a): the short conv (causal depthwise, W taps, no bias) + SiLU for
// T new tokens per sequence against the conv state (decode T = 1, verify T = 1 + drafts).
// Design note:
// - one thread per (sequence n, channel c), 256 channels per CTA, CTAs ordered (n, channel
//   block): consecutive threads take consecutive channels, so with channel stride 1 every load
//   and store of a warp is one contiguous run (the matrix also runs other strides, slower);
// - the thread reads its W - 1 history inputs (rows a-1 .. a+W-3 of its slot, a = num_accepted)
//   into a register window before it writes any state row (the rows overlap when a = 1), then
//   slides the window over its T tokens: read x, out = silu(sum_i w[i] s[t + i]) with f32 fmaf
//   oldest tap first (the reference sums in f64: within 2e-6 for 4 taps in [-1, 1]), store the
//   input itself (never a conversion of it) into the state row W - 2 + t;
// - the window is a register array indexed only by compile-time constants (unrolled loops with
//   `d < W` predicates), sized kMaxW = 4 (Kimi) or 8, so W in [2, 8] is supported;
// - in-place (out = x): each element of x is read by the thread that later writes the same
//   element of out, before it writes it. No shared memory, no barriers.
// Bytes per (sequence, channel): (W - 1 + T) reads of state and x, (W - 2 + T) state writes,
// T out writes, W weights (L2-resident across sequences).
#include "kda_common.cuh"
#include "kestrel/ops/kda_conv1d_update.h"

namespace kestrel::ops::cuda {

namespace {

struct Conv1dUpdateParams {
  void* out;            // [N*T, C] dtype of x, any strides
  void* state;          // [slots, R, C] dtype of x, any strides
  const void* x;        // [N*T, C]
  const void* weight;   // [C, W] bf16 | f32
  const void* slots;    // [N] i32 | i64
  const void* accepted; // [N] i32 | i64 in [1, E + 1], or nullptr (1)
  int64_t out_s0, out_s1, st_s0, st_s1, st_s2, x_s0, x_s1, w_s0, w_s1, slot_s0, acc_s0;
  int N, T, C, W;
  int cblocks;  // ceil(C / kThreads)
  bool w_bf16, slot64, acc64;
};

constexpr int kThreads = 256;

template <typename T, int kMaxW>
__global__ void __launch_bounds__(kThreads) kda_conv1d_update_kernel(const Conv1dUpdateParams p) {
  const int64_t n = blockIdx.x / static_cast<unsigned>(p.cblocks);
  const int c = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.cblocks)) * kThreads + threadIdx.x;
  if (c >= p.C) return;  // no barriers in this kernel
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t slot = kda::load_index(p.slots, p.slot64, n * p.slot_s0);
  if (slot <= 0) {  // padding: zero output, conv state untouched
    for (int t = 0; t < p.T; ++t) out[(n * p.T + t) * p.out_s0 + c * p.out_s1] = from_f32<T>(0.0f);
    return;
  }
  const int64_t acc = p.accepted != nullptr ? kda::load_index(p.accepted, p.acc64, n * p.acc_s0) : 1;
  T* st = static_cast<T*>(p.state) + slot * p.st_s0 + c * p.st_s2;  // this channel's column of the slot
  // wr[d] multiplies the input d tokens back: wr[d] = weight[c][W - 1 - d].
  float wr[kMaxW];
#pragma unroll
  for (int d = 0; d < kMaxW; ++d)
    wr[d] = d < p.W ? kda::load_real(p.weight, p.w_bf16, c * p.w_s0 + (p.W - 1 - d) * p.w_s1) : 0.0f;
  // win[kMaxW - 1 - e] = the input e + 1 tokens before the current one. Before token 0 the
  // history s[0 .. W-2] (s[j] = state row a - 1 + j) sits at win[kMaxW - 1 - e] = s[W - 2 - e].
  T win[kMaxW];
#pragma unroll
  for (int e = 0; e < kMaxW; ++e) {
    win[e] = from_f32<T>(0.0f);
  }
#pragma unroll
  for (int e = 0; e < kMaxW - 1; ++e)
    if (e <= p.W - 2) win[kMaxW - 1 - e] = st[(acc - 1 + p.W - 2 - e) * p.st_s1];
  // Rows r <= W - 3 <- s[r + 1] (= win[kMaxW - 1 - e], r = W - 3 - e): after every history read.
#pragma unroll
  for (int e = 0; e < kMaxW - 2; ++e)
    if (e <= p.W - 3) st[(p.W - 3 - e) * p.st_s1] = win[kMaxW - 1 - e];
  for (int t = 0; t < p.T; ++t) {
    const int64_t row = n * p.T + t;
    const T xv = x[row * p.x_s0 + c * p.x_s1];
#pragma unroll
    for (int i = 0; i < kMaxW - 1; ++i) win[i] = win[i + 1];
    win[kMaxW - 1] = xv;
    float sum = 0.0f;
#pragma unroll
    for (int d = kMaxW - 1; d >= 0; --d)  // oldest tap first, as the reference
      if (d < p.W) sum = fmaf(wr[d], to_f32(win[kMaxW - 1 - d]), sum);
    out[row * p.out_s0 + c * p.out_s1] = from_f32<T>(kda::silu(sum));
    st[(p.W - 2 + t) * p.st_s1] = xv;  // row W - 2 + t <- token t (a copy of the input)
  }
}

constexpr int kMaxTaps = 8;

}  // namespace

Support kda_conv1d_update_supports(const KdaConv1dUpdateArgs& a) {
  const int64_t N = a.state_indices.size(0), C = a.x.size(1), W = a.weight.size(1);
  if (W > kMaxTaps) return Support::no(str("W <= ", kMaxTaps, " taps (the window lives in registers); got W = ", W));
  if (C > INT32_MAX || N > INT32_MAX) return Support::no("N and C must fit in int32");
  if (N * ((C + kThreads - 1) / kThreads) > INT32_MAX)
    return Support::no(str("N * ceil(C / ", kThreads, ") must fit in int32 (grid size)"));
  if (N > 0 && a.x.size(0) / N > INT32_MAX) return Support::no("T must fit in int32");
  return Support::yes();
}

void kda_conv1d_update(const KdaConv1dUpdateArgs& a, Stream stream) {
  constexpr const char* op = "kda_conv1d_update";
  Conv1dUpdateParams p{};
  p.out = a.out.data;
  p.state = a.conv_state.data;
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.slots = a.state_indices.data;
  p.accepted = a.num_accepted.defined() ? a.num_accepted.data : nullptr;
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1);
  p.st_s0 = a.conv_state.stride(0); p.st_s1 = a.conv_state.stride(1); p.st_s2 = a.conv_state.stride(2);
  p.x_s0 = a.x.stride(0); p.x_s1 = a.x.stride(1);
  p.w_s0 = a.weight.stride(0); p.w_s1 = a.weight.stride(1);
  p.slot_s0 = a.state_indices.stride(0);
  p.acc_s0 = a.num_accepted.defined() ? a.num_accepted.stride(0) : 0;
  const int64_t N = a.state_indices.size(0);
  p.N = checked_int(N, op, "N");
  p.T = N == 0 ? 0 : checked_int(a.x.size(0) / N, op, "T");
  p.C = checked_int(a.x.size(1), op, "C");
  p.W = checked_int(a.weight.size(1), op, "W");
  p.cblocks = (p.C + kThreads - 1) / kThreads;
  p.w_bf16 = a.weight.dtype == DType::bf16;
  p.slot64 = a.state_indices.dtype == DType::i64;
  p.acc64 = a.num_accepted.defined() && a.num_accepted.dtype == DType::i64;
  if (p.N == 0 || p.C == 0) return;
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.N) * p.cblocks);
  auto launch = [&]<typename T>() {
    if (p.W <= 4) kda_conv1d_update_kernel<T, 4><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    else kda_conv1d_update_kernel<T, kMaxTaps><<<blocks, kThreads, 0, as_cuda(stream)>>>(p);
    KESTREL_LAUNCHED("kda_conv1d_update_kernel");
  };
  switch (a.x.dtype) {
    case DType::f32: launch.template operator()<float>(); break;
    case DType::bf16: launch.template operator()<__nv_bfloat16>(); break;
    default: throw Error(str(op, ": no CUDA kernel for dtype ", dtype_name(a.x.dtype)));
  }
}

}  // namespace kestrel::ops::cuda
