// mla_attention sm90 (WGMMA) kernel: the pure index arithmetic that both the kernel and the
// host-side emulation (tests/ops/mla_attention_sm90_layout_test.cpp) use, so that the layouts
// the emulation checks are the layouts the kernel runs. Plain C++ (host and device); no CUDA
// types. Sources: PTX ISA 9.7.15.5.1 (register fragments of wgmma .m64nNk16: matrix A,
// accumulator D), 9.7.15.5.1.2 (shared-memory matrix layouts: canonical layouts, leading /
// stride dimension byte offsets, the 64-bit matrix descriptor).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KESTREL_SM90_HD __host__ __device__ __forceinline__
#else
#define KESTREL_SM90_HD inline
#endif

namespace kestrel::ops::cuda::sm90 {

// ---- tile sizes ----------------------------------------------------------------------------
constexpr int kRows = 64;    // query rows per CTA: the M of one wgmma (a warpgroup)
constexpr int kKeys = 32;    // KV positions per shared-memory tile: the N of the QK wgmma
constexpr int kDqk = 576, kDv = 512;
constexpr int kAtomCols = 64;                 // bf16 values in one 128-byte swizzle row
constexpr int kColChunks = kDqk / kAtomCols;  // 9 column chunks of a Q / KV row
constexpr int kQChunkBytes = kRows * 128;     // 8,192: one column chunk of the Q tile
constexpr int kKvChunkBytes = kKeys * 128;    // 4,096: one column chunk of a KV tile
constexpr int kQBytes = kColChunks * kQChunkBytes;    // 73,728
constexpr int kKvBytes = kColChunks * kKvChunkBytes;  // 36,864
constexpr int kQkSteps = kDqk / 16;           // 36 k-steps of 16 features
constexpr int kQkStepsPerWg = kQkSteps / 2;   // 18: consumer warpgroup c takes features c*288 ..
constexpr int kVColsPerWg = kDv / 2;          // 256: consumer warpgroup c owns o columns c*256 ..
constexpr uint32_t kSbo = 1024;               // 8 rows x 128 B: the next 8 rows (K-major) /
                                              // the next 8 keys (MN-major V)
static_assert(kRows == 64 && kKeys % 16 == 0 && kDqk % kAtomCols == 0 && kQkSteps % 2 == 0);

// ---- the 128-byte swizzle --------------------------------------------------------------------
// A tile of `rows` rows x 576 bf16 is stored as 9 column chunks [chunk][rows][128 B]; inside a
// chunk, row r's 16-byte unit u (values u*8 .. u*8+7 of the chunk) sits at unit u ^ (r % 8).
// This is the hardware's 128-byte swizzle (address bits [4,7) ^= bits [7,10)) when every chunk
// starts on a 1024-byte boundary: then bits [7,10) of the address of row r are r % 8.
// Byte offset of value (row, col) from the tile's start.
KESTREL_SM90_HD uint32_t sw128_offset(int rows, int row, int col) {
  return static_cast<uint32_t>((col / kAtomCols) * rows * 128 + row * 128 + ((((col % kAtomCols) / 8) ^ (row % 8)) * 16) +
                               (col % 8) * 2);
}

// Which 16-byte piece (8 values) a writer's index `idx` in [0, rows * 72) stores: order
// (column chunk, row, unit), so that the 32 stores of a warp are 4 rows x 128 B of one chunk
// and every quarter warp (8 x 16 B) covers all 32 banks once: conflict-free with the swizzle.
// (Row-major order would put the 4 chunks a warp touches, rows * 128 B apart, on one bank set.)
KESTREL_SM90_HD void piece_of(int idx, int rows, int& row, int& piece) {
  row = (idx / 8) % rows;
  piece = (idx / 8 / rows) * 8 + idx % 8;  // values piece*8 .. piece*8+7 of the row
}

// The producer's relayout order in closed form. Thread wt (0 .. 127) of the producer
// warpgroup, relaying a staged chunk of `rows_per_chunk` (16 or 32) rows, writes row
// wt / 8 + 16 h (h < rows_per_chunk / 16), pieces u * 8 + wt % 8 (u < 9): exactly the pieces
// piece_of(wt + 128 (u * rows_per_chunk / 16 + h), rows_per_chunk) gives (tested), so the
// stores stay conflict-free, but with the row's status and both addresses computed once per
// row instead of per piece (the general form cost ~60 instructions per 16-byte piece and left
// the producer, one warp per scheduler, latency-bound at ~5,800 cycles per tile on the H200).
KESTREL_SM90_HD void producer_piece(int wt, int h, int u, int& row, int& piece) {
  row = wt / 8 + 16 * h;
  piece = u * 8 + wt % 8;
}

// ---- matrix descriptors (PTX ISA "Matrix Descriptor Format") --------------------------------
// bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
// 49-51 base offset (0: every pattern starts on a 1024-byte boundary), 62-63 swizzle (1 = 128 B).
KESTREL_SM90_HD uint64_t desc_encode(uint32_t x) { return static_cast<uint64_t>((x & 0x3FFFFu) >> 4); }
KESTREL_SM90_HD uint64_t make_desc_sw128(uint32_t start, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return desc_encode(start) | desc_encode(lbo_bytes) << 16 | desc_encode(sbo_bytes) << 32 | uint64_t{1} << 62;
}
// K-major with a swizzle: the leading byte offset is "not used, assumed to be 1" (PTX ISA);
// we encode the field as 1 (16 bytes).
constexpr uint32_t kLboUnused = 16;

// Q as the A operand of the QK wgmma (K-major, M = 64 rows, K = features 16 kk .. 16 kk + 15):
// the k-step starts 32 bytes further inside the same 128-byte rows while kk % 4 != 0, and in
// the next column chunk every 4 steps.
KESTREL_SM90_HD uint32_t q_step_bytes(int kk) { return static_cast<uint32_t>((kk / 4) * kQChunkBytes + (kk % 4) * 32); }
KESTREL_SM90_HD uint64_t q_desc(uint32_t q_base, int kk) { return make_desc_sw128(q_base + q_step_bytes(kk), kLboUnused, kSbo); }
// K (the KV tile) as the B operand of the QK wgmma (K-major, N = the 32 keys, K = features
// 16 kk ..): the same arrangement with 32-row chunks.
KESTREL_SM90_HD uint32_t k_step_bytes(int kk) { return static_cast<uint32_t>((kk / 4) * kKvChunkBytes + (kk % 4) * 32); }
KESTREL_SM90_HD uint64_t k_desc(uint32_t kv_base, int kk) { return make_desc_sw128(kv_base + k_step_bytes(kk), kLboUnused, kSbo); }
// The QK descriptors as the kernel forms them: a descriptor's start-address field advances by a
// compile-time amount per k-step, so a pair's loop derives every k-step's descriptor from one
// base by adding (offset >> 4) to the low word (no carry: a 16-byte-aligned shared address below
// 2^18 plus an in-range offset stays below 2^18, so the 14-bit field cannot overflow). Equal to
// q_desc / k_desc for every such base (tests/ops/mla_attention_sm90_layout_test.cpp); on the H200
// the per-k-step form (mask, shift, or, two register moves for each operand: ~13 instructions per
// wgmma) held the QK issue loop at 25% of the kernel's stall samples.
// sw128_lo: the low word of q_desc / k_desc's descriptor at `start`; desc_of: the descriptor of
// such a low word (the high word is the same for both).
KESTREL_SM90_HD uint32_t sw128_lo(uint32_t start) { return static_cast<uint32_t>(make_desc_sw128(start, kLboUnused, kSbo)); }
KESTREL_SM90_HD uint64_t desc_of(uint32_t lo) { return (make_desc_sw128(0, kLboUnused, kSbo) & ~uint64_t{0xFFFFFFFFu}) | lo; }
KESTREL_SM90_HD uint32_t q_step_lo(int kk) { return q_step_bytes(kk) >> 4; }
KESTREL_SM90_HD uint32_t k_step_lo(int kk) { return k_step_bytes(kk) >> 4; }

// V (the same KV tile) as the B operand of the PV wgmma, MN-major (transposed B): K = keys
// 16 ks .. 16 ks + 15, N = 256 value columns starting at column chunk 4 c. MN-major 128-byte
// swizzle canonical layout ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)), T = 8 values: 64 columns
// contiguous in a 128-byte row, the next 64 columns LBO = one column chunk (4,096 B) away,
// keys 128 B apart, the next 8 keys SBO = 1,024 B away.
KESTREL_SM90_HD uint64_t v_desc(uint32_t kv_base, int c, int ks) {
  return make_desc_sw128(kv_base + static_cast<uint32_t>((4 * c) * kKvChunkBytes + ks * 16 * 128), kKvChunkBytes, kSbo);
}

// ---- P through shared memory (the seesaw schedule) -------------------------------------------
// The probabilities of a 32-key tile, 64 rows x 32 keys bf16 (one buffer for hi, one for lo),
// written by the warpgroup that computed them and read by the other as the A operand of its PV
// wgmma: K-major, no swizzle (canonical ((8,m),(T,2k)) : ((T,SBO),(1,LBO)), T = 8 values): core
// matrices of 8 rows x 8 keys (rows 16 B apart), the 4 along the keys kPLbo = 128 B apart, the 8
// along the rows kPSbo = 512 B apart. A writer's bf16 pair (row, 2t + 8i .. +1) lands at
// 16 (row % 8) + 4 t + const: the 32 lanes of a fragment store cover 128 contiguous bytes.
constexpr uint32_t kPBytes = kRows * kKeys * 2;  // 4,096
constexpr uint32_t kPLbo = 128, kPSbo = 512;
static_assert(kPSbo == (kKeys / 8) * kPLbo && kPBytes == (kRows / 8) * kPSbo);
KESTREL_SM90_HD uint32_t p_offset(int row, int key) {
  return static_cast<uint32_t>((row / 8) * kPSbo + (key / 8) * kPLbo + (row % 8) * 16 + (key % 8) * 2);
}
// No swizzle: layout type 0 in bits 62-63.
KESTREL_SM90_HD uint64_t make_desc_interleave(uint32_t start, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return desc_encode(start) | desc_encode(lbo_bytes) << 16 | desc_encode(sbo_bytes) << 32;
}
// P as the A operand of PV k-step ks (keys 16 ks .. 16 ks + 15): two core matrices along K.
KESTREL_SM90_HD uint64_t p_desc(uint32_t p_base, int ks) {
  return make_desc_interleave(p_base + static_cast<uint32_t>(ks * 2) * kPLbo, kPLbo, kPSbo);
}

// ---- register fragments (PTX ISA figures "WGMMA .m64nNk16 register fragment layout") ---------
// Thread t of a warpgroup (warp w = t / 32, g = (t % 32) / 4, q = t % 4).
// Accumulator D (f32, N/2 registers): register i holds row 16 w + g + 8 ((i / 2) % 2), column
// 8 (i / 4) + 2 q + i % 2.
KESTREL_SM90_HD int frag_d_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2); }
KESTREL_SM90_HD int frag_d_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }
// Matrix A from registers (bf16, 4 x .b32 = values a0 .. a7): value e holds row
// 16 w + g + 8 ((e / 2) % 2), column (k within the k16 step) 8 (e / 4) + 2 q + e % 2.
KESTREL_SM90_HD int frag_a_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((e / 2) % 2); }
KESTREL_SM90_HD int frag_a_col(int t, int e) { return 8 * (e / 4) + 2 * (t % 4) + e % 2; }
// P of a KV tile, as the A operand of PV k-step ks: value e of the step is the score
// accumulator register 8 ks + e of the same thread (the kernel packs registers
// (8 ks + 2 j, 8 ks + 2 j + 1) into .b32 register j of the step).
KESTREL_SM90_HD int p_reg_of(int ks, int e) { return 8 * ks + e; }

}  // namespace kestrel::ops::cuda::sm90
