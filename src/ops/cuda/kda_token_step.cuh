// The KDA token-step kernel behind kda_packed_decode (one token, kMulti = false) and
// kda_recurrent (T tokens with per-position state columns, kMulti = true): decode and verify
// share this one path (DESIGN.md rule 4), so T = 1 with num_accepted 1 gives the same bits as
// decode. Semantics: docs/ops/kda.md; the design note is at the top of kda_packed_decode.cu.
//
// Work split: one CTA of kWarps warps per (sequence n, head h, tile of kTileV state rows v);
// warp w owns rows v0 .. v0 + kRows - 1 (v0 = tile * kTileV + w * kRows); lane l owns key dims
// 4l .. 4l + 3 of each of those rows (K = 128 = 32 lanes x one float4). A state row S[:, v] is
// K contiguous elements in the pool, so a warp reads and writes it as 512 contiguous bytes (f32
// pool: one 16-byte access per lane) or 256 (bf16 pool: one 8-byte access per lane). The rows
// land in shared memory by cp.async (each lane copies what it will read back, so no barrier);
// the kernel has no block barrier: a warp computes what it needs of the token (q_hat, k_hat,
// exp(g) for its lanes' 4 key dims, beta, the v of its rows) in registers, and reduces the
// per-row dot products with xor shuffles.
//
// State dtype (template parameter P, float | __nv_bfloat16): the rows are widened to f32 on load
// (exact), every token step is the same f32 code, and for a bf16 pool the f32 rows are rounded
// to bf16 (nearest even) in registers after every token, before any store: so the state a
// later token starts from is what the pool would hold, and a verify column equals the decode
// step it replaces. The output of a token uses the rows before that rounding (as the CPU
// reference, src/ops/cpu/kda_math.h token_step).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cp_async.cuh"
#include "kda_common.cuh"
#include "kestrel/ops/backend.h"
#include "kestrel/ops/kda_packed_decode.h"

namespace kestrel::ops::cuda::kda {

inline constexpr int kK = 128;                    // key head dim this kernel is written for
inline constexpr int kPerLane = kK / 32;          // key dims per lane: one float4
inline constexpr int kRows = 8;                   // state rows per warp, staged in shared memory at once
inline constexpr int kBatch = 8;                  // rows per warp in registers for one token step
inline constexpr int kWarps = 1;                  // warps per CTA (the shape was measured: kda_packed_decode.cu)
inline constexpr int kThreads = kWarps * 32;      // 32
inline constexpr int kTileV = kWarps * kRows;     // 8 state rows (v) per CTA: 16 CTAs per head at V = 128
static_assert(kPerLane == 4, "a lane's key dims are one float4");
static_assert(kRows % kBatch == 0 && kBatch <= 32, "whole batches; lane j < kBatch writes row j of a batch");

struct KdaStepParams {
  void* out;             // [N*T, H, V] bf16 | f32 (dtype of mixed_qkv), any strides
  void* pool;            // [slots, H, V, K] f32 | bf16, each slot contiguous, slots aligned to 4 elements
  const void* qkv;       // [N*T, >= 2HK + HV] dtype of out, channel stride 1
  const void* raw_g;     // [N*T, H, K] bf16 | f32
  const void* raw_beta;  // [N*T, H] bf16 | f32
  const float* A_log;    // [H]
  const float* dt_bias;  // [H * K]
  const void* table;     // [N, S] i32 | i64 slot table (decode: state_indices [B], tab_s1 = 0)
  const void* accepted;  // [N] i32 | i64 in [1, S]; nullptr reads 1 (decode)
  int64_t out_s0, out_s1, out_s2;
  int64_t qkv_s0;
  int64_t g_s0, g_s1, g_s2;
  int64_t beta_s0, beta_s1;
  int64_t alog_s0, dt_s0;
  int64_t pool_s0;  // elements from one slot to the next
  int64_t tab_s0, tab_s1, acc_s0;
  int N, T, H, V;
  int tiles;  // ceil(V / kTileV)
  bool g_bf16, beta_bf16, tab64, acc64, has_lb;
  float lb;
};

// What a lane loads of one token of head h: its 4 dims of q, k and raw_g, the v of its warp's
// rows (the same address on every lane: a broadcast) and the beta logit.
struct TokenRaw {
  float q[kPerLane], k[kPerLane], g[kPerLane], v[kBatch], beta;
};

// The same, ready for the recurrence: q_hat (scaled by 1/sqrt(K)), k_hat, exp(g), sigmoid(beta).
struct TokenHead {
  float q[kPerLane], k[kPerLane], decay[kPerLane], v[kBatch], beta;
};

template <typename T>
__device__ __forceinline__ TokenRaw load_token(const KdaStepParams& p, int64_t row, int h, int lane, int v0) {
  TokenRaw r;
  const T* qkv = static_cast<const T*>(p.qkv) + row * p.qkv_s0;
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const int64_t kq = static_cast<int64_t>(h) * kK + lane * kPerLane;  // this lane's first q column
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    r.q[i] = to_f32(qkv[kq + i]);
    r.k[i] = to_f32(qkv[HK + kq + i]);
    r.g[i] = load_real(p.raw_g, p.g_bf16, row * p.g_s0 + h * p.g_s1 + (lane * kPerLane + i) * p.g_s2);
  }
  const int64_t vcol = 2 * HK + static_cast<int64_t>(h) * p.V + v0;
#pragma unroll
  for (int j = 0; j < kBatch; ++j) r.v[j] = v0 + j < p.V ? to_f32(qkv[vcol + j]) : 0.0f;
  r.beta = load_real(p.raw_beta, p.beta_bf16, row * p.beta_s0 + h * p.beta_s1);
  return r;
}

