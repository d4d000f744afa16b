// mla_attention, CUDA (sm_90a): split-KV flash decoding for the absorbed MLA form, with
// mma.sync bf16 tensor-core tiles. Verified on an H200 (docs/verification.md); speed: docs/perf.md.
//
// Work split. A sequence b has n queries and H heads: n * H query rows, row r = qi * H + h
// (token q_start[b] + qi, head h). Rows are cut into tiles of kRows = 64; every row of a tile
// shares the one latent KV head, so one pass over the KV serves 64 rows (all 32 heads of two
// verify tokens, or half of 128 heads). The KV positions 0 .. L-1 are cut into `splits`
// contiguous chunks (a multiple of kKeys each; the count from mla_attention_num_splits, a pure
// function of B, the row tiles and the block table's capacity, so that small batches with long
// contexts still fill the SMs). One CTA per (row tile, split, sequence): grid (row_tiles_plan,
// splits, B), where row_tiles_plan covers ceil(Tq / B) queries; a CTA loops over row tiles
// mt = blockIdx.x, + gridDim.x, ... so longer ragged sequences are still covered. With one
// split the CTA writes o and lse directly; otherwise it writes a partial (o normalised, f32;
// lse in base 2) to a workspace (scratch_alloc: stream-ordered, from a pool that keeps its
// memory) and a combine kernel merges
// the splits: one CTA of 128 threads per (token, head), 4 output values per thread.
//
// The CTA (8 warps). Warp w owns row group rg = w & 3 (16 rows) and half hf = w >> 2. Per KV
// tile of kKeys = 32 positions:
//   S phase: S[16 rows, 16 keys] = Q K^T for keys hf*16 .. +15, m16n8k16 over 36 k-steps of
//            the 576 features, A (Q) and B (K) by ldmatrix from shared memory;
//   softmax: scores masked (beyond the split, beyond the causal limit of the row, padded
//            rows), scaled to base 2 by one f32 constant (softmax_scale * kv_scale * q_scale *
//            log2 e, multiplied left to right in f32); the row max over 32
//            keys is exchanged with the partner warp w ^ 4 through red_max; both warps then
//            hold identical running maxima m (fmaxf is symmetric), rescale their O halves and
//            their partial row sums l by exp2(m_old - m_new);
//   P:       p = exp2(s - m) in f32, stored as p_hi = bf16(p) and p_lo = bf16(p - p_hi), so
//            the product with V keeps ~16 bits of p (relative error <= 2^-17), not 8;
//   PV:      O[16 rows, 256 values hf*256 ..] += P_hi V + P_lo V over the 32 keys, V the first
//            512 values of the same cache rows (ldmatrix.trans), O in 128 f32 registers.
// At the end the partial row sums of the two warps of a row group are added through red_sum.
// A row with no key (empty split, causal limit before the split, L = 0) keeps m = -inf, l = 0
// and gives o = 0, lse = -inf: exponents use m_use = 0 when m = -inf, so no inf - inf.
//
// The query (template parameter kQFp8). A bf16 q is copied into sm.q as it is. An fp8 q is
// read as 8 bytes per 8-element chunk (one 8-byte load when contiguous and aligned, else 8
// byte loads) and dequantised in registers with the same e4m3 -> bf16 conversion as the fp8
// cache (exact: every e4m3 value, subnormals and NaN included, is a bf16 value) before the
// same 16-byte store into sm.q; so the QK mma.sync sees exactly dec(q), and q_scale only
// enters the softmax constant above. Everything after load_q is the same code for both.
//
// Shared memory (dynamic, 179,456 B, one CTA per SM): Q [64][584] bf16 (74,752 B), KV two
// stages [32][584] bf16 (2 x 37,376 B), P_hi and P_lo [64][40] bf16 (2 x 5,120 B), red_max,
// red_sum [2][64] and lse_tile [64] f32, and for fp8 the raw tile in flight [32][576] bytes
// (18,432 B). Rows are padded by 8 elements (16 B) so that the 8 row addresses of every
// ldmatrix phase fall 4 banks apart (pitch 1,168 B = 292 words; P pitch 80 B = 20 words): no
// bank conflicts. Pad columns are never read. At the end of a row tile the output is staged
// in the Q + KV region ([64][520] bf16, or f32 partials) and written with 16-byte stores.
//
// Pipeline and barriers, per KV tile j (stage st = j & 1):
//   (A) bf16: wait for this thread's cp.async of tile j. __syncthreads: tile j (and Q) are
//       visible to all, and every reader of stage st ^ 1 (the PV of tile j - 1) is done.
//       Prefetch tile j + 1: bf16 by cp.async (16 B) straight into stage st ^ 1; fp8 by
//       cp.async (8 B) into `raw`, and after the PV of tile j the same thread waits for its own
//       copies, loads its chunks of `raw` into registers, dequantises them (e4m3 -> bf16 is
//       exact) and stores them into stage st ^ 1, which nobody reads before (A) of j + 1.
//       `raw` is private per chunk to one thread (the same chunk -> thread map everywhere),
//       so it needs no barrier, only that thread's wait_group.
//   S phase, write red_max; (X) __syncthreads; read the partner's max, write P_hi / P_lo;
//   (B) __syncthreads; PV phase (reads P and stage st).
// red_max of tile j + 1 is written after (A) of j + 1, after every read of tile j's (before
// (B) of j); P of tile j + 1 is written after (X) of j + 1, after the PV of tile j (before (A)
// of j + 1). After the last tile: red_sum written, __syncthreads (every Q / KV reader done, no
// copy in flight), staging written, __syncthreads, staging read out. A new row tile starts
// with a __syncthreads, after every reader of the last one (staging, lse_tile included).
// Positions beyond the split's end (a partial last tile) are zero-filled, so masked keys meet
// finite V (0 * V must be 0, not NaN). A page outside [0, num_pages) is never read: its rows
// are filled with NaN, so a bad block table shows as NaN, not as someone else's data.
//
// Bytes per query row: 576 x 2 (bf16 q) or 576 (fp8 q) + 512 x 2 (o) + 4 (lse); per KV
// position 1,152 (bf16) or 576 (fp8), read once per row tile (64 rows) and split; 2 x 64 x 512
// x 4 B of partials per (row tile, split) when split.
#include <cuda_fp8.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "common.cuh"
#include "cp_async.cuh"
#include "kestrel/ops/mla_attention.h"
#include "mla_attention_common.cuh"

