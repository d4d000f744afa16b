// kda_chunk_prefill, CUDA (sm_90a): varlen KDA prefill in chunks of 64 tokens (UT transform / WY
// form), initial states from pool slots, final states back to them, optional checkpoints after
// every full chunk. Semantics: docs/ops/kda.md; CPU reference: src/ops/cpu/kda_chunk_prefill.cpp.
// Verified on an H200 (docs/verification.md); speed (slower than fla): docs/perf.md.
//
// This first version is f32 SIMT (FFMA) throughout, with the work split and the shared-memory
// layout a tensor-core version keeps (see "Tensor cores" at the end of this note).
//
// Algorithm, per (sequence, head), chunk by chunk from the sequence's first token; a chunk has
// C <= 64 tokens, rows C .. 63 are padded with q = k = v = 0, g = 0, beta = 0 (they then add
// nothing anywhere, and Gam_63 = Gam_{C-1}). Gam_i = g_0 + ... + g_i (in-chunk cumsum, a K-vector);
// blocks I = 0..3 of 16 rows; b_I = Gam at row 16I + 15 (b_3 = Gam_last), b_{-1} = 0.
//   P1  load: q, k L2-normalised (q scaled by 1/sqrt(K)), g = gate(raw_g + dt_bias), beta
//       (a warp per row), and this thread's v elements into registers;
//   P2  Gam = cumsum(g) per key dim, and b_I;
//   P3a diagonal 16x16 blocks of kk[i][j] = sum_d k_i k_j e^(Gam_i - Gam_j) and
//       qk[i][j] = sum_d q_i k_j e^(Gam_i - Gam_j): a running product over i of e^(g_i) per (j, d)
//       (one expf per (i, d)); the 32 dots of a row are reduced by one reduce-scatter butterfly
//       (31 shuffles). L = beta_i kk (strictly lower), Aqk = qk (lower incl. the diagonal);
//   P3b factor in place: qr = q e^(Gam - b_{I-1}), kr = k e^(Gam - b_{I-1}), kc = k e^(b_I - Gam)
//       (I = the row's block), and the per-d vectors c_IJ = e^(b_{I-1} - b_J), e^(b_{I-1}),
//       e^(Gam_last - b_J);
//   P3c off-diagonal blocks I > J: kk[i][j] = sum_d kr_i c_IJ kc_j, qk likewise with qr;
//   P3d rescale in place: Qg = q e^Gam, Kg = k e^Gam, Kd = k e^(Gam_last - Gam);
//   P5  [Qg; Kg] S (128 x 128 by 128 x 32): O = Qg S kept in registers; Y = beta (V - Kg S);
//       warps 0..3 also invert the diagonal blocks of (I + L) (16-step forward substitution);
//   P4  the off-diagonal blocks of X = (I + L)^-1, block row by block row:
//       X_IJ = -X_II sum_{M=J}^{I-1} L_IM X_MJ (3 block rows, 2 barriers each);
//   P6  Vn = X Y  (= Tm (V - Kg S) = U - W S with Tm = X diag(beta): W is never formed);
//   P7  O += Aqk Vn, stored; S = diag(e^Gam_last) S + Kd^T Vn; checkpoint after a full chunk.
// Gates, the numerically safe way: every exponential the kernel forms is of a difference
// Gam_i - Gam_j with i >= j, measured from a per-block reference point (b_{I-1}, the Gam just
// before the row's block, or b_J, the Gam at the end of the column's block), so every factor is
// <= 1: nothing overflows however strong the decay (the ungated softplus form has no bound on g),
// and a factor that underflows to 0 stands for a true value that is below f32's range anyway.
// fla factorises through a sub-chunk midpoint, whose factors can exceed 1 (bounded only for a
// gate with a lower bound); splitting at block boundaries, with the middle factor c_IJ for
// blocks that are not adjacent, keeps all three factors <= 1. The diagonal blocks, where no
// boundary separates i from j, use the running product instead.
//
// Work split: one CTA of 256 threads per (sequence, head, tile of 32 value columns): N * H * V/32
// CTAs, 128 at B = 1, H = 32, V = 128 (132 SMs). The state tile S[:, v0 .. v0+31] (128 x 32 f32,
// 16 KB) lives in shared memory across the sequence; the V-independent work (P1 - P4: gates,
// kk, qk, the UT transform) is recomputed by each of the 4 tiles of a head: about 1.4 MFLOP of
// the ~3.4 MFLOP a CTA does per chunk (a cluster sharing it through DSMEM is the obvious next step). Chunks are sequential (the state carries).
//
// Thread maps (tid 0..255, warp w, lane l):
//   P5, P6, P7-out: rows i in {rg, rg + 32}, columns v in {vg + 8b}, rg = tid / 8, vg = tid % 8;
//   P7-state, state load/store: S^T rows v in {w + 8b}, key dims 4l .. 4l+3 (one float4, so a
//   warp moves a 512-byte state row of the pool at once).
// Bank conflicts: 128-wide rows are padded to 132 floats and 64-wide rows to 68, so the eight
// 16-byte loads of a quarter warp from eight different rows land in distinct banks, and loads
// of one row by several lanes are broadcasts.
//
// Shared memory (floats; 183,552 bytes, 1 CTA per SM; opted in with cudaFuncSetAttribute):
//   q   [64][132]  q_hat -> qr -> Qg           k   [64][132]  k_hat -> kr -> Kg
//   g   [64][132]  g -> Gam -> kc -> Kd        st  [32][132]  S^T of the tile (v rows, K inner)
//   a   [64][68]   L -> X = (I + L)^-1         aqk [64][68]   Aqk
//   yt  [32][68]   Y^T                         vnt [32][68]   Vn^T
//   r [3][16][16] solve scratch; bend [4][128] b_I; cf [6][128] c_IJ; eb [5][128] e^(b_{I-1})
//   (eb[4] = e^Gam_last); ed [4][128] e^(Gam_last - b_J); beta [64].
//   Upper blocks of a and aqk are zeroed once and never written again; every other entry a
//   phase reads is written earlier in the same chunk.
//
// Bytes per (token, head), what must move: (2K + V) * sizeof(T) (q, k, v) + K * sizeof(raw_g)
// + beta + V * sizeof(T) (out), ~1.3 KB in bf16; plus per (sequence, head) the state, K * V * 4
// bytes read and written once (64 KB each way), and K * V * 4 per checkpoint (1 KB per token).
// Each tile CTA re-reads q, k and raw_g (L2 hits: 4 CTAs of a head run at the same time).
// FLOPs per (token, head) of the chunk algorithm: 6 K V (Qg S, Kg S, Kd^T Vn)
// + 2 (C + 1) K (kk, qk, lower triangles) + 2 (C + 1) V (X Y, Aqk Vn) + ~C^2 / 3 (the solve)
// ~ 133 K FLOPs at K = V = 128, C = 64 (bench/kda_chunk_prefill.cpp uses this count); the
// kernel does ~1.6x that (the V-independent part recomputed per tile, whole 16x16 blocks).
//
// Precision: all f32 (FFMA, expf, log1pf), the state f32 in shared memory across chunks; error
// against the f64 reference is dominated by f32 rounding of 128-long dot products (~1e-6
// relative), far inside the 4e-3 allowance.
// Tensor cores (next step; not in this version): the five 64 x 128 x 32 and 64 x 64 x 32
// products map onto mma.sync m16n8k8 tf32 (the operands are already f32 in shared memory, rows
// padded for conflict-free fragment loads). tf32 keeps 10 mantissa bits (2^-11 relative per
// operand); on the matrix's generators that bounds a 128-long dot of unit vectors against a
// state with entries <= 0.5 to ~3e-4 absolute, inside 4e-3 but carried from chunk to chunk
// through S, so the plan is 3xTF32 (split hi/lo, ~f32 accuracy at 3x the MMA count) for the
// products with S and plain tf32 for kk / qk, measured against the reference before adopting.
#include "kda_common.cuh"
#include "kestrel/ops/kda_chunk_prefill.h"