// L2 norms over the warp (each lane holds 4 of the K dims), the gate and beta, all in f32.
__device__ __forceinline__ TokenHead finish_token(const TokenRaw& r, const float (&dt)[kPerLane], float exp_a_log,
                                                  const KdaStepParams& p) {
  constexpr float kEps = 1e-6f;                         // inside the sqrt (kda_math.h kL2Eps)
  constexpr float kInvSqrtK = 0.08838834764831845f;     // 1 / sqrt(128), the fixed q scale
  float ss[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    ss[0] = fmaf(r.q[i], r.q[i], ss[0]);
    ss[1] = fmaf(r.k[i], r.k[i], ss[1]);
  }
  warp_sum_n<2>(ss);
  const float rq = kInvSqrtK / sqrtf(ss[0] + kEps), rk = 1.0f / sqrtf(ss[1] + kEps);
  TokenHead x;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    x.q[i] = r.q[i] * rq;
    x.k[i] = r.k[i] * rk;
    x.decay[i] = expf(gate(r.g[i] + dt[i], exp_a_log, p.has_lb, p.lb));
  }
#pragma unroll
  for (int j = 0; j < kBatch; ++j) x.v[j] = r.v[j];
  x.beta = sigmoid(r.beta);
  return x;
}

// A lane's 4 key dims of one state row: load4 (kda_common.cuh), one 16-byte load from an f32
// pool, one 8-byte load from a bf16 pool.

// The inverse: one 16-byte store, or 4 values rounded to bf16 (nearest even) in one 8-byte store.
// kStream: a streaming store (st.global.cs: evict-first in L2), f32 decode of small batches
// only (kda_packed_decode_streaming_stores says when).
template <bool kStream = false>
__device__ __forceinline__ void store_state4(float* p, const float4& s) {
  if constexpr (kStream) {
    __stcs(reinterpret_cast<float4*>(p), s);
  } else {
    *reinterpret_cast<float4*>(p) = s;
  }
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
template <bool kStream = false>
__device__ __forceinline__ void store_state4(__nv_bfloat16* p, const float4& s) {
  static_assert(!kStream, "streaming stores are for f32 pools");
  *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16x2(s.x, s.y), pack_bf16x2(s.z, s.w));
}

// What a store to a pool of P and a load back give: nothing changes for f32; bf16 rounds each
// value to nearest even.
template <typename P>
__device__ __forceinline__ void round_to_pool(float4& s) {
  if constexpr (!std::is_same_v<P, float>) {
    s.x = __bfloat162float(__float2bfloat16_rn(s.x));
    s.y = __bfloat162float(__float2bfloat16_rn(s.y));
    s.z = __bfloat162float(__float2bfloat16_rn(s.z));
    s.w = __bfloat162float(__float2bfloat16_rn(s.w));
  }
}

