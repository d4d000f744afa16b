// kda_chunk_prefill, CUDA, kernel 1 of 2: the intra-chunk work, one CTA per (chunk slot, head),
// all chunks of all sequences in parallel (design note: kda_chunk_prefill.cu). Everything here
// is independent of the state: the gates and their in-chunk cumsum, the gated kk / qk products,
// the UT transform, and the chunk's Qg, Kg, Kd, Tm, Aqk and decay, written to the workspace
// (kda_chunk_prefill_common.cuh) for the state kernel.
//
// Phases (the algorithm, blocks, reference points and solve order of the version that passed
// the matrix on an H200 at e9c5392; since then the log-decays are kept in base 2 with MUFU math
// (gate_log2, ex2 below), qk is plain tf32, and the outputs are f16), barriers between them:
//   P1  q, k L2-normalised (q scaled by 1/sqrt(K)), g = gate(raw_g + dt_bias) / ln 2, beta (a warp
//       per row, two batches of 4 rows of loads in flight; no divergence: 2490a75 took the
//       intra kernel from 235 to 187 us at T = 4096, H = 32);
//   P2  Gam = cumsum(g) per key dim (base 2 from here on: e^x below is ex2 of x / ln 2), and the
//       block ends b_I = Gam at row 16 I + 15;
//   P3a diagonal 16 x 16 blocks of kk and qk by a running product of e^(g_i) (factors <= 1), only
//       when some key dim decays by more than e^70 within a block (L_II -> ld, Aqk_II ->
//       the workspace); else they go to P3c;
//   P3b factor in place: qr = q e^(Gam - b_{I-1}), kr = k e^(Gam - b_{I-1}), kc = k e^(b_I - Gam),
//       and from the same registers store Qg = qr e^(b_{I-1}), Kg = kr e^(b_{I-1}),
//       Kd = kc e^(Gam_last - b_I), e^Gam_last; the per-d vectors c_IJ = e^(b_{I-1} - b_J);
//   P3c-1 qk blocks I > J (and I = J on the tensor-core path) = qr c_IJ kc, stored to the
//       workspace from the accumulators; on that path also the diagonal kk blocks (-> ld);
//       mma.sync (mma_tf32.cuh: plain tf32 for kk and qk, see tc_job), one 16 x 16
//       block pair per warp job (two accumulators);
//   P3c-2 kk blocks I > J = kr c_IJ kc times beta (-> a, which now overlays the dead q), and
//       meanwhile warps 6, 7 invert the diagonal blocks of (I + L) (forward substitution, a lane
//       per column, two blocks per warp) from ld into a;
//   P4  off-diagonal blocks of X = (I + L)^-1: X_IJ = -X_II sum_{M=J}^{I-1} L_IM X_MJ (3xTF32
//       tensor-core block products, warp J for block (I, J));
//   P5  store Tm = X diag(beta) (its lower 16 x 16 block triangle, as f16).
// Every exponential is of a difference Gam_i - Gam_j with i >= j, so every factor is <= 1, except
// the diagonal c_II, used only while it is <= e^70 (all operands stay finite; kDiagMaxDrop2).
//
// Shared memory (floats, 112,896 bytes: two CTAs per SM, with at most 128 registers per thread
// from __launch_bounds__(256, 2); the workspace outputs leave from registers instead of being
// staged here, and a overlays q):
//   q [64][132] q_hat -> qr (P1 .. P3c-1), then { a [64][68] L -> X, r [3][16][16] P4 scratch }
//   k [64][132] k_hat -> kr           g [64][132] g -> Gam -> kc          ld [4][16][16] L_II
//   bend [4][128] b_I; cf [10][128] c_IJ (6 off-diagonal, 4 diagonal pairs); beta [64].
// Predicted time (T = 4096, H = 32, 2080 CTAs): the previous layout measured 700.8 us at one CTA
// per SM, latency-bound (6.5 cycles per issued instruction per warp, 2 warps per scheduler); two
// CTAs per SM double the warps per scheduler and let one CTA's serial phases (P2's 4 warps, the
// loads of P1, the solve, the barriers) overlap the other's work; the P3c jobs issue ~30% fewer
// instructions (A fragments shared by two accumulators) and chain half as many mma per job:
// ~330-380 us. Measured (H200, 88276b9, Nsight Compute): 362 us, theoretical occupancy 25%,
// achieved 24.3%. At a97aa9c (vector row loads in P1): 295 us.
#pragma once