#include <mutex>

namespace kestrel::ops::cuda {
namespace kda_chunk {

using kda::load_index;
using kda::load_real;

inline constexpr int kK = 128;        // key head dim the kernel is written for
inline constexpr int kC = 64;         // chunk (docs/ops/kda.md)
inline constexpr int kB = 16;         // rows per block of the chunk
inline constexpr int kTileV = 32;     // value columns per CTA
inline constexpr int kThreads = 256;  // 8 warps
inline constexpr int kLdK = kK + 4;   // padded row of 128 floats (see "Bank conflicts")
inline constexpr int kLdC = kC + 4;   // padded row of 64 floats
static_assert(kC == 4 * kB && kThreads == 256 && kTileV == 32, "the thread maps assume these sizes");

struct Params {
  void* out;                 // [T, H, V] bf16 | f32 (dtype of qkv), any strides
  float* pool;               // [slots, H, V, K] f32, slots 16-byte aligned
  float* ckpt;               // [P, H, V, K] f32 or nullptr
  const void* qkv;           // [T, >= 2HK + HV], channel stride 1
  const void* raw_g;         // [T, H, K] bf16 | f32
  const void* raw_beta;      // [T, H] bf16 | f32
  const float* A_log;        // [H]
  const float* dt_bias;      // [H * K]
  const void* cu_seqlens;    // [N + 1] i32 | i64
  const void* slots;         // [N] i32 | i64
  const void* has_init;      // [N] i32 | i64, or nullptr (every sequence reads its slot)
  const void* cu_ckpt;       // [N + 1] i32 | i64 with ckpt
  int64_t out_s0, out_s1, out_s2, qkv_s0, g_s0, g_s1, g_s2, beta_s0, beta_s1, alog_s0, dt_s0;
  int64_t pool_s0, ckpt_s0, cu_s0, slot_s0, init_s0, cuk_s0;
  int N, H, V, tiles;
  bool g_bf16, beta_bf16, cu64, slot64, init64, cuk64, has_lb;
  float lb;
};

struct alignas(16) Smem {
  float q[kC][kLdK];
  float k[kC][kLdK];
  float g[kC][kLdK];
  float st[kTileV][kLdK];
  float a[kC][kLdC];
  float aqk[kC][kLdC];
  float yt[kTileV][kLdC];
  float vnt[kTileV][kLdC];
  float r[3][kB][kB];
  float bend[4][kK];
  float cf[6][kK];
  float eb[5][kK];
  float ed[4][kK];
  float beta[kC];
};
static_assert(sizeof(Smem) == 183552, "the design note states this size");

// The off-diagonal block pairs (I, J), I > J, in the order of cf.
__device__ __forceinline__ int pair_i(int p) { return p == 0 ? 1 : p < 3 ? 2 : 3; }
__device__ __forceinline__ int pair_j(int p) { return p == 0 ? 0 : p < 3 ? p - 1 : p - 3; }

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 exp4(float4 a) { return make_float4(expf(a.x), expf(a.y), expf(a.z), expf(a.w)); }
__device__ __forceinline__ float4 sub4(float4 a, float4 b) { return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

// Reduce-scatter over a warp: v[0 .. 2*kHalf) summed over the 32 lanes, lane l ending with the
// total of index l in v[0] (each step keeps the half selected by one lane bit and adds the
// partner's copy of it). 31 shuffles for 32 sums instead of 32 * 5.
template <int kHalf>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[32], int lane) {
  const bool hi = (lane & kHalf) != 0;
#pragma unroll
  for (int x = 0; x < kHalf; ++x) {
    const float send = hi ? v[x] : v[x + kHalf];
    const float keep = hi ? v[x + kHalf] : v[x];
    v[x] = keep + __shfl_xor_sync(0xffffffffu, send, kHalf);
  }
  if constexpr (kHalf > 1) reduce_scatter_step<kHalf / 2>(v, lane);
}

// P1: token rows of the chunk into shared memory (a warp per row; lane l owns key dims 4l..4l+3).
template <typename T>
__device__ __forceinline__ void load_rows(const Params& p, Smem& s, int64_t row0, int C, int h, int warp, int lane,
                                          const float (&dt)[4], float exp_a_log) {
  constexpr float kEps = 1e-6f;                      // inside the sqrt (kda_math.h kL2Eps)
  constexpr float kInvSqrtK = 0.08838834764831845f;  // 1 / sqrt(128), the fixed q scale
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const int d0 = 4 * lane;
#pragma unroll 2
  for (int i = warp; i < kC; i += kThreads / 32) {
    float4 q = make_float4(0.f, 0.f, 0.f, 0.f), k = q, g = q;
    float beta = 0.0f;
    if (i < C) {  // warp-uniform
      const int64_t row = row0 + i;
      const T* x = static_cast<const T*>(p.qkv) + row * p.qkv_s0 + static_cast<int64_t>(h) * kK + d0;
      float qv[4], kv[4], gv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        qv[e] = to_f32(x[e]);
        kv[e] = to_f32(x[HK + e]);
        gv[e] = load_real(p.raw_g, p.g_bf16, row * p.g_s0 + h * p.g_s1 + (d0 + e) * p.g_s2);
      }
      float ss[2] = {0.0f, 0.0f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ss[0] = fmaf(qv[e], qv[e], ss[0]);
        ss[1] = fmaf(kv[e], kv[e], ss[1]);
      }
      kda::warp_sum_n<2>(ss);
      const float rq = kInvSqrtK / sqrtf(ss[0] + kEps), rk = 1.0f / sqrtf(ss[1] + kEps);
#pragma unroll
      for (int e = 0; e < 4; ++e) gv[e] = kda::gate(gv[e] + dt[e], exp_a_log, p.has_lb, p.lb);
      q = make_float4(qv[0] * rq, qv[1] * rq, qv[2] * rq, qv[3] * rq);
      k = make_float4(kv[0] * rk, kv[1] * rk, kv[2] * rk, kv[3] * rk);
      g = make_float4(gv[0], gv[1], gv[2], gv[3]);
      beta = kda::sigmoid(load_real(p.raw_beta, p.beta_bf16, row * p.beta_s0 + h * p.beta_s1));
    }
    st4(&s.q[i][d0], q);
    st4(&s.k[i][d0], k);
    st4(&s.g[i][d0], g);
    if (lane == 0) s.beta[i] = beta;
  }
}

// P3a: the diagonal block I, rows [ib, ie) of it, by one warp. kp[j] = k_j e^(Gam_i - Gam_j) for
// the current row i (a running product: one expf per (i, d)), then the 16 kk and 16 qk dots of
// row i, reduced so that lane j < 16 holds kk[i][j] and lane 16 + j holds qk[i][j].
__device__ __forceinline__ void diag_block(Smem& s, int I, int ib, int ie, int lane) {
  const int base = I * kB, d0 = 4 * lane;
  float4 kp[kB];
#pragma unroll
  for (int j = 0; j < kB; ++j) kp[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 gprev = ld4(&s.g[base][d0]);
#pragma unroll
  for (int i = 0; i < kB; ++i) {
    if (i >= ie) break;  // warp-uniform
    const float4 ki = ld4(&s.k[base + i][d0]);
    if (i > 0) {
      const float4 gi = ld4(&s.g[base + i][d0]);
      const float4 e = exp4(sub4(gi, gprev));  // e^(g_i) <= 1
      gprev = gi;
#pragma unroll
      for (int j = 0; j < i; ++j) kp[j] = mul4(kp[j], e);
    }
    kp[i] = ki;
    if (i >= ib) {  // warp-uniform
      const float4 qi = ld4(&s.q[base + i][d0]);
      float v[32];
#pragma unroll
      for (int j = 0; j < kB; ++j) {
        v[j] = dot4(ki, kp[j], 0.0f);
        v[kB + j] = dot4(qi, kp[j], 0.0f);
      }
      reduce_scatter_step<16>(v, lane);
      const int j = lane & (kB - 1);
      if (lane < kB) {
        s.a[base + i][base + j] = j < i ? s.beta[base + i] * v[0] : 0.0f;  // L, strictly lower
      } else {
        s.aqk[base + i][base + j] = j <= i ? v[0] : 0.0f;
      }
    }
  }
}

// 2 x 4 outputs (rows i0, i0 + 32; columns c0 + 8b) of A [64 x ld] times B^T [32 x ld]^T over
// n inner elements, both row-major with the inner dim contiguous.
__device__ __forceinline__ void mm_2x4(const float* a0, const float* a1, const float* b0, int ldb, int n,
                                       float (&acc)[2][4]) {
#pragma unroll 4
  for (int x = 0; x < n; x += 4) {
    const float4 av0 = ld4(a0 + x), av1 = ld4(a1 + x);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float4 bv = ld4(b0 + 8 * b * ldb + x);
      acc[0][b] = dot4(av0, bv, acc[0][b]);
      acc[1][b] = dot4(av1, bv, acc[1][b]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) kda_chunk_prefill_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int tile = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.tiles));
  const int64_t nh = blockIdx.x / static_cast<unsigned>(p.tiles);
  const int h = static_cast<int>(nh % p.H);
  const int64_t n = nh / p.H;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int v0 = tile * kTileV;
  const int64_t bos = load_index(p.cu_seqlens, p.cu64, n * p.cu_s0);
  const int64_t len = load_index(p.cu_seqlens, p.cu64, (n + 1) * p.cu_s0) - bos;
  const int64_t slot = load_index(p.slots, p.slot64, n * p.slot_s0);
  T* out = static_cast<T*>(p.out);
  const int64_t out_h = static_cast<int64_t>(h) * p.out_s1;
  if (slot <= 0) {  // padding: zero output rows, no state read or written (uniform: no barrier yet)
    for (int64_t x = tid; x < len * kTileV; x += kThreads)
      out[(bos + x / kTileV) * p.out_s0 + out_h + (v0 + x % kTileV) * p.out_s2] = from_f32<T>(0.0f);
    return;
  }
  const bool read_state = p.has_init == nullptr || load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot
  float* slot_head = p.pool + slot * p.pool_s0 + head;
  const int64_t ck0 = p.ckpt != nullptr ? load_index(p.cu_ckpt, p.cuk64, n * p.cuk_s0) : 0;

  // The state tile, S^T rows v = warp + 8b, key dims 4 lane .. 4 lane + 3; the upper blocks of
  // a and aqk (never written after this).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    const float4 x = read_state ? ld4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
    st4(&s.st[v][4 * lane], x);
  }
  for (int x = tid; x < kC * kC; x += kThreads) {
    const int i = x / kC, j = x % kC;
    if (j / kB > i / kB) s.a[i][j] = s.aqk[i][j] = 0.0f;
  }

