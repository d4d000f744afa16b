// mla_attention, CUDA: what the two kernels (v1 mma.sync in mla_attention.cu, v2 WGMMA in
// mla_attention_sm90.cu) share: the params struct, which the host fills in one place
// (cuda::mla_attention), the workspace layout the combine kernel reads, and small device
// helpers with exact conversions.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_fp8.h>

#include <cstdint>

#include "common.cuh"
#include "kestrel/ops/mla_write_kv.h"  // kMlaNope
#include "mma_bf16.cuh"

namespace kestrel::ops::cuda {

struct MlaAttentionParams {
  const void* q;                 // [Tq, H, 576] bf16 bits | fp8 e4m3 bytes
  int64_t q_s0, q_s1, q_s2;      // elements
  const uint8_t* cache;          // [num_pages, page_size, 576] bf16 | fp8 bytes
  int64_t page_bytes, row_bytes; // strides in bytes (multiples of 16)
  const int32_t* block_table;    // [B, max_pages]
  int64_t bt_s0, bt_s1;
  const int32_t* seq_lens;       // [B]
  int64_t sl_s0;
  const int32_t* q_start;        // [B + 1]
  int64_t qs_s0;
  uint16_t* o;                   // [Tq, H, 512] bf16 bits
  int64_t o_s0, o_s1, o_s2;
  float* lse;                    // [Tq, H] natural log, or nullptr
  int64_t lse_s0, lse_s1;
  float* ws_o;                   // [splits, Tq * H, 512] normalised partial o (splits > 1)
  float* ws_lse;                 // [splits, Tq * H] base-2 partial lse (splits > 1)
  int flat_run, flat_tiles;      // v4's flattened schedule (MlaFlatPlan's run and tiles), or 0: uniform
  int flat_lead;                 // (and its lead)
  int flat_batch;                // splits; with it, splits is the plan's slots, and B for the combine
  int walk_batch;                // v3 wide's lead: the B sequences its CTAs walk (grid.z of them a row tile), or 0
  int64_t Tq;
  int H, num_pages, page_size, max_pages, splits;
  float scale_log2;              // softmax_scale * kv_scale * q_scale * log2(e), left to right in f32
  float out_scale;               // kv_scale
  bool q_vec, o_vec;             // vector q chunks (16 B bf16, 8 B fp8) / 16-byte o chunks allowed
  bool q_async;                  // v2: a bf16 q_vec q by cp.async (grids of at most one wave)
  bool combine_early;            // v2: the combine kernel is launched as a programmatic dependent
  bool q_tensor;                 // v2: a bf16 q may go by tensor copy (mla_attention_q_by_tensor_copy)
};

constexpr float kLn2 = 0.693147180559945309f;

using mma16::pack_bf16x2;
using mma16::pack_f16x2;

// Two e4m3 bytes (first in the low byte) -> two bf16 (first in the low half). Exact: every
// e4m3 value, subnormals and NaN included, is a bf16 value (via f16, also exact).
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t two) {
  const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(__half2(hr));
  return pack_bf16x2(f.x, f.y);
}

// Two e4m3 bytes -> two f16 (first in the low half). Exact, and one instruction: every e4m3
// value is an f16 value. The kernel whose query and cache are both fp8 runs its products in
// f16 (sm90: `Operands`), where this is the whole dequantisation.
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t two) {
  const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return static_cast<uint32_t>(hr.x) | static_cast<uint32_t>(hr.y) << 16;
}

// Eight e4m3 bytes (w.x low byte first) -> eight 2-byte values, f16 (kF16) or bf16, exact.
template <bool kF16>
__device__ __forceinline__ uint4 fp8x8_dequantize(uint2 w) {
  if constexpr (kF16) {
    return make_uint4(fp8x2_to_f16x2(w.x & 0xffffu), fp8x2_to_f16x2(w.x >> 16), fp8x2_to_f16x2(w.y & 0xffffu),
                      fp8x2_to_f16x2(w.y >> 16));
  } else {
    return make_uint4(fp8x2_to_bf16x2(w.x & 0xffffu), fp8x2_to_bf16x2(w.x >> 16), fp8x2_to_bf16x2(w.y & 0xffffu),
                      fp8x2_to_bf16x2(w.y >> 16));
  }
}