#include "kda_chunk_prefill_common.cuh"
#include "mma_bf16.cuh"
#include "mma_tf32.cuh"

namespace kestrel::ops::cuda::kda_chunk {

// a and the P4 scratch r live where q was: q (qr) is last read by the qk jobs of P3c-1, a is
// first written by the kk jobs of P3c-2, a barrier between them.
struct IntraSolve {
  float a[kC][kLdC];   // L (off-diagonal blocks), then X = (I + L)^-1
  float r[3][kB][kB];  // P4 scratch
};
static_assert(sizeof(IntraSolve) <= sizeof(float[kC][kLdK]), "a and r fit in q's place");

struct alignas(16) IntraSmem {
  union {
    float q[kC][kLdK];
    IntraSolve sv;
  };
  float k[kC][kLdK];
  float g[kC][kLdK];
  float ld[4][kB][kB];  // L_II, the diagonal blocks of L (written while q is still live)
  float bend[4][kK];
  float cf[10][kK];
  float beta[kC];
};
// Two CTAs per SM: 2 (112,896 + 1,024 reserved) <= 233,472 bytes (sm_90's 228 KB).
static_assert(sizeof(IntraSmem) == 112896, "the note above states this size");

// The block pairs (I, J) in the order of cf: 0..5 off-diagonal (I > J), 6..9 diagonal (I = J = p - 6).
__device__ __forceinline__ int pair_i(int p) { return p == 0 ? 1 : p < 3 ? 2 : p < 6 ? 3 : p - 6; }
__device__ __forceinline__ int pair_j(int p) { return p == 0 ? 0 : p < 3 ? p - 1 : p < 6 ? p - 3 : p - 6; }

// This kernel keeps the log-decays in base 2 (g2 = g / ln 2, Gam2 = cumsum g2), so that every
// factor e^(Gam_i - Gam_j) is one ex2 of a difference: CUDA's accurate expf (8 instructions) and
// log1pf (~25) in the gate and the factors were ~40% of the kernel's instructions (Nsight, H200,
// T = 4096, H = 32). The MUFU forms and the base-2 gate are in kda_common.cuh, beside the accurate
// gate that the token kernels keep (the MUFU forms there measured 0.91-1.16x by shape and build,
// docs/perf.md, seventeenth session). The workspace holds values only (Qg, Kg, Kd, Tm, Aqk,
// decay), never Gam, so the base is this kernel's business.
using kda::ex2;
using kda::gate_log2_lb;
using kda::gate_log2_softplus;
using kda::kLog2e;
using kda::lg2;

// Diagonal blocks on tensor cores when every key dim decays by at most e^70 across every 16-row
// block (kDiagMaxDrop2 in base 2); a stronger decay takes the running product (P3a). The bound is
// set by the operands, not by the products: on block I the A operand is kr_i c_II = k_i
// e^(Gam_i - b_I) <= e^70 |k_i| ~ 2.5e30 |k_i| (finite), the B operand kc_j = k_j e^(b_I - Gam_j)
// >= e^-70 |k_j|, and each product the tensor core forms is the true term k_i k_j e^(Gam_i -
// Gam_j), <= |k_i k_j|, whatever the factors. The only loss is an operand below f32's normal range
// (ex2.ftz and the tf32 operands flush it): kc_j flushes only if |k_j| < 1.2e-38 e^70 = 3e-8, so a
// lost term is below 3e-8 |k_i| (against the 4e-3 allowance), and kr_i c_II is formed as kr_i times
// c_II, both normal (kr_i >= e^-70 |k_i|). Until the seventeenth session the bound was e^40 (operands
// within 2.4e17): the bench's generators then sent ~40% of the (chunk, head) CTAs down P3a, ~1% at
// e^70, and the op ran 1.046x faster at T = 4k .. 64k (docs/perf.md, seventeenth session).
inline constexpr float kDiagMaxDrop2 = 70.0f * kLog2e;

__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 ex2_4(float4 a) { return make_float4(ex2(a.x), ex2(a.y), ex2(a.z), ex2(a.w)); }
__device__ __forceinline__ float4 sub4(float4 a, float4 b) { return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }
// Workspace stores (WsImage, kda_chunk_prefill_common.cuh): 4 consecutive values (8-byte aligned)
// rounded to f16 (mma_bf16.cuh).
__device__ __forceinline__ void ws_store4(f16* dst, float4 x) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(mma16::pack_f16x2(x.x, x.y), mma16::pack_f16x2(x.z, x.w));
}

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
// The phase is latency-bound (the SM's other CTA covers part of it): a batch's loads are issued
// together, then normalised and stored, in two batches of 4 rows (52 floats of loads each, within
// the 128 registers of two CTAs per SM; one batch of 8 spilled). kVec (Params::vec_rows: q, k and
// raw_g rows contiguous and aligned, the usual layout): a lane's 4 dims of q, of k and of raw_g are
// one vector load each (Nsight on the H200: with 13 scalar loads per row this phase was 45% of the
// kernel's stall samples, mostly waiting on them); otherwise scalar loads with any strides.
template <typename T, bool kVec>
__device__ __forceinline__ void load_rows(const Params& p, IntraSmem& s, int64_t row0, int C, int h, int warp,
                                          int lane, const float (&dt)[4], float exp_a_log) {
  constexpr float kEps = 1e-6f;                      // inside the sqrt (kda_math.h kL2Eps)
  constexpr float kInvSqrtK = 0.08838834764831845f;  // 1 / sqrt(128), the fixed q scale
  constexpr int kRows = kC / (kThreads / 32);        // 8 rows per warp: warp + 8 r
  constexpr int kBatch = 4;                          // rows per batch of loads
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const int d0 = 4 * lane;
#pragma unroll 1
  for (int r0 = 0; r0 < kRows; r0 += kBatch) {
    float qv[kBatch][4], kv[kBatch][4], gv[kBatch][4], bv[kBatch];
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      // Rows past the chunk's end (i >= C, only in a sequence's last chunk) load its last row,
      // valid memory, and are zeroed below: no branch around the loads.
      const int i = warp + 8 * (r0 + r);
      const int64_t row = row0 + (i < C ? i : C - 1);
      const T* x = static_cast<const T*>(p.qkv) + row * p.qkv_s0 + static_cast<int64_t>(h) * kK + d0;
      if constexpr (kVec) {
        const int64_t go = row * p.g_s0 + h * p.g_s1 + d0;
        const float4 q4 = load4(x), k4 = load4(x + HK);
        const float4 g4 = p.g_bf16 ? load4(static_cast<const __nv_bfloat16*>(p.raw_g) + go)
                                   : load4(static_cast<const float*>(p.raw_g) + go);
        qv[r][0] = q4.x; qv[r][1] = q4.y; qv[r][2] = q4.z; qv[r][3] = q4.w;
        kv[r][0] = k4.x; kv[r][1] = k4.y; kv[r][2] = k4.z; kv[r][3] = k4.w;
        gv[r][0] = g4.x; gv[r][1] = g4.y; gv[r][2] = g4.z; gv[r][3] = g4.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          qv[r][e] = to_f32(x[e]);
          kv[r][e] = to_f32(x[HK + e]);
          gv[r][e] = load_real(p.raw_g, p.g_bf16, row * p.g_s0 + h * p.g_s1 + (d0 + e) * p.g_s2);
        }
      }
      bv[r] = load_real(p.raw_beta, p.beta_bf16, row * p.beta_s0 + h * p.beta_s1);
    }
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const int i = warp + 8 * (r0 + r);
      // Every row is computed (rows past the chunk's end from a copy of its last row) and the
      // dead ones zeroed by selects: no divergence region per row. The norms and beta take the
      // MUFU forms (rsqrt, ex2, fast divide: ~2^-22 relative, far inside the 4e-3 allowance).
      float ss[2] = {0.0f, 0.0f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ss[0] = fmaf(qv[r][e], qv[r][e], ss[0]);
        ss[1] = fmaf(kv[r][e], kv[r][e], ss[1]);
      }
      kda::warp_sum_n<2>(ss);
      const bool live = i < C;  // warp-uniform
      const float rq = kInvSqrtK * rsqrtf(ss[0] + kEps), rk = rsqrtf(ss[1] + kEps);
      float gg[4];
      if (p.has_lb) {  // one uniform branch per row, not per element
#pragma unroll
        for (int e = 0; e < 4; ++e) gg[e] = gate_log2_lb(gv[r][e] + dt[e], exp_a_log, p.lb);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) gg[e] = gate_log2_softplus(gv[r][e] + dt[e], exp_a_log);
      }
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      const float4 q = live ? make_float4(qv[r][0] * rq, qv[r][1] * rq, qv[r][2] * rq, qv[r][3] * rq) : zero;
      const float4 k = live ? make_float4(kv[r][0] * rk, kv[r][1] * rk, kv[r][2] * rk, kv[r][3] * rk) : zero;
      const float4 g = live ? make_float4(gg[0], gg[1], gg[2], gg[3]) : zero;
      const float beta = live ? __fdividef(1.0f, 1.0f + ex2(-bv[r] * kLog2e)) : 0.0f;
      st4(&s.q[i][d0], q);
      st4(&s.k[i][d0], k);
      st4(&s.g[i][d0], g);
      if (lane == 0) s.beta[i] = beta;
    }
  }
}