  const float exp_a_log = expf(p.A_log[h * p.alog_s0]);
  float dt[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) dt[e] = p.dt_bias[(static_cast<int64_t>(h) * kK + 4 * lane + e) * p.dt_s0];
  const int rg = tid / 8, vg = tid % 8;  // P5 / P6 / P7-out map: rows rg, rg + 32; columns vg + 8b
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const T* vsrc = static_cast<const T*>(p.qkv) + 2 * HK + static_cast<int64_t>(h) * p.V + v0 + vg;

#pragma unroll 1
  for (int64_t c0 = 0; c0 < len; c0 += kC) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
    const int64_t row0 = bos + c0;
    // ---- P1: rows into shared memory; this thread's v elements into registers.
    float vr[2][4];
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int i = rg + 32 * a;
#pragma unroll
      for (int b = 0; b < 4; ++b) vr[a][b] = i < C ? to_f32(vsrc[(row0 + i) * p.qkv_s0 + 8 * b]) : 0.0f;
    }
    load_rows<T>(p, s, row0, C, h, warp, lane, dt, exp_a_log);
    __syncthreads();
    // ---- P2: Gam = cumsum(g) over the chunk, per key dim; b_I.
    if (tid < kK) {
      float run = 0.0f;
#pragma unroll 4
      for (int i = 0; i < kC; ++i) {
        run += s.g[i][tid];
        s.g[i][tid] = run;
        if (i % kB == kB - 1) s.bend[i / kB][tid] = run;
      }
    }
    __syncthreads();
    // ---- P3a: diagonal blocks, two warps each (rows 0..7 and 8..15).
    diag_block(s, warp / 2, (warp % 2) * 8, (warp % 2) * 8 + 8, lane);
    __syncthreads();
    // ---- P3b: factor q, k, g in place relative to the block boundaries; the per-d vectors.