namespace kestrel::ops::cuda {

namespace {

constexpr int kRows = 64;                // query rows per CTA tile
static_assert(kRows == kMlaAttentionSeesaw64TileRows, "v4's rule plans the 64-row tiles the dispatch launches");
constexpr int kKeys = 32;                // KV positions per shared-memory tile
constexpr int kThreads = 256;            // 8 warps
constexpr int kDqk = 576, kDv = 512;
constexpr int kLd = kDqk + 8;            // Q / KV row pitch in elements (1,168 B)
constexpr int kPLd = kKeys + 8;          // P row pitch in elements (80 B)
constexpr int kChunks = kDqk / 8;        // 8-element chunks per row
constexpr int kKvPerThread = kKeys * kChunks / kThreads;  // 9
constexpr int kQPerThread = kRows * kChunks / kThreads;   // 18
constexpr int kKSteps = kDqk / 16;       // 36 k-steps of the QK product
constexpr int kONb = kDv / 2 / 8;        // 32 n-blocks of 8 values in a warp's half of O
static_assert(kKeys * kChunks % kThreads == 0 && kRows * kChunks % kThreads == 0);
static_assert(kRows == 4 * 16 && kKeys == 2 * 16 && kThreads == 8 * 32, "warp roles assume 4 x 2 warps");
static_assert((kLd * 2) % 16 == 0 && (kPLd * 2) % 16 == 0, "ldmatrix rows must be 16-byte aligned");

struct Smem {
  uint16_t q[kRows * kLd];
  uint16_t kv[2][kKeys * kLd];
  uint16_t p_hi[kRows * kPLd];
  uint16_t p_lo[kRows * kPLd];
  float red_max[2][kRows];
  float red_sum[2][kRows];
  float lse_tile[kRows];
  uint8_t raw[kKeys * kDqk];  // fp8 only: the tile in flight, as stored
};
static_assert(sizeof(Smem) == 179456, "the design note states the shared-memory size");
// The output staging tile [64][520] (bf16, or f32 partials) reuses q and kv, contiguous in Smem.
constexpr int kStageLd = kDv + 8;
static_assert(kRows * kStageLd * sizeof(float) <= sizeof(Smem::q) + sizeof(Smem::kv), "staging fits in q + kv");


constexpr float kLog2e = 1.442695040888963407f;





// KV tile at `tile_begin` (positions < kv_end are data, others zero) into `dst` [32][584] bf16.
// Chunk c = tid + i * 256 is 8 elements: position c / 72, elements (c % 72) * 8 .. + 7.
// bf16: cp.async of 16 bytes straight into `dst`. fp8: cp.async of 8 bytes into `raw`
// [32][576] bytes, dequantised into `dst` later by dequant_fp8 in the same thread (a thread
// only ever touches its own chunks of `raw`, so only its own wait_group orders them).
// One commit group per tile.
template <bool kFp8>
__device__ __forceinline__ void fetch_kv(const MlaAttentionParams& p, int b, int tile_begin, int kv_end, uint16_t* dst,
                                         uint8_t* raw) {
#pragma unroll
  for (int i = 0; i < kKvPerThread; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    const int key = c / kChunks, col = (c % kChunks) * 8;
    const int pos = tile_begin + key;
    bool nan = false;
    const uint8_t* row = pos < kv_end ? kv_row(p, b, pos, nan) : nullptr;
    if constexpr (kFp8) {
      uint8_t* d = raw + key * kDqk + col;
      if (row) {
        cp_async_8(smem_u32(d), row + col);
      } else {
        const uint32_t fill = nan ? 0x7f7f7f7fu : 0u;  // e4m3 NaN, or zeros
        *reinterpret_cast<uint2*>(d) = make_uint2(fill, fill);
      }
    } else {
      uint16_t* d = dst + key * kLd + col;
      if (row) {
        cp_async_16(smem_u32(d), row + col * 2);
      } else {
        const uint32_t fill = nan ? 0x7fc07fc0u : 0u;  // bf16 NaN, or zeros
        *reinterpret_cast<uint4*>(d) = make_uint4(fill, fill, fill, fill);
      }
    }
  }
  cp_async_commit();
}

// fp8: waits for this thread's copies of the tile and widens its chunks of `raw` into `dst`.
__device__ __forceinline__ void dequant_fp8(uint16_t* dst, const uint8_t* raw) {
  cp_async_wait_all();
#pragma unroll 1
  for (int i = 0; i < kKvPerThread; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    const int key = c / kChunks, col = (c % kChunks) * 8;
    const uint2 w = *reinterpret_cast<const uint2*>(raw + key * kDqk + col);
    const uint4 v = make_uint4(fp8x2_to_bf16x2(w.x & 0xffffu), fp8x2_to_bf16x2(w.x >> 16),
                               fp8x2_to_bf16x2(w.y & 0xffffu), fp8x2_to_bf16x2(w.y >> 16));
    *reinterpret_cast<uint4*>(dst + key * kLd + col) = v;
  }
}

// Q rows r0 .. r0 + 63 of sequence b (token qb + r / H, head r % H) into sm.q as bf16; rows at
// or past rows_b are zero. kQFp8: the 8 bytes of a chunk are dequantised in registers (exact).
template <bool kQFp8>
__device__ __forceinline__ void load_q(const MlaAttentionParams& p, uint16_t* sq, int qb, int r0, int rows_b) {
#pragma unroll 6
  for (int i = 0; i < kQPerThread; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = c / kChunks, col = (c % kChunks) * 8;
    const int r = r0 + row;
    const uint4 v = r < rows_b ? q_chunk<kQFp8>(p, qb, r, col) : make_uint4(0u, 0u, 0u, 0u);
    *reinterpret_cast<uint4*>(sq + row * kLd + col) = v;
  }
}

// kFp8: the cache is fp8 (else bf16); kQFp8: the query is fp8 (else bf16).
template <bool kFp8, bool kQFp8>
__global__ void __launch_bounds__(kThreads, 1) mla_attention_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, tq = lane & 3;   // mma fragment row (g, g + 8) and column pair (2 tq)
  const int rg = warp & 3, hf = warp >> 2;  // row group; key half (S) = value half (PV)
  const int b = static_cast<int>(blockIdx.z), split = static_cast<int>(blockIdx.y);