// P3a: the diagonal block I, rows [ib, ie) of it, by one warp. kp[j] = k_j e^(Gam_i - Gam_j) for
// the current row i (a running product: one ex2 per (i, d)), then the 16 kk and 16 qk dots of
// row i, reduced so that lane j < 16 holds kk[i][j] (-> ld) and lane 16 + j holds qk[i][j] (-> the
// workspace's Aqk, 64 contiguous bytes). Only the dots kept by the masks (j < i for L, j <= i for
// Aqk) are formed; the reduction sums each index over the lanes on its own, so the kept values are
// those of the full version.
__device__ __forceinline__ void diag_block(IntraSmem& s, WsImage& ws, int I, int ib, int ie, int lane) {
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
      const float4 e = ex2_4(sub4(gi, gprev));  // e^(g_i) <= 1
      gprev = gi;
#pragma unroll
      for (int j = 0; j < i; ++j) kp[j] = mul4(kp[j], e);
    }
    kp[i] = ki;
    if (i >= ib) {  // warp-uniform
      const float4 qi = ld4(&s.q[base + i][d0]);
      float v[32];
#pragma unroll
      for (int j = 0; j < kB; ++j) {  // i is a constant here: the dots masked out below are not formed
        v[j] = j < i ? dot4(ki, kp[j], 0.0f) : 0.0f;
        v[kB + j] = j <= i ? dot4(qi, kp[j], 0.0f) : 0.0f;
      }
      reduce_scatter_step<16>(v, lane);
      const int j = lane & (kB - 1);
      if (lane < kB) {
        s.ld[I][i][j] = j < i ? s.beta[base + i] * v[0] : 0.0f;  // L, strictly lower
      } else {
        ws.aqk[base + i][base + j] = __float2half_rn(j <= i ? v[0] : 0.0f);
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

// One tensor-core job of P3c: the 16 x 16 block pair pr of kk (qk false) or qk (qk true), as two
// 16 x 8 column halves with their own accumulators (two independent mma chains; the A fragments,
// scaled and split once, serve both). A = kr or qr rows of block I times c_IJ per d, B = kc rows
// of block J (element (d, j) at g[j][d]); on a diagonal block kr_i c_II kc_j = k_i k_j
// e^(Gam_i - Gam_j), masked to j < i (L) or j <= i (Aqk). qk goes straight to the workspace
// (float2 per lane: c0 c1 and c2 c3 are adjacent columns); kk goes to ld (diagonal pairs) or to a
// (off-diagonal pairs, only once q is dead: a aliases q).
__device__ __forceinline__ void tc_job(IntraSmem& s, WsImage& ws, int pr, bool qk, int lane) {
  const int I = pair_i(pr), J = pair_j(pr);
  float c[1][2][4] = {};
  // k-steps at run time (unrolled twice): the fully unrolled loop doubled the kernel's
  // instruction-cache stalls (no_inst 10% -> 18% of the samples on the H200) for no gain.
  // kk and qk in plain tf32 (operands truncated to 10 mantissa bits): a third of the mma of
  // 3xTF32 and no operand splits. qk (Aqk) only feeds the output; kk (L) feeds Tm, which the
  // state kernel multiplies as f16 (11 bits) anyway. kk ran in 3xTF32 until the state products
  // went to f16; the host study (tools/kda_product_precision.py, KK_TF32=1) puts plain tf32 kk
  // at 1.1e-3 on final states with weak decay (9.1e-4 with an exact kk), 3.5x inside the 4e-3
  // allowance; the op 1.04x faster (docs/perf.md, ninth session).
  if (qk) {
    mma::warp_mma_tf32<0, 1, 2, false>(c, &s.q[kB * I][0], kLdK, 1, &s.g[kB * J][0], kLdK, lane, kK / 8, &s.cf[pr][0]);
  } else {
    mma::warp_mma_tf32<0, 1, 2, false>(c, &s.k[kB * I][0], kLdK, 1, &s.g[kB * J][0], kLdK, lane, kK / 8, &s.cf[pr][0]);
  }
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {  // rows g, g + 8: c[.][2 hf], c[.][2 hf + 1] at columns 2t, 2t + 1
      const int i = kB * I + g + 8 * hf, j = kB * J + 8 * nt + 2 * t;
      const float v0 = c[0][nt][2 * hf], v1 = c[0][nt][2 * hf + 1];
      if (qk) {
        *reinterpret_cast<uint32_t*>(&ws.aqk[i][j]) = mma16::pack_f16x2(j <= i ? v0 : 0.0f, j + 1 <= i ? v1 : 0.0f);
      } else if (I == J) {
        s.ld[I][i - kB * I][j - kB * J] = j < i ? s.beta[i] * v0 : 0.0f;
        s.ld[I][i - kB * I][j + 1 - kB * J] = j + 1 < i ? s.beta[i] * v1 : 0.0f;
      } else {
        s.sv.a[i][j] = s.beta[i] * v0;  // j < i off the diagonal
        s.sv.a[i][j + 1] = s.beta[i] * v1;
      }
    }
  }
}

// P4's block product, by one warp: c (16 x 16, as two 16 x 8 tiles) += A B in 3xTF32 (~f32: X
// feeds Tm, on the state's path), A = 16 x 16 row-major at a (row stride kLdC: ldmatrix), B =
// 16 x 16 row-major at b (row stride ldb), read element by element into the m16n8k8 B fragment
// (b0 = (k t, n g), b1 = (k t + 4, n g)) and split there.
__device__ __forceinline__ void block16_product(float (&c)[1][2][4], const float* a, const float* b, int ldb, int lane) {
  const int g = lane / 4, t = lane % 4;
  mma::Acc<1, 2, true> acc{c};
#pragma unroll
  for (int ks = 0; ks < kB / 8; ++ks) {
    uint32_t ab[1][4], as[1][4], bb[2][2], bs[2][2];
    mma::load_a<1, true>(ab, as, a, kLdC, 1, 8 * ks, g, t, nullptr);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      mma::split_tf32<true>(b[(8 * ks + t) * ldb + 8 * nt + g], bb[nt][0], bs[nt][0]);
      mma::split_tf32<true>(b[(8 * ks + t + 4) * ldb + 8 * nt + g], bb[nt][1], bs[nt][1]);
    }
    acc.step(ab, as, bb, bs);
  }
  acc.finish();
}