// Block-table entry k of sequence b: the page holding its KV positions k * page_size ...
__device__ __forceinline__ int page_at(const MlaAttentionParams& p, int b, int k) {
  return p.block_table[b * p.bt_s0 + k * p.bt_s1];
}

// Cache row of KV position `pos` of sequence b: its bytes, or nullptr with `nan` set when the
// block table names a page outside the cache.
__device__ __forceinline__ const uint8_t* kv_row(const MlaAttentionParams& p, int b, int pos, bool& nan) {
  const int64_t page = page_at(p, b, pos / p.page_size);
  nan = page < 0 || page >= p.num_pages;
  return nan ? nullptr : p.cache + page * p.page_bytes + (pos % p.page_size) * p.row_bytes;
}

// Values col .. col + 7 of query row r (token qb + r / H, head r % H) as 8 bf16 (16 bytes).
// A bf16 q: one 16-byte load when p.q_vec, else 8 element loads. An fp8 q: one 8-byte load
// (or 8 byte loads), dequantised in registers (exact); q_scale stays out (the softmax constant).
// kF16 (fp8 q only): the 8 values as f16 instead, also exact.
template <bool kQFp8, bool kF16 = false>
__device__ __forceinline__ uint4 q_chunk(const MlaAttentionParams& p, int qb, int r, int col) {
  uint4 v;
  const int64_t at = static_cast<int64_t>(qb + r / p.H) * p.q_s0 + static_cast<int64_t>(r % p.H) * p.q_s1 +
                     col * p.q_s2;  // elements
  if constexpr (kQFp8) {
    const uint8_t* src = static_cast<const uint8_t*>(p.q) + at;
    uint2 w;  // bytes col .. col + 7, the first in the low byte of w.x
    if (p.q_vec) {
      w = __ldg(reinterpret_cast<const uint2*>(src));
    } else {
      uint32_t b[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) b[k] = src[k * p.q_s2];
      w = make_uint2(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24, b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24);
    }
    v = fp8x8_dequantize<kF16>(w);
  } else {
    static_assert(!kF16, "f16 values from an fp8 q only");
    const uint16_t* src = static_cast<const uint16_t*>(p.q) + at;
    if (p.q_vec) {
      v = __ldg(reinterpret_cast<const uint4*>(src));
    } else {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        w[k] = static_cast<uint32_t>(src[(2 * k) * p.q_s2]) | static_cast<uint32_t>(src[(2 * k + 1) * p.q_s2]) << 16;
      v = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  return v;
}

// The KV range of one (sequence, split) and, per row tile, the keys its rows attend: the plan
// every CUDA kernel follows (tiles of kRowsPerTile query rows and kKeysPerTile keys). Bad
// offsets leave the sequence's rows unwritten, never out of bounds (mla_seq_plan returns false);
// a bad length writes NaN rows (bad_len). Each split is a whole number of key tiles. Positions
// and rows fit in int: the host checks max_pages * page_size and Tq * H.
struct MlaSeqPlan {
  int qb, n, L, rows_b, row_tiles, begin, end;
  bool bad_len;
  bool direct;  // o and lse written by the attention kernel (else a workspace partial)
};
struct MlaTilePlan {
  int r0, rows_here, kv_end, ntiles;
};
// Sequence b's queries, length and row tiles (both schedules' plans); false: its q_start entries
// are out of order or past Tq (the sequence is skipped).
template <int kRowsPerTile>
__device__ __forceinline__ bool mla_seq_rows(const MlaAttentionParams& p, int b, MlaSeqPlan& s) {
  s.qb = p.q_start[b * p.qs_s0];
  const int qe = p.q_start[(b + 1) * p.qs_s0];
  if (s.qb < 0 || qe < s.qb || qe > p.Tq) return false;
  s.n = qe - s.qb;
  s.L = p.seq_lens[b * p.sl_s0];
  s.bad_len = s.L < 0 || static_cast<int64_t>(s.L) > static_cast<int64_t>(p.max_pages) * p.page_size;
  s.rows_b = s.n * p.H;
  s.row_tiles = (s.rows_b + kRowsPerTile - 1) / kRowsPerTile;
  return true;
}
template <int kRowsPerTile, int kKeysPerTile>
__device__ __forceinline__ bool mla_seq_plan(const MlaAttentionParams& p, int b, int split, MlaSeqPlan& s) {
  if (!mla_seq_rows<kRowsPerTile>(p, b, s)) return false;
  const int chunk = s.bad_len ? 0 : ((s.L + p.splits - 1) / p.splits + kKeysPerTile - 1) / kKeysPerTile * kKeysPerTile;
  s.begin = split * chunk;
  s.end = s.bad_len ? 0 : min(s.L, s.begin + chunk);
  s.direct = p.splits == 1;
  return true;
}
// v4's flattened schedule (MlaFlatPlan): segment `slot` of sequence b, planned tiles [lo, hi) of
// its T; a sequence of one segment is direct. The keys past the real length are cut as above.
template <int kRowsPerTile, int kKeysPerTile>
__device__ __forceinline__ bool mla_seq_plan_flat(const MlaAttentionParams& p, int b, int lo, int hi, bool direct,
                                                  MlaSeqPlan& s) {
  if (!mla_seq_rows<kRowsPerTile>(p, b, s)) return false;
  s.begin = lo * kKeysPerTile;
  s.end = s.bad_len ? 0 : min(s.L, hi * kKeysPerTile);
  s.direct = direct;
  return true;
}
template <int kRowsPerTile, int kKeysPerTile>
__device__ __forceinline__ MlaTilePlan mla_tile_plan(const MlaAttentionParams& p, const MlaSeqPlan& s, int mt) {
  MlaTilePlan t;
  t.r0 = mt * kRowsPerTile;
  t.rows_here = min(kRowsPerTile, s.rows_b - t.r0);
  t.kv_end = min(s.end, s.L - s.n + (t.r0 + t.rows_here - 1) / p.H + 1);  // the last row's limit
  t.ntiles = t.kv_end > s.begin ? (t.kv_end - s.begin + kKeysPerTile - 1) / kKeysPerTile : 0;
  return t;
}

// The WGMMA kernel (mla_attention_sm90.cu): same params, grid (row_tiles, splits, B), same
// outputs (o and lse when splits == 1, else the workspace partials for the combine kernel).
// split_p: P as hi + lo (MlaAttentionPrecision::exact), else rounded once (::fast).
// lookahead: mla_attention_lookahead of the planned sizes (taken only with a bf16 cache by TMA).
void launch_mla_attention_sm90(const MlaAttentionParams& p, dim3 grid, bool fp8_cache, bool fp8_q, bool split_p,
                               bool lookahead, cudaStream_t s);

// The keys-as-M kernel for an fp8 cache and an fp8 query (mla_attention_keys_m.cu): same params,
// grid (32-row tiles, or 64-row ones when wide, splits, B), same outputs. wide needs !split_p.
void launch_mla_attention_keys_m(const MlaAttentionParams& p, dim3 grid, bool split_p, bool wide, cudaStream_t s);

// The keys-as-M kernel for a bf16 cache (mla_attention_keys_m_bf16.cu), precision fast: same
// params, grid (32-row tiles, splits, B), same outputs.
void launch_mla_attention_keys_m_bf16(const MlaAttentionParams& p, dim3 grid, bool fp8_q, cudaStream_t s);

// The 64-key seesaw kernel for a bf16 cache (mla_attention_seesaw64.cu), precision fast: same
// params, grid (64-row tiles, splits, B) or, with p.flat_run, (64-row tiles, 1, parts), same
// outputs. False (nothing launched) when the driver
// cannot encode its tensor maps of the cache.
bool launch_mla_attention_seesaw64(const MlaAttentionParams& p, dim3 grid, int batch, bool fp8_q, cudaStream_t s);

// A tensor map over a bf16 cache as [num_pages][page_size][576] (p's page and row strides), boxes
// of 64 columns x box_rows rows x 1 page, 128-byte swizzle (mla_attention_sm90.cu); false when the
// driver offers no encoder or refuses the map.
bool encode_mla_bf16_cache_map(const MlaAttentionParams& p, int box_rows, CUtensorMap* map);

// A tensor map over a bf16 q as [Tq * H][576] rows (its tokens H rows apart: q_s0 == H * q_s1,
// q_vec), boxes of 64 columns x 64 rows, 128-byte swizzle (Q's shared layout in v2 and v4); false
// for other strides or when the driver offers no encoder or refuses the map.
bool encode_mla_q_map(const MlaAttentionParams& p, CUtensorMap* map);

// A tensor map over an e4m3 q as [Tq * H][576] byte rows (its tokens H rows apart: q_s0 == H *
// q_s1, rows 16-byte aligned), boxes of 128 bytes x 32 rows, 128-byte swizzle, zeros past column
// 575 and the last row (v3 wide's Q: two 32-row tiles of 5 chunks); false for other strides or
// when the driver offers no encoder or refuses the map.
bool encode_mla_q8_map(const MlaAttentionParams& p, CUtensorMap* map);

// A tensor map over a bf16 o as [Tq * H][512] rows (its tokens H rows apart: o_s0 == H * o_s1,
// o_vec), boxes of 64 columns x 64 rows, 128-byte swizzle (v4's staged o boxes: a whole row
// tile's o by tensor copy); false for other strides or when the driver offers no encoder or
// refuses the map.
bool encode_mla_o_map(const MlaAttentionParams& p, CUtensorMap* map);

// A tensor map over the splits' f32 partials ws_o as [splits x Tq x H][512] rows, boxes of 32
// columns x box_rows rows, 128-byte swizzle (v3's 32-row form's split partials, staged as 16 boxes
// a row tile); false when ws_o is unset or misaligned, its rows exceed an int, or the driver
// refuses the map.
bool encode_mla_ws_o_map(const MlaAttentionParams& p, int box_rows, CUtensorMap* map);

// Query row r of sequence s in split `split`'s workspace partials: ws_o's row (512 f32) and ws_lse's
// element.
__device__ __forceinline__ int64_t mla_ws_row(const MlaAttentionParams& p, const MlaSeqPlan& s, int split, int r) {
  return static_cast<int64_t>(split) * p.Tq * p.H + static_cast<int64_t>(s.qb) * p.H + r;
}

// The element offsets of query row r of sequence s in the outputs: o's row (bf16) and lse's
// element when the call has one split, else the split's partial row in ws_o (f32, 512 values) and
// its ws_lse element. The keys-as-M epilogues form them once per row (one lane each) and share
// them through shared memory, so that their writers issue the stores without a division by H
// and the branches per row (a store loop that repeated them took ~8 us at the end of a CTA: H200
// timeline of B128 8k H32, twenty-fourth session, docs/perf.md).
struct MlaRowOffsets {
  int64_t o, lse;
};
__device__ __forceinline__ MlaRowOffsets mla_row_offsets(const MlaAttentionParams& p, const MlaSeqPlan& s, int split, int r) {
  if (!s.direct) {
    const int64_t grow = mla_ws_row(p, s, split, r);
    return {grow * kMlaNope, grow};
  }
  const int tok = r / p.H, head = r - tok * p.H;
  return {static_cast<int64_t>(s.qb + tok) * p.o_s0 + static_cast<int64_t>(head) * p.o_s1,
          static_cast<int64_t>(s.qb + tok) * p.lse_s0 + static_cast<int64_t>(head) * p.lse_s1};
}

// The end of a row: its output scale and lse (log2 units) from the running maximum m and sum l.
// A bad sequence length gives NaN; nothing attended (l = 0) gives o = 0 and lse = -inf; a NaN sum
// (a NaN page) propagates.
struct MlaRowEnd {
  float scale, lse2;
};
__device__ __forceinline__ MlaRowEnd mla_row_end(bool bad_len, float m, float l, float out_scale) {
  if (bad_len) return {NAN, NAN};
  if (l > 0.0f || l != l) return {out_scale / l, m + log2f(l)};
  return {0.0f, -INFINITY};  // nothing attended
}

}  // namespace kestrel::ops::cuda
