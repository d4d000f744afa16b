// mla_attention, the 64-key seesaw kernel (v4, mla_attention_seesaw64.cu): its shared-memory
// budget and the index maps its operands use, plain C++ so that the host emulation
// (tests/ops/mla_attention_seesaw64_layout_test.cpp, against the PTX ISA model of
// tests/testing/sm90_hw_model.h) checks the maps the kernel runs. Built on v2's swizzle and
// descriptor helpers (mla_attention_sm90_layout.h); only the tile geometry differs: 64-key KV
// tiles, so a KV column chunk has Q's shape (64 rows x 128 bytes).
#pragma once

#include <cstdint>

#include "mla_attention_sm90_layout.h"

namespace kestrel::ops::cuda::seesaw64 {

using sm90::kAtomCols;
using sm90::kColChunks;
using sm90::kDqk;
using sm90::kDv;
using sm90::kRows;

constexpr int kKeys = 64;                               // KV positions per tile (QK's N, PV's K)
constexpr int kChunkBytes = kKeys * 128;                // 8,192: one column chunk of a KV tile
constexpr int kStageBytes = kColChunks * kChunkBytes;   // 73,728
constexpr int kStages = 2;
constexpr int kQkSteps = kDqk / 16;                     // 36
constexpr int kQkSmemSteps = kQkSteps - 4;              // Q chunks 0-7 from shared memory; chunk 8
                                                        // (k-steps 32-35) from registers
constexpr int kPvSteps = kKeys / 16;                    // 4
constexpr int kHalfLChunks = 4;                         // half L: column chunks 0-3 (V columns 0-255)
static_assert(kChunkBytes == sm90::kQChunkBytes, "a KV chunk has Q's shape: the same k-step offsets");

// ---- shared memory (offsets from the dynamic base, which is 1,024-aligned on sm_90:
// tools/smem_base_probe.cu; the kernel traps otherwise) ----------------------------------------
//   Q       [9 chunks][64 rows][128 B]  73,728  chunk 8 is P1 once each thread holds its part of it
//   stages  2 x [9][64][128 B]         147,456
//   P0      [64 rows][128 B]             8,192  warpgroup 0's P (tile a), rescaled, for warpgroup 1
//   rows    m, scale0, scale1, l [2]     1,280  f32 per row
//   mbarriers full [2][9], empty [2][2]    176
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffP1 = kOffQ + 8 * sm90::kQChunkBytes;  // Q's chunk 8
constexpr uint32_t kOffStages = kOffQ + sm90::kQBytes;
constexpr uint32_t kOffP0 = kOffStages + kStages * kStageBytes;
constexpr uint32_t kPBytes = kRows * 128;
constexpr uint32_t kOffM = kOffP0 + kPBytes;
constexpr uint32_t kOffScale0 = kOffM + kRows * 4;
constexpr uint32_t kOffScale1 = kOffScale0 + kRows * 4;
constexpr uint32_t kOffL = kOffScale1 + kRows * 4;  // [2 warpgroups][64]
constexpr uint32_t kOffBarFull = kOffL + 2 * kRows * 4;
constexpr uint32_t kOffBarEmpty = kOffBarFull + kStages * kColChunks * 8;
// Per (stage, half): the producer's own barrier for a tile that ends inside its page (copied
// whole, then its rows past kv_end zeroed before `full`).
constexpr uint32_t kOffBarEdge = kOffBarEmpty + kStages * 2 * 8;
// Q by tensor copy (a bf16 q): Q's `full` mbarrier (count 1 + tx, the issuing producer lane) and
// the count of row tiles whose Q's region the consumers have freed (a u32 that consumer thread 0
// stores with release at each L barrier, the issuing producer warp reads with acquire: a count,
// not an mbarrier phase, because a producer warp with no tile in a row tile runs a row tile ahead,
// and a parity wait two phases behind would pass at once).
constexpr uint32_t kOffBarQ = kOffBarEdge + kStages * 2 * 8;
constexpr uint32_t kOffQFreed = kOffBarQ + 8;
constexpr uint32_t kSmemBytes = kOffQFreed + 8;
static_assert(kOffStages % 1024 == 0 && kOffP0 % 1024 == 0 && kOffP1 % 1024 == 0 && kOffBarFull % 8 == 0);
static_assert(kSmemBytes == 230880 && kSmemBytes <= 232448, "the budget above");

KESTREL_SM90_HD uint32_t full_bar(int stage, int chunk) { return kOffBarFull + 8 * (stage * kColChunks + chunk); }
KESTREL_SM90_HD uint32_t empty_bar(int stage, int half) { return kOffBarEmpty + 8 * (stage * 2 + half); }
KESTREL_SM90_HD uint32_t edge_bar(int stage, int half) { return kOffBarEdge + 8 * (stage * 2 + half); }

// ---- operands -----------------------------------------------------------------------------
// QK, k-step kk (features 16 kk ..): A = Q (M = 64 rows), B = the KV tile (N = 64 keys), both
// K-major with the 128-byte swizzle, the same offsets (a KV chunk has Q's shape): v2's
// sw128_lo / q_step_lo / desc_of. Chunk 8 of Q comes from registers: thread t's A fragment of
// k-step 32 + s, register j (values 2 j, 2 j + 1 of the PTX figure: adjacent columns) is the
// 4 bytes at q8_offset(t, s, j) from Q's start.
KESTREL_SM90_HD uint32_t q8_offset(int t, int s, int j) {
  return sm90::sw128_offset(kRows, sm90::frag_a_row(t, 2 * j), 8 * kAtomCols + 16 * s + sm90::frag_a_col(t, 2 * j));
}

// PV of warpgroup c (V columns 256 c ..), k-step ks (keys 16 ks ..): B = V read MN-major from
// the tile: 64 columns in a 128-byte row, the next 64 one chunk (LBO 8,192) away, keys 128 B
// apart, the next 8 keys SBO 1,024 away.
KESTREL_SM90_HD uint64_t v_desc(uint32_t stage, int c, int ks) {
  return sm90::make_desc_sw128(stage + static_cast<uint32_t>(4 * c * kChunkBytes + ks * 16 * 128), kChunkBytes, sm90::kSbo);
}

// o of a row tile on its way out (one split, 16-byte o rows, at least one KV tile): warpgroup c's
// 64 rows x 256 bf16 columns (512 bytes a row) in half c's bytes of the stage that held the row
// tile's last KV tile (half L: chunks 0-3; warpgroup 1 in chunks 4-7 of half R), as FlashMLA
// stages its o in a KV buffer. That leaves Q's region free for the next row tile's Q, issued at
// the L barrier under this epilogue; the stage's halves go back to the producers only once the
// copies have read them (thirty-fourth session). Row r lies at o_stage_half(c) + 512 r, rotated
// by o_stage_rot(r) = 16 (r % 8) bytes: byte g of the row (column g / 2) at ((g + rot) % 512), so
// that a warp's 4-byte stores, 8 rows x 4 column pairs, fall in 32 different banks (as the
// padded rows in Q's region did). A row goes out in two bulk copies, the rotation's two parts
// (o_stage_copy).
constexpr uint32_t kORowBytes = 512;
constexpr uint32_t kOHalfBytes = kRows * kORowBytes;  // 32,768
static_assert(kOHalfBytes == kHalfLChunks * kChunkBytes && 2 * kOHalfBytes <= kStageBytes, "warpgroup c's o in half c's chunks");
KESTREL_SM90_HD uint32_t o_stage_half(int c) { return c * kOHalfBytes; }
KESTREL_SM90_HD uint32_t o_stage_rot(int row) { return 16u * static_cast<uint32_t>(row % 8); }
// The stored bytes of row r, byte g (column g / 2), from the start of the warpgroup's half.
KESTREL_SM90_HD uint32_t o_stage_offset(int row, uint32_t g) { return row * kORowBytes + (g + o_stage_rot(row)) % kORowBytes; }
// Bulk copy k (0, 1) of row r: `bytes` bytes (0: none) from src (from the half's start) to the
// row's bytes dst.. in global memory; all multiples of 16.
struct OStageCopy {
  uint32_t src, dst, bytes;
};
KESTREL_SM90_HD OStageCopy o_stage_copy(int row, int k) {
  const uint32_t rot = o_stage_rot(row), at = row * kORowBytes;
  return k == 0 ? OStageCopy{at + rot, 0, kORowBytes - rot} : OStageCopy{at, kORowBytes - rot, rot};
}

// o of a whole row tile (64 rows) by tensor copy (o's rows contiguous: o_s0 == H o_s1; a tensor map
// of [Tq * H rows][512] with 64 x 64 boxes and the 128-byte swizzle): warpgroup c's 256 columns
// staged in the same half as four boxes, box k (columns 64 k ..) in chunk k of the half, each in
// the tensor map's swizzled layout (Q's: sm90::sw128_offset), so that one thread issues 4 copies
// where the rows take 128 (o_stage_copy), and a warp's 4-byte stores, 8 rows x 4 column pairs,
// fall in 32 banks (the swizzle spreads the 8 rows over the 8 16-byte units). Byte offset of
// columns col, col + 1 (col < 256, even) of row r from the start of the warpgroup's half.
constexpr int kOBoxes = kDv / 2 / kAtomCols;  // 4 per warpgroup
KESTREL_SM90_HD uint32_t o_box_offset(int row, int col) { return sm90::sw128_offset(kRows, row, col); }
// The same as the kernel forms it (one base a row, then an XOR and a constant a store, not the
// swizzle's arithmetic for each of 64 stores with o's 128 registers live, which spilled): a
// thread's columns are colw + 8 k (colw = 0, 2, 4, 6: the fragment's column in a unit), the 16-
// byte unit k % 8 of box k / 8 swizzled by row % 8; the three terms of the base and the unit
// occupy disjoint address bits, so the XOR applies the swizzle. Equal to o_box_offset(row, colw +
// 8 k) (tests/ops/mla_attention_seesaw64_layout_test.cpp).
KESTREL_SM90_HD uint32_t o_box_base(int row, int colw) {
  return static_cast<uint32_t>(row * 128 + (row % 8) * 16 + colw * 2);
}
KESTREL_SM90_HD uint32_t o_box_at(uint32_t base, int k) {
  return (base ^ static_cast<uint32_t>((k % 8) * 16)) + static_cast<uint32_t>((k / 8) * kChunkBytes);
}
static_assert(kOBoxes * kChunkBytes == kOHalfBytes, "a warpgroup's boxes fill its half");

// P of a tile through shared memory (P0, P1): [64 rows][64 keys] bf16 in one swizzled chunk,
// Q's layout, read as PV's A (K-major) by the other warpgroup: k-step ks is Q's k-step ks. The
// writer stores each register pair (adjacent keys) of its score fragment as 4 bytes.
KESTREL_SM90_HD uint32_t p_offset(int row, int key) { return sm90::sw128_offset(kRows, row, key); }

}  // namespace kestrel::ops::cuda::seesaw64