// The C fragments of a block product, times `sign`, to a 16 x 16 row-major block at dst (row
// stride ld): c[0][nt][e] is row g + 8 (e / 2), column 8 nt + 2 t + e % 2.
__device__ __forceinline__ void store_block16(float* dst, int ld, const float (&c)[1][2][4], float sign, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[(g + 8 * (e / 2)) * ld + 8 * nt + 2 * t + e % 2] = sign * c[0][nt][e];
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) kda_chunk_prefill_intra_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  IntraSmem& s = *reinterpret_cast<IntraSmem*>(smem_raw);
  const int h = static_cast<int>(blockIdx.y);
  const int64_t slot = p.slot_lo + blockIdx.x;  // the grid covers the window
  if (slot >= p.slot_hi) return;
  int64_t n, row0;
  int C;
  if (!find_chunk(p, slot, n, row0, C)) return;  // uniform: before any barrier
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  WsImage& ws = *reinterpret_cast<WsImage*>(ws_at(p, slot, h));

  // The blocks of a and of the workspace's Tm / Aqk above the block diagonal are never written
  // nor read (P4 and the stores touch blocks I >= J only).
  const float exp_a_log = expf(p.A_log[h * p.alog_s0]);
  float dt[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) dt[e] = p.dt_bias[(static_cast<int64_t>(h) * kK + 4 * lane + e) * p.dt_s0];

  // ---- P1
  if (p.vec_rows) {
    load_rows<T, true>(p, s, row0, C, h, warp, lane, dt, exp_a_log);
  } else {
    load_rows<T, false>(p, s, row0, C, h, warp, lane, dt, exp_a_log);
  }
  __syncthreads();
  // ---- P2: Gam = cumsum(g) over the chunk, per key dim (base 2, as g); b_I; whether every
  // block's decay is within e^70 (g <= 0, so Gam only falls: a block's largest drop is
  // b_{I-1} - b_I).
  bool steep = false;
  if (tid < kK) {
    float run = 0.0f, prev = 0.0f;
#pragma unroll 4
    for (int i = 0; i < kC; ++i) {
      run += s.g[i][tid];
      s.g[i][tid] = run;
      if (i % kB == kB - 1) {
        s.bend[i / kB][tid] = run;
        steep = steep || !(prev - run <= kDiagMaxDrop2);  // NaN counts as steep
        prev = run;
      }
    }
  }
  const bool diag_mma = !__syncthreads_or(steep);  // also the barrier after P2
  // ---- P3a: diagonal blocks by the running product, two warps each, unless they go on tensor
  // cores in P3c. Rows 0..9 and 10..15: the second warp also runs the product through rows 0..9,
  // and its rows have more unmasked dots; this split evens the two (~2.2K vs ~2.5K instructions
  // per warp, against ~1.7K vs ~2.9K for 8 / 8).
  if (!diag_mma) diag_block(s, ws, warp / 2, warp % 2 != 0 ? 10 : 0, warp % 2 != 0 ? kB : 10, lane);
  __syncthreads();
  // ---- P3b: factor q, k, g in place relative to the block boundaries, and store the chunk's
  // Qg = qr e^(b_{I-1}), Kg = kr e^(b_{I-1}), Kd = kc e^(Gam_last - b_I) and e^(Gam_last) to the
  // workspace from the same registers. Thread (warp, lane) owns key dims 4 lane .. 4 lane + 3 of
  // rows warp + 8 u (u = 0..7), two rows per block I = u / 2; a warp stores 256 contiguous bytes
  // per row (f16).
  {
    const int d = 4 * lane;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f), blast = ld4(&s.bend[3][d]);