#pragma unroll 2
    for (int x = tid; x < kC * (kK / 4); x += kThreads) {
      const int i = x / (kK / 4), d = 4 * (x % (kK / 4)), I = i / kB;
      const float4 gam = ld4(&s.g[i][d]);
      const float4 ref = I > 0 ? ld4(&s.bend[I - 1][d]) : make_float4(0.f, 0.f, 0.f, 0.f);
      const float4 rf = exp4(sub4(gam, ref));               // e^(Gam_i - b_{I-1}) <= 1
      const float4 cf = exp4(sub4(ld4(&s.bend[I][d]), gam));  // e^(b_I - Gam_i) <= 1
      const float4 kv = ld4(&s.k[i][d]);
      st4(&s.q[i][d], mul4(ld4(&s.q[i][d]), rf));
      st4(&s.k[i][d], mul4(kv, rf));
      st4(&s.g[i][d], mul4(kv, cf));
    }
    for (int x = tid; x < 15 * kK; x += kThreads) {
      const int r = x / kK, d = x % kK;
      if (r < 6) {
        s.cf[r][d] = expf(s.bend[pair_i(r) - 1][d] - s.bend[pair_j(r)][d]);
      } else if (r < 11) {
        s.eb[r - 6][d] = r == 6 ? 1.0f : expf(s.bend[r - 7][d]);
      } else {
        s.ed[r - 11][d] = expf(s.bend[3][d] - s.bend[r - 11][d]);
      }
    }
    __syncthreads();
    // ---- P3c: off-diagonal blocks (6 pairs x 32 threads; rows rq, rq + 8, columns cq + 4c).
    if (tid < 6 * 32) {
      const int pr = tid / 32, w = tid % 32, rq = w / 4, cq = w % 4;
      const int i0 = pair_i(pr) * kB + rq, jb = pair_j(pr) * kB + cq;
      float ak[2][4] = {}, aq[2][4] = {};
#pragma unroll 2
      for (int d = 0; d < kK; d += 4) {
        const float4 c = ld4(&s.cf[pr][d]);
        const float4 q0 = mul4(ld4(&s.q[i0][d]), c), q1 = mul4(ld4(&s.q[i0 + 8][d]), c);
        const float4 k0 = mul4(ld4(&s.k[i0][d]), c), k1 = mul4(ld4(&s.k[i0 + 8][d]), c);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          const float4 kc = ld4(&s.g[jb + 4 * cc][d]);
          ak[0][cc] = dot4(k0, kc, ak[0][cc]);
          ak[1][cc] = dot4(k1, kc, ak[1][cc]);
          aq[0][cc] = dot4(q0, kc, aq[0][cc]);
          aq[1][cc] = dot4(q1, kc, aq[1][cc]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int i = i0 + 8 * rr;
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          s.a[i][jb + 4 * cc] = s.beta[i] * ak[rr][cc];
          s.aqk[i][jb + 4 * cc] = aq[rr][cc];
        }
      }
    }
    __syncthreads();
    // ---- P3d: Qg = qr e^(b_{I-1}), Kg = kr e^(b_{I-1}), Kd = kc e^(Gam_last - b_I).