// One token on the warp's rows, in place:  S' = diag(exp(g)) S;  u = beta (v - S'^T k_hat);
// S = S' + k_hat u^T;  o = S^T q_hat. Every lane ends with the full o of each row.
__device__ __forceinline__ void token_step(float4 (&s)[kBatch], const TokenHead& x, float (&o)[kBatch]) {
  float sk[kBatch];
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    s[j].x *= x.decay[0];
    s[j].y *= x.decay[1];
    s[j].z *= x.decay[2];
    s[j].w *= x.decay[3];
    sk[j] = fmaf(s[j].w, x.k[3], fmaf(s[j].z, x.k[2], fmaf(s[j].y, x.k[1], s[j].x * x.k[0])));
  }
  warp_sum_n<kBatch>(sk);
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const float u = x.beta * (x.v[j] - sk[j]);
    s[j].x = fmaf(x.k[0], u, s[j].x);
    s[j].y = fmaf(x.k[1], u, s[j].y);
    s[j].z = fmaf(x.k[2], u, s[j].z);
    s[j].w = fmaf(x.k[3], u, s[j].w);
    o[j] = fmaf(s[j].w, x.q[3], fmaf(s[j].z, x.q[2], fmaf(s[j].y, x.q[1], s[j].x * x.q[0])));
  }
  warp_sum_n<kBatch>(o);
}

// One lane's 4 key dims of a state row into shared memory, asynchronously: 16 bytes (f32 pool)
// or 8 (bf16 pool), both aligned as supports() requires.
__device__ __forceinline__ void stage_state4(float* dst, const float* src) { cp_async_16(smem_u32(dst), src); }
__device__ __forceinline__ void stage_state4(__nv_bfloat16* dst, const __nv_bfloat16* src) {
  cp_async_8(smem_u32(dst), src);
}