#pragma unroll
    for (int I = 0; I < 4; ++I) {
      const float4 ref = I > 0 ? ld4(&s.bend[I - 1][d]) : zero, bI = ld4(&s.bend[I][d]);
      const float4 eb = I > 0 ? ex2_4(ref) : make_float4(1.f, 1.f, 1.f, 1.f);  // e^(b_{I-1})
      const float4 ed = ex2_4(sub4(blast, bI));                                // e^(Gam_last - b_I)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int i = kB * I + warp + 8 * u;
        const float4 gam = ld4(&s.g[i][d]);
        const float4 rf = ex2_4(sub4(gam, ref));  // e^(Gam_i - b_{I-1}) <= 1
        const float4 cf = ex2_4(sub4(bI, gam));   // e^(b_I - Gam_i) <= 1
        const float4 kv = ld4(&s.k[i][d]);
        const float4 qr = mul4(ld4(&s.q[i][d]), rf), kr = mul4(kv, rf), kc = mul4(kv, cf);
        st4(&s.q[i][d], qr);
        st4(&s.k[i][d], kr);
        st4(&s.g[i][d], kc);
        ws_store4(&ws.qg[i][d], mul4(qr, eb));
        ws_store4(&ws.kg[i][d], mul4(kr, eb));
        ws_store4(&ws.kd[i][d], mul4(kc, ed));
      }
    }
    if (warp == 0) st4(&ws.dec[d], ex2_4(blast));
  }
  for (int x = tid; x < 10 * kK; x += kThreads) {
    const int r = x / kK, d = x % kK;
    if (r < 6) {
      s.cf[r][d] = ex2(s.bend[pair_i(r) - 1][d] - s.bend[pair_j(r)][d]);
    } else {  // diagonal pairs: e^(b_{I-1} - b_I) >= 1, <= e^70 where used
      const int I = r - 6;
      s.cf[r][d] = ex2(fminf((I > 0 ? s.bend[I - 1][d] : 0.0f) - s.bend[I][d], kDiagMaxDrop2));
    }
  }
  __syncthreads();
  // ---- P3c-1: every qk job (6 off-diagonal pairs, and the 4 diagonal ones on the tensor-core
  // path) and that path's 4 diagonal kk jobs (into ld): 6 or 14 jobs on 8 warps. The off-diagonal
  // kk jobs wait for q to die (a aliases it).
  const int jobs1 = diag_mma ? 14 : 6;