  // Sequence metadata (mla_seq_plan: bad offsets leave the rows unwritten, never out of bounds;
  // a bad length writes NaN rows). Every branch here is uniform over the CTA.
  MlaSeqPlan sp;
  if (!mla_seq_plan<kRows, kKeys>(p, b, split, sp)) return;
  const int qb = sp.qb, n = sp.n, L = sp.L, rows_b = sp.rows_b, row_tiles = sp.row_tiles, begin = sp.begin;
  const bool bad_len = sp.bad_len;

  for (int mt = static_cast<int>(blockIdx.x); mt < row_tiles; mt += static_cast<int>(gridDim.x)) {
    __syncthreads();  // the previous row tile's readers of q, kv, P and red_* are done
    const MlaTilePlan tp = mla_tile_plan<kRows, kKeys>(p, sp, mt);
    const int r0 = tp.r0, rows_here = tp.rows_here, kv_end = tp.kv_end, ntiles = tp.ntiles;
    const bool active = rg * 16 < rows_here;  // warp-uniform: the row group holds live rows
    // Causal limit (keys < lim) of this thread's rows g and g + 8; 0 for padded rows.
    int lim[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int r = r0 + rg * 16 + g + 8 * k;
      lim[k] = r < rows_b ? L - n + r / p.H + 1 : 0;
    }

    if (ntiles > 0) {
      fetch_kv<kFp8>(p, b, begin, kv_end, sm.kv[0], sm.raw);
      if constexpr (kFp8) dequant_fp8(sm.kv[0], sm.raw);
      load_q<kQFp8>(p, sm.q, qb, r0, rows_b);
    }

    float acc[kONb][4];
#pragma unroll
    for (int nb = 0; nb < kONb; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int j = 0; j < ntiles; ++j) {
      const int st = j & 1;
      const int tile_begin = begin + j * kKeys;
      if constexpr (!kFp8) cp_async_wait_all();
      __syncthreads();  // (A)
      if (j + 1 < ntiles) fetch_kv<kFp8>(p, b, tile_begin + kKeys, kv_end, sm.kv[st ^ 1], sm.raw);

      float x[2][4];  // scores of keys hf*16 + nb*8 + 2tq + (e & 1), rows g + 8 (e >> 1), base 2
      float mx[2] = {-INFINITY, -INFINITY};
      if (active) {
        float s[2][4] = {};
        const uint32_t a_addr = smem_u32(sm.q + (rg * 16 + (lane & 15)) * kLd + (lane >> 4) * 8);
        const uint32_t b_addr =
            smem_u32(sm.kv[st] + (hf * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8);
#pragma unroll 2
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t a[4], bk[4];
          mma16::ldsm_x4<false>(a, a_addr + kk * 32);
          mma16::ldsm_x4<false>(bk, b_addr + kk * 32);
          mma16::mma_bf16(s[0], a, {bk[0], bk[1]});
          mma16::mma_bf16(s[1], a, {bk[2], bk[3]});
        }
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = tile_begin + hf * 16 + nb * 8 + 2 * tq + (e & 1);
            const bool ok = key < kv_end && key < lim[e >> 1];
            x[nb][e] = ok ? s[nb][e] * p.scale_log2 : -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], x[nb][e]);
          }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 1));
          mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 2));
        }
        if (tq == 0) {
          sm.red_max[hf][rg * 16 + g] = mx[0];
          sm.red_max[hf][rg * 16 + g + 8] = mx[1];
        }
      }
      __syncthreads();  // (X)
      if (active) {
        float m_use[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const float m_new = fmaxf(m[k], fmaxf(mx[k], sm.red_max[hf ^ 1][rg * 16 + g + 8 * k]));
          m_use[k] = m_new == -INFINITY ? 0.0f : m_new;
          const float alpha = exp2f(m[k] - m_use[k]);  // 0 while nothing was attended
          m[k] = m_new;
          l[k] *= alpha;
#pragma unroll
          for (int nb = 0; nb < kONb; ++nb) {
            acc[nb][2 * k] *= alpha;
            acc[nb][2 * k + 1] *= alpha;
          }
        }
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const float p0 = exp2f(x[nb][2 * k] - m_use[k]), p1 = exp2f(x[nb][2 * k + 1] - m_use[k]);
            l[k] += p0 + p1;
            const uint32_t hi = pack_bf16x2(p0, p1);
            const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
            const uint32_t lo = pack_bf16x2(p0 - h0, p1 - h1);
            const int at = (rg * 16 + g + 8 * k) * kPLd + hf * 16 + nb * 8 + 2 * tq;
            *reinterpret_cast<uint32_t*>(sm.p_hi + at) = hi;
            *reinterpret_cast<uint32_t*>(sm.p_lo + at) = lo;
          }
      }
      __syncthreads();  // (B)
      if (active) {
        const int prow = (rg * 16 + (lane & 15)) * kPLd + (lane >> 4) * 8;
        const uint32_t ph_addr = smem_u32(sm.p_hi + prow), pl_addr = smem_u32(sm.p_lo + prow);
        const uint32_t v_addr =
            smem_u32(sm.kv[st] + ((lane & 7) + ((lane >> 3) & 1) * 8) * kLd + hf * (kDv / 2) + (lane >> 4) * 8);
#pragma unroll
        for (int ks = 0; ks < kKeys / 16; ++ks) {
          uint32_t ah[4], al[4];
          mma16::ldsm_x4<false>(ah, ph_addr + ks * 32);
          mma16::ldsm_x4<false>(al, pl_addr + ks * 32);
#pragma unroll
          for (int np = 0; np < kONb / 2; ++np) {
            uint32_t bv[4];
            mma16::ldsm_x4<true>(bv, v_addr + (ks * 16 * kLd + np * 16) * 2);
            mma16::mma_bf16(acc[2 * np], ah, {bv[0], bv[1]});
            mma16::mma_bf16(acc[2 * np], al, {bv[0], bv[1]});
            mma16::mma_bf16(acc[2 * np + 1], ah, {bv[2], bv[3]});
            mma16::mma_bf16(acc[2 * np + 1], al, {bv[2], bv[3]});
          }
        }
      }
      if constexpr (kFp8) {
        if (j + 1 < ntiles) dequant_fp8(sm.kv[st ^ 1], sm.raw);
      }
    }

    // Row sums: the quad's partial sums, then the partner warp's half of the keys.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      l[k] += __shfl_xor_sync(0xffffffffu, l[k], 1);
      l[k] += __shfl_xor_sync(0xffffffffu, l[k], 2);
    }
    if (active && tq == 0) {
      sm.red_sum[hf][rg * 16 + g] = l[0];
      sm.red_sum[hf][rg * 16 + g + 8] = l[1];
    }
    __syncthreads();
    // Normalise into a staging tile in the Q / KV region (all of its readers finished before
    // the barrier above; no cp.async is in flight), then write rows out with coalesced stores.
    if (active) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int local = rg * 16 + g + 8 * k;
        const float l_tot = l[k] + sm.red_sum[hf ^ 1][local];  // a + b == b + a: both warps agree
        const auto [scale, lse2] = mla_row_end(bad_len, m[k], l_tot, p.out_scale);
        if (hf == 0 && tq == 0) sm.lse_tile[local] = lse2;
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          const int d = hf * (kDv / 2) + nb * 8 + 2 * tq;
          const float v0 = acc[nb][2 * k] * scale, v1 = acc[nb][2 * k + 1] * scale;
          if (p.splits == 1) {
            *reinterpret_cast<uint32_t*>(reinterpret_cast<uint16_t*>(sm.q) + local * kStageLd + d) = pack_bf16x2(v0, v1);
          } else {
            *reinterpret_cast<float2*>(reinterpret_cast<float*>(sm.q) + local * kStageLd + d) = make_float2(v0, v1);
          }
        }
      }
    }
    __syncthreads();
    if (p.splits == 1) {
      const uint16_t* stage = reinterpret_cast<const uint16_t*>(sm.q);
      for (int c = tid; c < rows_here * (kDv / 8); c += kThreads) {
        const int local = c / (kDv / 8), d = (c % (kDv / 8)) * 8;
        const int r = r0 + local;
        uint16_t* orow = p.o + static_cast<int64_t>(qb + r / p.H) * p.o_s0 + static_cast<int64_t>(r % p.H) * p.o_s1;
        const uint4 v = *reinterpret_cast<const uint4*>(stage + local * kStageLd + d);
        if (p.o_vec) {
          *reinterpret_cast<uint4*>(orow + d) = v;
        } else {
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) orow[(d + e) * p.o_s2] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
        }
      }
      if (p.lse) {
        for (int local = tid; local < rows_here; local += kThreads) {
          const int r = r0 + local;
          p.lse[static_cast<int64_t>(qb + r / p.H) * p.lse_s0 + static_cast<int64_t>(r % p.H) * p.lse_s1] =
              sm.lse_tile[local] * kLn2;
        }
      }
    } else {
      const float* stage = reinterpret_cast<const float*>(sm.q);
      const int64_t grow0 = static_cast<int64_t>(split) * p.Tq * p.H + static_cast<int64_t>(qb) * p.H + r0;
      for (int c = tid; c < rows_here * (kDv / 4); c += kThreads) {
        const int local = c / (kDv / 4), d = (c % (kDv / 4)) * 4;
        *reinterpret_cast<float4*>(p.ws_o + (grow0 + local) * kDv + d) =
            *reinterpret_cast<const float4*>(stage + local * kStageLd + d);
      }
      for (int local = tid; local < rows_here; local += kThreads) p.ws_lse[grow0 + local] = sm.lse_tile[local];
    }
  }
}

