// kda_chunk_prefill, CUDA, kernel 1 of 2: the intra-chunk work, one CTA per (chunk slot, head),
// all chunks of all sequences in parallel (design note: kda_chunk_prefill.cu). Everything here
// is independent of the state: the gates and their in-chunk cumsum, the gated kk / qk products,
// the UT transform, and the chunk's Qg, Kg, Kd, Tm, Aqk and decay, written to the workspace
// (kda_chunk_prefill_common.cuh) for the state kernel.
//
// Phases (the same algorithm, blocks, reference points and solve order as the single-kernel v1,
// which passed the matrix on an H200), barriers between them:
//   P1  q, k L2-normalised (q scaled by 1/sqrt(K)), g = gate(raw_g + dt_bias), beta (a warp per row);
//   P2  Gam = cumsum(g) per key dim, and the block ends b_I = Gam at row 16 I + 15;
//   P3a diagonal 16 x 16 blocks of kk and qk by a running product of e^(g_i) (factors <= 1), only
//       when some key dim decays by more than kDiagMaxDrop within a block; else they go to P3c;
//   P3b factor in place: qr = q e^(Gam - b_{I-1}), kr = k e^(Gam - b_{I-1}), kc = k e^(b_I - Gam),
//       and the per-d vectors c_IJ = e^(b_{I-1} - b_J), e^(b_{I-1}), e^(Gam_last - b_J);
//   P3c off-diagonal blocks I > J: kk = kr c_IJ kc, qk = qr c_IJ kc (mma.sync 3xTF32, mma_tf32.cuh),
//       and the diagonal ones with c_II = e^(b_{I-1} - b_I) >= 1 when that is <= e^kDiagMaxDrop;
//   P3d Qg = qr e^(b_{I-1}), Kg = kr e^(b_{I-1}), Kd = kc e^(Gam_last - b_I); warps 0..3 invert
//       the diagonal blocks of (I + L) (forward substitution, a lane per column);
//   P4  off-diagonal blocks of X = (I + L)^-1: X_IJ = -X_II sum_{M=J}^{I-1} L_IM X_MJ;
//   P5  store: Qg, Kg, Kd, Tm = X diag(beta), Aqk (their lower 16 x 16 block triangles),
//       e^Gam_last (float4, coalesced).
// Every exponential is of a difference Gam_i - Gam_j with i >= j, so every factor is <= 1, except
// the diagonal c_II, used only while it is <= e^40 (all products stay finite and normal).
//
// Shared memory (floats, 151,296 bytes):
//   q [64][132] q_hat -> qr -> Qg     k [64][132] k_hat -> kr -> Kg     g [64][132] g -> Gam -> kc -> Kd
//   a [64][68] L -> X                 aqk [64][68]                      r [3][16][16] solve scratch
//   bend [4][128] b_I; cf [10][128] c_IJ (6 off-diagonal, 4 diagonal pairs); eb [5][128] e^(b_{I-1}) (eb[4] = e^Gam_last);
//   ed [4][128] e^(Gam_last - b_J); beta [64].
#pragma once

#include "kda_chunk_prefill_common.cuh"
#include "mma_tf32.cuh"