#pragma unroll 1
  for (int job = warp; job < jobs1; job += kThreads / 32) {
    if (job < 6) {
      tc_job(s, ws, job, true, lane);
    } else {
      tc_job(s, ws, 6 + (job - 6) / 2, (job - 6) % 2 != 0, lane);
    }
  }
  __syncthreads();
  // ---- P3c-2: warps 0..5 the 6 off-diagonal kk jobs (into a's off-diagonal blocks); warps 6, 7
  // invert the diagonal blocks of (I + L), two each (half-warp 16 hf + j: block 2 (warp - 6) + hf,
  // column j by forward substitution), X_II = (I + L_II)^-1 from ld into a's diagonal blocks.
  // Disjoint writes; reads of k, g, cf, beta, ld only.
  if (warp < 6) {
    tc_job(s, ws, warp, false, lane);
  } else {
    const int I = 2 * (warp - 6) + lane / kB, base = I * kB, j = lane % kB;
    float x[kB];
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      float acc = i == j ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < i; ++m) acc = fmaf(-s.ld[I][i][m], x[m], acc);
      x[i] = acc;
    }
#pragma unroll
    for (int i = 0; i < kB; ++i) s.sv.a[base + i][base + j] = x[i];
  }
  __syncthreads();
  // ---- P4: X_IJ = -X_II sum_{M=J}^{I-1} L_IM X_MJ, block row by block row; the I jobs (I, J)
  // of a row on warps J, two 3xTF32 tensor-core products each (block16_product), the sum through
  // the scratch r[J]. The barrier between the two: job J' < J still reads L_IJ, which job J
  // overwrites with X_IJ. (As 16 x 16 SIMT dot products over all 256 threads, this phase was
  // ~20% of the kernel's instructions on the H200.)