#pragma unroll 2
    for (int x = tid; x < kC * (kK / 4); x += kThreads) {
      const int i = x / (kK / 4), d = 4 * (x % (kK / 4)), I = i / kB;
      const float4 e = ld4(&s.eb[I][d]);
      st4(&s.q[i][d], mul4(ld4(&s.q[i][d]), e));
      st4(&s.k[i][d], mul4(ld4(&s.k[i][d]), e));
      st4(&s.g[i][d], mul4(ld4(&s.g[i][d]), ld4(&s.ed[I][d])));
    }
    __syncthreads();
    // ---- P5: O = Qg S (kept), Y = beta (V - Kg S) -> yt; warps 0..3 invert the diagonal blocks.
    float o[2][4] = {};
    {
      float pk[2][4] = {};
      mm_2x4(&s.q[rg][0], &s.q[rg + 32][0], &s.st[vg][0], kLdK, kK, o);
      mm_2x4(&s.k[rg][0], &s.k[rg + 32][0], &s.st[vg][0], kLdK, kK, pk);
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        const int i = rg + 32 * a;
#pragma unroll
        for (int b = 0; b < 4; ++b) s.yt[vg + 8 * b][i] = s.beta[i] * (vr[a][b] - pk[a][b]);
      }
    }
    if (warp < 4) {  // X_II = (I + L_II)^-1: lane j < 16 computes column j by forward substitution
      const int base = warp * kB, j = lane % kB;
      float x[kB];
#pragma unroll
      for (int i = 0; i < kB; ++i) {
        float acc = i == j ? 1.0f : 0.0f;
#pragma unroll
        for (int m = 0; m < i; ++m) acc = fmaf(-s.a[base + i][base + m], x[m], acc);
        x[i] = acc;
      }
      __syncwarp();  // every lane's reads of L_II before any write of X_II
      if (lane < kB) {
#pragma unroll
        for (int i = 0; i < kB; ++i) s.a[base + i][base + j] = x[i];
      }
    }
    __syncthreads();
    // ---- P4: X_IJ = -X_II sum_{M=J}^{I-1} L_IM X_MJ, block row by block row.