// Merges the splits of one (token, head) row: weights exp2(lse_s - max), o = sum w o_s / sum w,
// lse = (max + log2(sum w)) ln 2. A NaN partial gives NaN; no attended key gives 0 and -inf.
// The partials are 2 KB per split, and small batches have few rows and many splits (B = 1, H =
// 32 at 8k keys: 32 rows of 128 splits), so there the combine is bound by how many loads are in
// flight, not by bytes. A CTA takes one row, or 1 / kParts of its columns (grid (rows, kParts);
// kParts = 4 for batches of at most num_sms rows, the pure rule mla_attention_combine_parts):
// warp w takes splits w, w + 4, ..., lane l 16 / kParts columns of each (4 l + 128 k), 8 16-byte
// loads in flight per lane (two splits of a whole row, eight of a quarter); the four warps' sums
// (all relative to the row's max) are added in shared memory in warp order. Every sum is formed
// in the same fixed order for either kParts (deterministic, the same arithmetic per column).
// (H200, B = 1, H = 32, 8k keys, Nsight: one CTA per row took 24 us, the attention kernel 17 us;
// with 4 parts the op 29.2 -> 21.9 us. With thousands of rows 4 parts were slower (B = 32, H =
// 128, 1k keys: 50 -> 76 us): there the grid fills the GPU already and each CTA's fixed work
// (the max pass, two barriers) repeats 4 times. Before either, one thread per 4 columns walking
// every split in turn took ~0.2 us a split.)
constexpr int kCombineThreads = 128, kCombineWarps = kCombineThreads / 32;
// Columns d .. d + 3 of an output row as bf16: one 8-byte store when o_vec, else four.
__device__ __forceinline__ void store_o4(const MlaAttentionParams& p, uint16_t* orow, int d, const float (&o)[4]) {
  const uint32_t lo = pack_bf16x2(o[0], o[1]), hi = pack_bf16x2(o[2], o[3]);
  if (p.o_vec) {
    *reinterpret_cast<uint2*>(orow + d) = make_uint2(lo, hi);
  } else {
    orow[d * p.o_s2] = static_cast<uint16_t>(lo & 0xffffu);
    orow[(d + 1) * p.o_s2] = static_cast<uint16_t>(lo >> 16);
    orow[(d + 2) * p.o_s2] = static_cast<uint16_t>(hi & 0xffffu);
    orow[(d + 3) * p.o_s2] = static_cast<uint16_t>(hi >> 16);
  }
}
// The partials to merge for token t's rows: every split, or with v4's flattened schedule its
// sequence's segments (0: one segment, o written by the attention kernel). The sequence: the last b
// whose q_start[b] <= t (an empty sequence's start equals the next one's).
__device__ __forceinline__ int combine_slots(const MlaAttentionParams& p, int64_t t) {
  if (p.flat_run == 0) return p.splits;
  int lo = 0, hi = p.flat_batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.q_start[static_cast<int64_t>(mid) * p.qs_s0] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int n = mla_flat_segments(lo, p.flat_tiles, p.flat_lead, p.flat_run);
  return n == 1 ? 0 : n;
}
template <int kParts>
__global__ void __launch_bounds__(kCombineThreads) mla_attention_combine_kernel(const __grid_constant__ MlaAttentionParams p) {
  constexpr int kCols = kDv / kParts;     // columns of the CTA
  constexpr int kVecs = kCols / 128;      // 16-byte loads per lane and split (4 or 1)
  constexpr int kInFlight = 8 / kVecs;    // splits per warp in flight (quarter rows)
  static_assert(kDv % (128 * kParts) == 0, "a lane holds whole 16-byte pieces");
  __shared__ float part[kCombineWarps][kCols];
  __shared__ float part_sum[kCombineWarps], warp_mx[kCombineWarps];
  __shared__ int warp_nan[kCombineWarps];
  // Launched as a programmatic dependent of a small attention grid (combine_early): wait until
  // that grid has completed and its partials are visible. (Without the launch attribute this
  // returns at once: stream order already holds.)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int64_t rows = p.Tq * p.H, row = blockIdx.x;
  const int64_t t = row / p.H, h = row % p.H;
  const int splits = combine_slots(p, t);
  if (splits == 0) return;  // (uniform over the CTA: one row)
  const int c0 = static_cast<int>(blockIdx.y) * kCols;  // the CTA's first column
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  // The row's max over the splits, and whether any is NaN.
  float mx = -INFINITY;
  bool nan = false;
  for (int s = tid; s < splits; s += kCombineThreads) {
    const float x = p.ws_lse[s * rows + row];
    nan |= x != x;
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  nan = __any_sync(0xffffffffu, nan);
  if (lane == 0) {
    warp_mx[warp] = mx;
    warp_nan[warp] = nan;
  }
  __syncthreads();
  mx = warp_mx[0];
  nan = warp_nan[0];
#pragma unroll
  for (int w = 1; w < kCombineWarps; ++w) {
    mx = fmaxf(mx, warp_mx[w]);
    nan |= warp_nan[w] != 0;
  }
  // Accumulation: lane l's columns c0 + 4 l + 128 k + e (k < kVecs, e < 4). Output: thread tid <
  // kCols / 4 writes columns c0 + 4 tid + e (the same columns, spread over every warp).
  float o[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lse = -INFINITY;
  if (nan) {
    o[0] = o[1] = o[2] = o[3] = lse = NAN;
  } else if (mx != -INFINITY) {  // (uniform over the CTA)
    float acc[kVecs][4] = {}, sum = 0.0f;
    const auto add = [&](float w, const float4& v, int k) {
      acc[k][0] += w * v.x;
      acc[k][1] += w * v.y;
      acc[k][2] += w * v.z;
      acc[k][3] += w * v.w;
    };
    if constexpr (kParts == 1) {
      // A whole row: 4 loads per split already; two splits unrolled put 8 in flight (a version
      // with the loads of both issued explicitly first measured 1-2% slower on the H200).
#pragma unroll 2
      for (int s = warp; s < splits; s += kCombineWarps) {
        const float w = exp2f(p.ws_lse[s * rows + row] - mx);
        sum += w;
        const float* src = p.ws_o + (s * rows + row) * kDv + c0 + 4 * lane;
#pragma unroll
        for (int k = 0; k < kVecs; ++k) add(w, *reinterpret_cast<const float4*>(src + 128 * k), k);
      }
    } else {
      // One load per split: the loads of 8 splits are issued before any of their sums.
      for (int s0 = warp; s0 < splits; s0 += kCombineWarps * kInFlight) {
        float l[kInFlight];
        float4 v[kInFlight][kVecs];
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) {
          const int s = s0 + i * kCombineWarps;
          if (s < splits) {
            l[i] = p.ws_lse[s * rows + row];
            const float* src = p.ws_o + (s * rows + row) * kDv + c0 + 4 * lane;
#pragma unroll
            for (int k = 0; k < kVecs; ++k) v[i][k] = *reinterpret_cast<const float4*>(src + 128 * k);
          }
        }
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) {
          if (s0 + i * kCombineWarps < splits) {
            const float w = exp2f(l[i] - mx);
            sum += w;
#pragma unroll
            for (int k = 0; k < kVecs; ++k) add(w, v[i][k], k);
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      *reinterpret_cast<float4*>(&part[warp][4 * lane + 128 * k]) = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    if (lane == 0) part_sum[warp] = sum;
    __syncthreads();
    if (tid >= kCols / 4) return;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) {
      total += part_sum[w];
      const float4 x = *reinterpret_cast<const float4*>(&part[w][4 * tid]);
      o[0] += x.x;
      o[1] += x.y;
      o[2] += x.z;
      o[3] += x.w;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] /= total;
    lse = (mx + log2f(total)) * kLn2;
  }
  if (tid >= kCols / 4) return;
  store_o4(p, p.o + t * p.o_s0 + h * p.o_s1, c0 + 4 * tid, o);  // this thread's output columns
  if (p.lse && tid == 0 && blockIdx.y == 0) p.lse[t * p.lse_s0 + h * p.lse_s1] = lse;
}

// The same merge with one warp per row (calls of many rows and at most 4 splits: the rule
// mla_attention_combine_by_warps): lane l holds columns 4 l + 128 k (k < 4) of every split's
// partial and lane s split s's lse, all loaded at once; the max and the weights go by shuffles,
// no barrier. Same arithmetic and order as mla_attention_combine_kernel<1> (there warp s holds
// split s's products, summed in warp order): each product w_s o_s rounded, then added in split
// order, so the two give the same bits (MlaAttentionCuda.CombineByWarpsGivesTheSameBits).
// (H200, decode B32 32k H32 fp8: 4 splits x 1024 rows; the CTA-per-row kernel paid a round trip
// for the lse before the partials' loads and two barriers.)
constexpr int kCombineWarpSplits = static_cast<int>(kMlaAttentionCombineWarpMaxSplits);
__global__ void __launch_bounds__(kCombineThreads) mla_attention_combine_warps_kernel(const __grid_constant__ MlaAttentionParams p) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // (see mla_attention_combine_kernel)
  const int64_t rows = p.Tq * p.H;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + static_cast<int>(threadIdx.x) / 32;
  if (row >= rows) return;
  const int64_t t = row / p.H, h = row % p.H;
  const int splits = combine_slots(p, t);
  if (splits == 0) return;  // (uniform over the warp: one row)
  const float my_lse = lane < splits ? p.ws_lse[lane * rows + row] : -INFINITY;
  // Each partial read once with streaming loads (__ldcs: evict-first), after v4 wrote it
  // evict-last: verify 4 B8 8k H 96 1.032-1.037x on the H100, the other split shapes 1.00-1.01x
  // (forty-fourth session; v4's writes' policy alone 1.005x). mla_attention_combine_kernel keeps
  // plain loads: with __ldcs there too, decode B1 32k H 32 (32 rows: that combine, on partials
  // another kernel wrote) measured 0.993-0.998x in three jobs.
  float4 v[kCombineWarpSplits][kDv / 128];
#pragma unroll
  for (int s = 0; s < kCombineWarpSplits; ++s)
    if (s < splits) {
      const float* src = p.ws_o + (s * rows + row) * kDv + 4 * lane;
#pragma unroll
      for (int k = 0; k < kDv / 128; ++k) v[s][k] = __ldcs(reinterpret_cast<const float4*>(src + 128 * k));
    }
  float mx = my_lse;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  const bool nan = __any_sync(0xffffffffu, my_lse != my_lse);
  float o[kDv / 128][4] = {}, lse = -INFINITY;
  if (nan) {
#pragma unroll
    for (int k = 0; k < kDv / 128; ++k) o[k][0] = o[k][1] = o[k][2] = o[k][3] = NAN;
    lse = NAN;
  } else if (mx != -INFINITY) {
    const float my_w = exp2f(my_lse - mx);
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < kCombineWarpSplits; ++s)
      if (s < splits) {
        const float w = __shfl_sync(0xffffffffu, my_w, s);
        total = __fadd_rn(total, w);
#pragma unroll
        for (int k = 0; k < kDv / 128; ++k) {
          o[k][0] = __fadd_rn(o[k][0], __fmul_rn(w, v[s][k].x));
          o[k][1] = __fadd_rn(o[k][1], __fmul_rn(w, v[s][k].y));
          o[k][2] = __fadd_rn(o[k][2], __fmul_rn(w, v[s][k].z));
          o[k][3] = __fadd_rn(o[k][3], __fmul_rn(w, v[s][k].w));
        }
      }
#pragma unroll
    for (int k = 0; k < kDv / 128; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[k][e] /= total;
    lse = (mx + log2f(total)) * kLn2;
  }
  uint16_t* orow = p.o + t * p.o_s0 + h * p.o_s1;
#pragma unroll
  for (int k = 0; k < kDv / 128; ++k) store_o4(p, orow, 4 * lane + 128 * k, o[k]);
  if (p.lse && lane == 0) p.lse[t * p.lse_s0 + h * p.lse_s1] = lse;
}

bool aligned(const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0; }

std::pair<int, int> compute_capability() {
  int dev = 0, major = 0, minor = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&dev));
  KESTREL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  KESTREL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return {major, minor};
}