// kMulti = false: one token per sequence from and back to slot table[n * tab_s0] (decode).
// kMulti = true: T tokens; the state starts at column accepted[n] - 1 and the state after token
// t goes to column t (skipped where that id is <= 0). Either way a padding sequence (start slot
// <= 0) writes zero output rows and touches no state.
//
// The warp's kRows state rows go to shared memory by cp.async first, lane l copying the 4 key
// dims it will itself compute on, so the bytes are in flight without holding registers (what
// limited the register-resident version: docs in kda_packed_decode.cu), and no barrier is
// needed: a lane only reads back its own copies, after its own wait_group. The rows are then
// stepped kBatch at a time from registers; a row's arithmetic is the same whatever the batch.
// kStream: the state stores are streaming stores (f32 decode only; the launcher's rule).
template <typename T, typename P, bool kMulti, bool kStream = false>
__global__ void __launch_bounds__(kThreads) kda_token_steps_kernel(const KdaStepParams p) {
  static_assert(!kStream || (!kMulti && std::is_same_v<P, float>), "streaming stores: f32 decode only");
  __shared__ __align__(16) P stage[kWarps][kRows][kK];
  // Launched as a programmatic dependent (launch_token_steps_as): the grid may become resident
  // while the kernel before it in the stream drains, and waits here, before its first global
  // access, until that kernel has completed and its writes are visible. It lets the kernel after
  // it do the same as soon as all of this grid's CTAs have started.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int tile = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.tiles));
  const int64_t nh = blockIdx.x / static_cast<unsigned>(p.tiles);
  const int h = static_cast<int>(nh % p.H);
  const int64_t n = nh / p.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int v0 = tile * kTileV + warp * kRows;
  if (v0 >= p.V) return;  // a warp past V (V not a multiple of kTileV); there are no barriers
  const int steps = kMulti ? p.T : 1;
  const int64_t acc = kMulti && p.accepted != nullptr ? load_index(p.accepted, p.acc64, n * p.acc_s0) : 1;
  const int64_t start = load_index(p.table, p.tab64, n * p.tab_s0 + (acc - 1) * p.tab_s1);
  T* out = static_cast<T*>(p.out);
  if (start <= 0) {  // padding: zero output, no state read or written
    for (int j = lane; j < kRows; j += 32)
      if (v0 + j < p.V) {
        const int64_t col = static_cast<int64_t>(h) * p.out_s1 + static_cast<int64_t>(v0 + j) * p.out_s2;
        for (int t = 0; t < steps; ++t) out[(n * steps + t) * p.out_s0 + col] = from_f32<T>(0.0f);
      }
    return;
  }
  P* const pool = static_cast<P*>(p.pool);
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot (elements)
  // Element offset of this lane's 4 key dims in row v0 of a head: a multiple of 4 elements.
  const int64_t row0 = static_cast<int64_t>(v0) * kK + lane * kPerLane;
  P* const mine = &stage[warp][0][lane * kPerLane];  // this lane's 4 dims of the warp's row 0
  // The state rows first: they are the bytes that matter, so they go out before anything else.
  {
    const P* src = pool + start * p.pool_s0 + head + row0;
#pragma unroll
    for (int j = 0; j < kRows; ++j)
      if (v0 + j < p.V) stage_state4(mine + j * kK, src + j * kK);
    cp_async_commit();
  }
  const float exp_a_log = expf(p.A_log[h * p.alog_s0]);
  float dt[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dt[i] = p.dt_bias[(static_cast<int64_t>(h) * kK + lane * kPerLane + i) * p.dt_s0];
  // The first token of the first batch is loaded while the state rows are in flight (it does not
  // depend on them): loaded after the wait, its latency came on top of theirs, a third global
  // round trip (slot index -> state -> token) on the path of a small batch. The registers are
  // the same either way (the state waits in shared memory, and cur is live with s[] below).
  // Decode with a bf16 pool also makes it ready for the step (norms, gate, beta: ~150
  // instructions per lane with the accurate expf / log1pf) before the wait, under the state
  // loads instead of after them. Measured on the H200 (docs/perf.md, ninth session): bf16 pools
  // 1.05-1.12x at every B (ptxas then needs 72 registers instead of 80: 28 resident one-warp
  // CTAs instead of 25), f32 pools 1-2% slower at B >= 8 and 5-10% at B = 1 (80 registers
  // either way), so they keep the order; verify too (there the prepared token would live beside
  // the next one's loads: 128 -> 195 registers).
  constexpr bool kEarly = !kMulti && !std::is_same_v<P, float>;
  const TokenRaw first = load_token<T>(p, n * steps, h, lane, v0);
  TokenHead first_x{};
  if constexpr (kEarly) first_x = finish_token(first, dt, exp_a_log, p);
  cp_async_wait_all();
#pragma unroll 1
  for (int b0 = 0; b0 < kRows && v0 + b0 < p.V; b0 += kBatch) {
    const int vb = v0 + b0;  // the batch's first row
    const int64_t out_col = static_cast<int64_t>(h) * p.out_s1 + static_cast<int64_t>(vb + lane) * p.out_s2;
    const bool writes_out = lane < kBatch && vb + lane < p.V;  // lane j < kBatch writes row vb + j
    float4 s[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      s[j] = vb + j < p.V ? load4(mine + (b0 + j) * kK) : make_float4(0.f, 0.f, 0.f, 0.f);
    TokenRaw cur = b0 == 0 ? first : load_token<T>(p, n * steps, h, lane, vb);
#pragma unroll 1
    for (int t = 0; t < steps; ++t) {
      const int64_t row = n * steps + t;
      const int64_t dst = kMulti ? load_index(p.table, p.tab64, n * p.tab_s0 + t * p.tab_s1) : start;
      TokenRaw next = cur;
      if (kMulti && t + 1 < steps) next = load_token<T>(p, row + 1, h, lane, vb);  // in flight during this step
      TokenHead x;
      if (kEarly && b0 == 0) {  // the one step of decode, prepared above
        x = first_x;
      } else {
        x = finish_token(cur, dt, exp_a_log, p);
      }
      float o[kBatch];
      token_step(s, x, o);
      float here = o[0];
#pragma unroll
      for (int j = 1; j < kBatch; ++j)
        if (lane == j) here = o[j];
      if (writes_out) out[row * p.out_s0 + out_col] = from_f32<T>(here);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) round_to_pool<P>(s[j]);  // the state the pool holds (bf16: RNE)
      if (dst > 0) {
        P* d = pool + dst * p.pool_s0 + head + row0 + static_cast<int64_t>(b0) * kK;
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (vb + j < p.V) store_state4<kStream>(d + j * kK, s[j]);
      }
      cur = next;
    }
  }
}

// What both ops' `supports` check beyond the shared argument checks.
inline Support token_steps_supports(const TensorView& pool, int64_t K, int64_t N, int64_t H, int64_t V) {
  if (K != kK) return Support::no(str("K = ", kK, " only (a state row is 4 key dims per lane of a warp); got K = ", K));
  // A lane moves 4 contiguous state elements at once: 16 bytes (f32) or 8 bytes (bf16).
  const size_t align = 4 * dtype_size(pool.dtype);
  if (reinterpret_cast<uintptr_t>(pool.data) % align != 0 || (pool.size(0) > 1 && pool.stride(0) % 4 != 0))
    return Support::no(str("state_pool: slots aligned to 4 elements (", dtype_name(pool.dtype),
                           ": base address a multiple of ", align, " bytes, slot stride a multiple of 4 elements)"));
  if (H > INT32_MAX || V > INT32_MAX || N > INT32_MAX) return Support::no("N, H and V must fit in int32");
  const int64_t tiles = (V + kTileV - 1) / kTileV;
  if (N * H * tiles > INT32_MAX) return Support::no(str("N * H * ceil(V / ", kTileV, ") must fit in int32 (grid size)"));
  return Support::yes();
}

// The params both ops share; the caller sets table, accepted, their strides, N and T.
template <typename Args>
KdaStepParams token_steps_params(const Args& a) {
  KdaStepParams p{};
  p.out = a.out.data;
  p.pool = a.state_pool.data;
  p.qkv = a.mixed_qkv.data;
  p.raw_g = a.raw_g.data;
  p.raw_beta = a.raw_beta.data;
  p.A_log = static_cast<const float*>(a.A_log.data);
  p.dt_bias = static_cast<const float*>(a.dt_bias.data);
  p.out_s0 = a.out.stride(0); p.out_s1 = a.out.stride(1); p.out_s2 = a.out.stride(2);
  p.qkv_s0 = a.mixed_qkv.stride(0);
  p.g_s0 = a.raw_g.stride(0); p.g_s1 = a.raw_g.stride(1); p.g_s2 = a.raw_g.stride(2);
  p.beta_s0 = a.raw_beta.stride(0); p.beta_s1 = a.raw_beta.stride(1);
  p.alog_s0 = a.A_log.stride(0);
  p.dt_s0 = a.dt_bias.stride(0);
  p.pool_s0 = a.state_pool.stride(0);
  p.H = static_cast<int>(a.raw_g.size(1));
  p.V = static_cast<int>(a.out.size(2));
  p.tiles = (p.V + kTileV - 1) / kTileV;
  p.g_bf16 = a.raw_g.dtype == DType::bf16;
  p.beta_bf16 = a.raw_beta.dtype == DType::bf16;
  p.has_lb = a.lower_bound.has_value();
  p.lb = a.lower_bound.value_or(0.0f);
  return p;
}

template <typename T, typename P, bool kMulti, bool kStream = false>
void launch_token_steps_as(const KdaStepParams& p, Stream stream) {
  launch_dependent(kda_token_steps_kernel<T, P, kMulti, kStream>,
                   dim3(static_cast<unsigned>(static_cast<int64_t>(p.N) * p.H * p.tiles)), dim3(kThreads),
                   as_cuda(stream), true, p);
}

// The instantiation for out dtype T: the pool's dtype, and for an f32 decode the store kind.
template <typename T, bool kMulti>
void launch_token_steps_for(const KdaStepParams& p, bool pool_bf16, bool stream_stores, Stream stream) {
  if (pool_bf16) {
    launch_token_steps_as<T, __nv_bfloat16, kMulti>(p, stream);
  } else if (stream_stores) {
    if constexpr (!kMulti) launch_token_steps_as<T, float, false, true>(p, stream);
  } else {
    launch_token_steps_as<T, float, kMulti>(p, stream);
  }
}

// Launches the kernel over N * H * tiles CTAs for the out dtype and the pool dtype (bf16 | f32
// each). Decode with an f32 pool takes streaming state stores where the rule says so (the launch
// log then records `name` + "<streaming stores>").
template <bool kMulti>
void launch_token_steps(const KdaStepParams& p, DType dtype, DType pool_dtype, Stream stream, const char* op,
                        const char* name) {
  if (p.N == 0) return;
  const bool pool_bf16 = pool_dtype == DType::bf16;
  if (!pool_bf16 && pool_dtype != DType::f32)
    throw Error(str(op, ": no CUDA kernel for a state pool of dtype ", dtype_name(pool_dtype)));
  const int64_t state_bytes = static_cast<int64_t>(p.N) * p.H * p.V * kK * static_cast<int64_t>(sizeof(float));
  const bool stream_stores = !kMulti && !pool_bf16 && kda_packed_decode_streaming_stores(state_bytes, l2_bytes());
  switch (dtype) {
    case DType::f32: launch_token_steps_for<float, kMulti>(p, pool_bf16, stream_stores, stream); break;
    case DType::bf16: launch_token_steps_for<__nv_bfloat16, kMulti>(p, pool_bf16, stream_stores, stream); break;
    default: throw Error(str(op, ": no CUDA kernel for dtype ", dtype_name(dtype)));
  }
  if (stream_stores) {
    KESTREL_LAUNCHED(str(name, "<streaming stores>").c_str());
  } else {
    KESTREL_LAUNCHED(name);
  }
}

}  // namespace kestrel::ops::cuda::kda