#pragma unroll 1
    for (int I = 1; I < 4; ++I) {
      for (int x = tid; x < I * kB * kB; x += kThreads) {
        const int J = x / (kB * kB), r = x / kB % kB, c = x % kB;
        float acc = 0.0f;
        for (int m = J * kB; m < I * kB; ++m) acc = fmaf(s.a[I * kB + r][m], s.a[m][J * kB + c], acc);
        s.r[J][r][c] = acc;
      }
      __syncthreads();
      for (int x = tid; x < I * kB * kB; x += kThreads) {
        const int J = x / (kB * kB), r = x / kB % kB, c = x % kB;
        float acc = 0.0f;
#pragma unroll
        for (int m = 0; m < kB; ++m) acc = fmaf(s.a[I * kB + r][I * kB + m], s.r[J][m][c], acc);
        s.a[I * kB + r][J * kB + c] = -acc;
      }
      __syncthreads();
    }
    // ---- P6: Vn = X Y -> vnt (X is lower triangular: columns past the row's block are 0).
    const int jend = ((rg + 32) / kB + 1) * kB;  // the same for the 4 row groups of a warp
    {
      float vn[2][4] = {};
      mm_2x4(&s.a[rg][0], &s.a[rg + 32][0], &s.yt[vg][0], kLdC, jend, vn);
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) s.vnt[vg + 8 * b][rg + 32 * a] = vn[a][b];
    }
    __syncthreads();
    // ---- P7: O += Aqk Vn, stored; S = diag(e^Gam_last) S + Kd^T Vn; checkpoint.
    mm_2x4(&s.aqk[rg][0], &s.aqk[rg + 32][0], &s.vnt[vg][0], kLdC, jend, o);
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int i = rg + 32 * a;
      if (i < C) {
        T* dst = out + (row0 + i) * p.out_s0 + out_h;
#pragma unroll
        for (int b = 0; b < 4; ++b) dst[(v0 + vg + 8 * b) * p.out_s2] = from_f32<T>(o[a][b]);
      }
    }
    {
      const int d = 4 * lane;
      const float4 decay = ld4(&s.eb[4][d]);
      float4 acc[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) acc[b] = mul4(ld4(&s.st[warp + 8 * b][d]), decay);
#pragma unroll 2
      for (int j = 0; j < kC; j += 4) {
        const float4 kd0 = ld4(&s.g[j][d]), kd1 = ld4(&s.g[j + 1][d]);
        const float4 kd2 = ld4(&s.g[j + 2][d]), kd3 = ld4(&s.g[j + 3][d]);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const float4 vn = ld4(&s.vnt[warp + 8 * b][j]);
          acc[b].x = fmaf(vn.w, kd3.x, fmaf(vn.z, kd2.x, fmaf(vn.y, kd1.x, fmaf(vn.x, kd0.x, acc[b].x))));
          acc[b].y = fmaf(vn.w, kd3.y, fmaf(vn.z, kd2.y, fmaf(vn.y, kd1.y, fmaf(vn.x, kd0.y, acc[b].y))));
          acc[b].z = fmaf(vn.w, kd3.z, fmaf(vn.z, kd2.z, fmaf(vn.y, kd1.z, fmaf(vn.x, kd0.z, acc[b].z))));
          acc[b].w = fmaf(vn.w, kd3.w, fmaf(vn.z, kd2.w, fmaf(vn.y, kd1.w, fmaf(vn.x, kd0.w, acc[b].w))));
        }
      }
      float* ck = p.ckpt != nullptr && C == kC ? p.ckpt + (ck0 + c0 / kC) * p.ckpt_s0 + head : nullptr;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int v = warp + 8 * b;
        st4(&s.st[v][d], acc[b]);
        if (ck != nullptr) st4(ck + static_cast<int64_t>(v0 + v) * kK + d, acc[b]);
      }
    }
    __syncthreads();  // the next chunk overwrites q, k, g, a, aqk, yt, vnt and reads st
  }
  // The final state (each thread stores the elements it owns; an empty sequence stores its
  // initial state, or zeros).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    st4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane, ld4(&s.st[v][4 * lane]));
  }
}

