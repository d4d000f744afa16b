// mla_attention over an fp8 cache with the keys as the wgmma M (the plan in
// docs/ops/mla_attention.md, "Where the fp8 cache stands"): the pure index arithmetic of its
// register operands, written before the kernel so that the host emulation
// (tests/ops/mla_attention_keys_m_layout_test.cpp, the hardware's fragment maps and shared-memory
// reads modelled from the PTX ISA) proves the products before any GPU time is spent. Plain C++
// (host and device), no CUDA types.
//
// The two products of a 64-key tile, per CTA of query rows n < 32 (decode at H = 32):
//   QK:  S^T = K Q^T   M = 64 keys, N = query rows, K-dim = 576 features (36 k-steps of 16);
//        A = the tile's e4m3 key rows, converted to f16 in registers (cvt.rn.f16x2.e4m3x2);
//        B = Q in f16 in shared memory (K-major, the 128-byte swizzle of mla_attention_sm90_layout.h).
//   PV:  O^T = V^T P^T M = 512 value features (8 m-tiles of 64), N = query rows, K-dim = the 64
//        keys (4 k-steps); A = V^T, the tile's e4m3 value bytes converted in registers;
//        B = P^T in f16 in shared memory, written by the softmax from S^T's accumulators.
// A contraction index may be permuted freely as long as both operands use the same order, and
// an M index if the output is written back through the inverse. Both are used so that a thread's
// A values come from whole 16-byte loads of the fp8 rows (natural order, as TMA lands them):
//   QK: the features of k-step s are permuted so that a thread's 4 values per key row and
//       k-step are 4 consecutive bytes, and its values of k-steps 4q .. 4q + 3 one 16-byte load;
//       Q is stored with its features in the same order (q_store_col).
//   PV: the value features of the 8 m-tiles are permuted so that a thread's 16 rows (2 per
//       m-tile) are 16 consecutive bytes of one key row; the output is written through
//       pv_feature.
// Fragment maps (PTX ISA "WGMMA .m64nNk16 register fragment layout"): thread t of a warpgroup,
// w = t / 32, g = (t % 32) / 4, q4 = t % 4; A value e (0 .. 7) is row 16 w + g + 8 ((e / 2) % 2),
// column 8 (e / 4) + 2 q4 + e % 2 of the 64 x 16 tile; register j (0 .. 3) holds values 2 j and
// 2 j + 1 (low half first).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KESTREL_KEYS_M_HD __host__ __device__ __forceinline__
#else
#define KESTREL_KEYS_M_HD inline
#endif

