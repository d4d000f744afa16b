// mla_attention, the planned wide form of the keys-as-M kernel for a bf16 cache (64 query rows per
// CTA; docs/ops/mla_attention.md, "Open after the twenty-fourth session"): its index arithmetic
// and shared-memory budget, proven on the host before the kernel exists
// (tests/ops/mla_attention_keys_m_bf16_wide_layout_test.cpp: the PTX ISA's ldmatrix / stmatrix /
// wgmma fragment maps, the shared-memory banks). No kernel uses it yet. Plain C++ (host and
// device), no CUDA types.
//
// Why a second layout: the 32-row kernel (mla_attention_keys_m_bf16_layout.h) reads the cache
// once per 32 query rows, which at H 96 / 128 or verify blocks costs 1.7-2x against v2; 64 rows
// per CTA need Q of 73,728 bytes, and two 64-key stages fit beside it only with dense 1,152-byte
// key rows (73,728 bytes a stage, not the 32-row kernel's 74,752) and one P^T buffer. Dense rows
// are conflict-free for ldmatrix only when swizzled, so a stage is what the tensor copies write
// with the 128-byte swizzle: 9 chunks of 64 columns, [chunk][64 keys][128 B], unit u of key k's
// 128 bytes at u ^ (k % 8) (tile_offset; the layout of branch kmb-tma, whose copies were correct
// on the H200).
//   QK   S^T = K Q^T: M = the 64 keys (warp w: keys 16 w ..), N = 32 query rows a warpgroup
//        (warpgroup c: rows 32 c ..), 36 k-steps; A = one ldmatrix.x4 per k-step at
//        qk_key * 128 + qk_unit + chunk, B = Q through a descriptor (q_step_lo: 64-row chunks).
//   P^T  [64 query rows][64 keys] bf16, 128-byte swizzle (one chunk), written by two
//        stmatrix.x4.trans per warp from the S^T accumulators (pt_row, pt_key).
//   PV   O^T = V^T P^T: M = 64 value features a m-tile (warpgroup c: 256 c .., 4 m-tiles), N =
//        all 64 query rows (m64n64k16), 4 k-steps of 16 keys; A = one ldmatrix.x4.trans per
//        m-tile and k-step at pv_key(0) * 128 + pv_unit + chunk + 16 ks keys.
#pragma once

#include <cstdint>

#include "mla_attention_keys_m_bf16_layout.h"