template <typename T>
void launch(const Params& p, cudaStream_t stream) {
  static std::once_flag once;
  std::call_once(once, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(kda_chunk_prefill_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(sizeof(Smem))));
  });
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.N) * p.H * p.tiles);
  kda_chunk_prefill_kernel<T><<<blocks, kThreads, sizeof(Smem), stream>>>(p);
  KESTREL_LAUNCHED("kda_chunk_prefill_kernel");
}

bool slots_aligned(const TensorView& pool) {
  return reinterpret_cast<uintptr_t>(pool.data) % 16 == 0 && (pool.size(0) <= 1 || pool.stride(0) % 4 == 0);
}

}  // namespace kda_chunk

Support kda_chunk_prefill_supports(const KdaChunkPrefillArgs& a) {
  using namespace kda_chunk;
  const int64_t K = a.raw_g.size(2), V = a.out.size(2), H = a.raw_g.size(1), N = a.state_indices.size(0);
  if (K != kK) return Support::no(str("K = ", kK, " only (a state row is one float4 per lane); got K = ", K));
  if (V % kTileV != 0) return Support::no(str("V a multiple of ", kTileV, " (the value tile of a CTA); got V = ", V));
  if (a.state_pool.dtype != DType::f32)
    return Support::no(str("state_pool: f32 only in this kernel (got ", dtype_name(a.state_pool.dtype),
                           "; bf16 pools: kda_packed_decode, kda_recurrent, and the CPU reference)"));
  if (!slots_aligned(a.state_pool))
    return Support::no("state_pool: slots 16-byte aligned (base address and slot stride a multiple of 4 floats)");
  if (a.checkpoints.defined() && !slots_aligned(a.checkpoints))
    return Support::no("checkpoints: rows 16-byte aligned (base address and row stride a multiple of 4 floats)");
  if (H > INT32_MAX || V > INT32_MAX || N > INT32_MAX) return Support::no("N, H and V must fit in int32");
  if (N * H * (V / kTileV) > INT32_MAX) return Support::no(str("N * H * V / ", kTileV, " must fit in int32 (grid size)"));
  return Support::yes();
}