template <bool kFp8, bool kQFp8>
void launch(const MlaAttentionParams& p, dim3 grid, cudaStream_t s) {
  static const char tag = 0;  // one per instantiation
  once_per_device(&tag, [] {
    KESTREL_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_kernel<kFp8, kQFp8>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(Smem))));
  });
  mla_attention_kernel<kFp8, kQFp8><<<grid, kThreads, sizeof(Smem), s>>>(p);
  KESTREL_LAUNCHED(kFp8 ? (kQFp8 ? "mla_attention_kernel<fp8 cache, fp8 q>" : "mla_attention_kernel<fp8 cache, bf16 q>")
                        : (kQFp8 ? "mla_attention_kernel<bf16 cache, fp8 q>" : "mla_attention_kernel<bf16 cache, bf16 q>"));
}

}  // namespace

Support mla_attention_supports(const MlaAttentionArgs& a) {
  const int64_t es = static_cast<int64_t>(dtype_size(a.cache.dtype));
  if (!aligned(a.cache.data, 16) || (a.cache.stride(0) * es) % 16 != 0 || (a.cache.stride(1) * es) % 16 != 0)
    return Support::no(str("cache: the kernel copies 16-byte pieces of rows: needs a 16-byte aligned base and page and "
                           "row strides of whole 16 bytes, got strides ",
                           a.cache.strides_str()));
  if (a.block_table.size(0) > 65535) return Support::no(str("B = ", a.block_table.size(0), " exceeds 65535 (grid z)"));
  if (a.cache.size(0) > INT32_MAX || a.cache.size(1) > INT32_MAX || a.block_table.size(1) > INT32_MAX ||
      a.q.size(1) > INT32_MAX)
    return Support::no("num_pages, page_size, max_pages and H must fit in int32");
  // KV positions and query rows are int in the kernel (with room for one split's rounding).
  if (a.block_table.size(1) * a.cache.size(1) > INT32_MAX - (int64_t{1} << 16))
    return Support::no(str("max_pages * page_size = ", a.block_table.size(1) * a.cache.size(1), " exceeds 2^31 - 2^16"));
  if (a.q.size(0) * a.q.size(1) > INT32_MAX)
    return Support::no(str("Tq * H = ", a.q.size(0) * a.q.size(1), " exceeds int32"));
  const bool keys_m = a.cuda_kernel == MlaAttentionKernel::wgmma_keys_m || a.cuda_kernel == MlaAttentionKernel::wgmma_keys_m_wide;
  const bool keys_m_bf16 = a.cuda_kernel == MlaAttentionKernel::wgmma_keys_m_bf16;
  const bool seesaw64 = a.cuda_kernel == MlaAttentionKernel::wgmma_seesaw64;
  if (a.cuda_kernel == MlaAttentionKernel::wgmma || keys_m || keys_m_bf16 || seesaw64) {
    const auto [major, minor] = compute_capability();
    if (!(major == 9 && minor == 0))
      return Support::no(str("cuda_kernel: the wgmma kernels need sm_90a (compute capability 9.0: wgmma, setmaxnreg, "
                             "cp.async.bulk), this device is ", major, ".", minor));
  }
  if (keys_m && (a.cache.dtype != DType::fp8_e4m3 || a.q.dtype != DType::fp8_e4m3))
    return Support::no(str("cuda_kernel: the keys-as-M kernel takes an fp8_e4m3 cache with an fp8_e4m3 q, got a ",
                           dtype_name(a.cache.dtype), " cache with a ", dtype_name(a.q.dtype), " q"));
  if (a.cuda_kernel == MlaAttentionKernel::wgmma_keys_m_wide && a.precision != MlaAttentionPrecision::fast)
    return Support::no("cuda_kernel: the wide keys-as-M kernel (64 query rows per CTA) runs precision fast only (P "
                       "rounded once, QK on the e4m3 operands), got precision exact");
  if (keys_m_bf16 && a.cache.dtype != DType::bf16)
    return Support::no(str("cuda_kernel: the bf16 keys-as-M kernel takes a bf16 cache, got ", dtype_name(a.cache.dtype)));
  if (keys_m_bf16 && a.precision != MlaAttentionPrecision::fast)
    return Support::no("cuda_kernel: the bf16 keys-as-M kernel runs precision fast only (P rounded once to bf16), got "
                       "precision exact");
  if (seesaw64 && a.cache.dtype != DType::bf16)
    return Support::no(str("cuda_kernel: the 64-key seesaw kernel takes a bf16 cache, got ", dtype_name(a.cache.dtype)));
  if (seesaw64 && a.precision != MlaAttentionPrecision::fast)
    return Support::no("cuda_kernel: the 64-key seesaw kernel runs precision fast only (P rounded once to bf16), got "
                       "precision exact");
  return Support::yes();
}

