// mla_attention, the keys-as-M kernel for a bf16 cache (mla_attention_keys_m_bf16.cu): the pure
// index arithmetic the kernel and its host proof (tests/ops/mla_attention_keys_m_bf16_layout_test.cpp:
// the PTX ISA's ldmatrix / stmatrix / wgmma fragment maps, the shared-memory banks) both use.
// Plain C++ (host and device), no CUDA types.
//
// A stage holds one 64-key tile: key k's 1,152-byte cache row at k * kRowBytes. Rows 1,168 bytes
// apart sit at 16 k mod 128, so the 8 rows of any 8 consecutive keys (one ldmatrix matrix: 16
// bytes of each) fall in 8 distinct 16-byte bank groups; dense 1,152-byte rows all share one
// group (8-way conflicts). The copies: one cp.async.bulk per row (the probe: 100.9% of a device
// copy for rows 1,168 bytes apart, H200, twenty-third session).
//   QK   S^T = K Q^T: M = the 64 keys (warp w: keys 16 w ..), N = 16 query rows a warpgroup,
//        36 k-steps of 16 features; A = one ldmatrix.x4 per k-step (key rows, 32 bytes).
//   PV   O^T = V^T P^T: M = 64 value features a m-tile (warpgroup c: features 256 c .. 256 c + 255,
//        4 m-tiles), N = the 32 query rows, 4 k-steps of 16 keys; A = one ldmatrix.x4.trans per
//        m-tile and k-step (the same key rows, 16 bytes of value features each).
//   P^T  [32 query rows][64 keys] bf16, 128-byte swizzle (the B operand, K-major), written by
//        stmatrix.trans from the S^T accumulators.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KESTREL_KMB_HD __host__ __device__ __forceinline__
#else
#define KESTREL_KMB_HD inline
#endif

namespace kestrel::ops::cuda::keys_m_bf16 {

constexpr int kKeys = 64;     // keys per tile and stage: the M of QK
constexpr int kRows = 32;     // query rows per CTA: the N of PV
constexpr int kWgRows = 16;   // query rows per warpgroup in QK: its N
constexpr int kDqk = 576, kDv = 512;
constexpr int kCacheRowBytes = kDqk * 2;           // 1,152
constexpr int kRowBytes = kCacheRowBytes + 16;     // 1,168: key k at 16 k mod 128
constexpr int kStageBytes = kKeys * kRowBytes;     // 74,752
constexpr int kQkSteps = kDqk / 16;                // 36
constexpr int kPvSteps = kKeys / 16;               // 4
constexpr int kPvTiles = kDv / 2 / 64;             // 4 m-tiles of 64 features per warpgroup
static_assert(kRowBytes % 128 == 16, "rows at distinct 16-byte phases mod 128");

// QK's A (keys x features) of k-step ks by ldmatrix.x4: lane `lane` of warp w gives the row
// address of key qk_key(w, lane), bytes qk_byte(ks, lane) ..: matrices 0 .. 3 = (keys + 0 / + 8,
// features + 0 / + 8) in the order of the A registers a0 .. a3.
KESTREL_KMB_HD int qk_key(int w, int lane) { return 16 * w + lane % 8 + 8 * ((lane / 8) % 2); }
KESTREL_KMB_HD int qk_byte(int ks, int lane) { return 32 * ks + 16 * (lane / 16); }

// PV's A (features x keys) of m-tile mm, k-step ks by ldmatrix.x4.trans: lane `lane` of warp w in
// warpgroup c gives the row address of key pv_key(ks, lane), the 16 bytes of features
// pv_feature(c, mm, w, lane) ..: matrices (features + 0 / + 8, keys + 0 / + 8) in the order
// a0 .. a3 after the transpose.
KESTREL_KMB_HD int pv_key(int ks, int lane) { return 16 * ks + lane % 8 + 8 * (lane / 16); }
KESTREL_KMB_HD int pv_feature(int c, int mm, int w, int lane) { return 256 * c + 64 * mm + 16 * w + 8 * ((lane / 8) % 2); }
// The value feature of O^T accumulator register i (m-tile mm) of thread t (warp w = t / 32,
// g = (t % 32) / 4) in warpgroup c: the m-tile's row 16 w + g + 8 ((i / 2) % 2).
KESTREL_KMB_HD int o_feature(int c, int mm, int t, int i) {
  return 256 * c + 64 * mm + 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}

// Byte offset of element (n, col) of a 32-row, 128-byte-swizzled K-major tile of 64-column chunks
// ([chunk][32 rows][128 B], unit u of row n at u ^ (n % 8)): Q (col = feature, 9 chunks) and P^T
// (col = key, one chunk).
KESTREL_KMB_HD uint32_t sw128(int n, int col) {
  return static_cast<uint32_t>((col / 64) * kRows * 128 + n * 128 + ((((col % 64) / 8) ^ (n % 8)) * 16) + (col % 8) * 2);
}

// P^T by stmatrix.x4.trans from the S^T accumulators of warp w in warpgroup c: register j of a
// lane packs accumulators (4 (j / 2) + 2 (j % 2), + 1): keys 16 w + 8 (j % 2) + g, query rows
// 16 c + 8 (j / 2) + 2 q4, + 1. Lane 8 j + r gives the address of the stored matrix j's row r:
// query row pt_row(c, lane), keys pt_key(w, lane) .. + 7.
KESTREL_KMB_HD int pt_row(int c, int lane) { return 16 * c + 8 * ((lane / 8) / 2) + lane % 8; }
KESTREL_KMB_HD int pt_key(int w, int lane) { return 16 * w + 8 * ((lane / 8) % 2); }

}  // namespace kestrel::ops::cuda::keys_m_bf16