void kda_chunk_prefill(const KdaChunkPrefillArgs& a, Stream stream) {
  using namespace kda_chunk;
  Params p{};
  p.out = a.out.data;
  p.pool = static_cast<float*>(a.state_pool.data);
  p.ckpt = a.checkpoints.defined() ? static_cast<float*>(a.checkpoints.data) : nullptr;
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
  p.g_bf16 = a.raw_g.dtype == DType::bf16;
  p.beta_bf16 = a.raw_beta.dtype == DType::bf16;
  p.cu64 = a.cu_seqlens.dtype == DType::i64;
  p.slot64 = a.state_indices.dtype == DType::i64;
  p.init64 = a.has_initial_state.defined() && a.has_initial_state.dtype == DType::i64;
  p.cuk64 = a.checkpoints.defined() && a.cu_checkpoints.dtype == DType::i64;
  p.has_lb = a.lower_bound.has_value();
  p.lb = a.lower_bound.value_or(0.0f);
  if (p.N == 0 || p.H == 0 || p.tiles == 0) return;
  switch (a.out.dtype) {
    case DType::f32: launch<float>(p, as_cuda(stream)); break;
    case DType::bf16: launch<__nv_bfloat16>(p, as_cuda(stream)); break;
    default: throw Error(str("kda_chunk_prefill: no CUDA kernel for dtype ", dtype_name(a.out.dtype)));
  }
}

}  // namespace kestrel::ops::cuda