namespace kestrel::ops::cuda::keys_m_bf16_wide {

// The maps that do not depend on the row count or the tile's pitch are the 32-row kernel's.
using keys_m_bf16::kDqk;
using keys_m_bf16::kDv;
using keys_m_bf16::kKeys;
using keys_m_bf16::kPvSteps;
using keys_m_bf16::kPvTiles;
using keys_m_bf16::kQkSteps;
using keys_m_bf16::o_feature;
using keys_m_bf16::pt_key;
using keys_m_bf16::pv_feature;
using keys_m_bf16::pv_key;
using keys_m_bf16::qk_byte;
using keys_m_bf16::qk_key;

constexpr int kRows = 64;    // query rows per CTA: the N of PV
constexpr int kWgRows = 32;  // query rows per warpgroup in QK: its N
constexpr int kChunkBytes = kKeys * 128;              // 8,192: 64 columns of the tile's 64 keys
constexpr int kStageBytes = kDqk / 64 * kChunkBytes;  // 73,728
constexpr int kQChunkBytes = kRows * 128;             // 8,192: 64 columns of the 64 query rows
constexpr int kQBytes = kDqk / 64 * kQChunkBytes;     // 73,728
constexpr int kPtBytes = kRows * kKeys * 2;           // 8,192: one 128-byte-swizzled chunk

// The shared-memory budget: Q, two stages, one P^T buffer (each 1,024-byte aligned for the
// swizzle), then the small state (bytes): column maxima [2 warpgroups][4 warps][32] f32, output
// scales [64] f32 and row offsets [64] x 16 (o and lse), causal limits [64] i32, rescale factors
// [64] f32 and flags [2] i32, mbarriers full[2], empty[2] and a P^T-free barrier. No alignment
// slack: the dynamic shared-memory base is already 1,024-aligned on sm_90
// (tools/smem_base_probe.cu; the kernel should trap if it is not).
constexpr int kStages = 2;
constexpr int kOffQ = 0;
constexpr int kOffStages = kOffQ + kQBytes;
constexpr int kOffPt = kOffStages + kStages * kStageBytes;
constexpr int kOffSmall = kOffPt + kPtBytes;
constexpr int kSmallBytes = 2 * 4 * kWgRows * 4 + kRows * 4 + kRows * 16 + kRows * 4 + kRows * 4 + 2 * 4 + 5 * 8;
constexpr int kSmemBytes = kOffSmall + kSmallBytes;
constexpr int kSmemMax = 232448;  // sm_90: 227 KB of dynamic shared memory per CTA
static_assert(kOffStages % 1024 == 0 && kOffPt % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms aligned");
static_assert(kSmemBytes <= kSmemMax, "Q, two 64-key stages, one P^T buffer and the state fit one CTA");

// Byte offset of byte `byte` (0 .. 1,151) of key `key`'s cache row in a stage.
KESTREL_KMB_HD uint32_t tile_offset(int key, int byte) {
  return static_cast<uint32_t>((byte / 128) * kChunkBytes + key * 128 + ((((byte % 128) / 16) ^ (key % 8)) * 16) + byte % 16);
}

// The kernel's form of tile_offset(qk_key(w, lane), qk_byte(ks, lane)): qk_key(w, lane) * 128 +
// qk_unit(ks % 4, lane) (one of 4 registers) + (ks / 4) * kChunkBytes (an immediate).
KESTREL_KMB_HD uint32_t qk_unit(int ks4, int lane) { return static_cast<uint32_t>(((2 * ks4 + lane / 16) ^ (lane % 8)) * 16); }

// The kernel's form of tile_offset(pv_key(ks, lane), 2 pv_feature(c, mm, w, lane)):
// pv_key(0, lane) * 128 + pv_unit(w, lane) + (4 c + mm) * kChunkBytes + 16 ks * 128 (immediates).
KESTREL_KMB_HD uint32_t pv_unit(int w, int lane) { return static_cast<uint32_t>(((2 * w + (lane / 8) % 2) ^ (lane % 8)) * 16); }

// Byte offset of element (n, col) of a 64-row, 128-byte-swizzled K-major tile of 64-column chunks
// ([chunk][64 rows][128 B], unit u of row n at u ^ (n % 8)): Q (col = feature, 9 chunks) and P^T
// (col = key, one chunk).
KESTREL_KMB_HD uint32_t sw128(int n, int col) {
  return static_cast<uint32_t>((col / 64) * kQChunkBytes + n * 128 + ((((col % 64) / 8) ^ (n % 8)) * 16) + (col % 8) * 2);
}

// P^T by two stmatrix.x4.trans (h = 0, 1) from the S^T accumulators (N = 32) of warp w in
// warpgroup c: register j of call h packs accumulators i = 4 (2 h + j / 2) + 2 (j % 2) and i + 1,
// i.e. keys 16 w + 8 (j % 2) + g and query rows 32 c + 8 (2 h + j / 2) + 2 q4, + 1. Lane 8 j + r
// gives the address of stored matrix j's row r: query row pt_row(c, h, lane), keys
// pt_key(w, lane) .. + 7.
KESTREL_KMB_HD int pt_row(int c, int h, int lane) { return 32 * c + 8 * (2 * h + (lane / 8) / 2) + lane % 8; }

}  // namespace kestrel::ops::cuda::keys_m_bf16_wide