namespace kestrel::ops::cuda::keys_m {

constexpr int kKeys = 64;      // keys per tile: the M of the QK wgmma, the K-dim of the PV one
constexpr int kDqk = 576, kDv = 512;
constexpr int kQkSteps = kDqk / 16;  // 36
constexpr int kPvTiles = kDv / 64;   // 8 m-tiles of value features
constexpr int kPvSteps = kKeys / 16; // 4

// ---- the e4m3 tile in shared memory and the order of its keys ---------------------------------
// Key rows kRowBytes apart (576 bytes and 32 of padding: per-row bulk copies, 16-byte aligned).
// Both products read a key row 16 bytes per lane, and a quarter warp (8 lanes) is one wavefront
// only if its 8 addresses fall in 8 distinct 16-byte bank groups ((address / 16) % 8). QK's
// quarter warp reads two A rows (lanes g = 2i, 2i + 1) at 4 offsets 16 q4: its two keys must be 4
// groups apart; PV's reads 4 keys (columns 2 q4 + lohi) at offsets 16 g: their 4 groups must be
// pairwise at least 2 apart. With 576-byte rows (36 groups, 4 mod 8) QK is conflict-free but PV
// 4-way; 592 (37, 5 mod 8) cannot serve both (tests/ops/mla_attention_keys_m_layout_test.cpp);
// 608 (38, 6 mod 8) does, with the keys of each 8 positions reordered (key_of_position): the QK
// pairs take keys 6 or 2 apart (36, 12 = 4 mod 8) and PV's quartets keys {0,1,2,3} / {6,7,4,5}
// (groups 0, 6, 4, 2 and 4, 2, 0, 6 mod 8).
constexpr int kRowBytes = 608;
// The key at position p of the tile: row p of S^T (QK's M), key p of P^T and column p of PV (its
// contraction index): the same order in all three, so the products are those of the natural one.
// The order 0 6 1 7 2 4 3 5 as nibbles of one constant: a table indexed by a thread's lane went to
// local memory on the GPU (a store and a load per use: the first H200 profile's hottest lines).
// The fast precision's tile (below) has its own order: position 8 j + r (r < 8) holds key
// 16 (r / 2) + 2 j + r % 2, so that each 8 positions are 2 keys of each of the 4 blocks.
KESTREL_KEYS_M_HD int key_of_position(int p, bool e4m3_qk = false) {
  return e4m3_qk ? (((p >> 1) & 3) << 4) + ((p >> 3) << 1) + (p & 1)  // (bits: fewer registers than / and %)
                 : (p & ~7) | static_cast<int>((0x53427160u >> (4 * (p & 7))) & 0xfu);
}
// The fast precision's tile: 4 blocks of 16 key rows, each block as it lies in the cache (rows
// 576 bytes apart: one bulk copy of 9,216 bytes per block, where per-row copies took the stream
// ~10% longer on the H200). Block b starts at 9,216 b plus its phase, 0, 16, 32 or 112 bytes: a
// block copy streams fastest when its destination keeps its source's address mod 128 (the
// source blocks start at 0 mod 128), and the H200's rate depends on the difference: 0 or 32
// bytes off ~107-109% of a device copy, 16 ~97%, 112 ~90%, 48 / 64 / 80 / 96 81-87%
// (tools/bulk_copy_probe.cu, all four blocks at one phase; docs/perf.md, twenty-second session).
// Every block at 0 would put all rows in 2 of the 8 16-byte bank groups (4-way conflicts): with
// phases of 4 distinct residues mod 64, key k = 16 b + i lies in group (phase_b / 16 + 4 (i % 2)
// + u) % 8 for its 16-byte unit u, so the 8 keys of 8 positions (4 blocks x 2 parities) fall in
// 8 distinct groups (each ldmatrix matrix is one wavefront), and PV's quartets (4 blocks, one
// parity) in 4 groups that a unit pair 4 groups apart fills to 8 (pv_load_offset). 0 / 16 / 32 /
// 112 are the fastest such phases (residues 0, 1, 2, 3: 0 or 64, 16 or 80, 32 or 96, 48 or 112);
// blocks 9,232 bytes apart (0 / 16 / 32 / 48, the twenty-first session's layout) streamed ~2%
// slower in the kernel.
constexpr int kBlockRows8 = 16, kBlockBytes8 = 9216;
// Block b's phase in 16-byte units, nibble b: 0, 1, 2, 7.
constexpr uint32_t kBlockPhases8 = 0x7210u;
KESTREL_KEYS_M_HD constexpr int block_phase8(int b) { return 16 * static_cast<int>((kBlockPhases8 >> (4 * b)) & 0xfu); }
KESTREL_KEYS_M_HD constexpr int row_offset8(int key) {
  return (key / kBlockRows8) * kBlockBytes8 + block_phase8(key / kBlockRows8) + (key % kBlockRows8) * kDqk;
}
// Key row k's byte offset in the tile of either precision.
KESTREL_KEYS_M_HD constexpr int row_offset(int key, bool e4m3_qk) { return e4m3_qk ? row_offset8(key) : key * kRowBytes; }

// ---- QK ---------------------------------------------------------------------------------------
// The feature held by A column c (0 .. 15) of k-step s: thread q4 = (c % 8) / 2 holds columns
// 2 q4, 2 q4 + 1, 2 q4 + 8, 2 q4 + 9, which are bytes 4 (s % 4) + 0 .. 3 of its 16-byte load
// at 64 (s / 4) + 16 q4 of the key row.
KESTREL_KEYS_M_HD int qk_feature(int s, int c) {
  return 64 * (s / 4) + 16 * ((c % 8) / 2) + 4 * (s % 4) + (c % 2) + 2 * (c / 8);
}
// Where Q's feature f goes in the stored Q tile (its column, k-step s = column / 16): the inverse
// of qk_feature, so that B row (k) c of k-step s holds Q[n][qk_feature(s, c)].
KESTREL_KEYS_M_HD int q_store_col(int f) {
  const int q = f / 64, q4 = (f % 64) / 16, r = (f % 16) / 4, j = f % 4;
  return 16 * (4 * q + r) + 2 * q4 + (j % 2) + 8 * (j / 2);
}
// Thread t's 16-byte load for k-steps 4 q .. 4 q + 3: byte offset in a key row, and the keys it
// loads from (those at the positions of its A rows: half 0 and half 1).
KESTREL_KEYS_M_HD int qk_load_offset(int q, int t) { return 64 * q + 16 * (t % 4); }
KESTREL_KEYS_M_HD int qk_key(int t, int half) { return key_of_position(16 * (t / 32) + (t % 32) / 4 + 8 * half); }
// Register j (0 .. 3) of k-step s = 4 q + r: the key-row half it comes from and the first of the
// two bytes (of that half's 16-byte load) that cvt.rn.f16x2.e4m3x2 widens into it, low half first.
KESTREL_KEYS_M_HD int qk_reg_half(int j) { return j % 2; }
KESTREL_KEYS_M_HD int qk_reg_byte(int r, int j) { return 4 * r + 2 * (j / 2); }

// ---- QK on e4m3 operands (the fast precision) ---------------------------------------------
// S^T = K Q^T with both operands e4m3 (wgmma m64n32k32 .e4m3, f32 accumulators): no conversion,
// the features in natural order (k-step s = features 32 s .. 32 s + 31; Q stored as it is). A
// k32 fragment is the k16 one in bytes (4 lanes per 16-byte row of 8 rows; PTX ISA "m64nNk32
// register fragment layout"): register j holds A row g + 8 (j % 2), bytes 16 (j / 2) + 4 q4 ..
// + 3 of the k-step, which is what ldmatrix.x4 (b16) gives for matrix j with rows 16 bytes of
// those 8 key rows: one ldmatrix per k-step fills the wgmma's 4 registers in order (16-byte
// loads would need register moves to interleave the two rows: ~7 per k-step, each waiting for
// its load).
constexpr int kQk8Steps = kDqk / 32;  // 18
// Lane l's ldmatrix row address for k-step s: matrix j = l / 8, its row l % 8 (warp w): the key at
// position 16 w + 8 (j % 2) + l % 8, bytes 32 s + 16 (j / 2) of its row.
KESTREL_KEYS_M_HD int qk8_ldm_key(int w, int lane) { return key_of_position(16 * w + 8 * ((lane / 8) % 2) + lane % 8, true); }
KESTREL_KEYS_M_HD int qk8_ldm_offset(int s, int lane) { return 32 * s + 16 * (lane / 16); }

// ---- P^T from S^T's accumulators by stmatrix.trans --------------------------------------------
// Thread t's 16 accumulators (w, g, q4 as above) are 8 matrices of 8 x 8: (h, nb) holds positions
// 16 w + 8 h + g (rows) and query rows 8 nb + 2 q4 + 0 / 1 (columns) in registers 4 nb + 2 h + 0 / 1:
// the m8n8 fragment. stmatrix.trans writes column c of a matrix (query row 8 nb + c) as its 8
// positions, one 16-byte unit of P^T's row; with the matrices nb = 0 .. 3 of one h in one x4,
// lane l gives the address of query row pt_store_row(l) at position pt_store_pos(w, h).
KESTREL_KEYS_M_HD int pt_store_row(int lane) { return lane; }
KESTREL_KEYS_M_HD int pt_store_pos(int w, int h) { return 16 * w + 8 * h; }

// ---- PV ---------------------------------------------------------------------------------------
// The value feature of A row `row` (0 .. 63) of m-tile mt: thread (w, g) holds rows 16 w + g and
// 16 w + g + 8 of every m-tile: 16 rows that are bytes 0 .. 15 of its 16-byte load at unit
// pv_unit(w, g) (16 bytes) of a key row, byte 2 mt + half. The exact layout takes unit 8 w + g; the
// fast one 8 w + g / 2 + 4 (g % 2), so that the two g of a quarter warp load units 4 groups apart.
KESTREL_KEYS_M_HD int pv_unit(int w, int g, bool e4m3_qk) { return 8 * w + (e4m3_qk ? g / 2 + 4 * (g % 2) : g); }
KESTREL_KEYS_M_HD int pv_feature(int mt, int row, bool e4m3_qk = false) {
  const int w = row / 16, g = row % 8, half = (row % 16) / 8;
  return 16 * pv_unit(w, g, e4m3_qk) + 2 * mt + half;
}
KESTREL_KEYS_M_HD int pv_load_offset(int t, bool e4m3_qk = false) { return 16 * pv_unit(t / 32, (t % 32) / 4, e4m3_qk); }
// The keys of thread t's A columns in PV k-step ks: register j holds values 2 j, 2 j + 1, which
// are columns (positions) 8 (j / 2) + 2 q4 + 0 / 1; their bytes come from two keys' loads.
KESTREL_KEYS_M_HD int pv_key(int ks, int t, int j, int lohi, bool e4m3_qk = false) {
  return key_of_position(16 * ks + 8 * (j / 2) + 2 * (t % 4) + lohi, e4m3_qk);
}
// The offset of k-step ks's keys of half h (registers j = 2 h, 2 h + 1) from k-step 0's of half 0,
// the same for every thread in both layouts (an immediate in the loads; the layout test checks):
// the exact order permutes keys within 8 positions, the fast one keeps 16 ks + 8 h + 2 q4 + lohi
// in block q4, at row 4 ks + 2 h + lohi.
KESTREL_KEYS_M_HD int pv_step_offset(int ks, int h, bool e4m3_qk) {
  return row_offset(key_of_position(16 * ks + 8 * h, e4m3_qk), e4m3_qk);
}
// Register j of m-tile mt: the byte of each key's 16-byte load that it takes (a byte permute
// pairs the two keys' bytes, then one cvt.rn.f16x2.e4m3x2).
KESTREL_KEYS_M_HD int pv_reg_byte(int mt, int j) { return 2 * mt + (j % 2); }

// ---- PV with 64 query rows (the wide CTA of the fast precision) --------------------------------
// Both warpgroups take every tile: warpgroup c computes S^T and P^T for query rows 32 c .. 32 c +
// 31, and O^T = V^T P^T for all 64 rows (N = 64) over its own value features 256 c .. 256 c + 255
// (4 m-tiles), so each converts only half of a tile's value bytes. Thread (w, g) of warpgroup c
// holds rows 16 w + g and 16 w + g + 8 of its 4 m-tiles: 8 features that are 8 consecutive bytes
// of a key row (byte 2 mm + half of one 8-byte load per key, at 8-byte unit pv_wide_unit(w, g):
// pv_reg_byte(mm, j) as above). A half warp's loads read 4 keys of 4 blocks (8-byte units 2 b +
// 8 (i % 2) mod 16 of their rows) at 4 units {u, u + 1, u + 8, u + 9}: 32 distinct banks
// (tests/ops/mla_attention_keys_m_layout_test.cpp).
constexpr int kWideRows = 64, kPvTilesWide = 4;
KESTREL_KEYS_M_HD int pv_wide_unit(int w, int g) {
  const int i = g / 4, e = g % 4;
  return 16 * (w / 2) + 2 * (2 * (w % 2) + i) + (e % 2) + 8 * (e / 2);
}
KESTREL_KEYS_M_HD int pv_wide_feature(int c, int mm, int row) {
  const int w = row / 16, g = row % 8, half = (row % 16) / 8;
  return 256 * c + 8 * pv_wide_unit(w, g) + 2 * mm + half;
}
KESTREL_KEYS_M_HD int pv_wide_load_offset(int c, int t) { return 256 * c + 8 * pv_wide_unit(t / 32, (t % 32) / 4); }

// The wide form's o boxes (kOBoxes): the byte offset in warpgroup c's staging (4 boxes of 64 rows
// x 128 bytes, the 128-byte swizzle: sw128_offset(64, row, feature - 256 c)) of the 16 bytes
// thread t stores for its column slot k, row n = 8 (k / 2) + 2 q4 + k % 2, features 8 u .. 8 u + 7
// of the warpgroup's 256 (u = pv_wide_unit(w, g)). As the kernel forms it: one base for the even
// slots and one for the odd ones, then a constant 1024 (k / 2) a store (row n's swizzle is
// (u % 8) ^ (n % 8), and n % 8 = 2 q4 + k % 2); the swizzle's arithmetic for each of 16 stores
// with o's 128 registers live spilled (as it did in v4's epilogue).
KESTREL_KEYS_M_HD uint32_t o_box_base(int t, int odd) {
  const int w = t / 32, g = (t % 32) / 4, q4 = t % 4, u = pv_wide_unit(w, g), n8 = 2 * q4 + odd;
  return static_cast<uint32_t>((u / 8) * 64 * 128 + n8 * 128 + (((u % 8) ^ n8) * 16));
}
KESTREL_KEYS_M_HD uint32_t o_box_store_offset(uint32_t base, int k) { return base + static_cast<uint32_t>(1024 * (k / 2)); }

// ---- the 32-row form's split partials as boxes (kBoxes, fast layout) ----------------------------
// A split's f32 partial of a whole 32-row tile (32 rows x 512 features, 64 KB) staged as 16 boxes
// of 32 rows x 32 features (128 bytes a row, the 128-byte swizzle) 4,096 bytes apart: box b holds
// features 32 b .. 32 b + 31, row n's 16-byte unit j (features 32 b + 4 j ..) at unit j ^ (n % 8).
// A writer thread (w, g, q4) holds the 16 features 16 u .. 16 u + 15 (u = pv_unit(w, g, true)) of
// its 8 columns n_k = 8 (k / 2) + 2 q4 + k % 2: its 4 units i of row n_k are units 4 (u % 2) + i
// of box u / 2. A quarter warp (g = 2 i', 2 i' + 1, q4 = 0 .. 3) stores rows of 4 residues n % 8 of
// one parity, and its two g hold the same u % 2 (units 4 apart: boxes 8 KB apart), so storing
// unit i at step i would put its 8 stores in 4 bank groups (a 2-way conflict); odd g store unit
// i ^ 1 at step i (partial_unit_at_step), which fills the other 4.
constexpr int kPartialBoxes = 16, kPartialBoxCols = 32, kPartialBoxBytes = 32 * 128;
KESTREL_KEYS_M_HD int partial_unit_at_step(int g, int step) { return step ^ (g & 1); }
// The byte offset (from the staging's start) of step 0 of column slots of parity `odd`, row
// 2 q4 + odd (k < 2); partial_store_offset adds the step (a XOR inside the row's 128 bytes: the
// swizzled unit is (4 (u % 2) ^ (g % 2) ^ n % 8) ^ step) and the slot's 8 rows (1024 (k / 2)).
KESTREL_KEYS_M_HD uint32_t partial_box_base(int t, int odd) {
  const int w = t / 32, g = (t % 32) / 4, q4 = t % 4, u = pv_unit(w, g, true), n8 = 2 * q4 + odd;
  return static_cast<uint32_t>((u / 2) * kPartialBoxBytes + n8 * 128 + ((4 * (u % 2)) ^ (g & 1) ^ n8) * 16);
}
KESTREL_KEYS_M_HD uint32_t partial_store_offset(uint32_t base, int k, int step) {
  return (base ^ static_cast<uint32_t>(step << 4)) + static_cast<uint32_t>(1024 * (k / 2));
}

}  // namespace kestrel::ops::cuda::keys_m