#pragma unroll 1
  for (int I = 1; I < 4; ++I) {
    if (warp < I) {
      const int J = warp;
      float t[1][2][4] = {};
      for (int M = J; M < I; ++M) block16_product(t, &s.sv.a[kB * I][kB * M], &s.sv.a[kB * M][kB * J], kLdC, lane);
      store_block16(&s.sv.r[J][0][0], kB, t, 1.0f, lane);
    }
    __syncthreads();
    if (warp < I) {
      const int J = warp;
      float x[1][2][4] = {};
      block16_product(x, &s.sv.a[kB * I][kB * I], &s.sv.r[J][0][0], kB, lane);
      store_block16(&s.sv.a[kB * I][kB * J], kLdC, x, -1.0f, lane);
    }
    __syncthreads();
  }
  // ---- P5: Tm = X diag(beta) to the workspace (reads only; the last barrier above ordered every
  // write before them). Qg, Kg, Kd, e^Gam_last went out in P3b, Aqk in P3a / P3c-1.
#pragma unroll 4
  for (int x = tid; x < kC * (kC / 4); x += kThreads) {
    const int i = x / (kC / 4), j = 4 * (x % (kC / 4));
    if (j >= kB * (i / kB + 1)) continue;  // above the block diagonal: zero, never read
    ws_store4(&ws.tm[i][j], mul4(ld4(&s.sv.a[i][j]), ld4(&s.beta[j])));
  }
}

}  // namespace kestrel::ops::cuda::kda_chunk