namespace kestrel::ops::cuda::kda_chunk {

struct alignas(16) IntraSmem {
  float q[kC][kLdK];
  float k[kC][kLdK];
  float g[kC][kLdK];
  float a[kC][kLdC];
  float aqk[kC][kLdC];
  float r[3][kB][kB];
  float bend[4][kK];
  float cf[10][kK];
  float eb[5][kK];
  float ed[4][kK];
  float beta[kC];
};
static_assert(sizeof(IntraSmem) == 151296, "the note above states this size");

// The block pairs (I, J) in the order of cf: 0..5 off-diagonal (I > J), 6..9 diagonal (I = J = p - 6).
__device__ __forceinline__ int pair_i(int p) { return p == 0 ? 1 : p < 3 ? 2 : p < 6 ? 3 : p - 6; }
__device__ __forceinline__ int pair_j(int p) { return p == 0 ? 0 : p < 3 ? p - 1 : p < 6 ? p - 3 : p - 6; }

// Diagonal blocks on tensor cores when every key dim decays by at most this much (in log) across
// every 16-row block: their factors e^(b_{I-1} - b_I) then stay below e^40 ~ 2.4e17, so kr c kc
// products (true value <= |k_i k_j|) are formed from finite f32 / tf32 operands far inside the
// range (kr >= e^-40 |k|, no denormals); a stronger decay takes the running product (P3a).
inline constexpr float kDiagMaxDrop = 40.0f;

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
// The warp's 8 rows are loaded first, all 104 scalar loads in flight together (the phase is
// latency-bound), then normalised and stored.
template <typename T>
__device__ __forceinline__ void load_rows(const Params& p, IntraSmem& s, int64_t row0, int C, int h, int warp,
                                          int lane, const float (&dt)[4], float exp_a_log) {
  constexpr float kEps = 1e-6f;                      // inside the sqrt (kda_math.h kL2Eps)
  constexpr float kInvSqrtK = 0.08838834764831845f;  // 1 / sqrt(128), the fixed q scale
  constexpr int kRows = kC / (kThreads / 32);        // 8 rows per warp: warp + 8 r
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const int d0 = 4 * lane;
  float qv[kRows][4], kv[kRows][4], gv[kRows][4], bv[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp + 8 * r;
    const int64_t row = row0 + i;
    const bool live = i < C;  // warp-uniform
    const T* x = static_cast<const T*>(p.qkv) + row * p.qkv_s0 + static_cast<int64_t>(h) * kK + d0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      qv[r][e] = live ? to_f32(x[e]) : 0.0f;
      kv[r][e] = live ? to_f32(x[HK + e]) : 0.0f;
      gv[r][e] = live ? load_real(p.raw_g, p.g_bf16, row * p.g_s0 + h * p.g_s1 + (d0 + e) * p.g_s2) : 0.0f;
    }
    bv[r] = live ? load_real(p.raw_beta, p.beta_bf16, row * p.beta_s0 + h * p.beta_s1) : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = warp + 8 * r;
    float4 q = make_float4(0.f, 0.f, 0.f, 0.f), k = q, g = q;
    float beta = 0.0f;
    if (i < C) {  // warp-uniform
      float ss[2] = {0.0f, 0.0f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ss[0] = fmaf(qv[r][e], qv[r][e], ss[0]);
        ss[1] = fmaf(kv[r][e], kv[r][e], ss[1]);
      }
      kda::warp_sum_n<2>(ss);
      const float rq = kInvSqrtK / sqrtf(ss[0] + kEps), rk = 1.0f / sqrtf(ss[1] + kEps);
      float gg[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) gg[e] = kda::gate(gv[r][e] + dt[e], exp_a_log, p.has_lb, p.lb);
      q = make_float4(qv[r][0] * rq, qv[r][1] * rq, qv[r][2] * rq, qv[r][3] * rq);
      k = make_float4(kv[r][0] * rk, kv[r][1] * rk, kv[r][2] * rk, kv[r][3] * rk);
      g = make_float4(gg[0], gg[1], gg[2], gg[3]);
      beta = kda::sigmoid(bv[r]);
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
__device__ __forceinline__ void diag_block(IntraSmem& s, int I, int ib, int ie, int lane) {
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

// The CTA's chunk: sequence n, chunk c of it, from workspace slot blockIdx.x. Returns false when
// the slot is unused (past the sequence's last chunk, or a padding sequence).
__device__ __forceinline__ bool find_chunk(const Params& p, int64_t slot, int64_t& n, int64_t& row0, int& C) {
  // The largest n with f(n) <= slot (f strictly increasing, f(0) = 0).
  int64_t lo = 0, hi = p.N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (chunk_slot_base(p, mid) <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  n = lo;
  const int64_t c = slot - chunk_slot_base(p, n);
  const int64_t bos = load_index(p.cu_seqlens, p.cu64, n * p.cu_s0);
  const int64_t len = load_index(p.cu_seqlens, p.cu64, (n + 1) * p.cu_s0) - bos;
  if (c * kC >= len || load_index(p.slots, p.slot64, n * p.slot_s0) <= 0) return false;
  row0 = bos + c * kC;
  C = static_cast<int>(len - c * kC < kC ? len - c * kC : kC);
  return true;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) kda_chunk_prefill_intra_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  IntraSmem& s = *reinterpret_cast<IntraSmem*>(smem_raw);
  const int h = static_cast<int>(blockIdx.y);
  const int64_t slot = blockIdx.x;
  int64_t n, row0;
  int C;
  if (!find_chunk(p, slot, n, row0, C)) return;  // uniform: before any barrier
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // The blocks of a and aqk above the block diagonal are never written nor read (P4 and the store
  // touch blocks I >= J only).
  const float exp_a_log = expf(p.A_log[h * p.alog_s0]);
  float dt[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) dt[e] = p.dt_bias[(static_cast<int64_t>(h) * kK + 4 * lane + e) * p.dt_s0];

  // ---- P1
  load_rows<T>(p, s, row0, C, h, warp, lane, dt, exp_a_log);
  __syncthreads();
  // ---- P2: Gam = cumsum(g) over the chunk, per key dim; b_I; whether every block's decay is
  // within kDiagMaxDrop (g <= 0, so Gam only falls: a block's largest drop is b_{I-1} - b_I).
  bool steep = false;
  if (tid < kK) {
    float run = 0.0f, prev = 0.0f;
#pragma unroll 4
    for (int i = 0; i < kC; ++i) {
      run += s.g[i][tid];
      s.g[i][tid] = run;
      if (i % kB == kB - 1) {
        s.bend[i / kB][tid] = run;
        steep = steep || !(prev - run <= kDiagMaxDrop);  // NaN counts as steep
        prev = run;
      }
    }
  }
  const bool diag_mma = !__syncthreads_or(steep);  // also the barrier after P2
  // ---- P3a: diagonal blocks by the running product, two warps each (rows 0..7 and 8..15),
  // unless they go on tensor cores in P3c.
  if (!diag_mma) diag_block(s, warp / 2, (warp % 2) * 8, (warp % 2) * 8 + 8, lane);
  __syncthreads();
  // ---- P3b: factor q, k, g in place relative to the block boundaries; the per-d vectors.
#pragma unroll 2
  for (int x = tid; x < kC * (kK / 4); x += kThreads) {
    const int i = x / (kK / 4), d = 4 * (x % (kK / 4)), I = i / kB;
    const float4 gam = ld4(&s.g[i][d]);
    const float4 ref = I > 0 ? ld4(&s.bend[I - 1][d]) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 rf = exp4(sub4(gam, ref));                 // e^(Gam_i - b_{I-1}) <= 1
    const float4 cf = exp4(sub4(ld4(&s.bend[I][d]), gam));  // e^(b_I - Gam_i) <= 1
    const float4 kv = ld4(&s.k[i][d]);
    st4(&s.q[i][d], mul4(ld4(&s.q[i][d]), rf));
    st4(&s.k[i][d], mul4(kv, rf));
    st4(&s.g[i][d], mul4(kv, cf));
  }
  for (int x = tid; x < 19 * kK; x += kThreads) {
    const int r = x / kK, d = x % kK;
    if (r < 6) {
      s.cf[r][d] = expf(s.bend[pair_i(r) - 1][d] - s.bend[pair_j(r)][d]);
    } else if (r < 11) {
      s.eb[r - 6][d] = r == 6 ? 1.0f : expf(s.bend[r - 7][d]);
    } else if (r < 15) {
      s.ed[r - 11][d] = expf(s.bend[3][d] - s.bend[r - 11][d]);
    } else {  // diagonal pairs: e^(b_{I-1} - b_I) >= 1, <= e^kDiagMaxDrop where used
      const int I = r - 15;
      s.cf[6 + I][d] = expf(fminf((I > 0 ? s.bend[I - 1][d] : 0.0f) - s.bend[I][d], kDiagMaxDrop));
    }
  }
  __syncthreads();
  // ---- P3c: blocks on tensor cores (3xTF32, ~f32): jobs of 16 x 8 (block pair x {kk, qk} x 2
  // column halves), 24 for the 6 off-diagonal pairs, 40 with the 4 diagonal ones; A = kr or qr
  // rows of block I times c_IJ per d, B = kc rows of block J (element (d, j) at g[j][d]). On a
  // diagonal block, kr_i c_II kc_j = k_i k_j e^(Gam_i - Gam_j), masked to j < i (L) or j <= i (Aqk).
  const int jobs = diag_mma ? 40 : 24;
#pragma unroll 1
  for (int job = warp; job < jobs; job += kThreads / 32) {
    const int pr = job / 4, qk = (job / 2) % 2, nt = job % 2;
    const int I = pair_i(pr), J = pair_j(pr);
    float c[1][1][4] = {};
    mma::warp_mma_tf32<1, 1, true>(c, qk ? &s.q[kB * I][0] : &s.k[kB * I][0], kLdK, 1, &s.g[kB * J + 8 * nt][0], kLdK,
                               kK / 8, lane, &s.cf[pr][0]);
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = kB * I + g + 8 * (e / 2), j = kB * J + 8 * nt + 2 * t + e % 2;
      if (qk) {
        s.aqk[i][j] = j <= i ? c[0][0][e] : 0.0f;  // j <= i always off the diagonal
      } else {
        s.a[i][j] = j < i ? s.beta[i] * c[0][0][e] : 0.0f;
      }
    }
  }
  __syncthreads();
  // ---- P3d: Qg = qr e^(b_{I-1}), Kg = kr e^(b_{I-1}), Kd = kc e^(Gam_last - b_I); meanwhile
  // warps 0..3 invert the diagonal blocks of (I + L) (a reads a, the rest reads q, k, g: disjoint).
#pragma unroll 2
  for (int x = tid; x < kC * (kK / 4); x += kThreads) {
    const int i = x / (kK / 4), d = 4 * (x % (kK / 4)), I = i / kB;
    const float4 e = ld4(&s.eb[I][d]);
    st4(&s.q[i][d], mul4(ld4(&s.q[i][d]), e));
    st4(&s.k[i][d], mul4(ld4(&s.k[i][d]), e));
    st4(&s.g[i][d], mul4(ld4(&s.g[i][d]), ld4(&s.ed[I][d])));
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
  // ---- P5: the workspace (reads only; the last barrier above ordered every write before them).
  float* ws = ws_at(p, slot, h);
#pragma unroll 4
  for (int x = tid; x < kC * (kK / 4); x += kThreads) {
    const int i = x / (kK / 4), d = 4 * (x % (kK / 4));
    st4(ws + kWsQg + i * kK + d, ld4(&s.q[i][d]));
    st4(ws + kWsKg + i * kK + d, ld4(&s.k[i][d]));
    st4(ws + kWsKd + i * kK + d, ld4(&s.g[i][d]));
  }
#pragma unroll 4
  for (int x = tid; x < kC * (kC / 4); x += kThreads) {
    const int i = x / (kC / 4), j = 4 * (x % (kC / 4));
    if (j >= kB * (i / kB + 1)) continue;  // above the block diagonal: zero, never read
    st4(ws + kWsTm + i * kC + j, mul4(ld4(&s.a[i][j]), ld4(&s.beta[j])));
    st4(ws + kWsAqk + i * kC + j, ld4(&s.aqk[i][j]));
  }
  if (tid < kK / 4) st4(ws + kWsDec + 4 * tid, ld4(&s.eb[4][4 * tid]));
}

}  // namespace kestrel::ops::cuda::kda_chunk