void mla_attention(const MlaAttentionArgs& a, Stream stream) {
  constexpr const char* op = "mla_attention";
  const int64_t Tq = a.q.size(0), H = a.q.size(1), B = a.block_table.size(0);
  if (Tq == 0 || B == 0) return;
  MlaAttentionParams p{};
  const bool q_fp8 = a.q.dtype == DType::fp8_e4m3;
  p.q = a.q.data;
  p.q_s0 = a.q.stride(0); p.q_s1 = a.q.stride(1); p.q_s2 = a.q.stride(2);
  // A chunk of 8 elements is one 16-byte (bf16) or 8-byte (fp8) load.
  p.q_vec = p.q_s2 == 1 && aligned(a.q.data, q_fp8 ? 8 : 16) && p.q_s0 % 8 == 0 && p.q_s1 % 8 == 0;
  const int64_t es = static_cast<int64_t>(dtype_size(a.cache.dtype));
  p.cache = static_cast<const uint8_t*>(a.cache.data);
  p.page_bytes = a.cache.stride(0) * es;
  p.row_bytes = a.cache.stride(1) * es;
  p.block_table = static_cast<const int32_t*>(a.block_table.data);
  p.bt_s0 = a.block_table.stride(0); p.bt_s1 = a.block_table.stride(1);
  p.seq_lens = static_cast<const int32_t*>(a.seq_lens.data);
  p.sl_s0 = a.seq_lens.stride(0);
  p.q_start = static_cast<const int32_t*>(a.q_start.data);
  p.qs_s0 = a.q_start.stride(0);
  p.o = static_cast<uint16_t*>(a.o.data);
  p.o_s0 = a.o.stride(0); p.o_s1 = a.o.stride(1); p.o_s2 = a.o.stride(2);
  p.o_vec = p.o_s2 == 1 && aligned(a.o.data, 16) && p.o_s0 % 8 == 0 && p.o_s1 % 8 == 0;
  p.lse = a.lse.defined() ? static_cast<float*>(a.lse.data) : nullptr;
  if (p.lse) { p.lse_s0 = a.lse.stride(0); p.lse_s1 = a.lse.stride(1); }
  p.Tq = Tq;
  p.H = checked_int(H, op, "H");
  p.num_pages = checked_int(a.cache.size(0), op, "num_pages");
  p.page_size = checked_int(a.cache.size(1), op, "page_size");
  p.max_pages = checked_int(a.block_table.size(1), op, "max_pages");
  p.scale_log2 = a.softmax_scale * a.kv_scale * a.q_scale * kLog2e;  // f32, left to right (q_scale 1 for bf16 q)
  p.out_scale = a.kv_scale;

  // Plan from host-known sizes only (capture-stable): ceil(Tq / B) queries per sequence, in row
  // tiles of 64 (v1, v2, the wide keys-as-M kernel) or 32 (the keys-as-M kernels).
  const auto [cc_major, cc_minor] = compute_capability();
  const int64_t q_plan = (Tq + B - 1) / B;
  const int sms = num_sms();
  const MlaAttentionKernel kernel =
      mla_attention_cuda_kernel(a.cuda_kernel, cc_major, cc_minor, a.cache.dtype == DType::fp8_e4m3 && q_fp8,
                                q_plan * H, B, static_cast<int64_t>(p.max_pages) * p.page_size,
                                a.precision == MlaAttentionPrecision::fast, a.cache.dtype == DType::bf16, p.page_size, sms);
  const bool keys_m = kernel == MlaAttentionKernel::wgmma_keys_m || kernel == MlaAttentionKernel::wgmma_keys_m_wide;
  const bool keys_m_bf16 = kernel == MlaAttentionKernel::wgmma_keys_m_bf16;
  const int64_t tile_rows = kernel == MlaAttentionKernel::wgmma_keys_m || keys_m_bf16 ? kMlaAttentionKeysMTileRows
                            : kernel == MlaAttentionKernel::wgmma_keys_m_wide ? kMlaAttentionKeysMWideTileRows
                                                                                : kRows;
  const int64_t row_tiles = (q_plan * H + tile_rows - 1) / tile_rows;
  const int64_t kv_plan = static_cast<int64_t>(p.max_pages) * p.page_size;
  const int64_t plan_splits = mla_attention_num_splits(B, row_tiles, kv_plan, sms);
  const bool seesaw64 = kernel == MlaAttentionKernel::wgmma_seesaw64;
  // A forced count (cuda_splits), else v4 and v3 rebalance the plan's waves.
  const int64_t uniform_splits = a.cuda_splits > 0 ? a.cuda_splits
                                 : seesaw64         ? mla_attention_seesaw64_splits(B, row_tiles, kv_plan, sms, plan_splits)
                                 : keys_m           ? mla_attention_keys_m_splits(B, row_tiles, kv_plan, sms, plan_splits)
                                                    : plan_splits;
  // v4's flattened schedule where it was measured faster than the uniform splits (or asked for).
  MlaFlatPlan flat;
  if (seesaw64 && a.cuda_schedule != MlaAttentionSchedule::uniform && a.cuda_splits == 0) {
    const MlaFlatPlan f = mla_attention_seesaw64_flat_plan(B, row_tiles, kv_plan, sms);
    if (f.parts > 0 && (a.cuda_schedule == MlaAttentionSchedule::flat || mla_attention_seesaw64_flat_wins(B, row_tiles, uniform_splits, sms, f)))
      flat = f;
  }
  KESTREL_CHECK(row_tiles <= INT32_MAX, op, ": ", row_tiles, " row tiles exceed the grid");
  KESTREL_CHECK(B * (flat.tiles + flat.lead) <= INT32_MAX, op, ": ", B, " sequences of ", flat.tiles, " planned tiles (and a lead of ",
                flat.lead, " each) exceed the flattened schedule's range");
  int64_t splits = flat.parts > 0 ? flat.slots : uniform_splits;
  p.splits = static_cast<int>(splits);
  p.flat_run = static_cast<int>(flat.run);
  p.flat_tiles = static_cast<int>(flat.tiles);
  p.flat_lead = static_cast<int>(flat.lead);
  p.flat_batch = flat.parts > 0 ? static_cast<int>(B) : 0;
  dim3 grid = flat.parts > 0 ? dim3(static_cast<unsigned>(row_tiles), 1u, static_cast<unsigned>(flat.parts))
                             : dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(splits), static_cast<unsigned>(B));
  const cudaStream_t s = as_cuda(stream);

  void* ws = nullptr;
  const auto alloc_ws = [&] {
    if (splits <= 1) return;
    const size_t rows = static_cast<size_t>(Tq * H);
    ws = scratch_alloc(static_cast<size_t>(splits) * rows * (kDv + 1) * sizeof(float), s);
    p.ws_o = static_cast<float*>(ws);
    p.ws_lse = p.ws_o + static_cast<size_t>(splits) * rows * kDv;
  };
  alloc_ws();
  const bool fp8 = a.cache.dtype == DType::fp8_e4m3;
  // v2 takes what v4 cannot launch when the rule chose v4 (same tiles, splits and workspace): its
  // relayout mode needs no tensor map. A forced v4 fails instead, saying why.
  bool run_v2 = kernel == MlaAttentionKernel::wgmma;
  if (kernel == MlaAttentionKernel::wgmma_seesaw64) {
    p.combine_early = splits > 1 && mla_attention_combine_early(static_cast<int64_t>(grid.x) * grid.y * grid.z, sms);
    if (!launch_mla_attention_seesaw64(p, grid, static_cast<int>(B), q_fp8, s)) {
      const bool forced = a.cuda_kernel != MlaAttentionKernel::automatic;
      if ((forced || flat.parts > 0) && ws != nullptr) scratch_free(ws, s);  // (nothing was launched)
      if (!forced && flat.parts > 0) {  // v2 takes the uniform splits
        ws = nullptr;
        splits = uniform_splits;
        p.splits = static_cast<int>(splits);
        p.flat_run = p.flat_tiles = p.flat_lead = p.flat_batch = 0;
        grid = dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(splits), static_cast<unsigned>(B));
        alloc_ws();
      }
      KESTREL_CHECK(!forced, op,
                    ": the 64-key seesaw kernel needs tensor maps of the cache, and the driver could not encode them "
                    "(cuTensorMapEncodeTiled missing or refused)");
      run_v2 = true;
    }
  } else if (keys_m_bf16) {
    p.combine_early = splits > 1 && mla_attention_combine_early(static_cast<int64_t>(grid.x) * grid.y * grid.z, sms);
    launch_mla_attention_keys_m_bf16(p, grid, q_fp8, s);
  } else if (keys_m) {
    p.combine_early = splits > 1 && mla_attention_combine_early(static_cast<int64_t>(grid.x) * grid.y * grid.z, sms);
    launch_mla_attention_keys_m(p, grid, a.precision == MlaAttentionPrecision::exact,
                                kernel == MlaAttentionKernel::wgmma_keys_m_wide, s);
  } else if (!run_v2) {  // v1
    if (fp8 && q_fp8) {
      launch<true, true>(p, grid, s);
    } else if (fp8) {
      launch<true, false>(p, grid, s);
    } else if (q_fp8) {
      launch<false, true>(p, grid, s);
    } else {
      launch<false, false>(p, grid, s);
    }
  }
  if (run_v2) {
    p.q_async = p.q_vec && !q_fp8 && static_cast<int64_t>(grid.x) * grid.y * grid.z <= sms;
    p.combine_early = splits > 1 && mla_attention_combine_early(static_cast<int64_t>(grid.x) * grid.y * grid.z, sms);
    p.q_tensor = mla_attention_q_by_tensor_copy(static_cast<int64_t>(p.max_pages) * p.page_size, splits);
    const bool split_p = a.precision == MlaAttentionPrecision::exact;
    const int64_t kv_len = static_cast<int64_t>(p.max_pages) * p.page_size;
    const bool lookahead = mla_attention_lookahead(!fp8, split_p, (kv_len + splits - 1) / splits, q_plan * H);
    launch_mla_attention_sm90(p, grid, fp8, q_fp8, split_p, lookahead, s);
  }
  if (splits > 1) {
    KESTREL_CHECK(Tq * H <= INT32_MAX, op, ": Tq * H = ", Tq * H, " exceeds the combine grid");
    if (a.cuda_combine == MlaAttentionCombine::automatic && mla_attention_combine_by_warps(Tq * H, splits, sms)) {
      const dim3 cgrid(static_cast<unsigned>((Tq * H + kCombineWarps - 1) / kCombineWarps));
      launch_dependent(mla_attention_combine_warps_kernel, cgrid, dim3(kCombineThreads), s, p.combine_early, p);
      KESTREL_LAUNCHED("mla_attention_combine_kernel<warp per row>");
    } else {
      const int parts = mla_attention_combine_parts(Tq * H, sms);
      const dim3 cgrid(static_cast<unsigned>(Tq * H), static_cast<unsigned>(parts));
      launch_dependent(parts == 4 ? mla_attention_combine_kernel<4> : mla_attention_combine_kernel<1>, cgrid,
                       dim3(kCombineThreads), s, p.combine_early, p);
      KESTREL_LAUNCHED("mla_attention_combine_kernel");
    }
    scratch_free(ws, s);
  }
}

}  // namespace kestrel::ops::cuda
