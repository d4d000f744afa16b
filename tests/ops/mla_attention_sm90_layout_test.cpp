// Host-side emulation of the data movement of the sm90 (WGMMA) mla_attention kernel, with the
// kernel's own index functions (src/ops/cuda/mla_attention_sm90_layout.h) on one side and a
// model of the hardware written from the PTX ISA tables on the other:
//  - the writers (producer relayout of KV rows, consumer load of Q) place value (row, col) at
//    sw128_offset; the hardware model reads operand element (mn, k) of a wgmma through the
//    64-bit descriptor: canonical layout (PTX ISA "Canonical Layouts", CuTe notation, T = 8
//    bf16) plus the 128-byte swizzle on the absolute shared address (bits [4,7) ^= [7,10));
//  - the QK product of both consumer warpgroups (features split 288 / 288), the exchange of
//    the partial score fragments by thread index, the reinterpretation of the score
//    accumulator registers as the A fragment of the PV product, the PV product of each
//    warpgroup's 256 columns with V read MN-major, and the accumulator -> (row, col) map of
//    the output are all emulated and compared with the plain products.
// Every check runs on integer-valued data, so the sums are exact and any misplaced element
// shows. Each planted bug (a wrong swizzle, stride, step, transpose or fragment map) must make
// the emulation fail: that shows the emulation can see the class of error it is meant to see.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "testing/sm90_hw_model.h"

namespace {

namespace sm = kestrel::ops::cuda::sm90;
using namespace kestrel::testing_util::sm90_hw;

// ---- the kernel side, replaceable for the planted bugs -------------------------------------
struct KernelSide {
  std::function<uint32_t(int rows, int row, int col)> sw128_offset = sm::sw128_offset;
  std::function<uint64_t(uint32_t, int)> q_desc = sm::q_desc;
  std::function<uint64_t(uint32_t, int)> k_desc = sm::k_desc;
  std::function<uint64_t(uint32_t, int, int)> v_desc = sm::v_desc;
  std::function<int(int, int)> frag_d_row = sm::frag_d_row, frag_d_col = sm::frag_d_col;
  std::function<int(int, int)> frag_a_row = sm::frag_a_row, frag_a_col = sm::frag_a_col;
  std::function<int(int, int)> p_reg_of = sm::p_reg_of;
};

// Runs the emulation; returns "" when every element matched, else the first mismatch.
std::string emulate(const KernelSide& ks_side, uint64_t seed) {
  constexpr uint32_t kSmem = 232448;
  constexpr uint32_t q_base = 0, kv_base = sm::kQBytes + sm::kKvBytes;  // the kernel's second KV stage
  std::vector<uint8_t> smem(kSmem, 0xEE);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-3, 3);
  std::vector<float> Q(sm::kRows * sm::kDqk), KV(sm::kKeys * sm::kDqk);
  for (auto& x : Q) x = static_cast<float>(val(rng));
  for (auto& x : KV) x = static_cast<float>(val(rng));
  // Writers: Q by the consumers, the KV tile by the producer; 16-byte pieces of 8 values, as
  // the kernel stores them (the piece's first value's offset + 2 e for value e).
  auto put = [&](uint32_t base, int rows, const std::vector<float>& m) -> std::string {
    for (int r = 0; r < rows; ++r)
      for (int p = 0; p < sm::kDqk / 8; ++p) {
        const uint32_t off = base + ks_side.sw128_offset(rows, r, p * 8);
        if (off % 16 != 0 || off + 16 > kSmem) return "writer: unaligned or out-of-range 16-byte piece";
        for (int e = 0; e < 8; ++e) {
          const uint16_t b = bf16_bits(m[r * sm::kDqk + p * 8 + e]);
          std::memcpy(&smem[off + 2 * e], &b, 2);
        }
      }
    return "";
  };
  if (std::string err = put(q_base, sm::kRows, Q); !err.empty()) return err;
  if (std::string err = put(kv_base, sm::kKeys, KV); !err.empty()) return err;
  auto read = [&](uint64_t desc, Major mj, int mn, int k, float& out) -> bool {
    uint32_t a;
    if (!hw_addr(desc, mj, mn, k, a) || a + 2 > kSmem) return false;
    uint16_t b;
    std::memcpy(&b, &smem[a], 2);
    out = bf16_value(b);
    return true;
  };

  // QK: consumer warpgroup c runs k-steps c*18 .. c*18+17 (M = 64, N = 32, K = 16 each).
  // Accumulator registers per thread: reg[c][t][i], i < 16.
  std::vector<double> reg(2 * 128 * 16, 0.0);
  for (int c = 0; c < 2; ++c) {
    std::vector<double> D(sm::kRows * sm::kKeys, 0.0);
    for (int kk = c * sm::kQkStepsPerWg; kk < (c + 1) * sm::kQkStepsPerWg; ++kk) {
      const uint64_t da = ks_side.q_desc(q_base, kk), db = ks_side.k_desc(kv_base, kk);
      for (int r = 0; r < sm::kRows; ++r)
        for (int n = 0; n < sm::kKeys; ++n)
          for (int k = 0; k < 16; ++k) {
            float a, b;
            if (!read(da, Major::k, r, k, a) || !read(db, Major::k, n, k, b)) return "QK: bad descriptor";
            D[r * sm::kKeys + n] += static_cast<double>(a) * b;
          }
    }
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 16; ++i) reg[(c * 128 + t) * 16 + i] = D[hw_d_row(t, i) * sm::kKeys + hw_d_col(t, i)];
  }
  // Exchange by thread index: both warpgroups hold the full scores in the same registers. The
  // kernel's view of register i of thread t is (frag_d_row, frag_d_col): check it against S.
  std::vector<double> S(sm::kRows * sm::kKeys, 0.0);  // the reference Q K^T
  for (int r = 0; r < sm::kRows; ++r)
    for (int n = 0; n < sm::kKeys; ++n)
      for (int f = 0; f < sm::kDqk; ++f) S[r * sm::kKeys + n] += static_cast<double>(Q[r * sm::kDqk + f]) * KV[n * sm::kDqk + f];
  std::vector<double> tot(128 * 16);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 16; ++i) {
      tot[t * 16 + i] = reg[t * 16 + i] + reg[(128 + t) * 16 + i];
      const int r = ks_side.frag_d_row(t, i), n = ks_side.frag_d_col(t, i);
      if (tot[t * 16 + i] != S[r * sm::kKeys + n])
        return "scores: thread " + std::to_string(t) + " register " + std::to_string(i) + " is not S[" +
               std::to_string(r) + "][" + std::to_string(n) + "] in the kernel's map";
    }
  // P = the scores themselves (any per-element function commutes with the maps), packed into
  // the A fragment of PV step ks: the hardware reads value e of thread t as (hw_a_row,
  // 16 ks + hw_a_col). Build that matrix and compare with S.
  std::vector<double> Pm(sm::kRows * sm::kKeys, 1e300);
  for (int ks = 0; ks < sm::kKeys / 16; ++ks)
    for (int t = 0; t < 128; ++t)
      for (int e = 0; e < 8; ++e) {
        const int reg_i = ks_side.p_reg_of(ks, e);
        if (reg_i < 0 || reg_i >= 16) return "P: register index out of range";
        Pm[hw_a_row(t, e) * sm::kKeys + 16 * ks + hw_a_col(t, e)] = tot[t * 16 + reg_i];
        // The kernel's own statement of the A map must agree with the hardware's.
        if (ks_side.frag_a_row(t, e) != hw_a_row(t, e) || ks_side.frag_a_col(t, e) != hw_a_col(t, e))
          return "A fragment map differs from the PTX figure";
      }
  for (size_t x = 0; x < Pm.size(); ++x)
    if (Pm[x] != S[x]) return "P as the PV A operand is not S at row " + std::to_string(x / sm::kKeys) + " key " + std::to_string(x % sm::kKeys);

  // PV: warpgroup c, N = 256 columns c*256 .., K = 32 keys in 2 steps, V read MN-major.
  for (int c = 0; c < 2; ++c) {
    std::vector<double> O(sm::kRows * sm::kVColsPerWg, 0.0);
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t db = ks_side.v_desc(kv_base, c, ks);
      for (int n = 0; n < sm::kVColsPerWg; ++n)
        for (int k = 0; k < 16; ++k) {
          float v;
          if (!read(db, Major::mn, n, k, v)) return "PV: bad descriptor";
          for (int r = 0; r < sm::kRows; ++r) O[r * sm::kVColsPerWg + n] += Pm[r * sm::kKeys + 16 * ks + k] * v;
        }
    }
    // Output: register i of thread t -> (frag_d_row, c*256 + frag_d_col) in the kernel.
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 128; ++i) {
        const double got = O[hw_d_row(t, i) * sm::kVColsPerWg + hw_d_col(t, i)];
        const int r = ks_side.frag_d_row(t, i), col = c * sm::kVColsPerWg + ks_side.frag_d_col(t, i);
        double want = 0;
        for (int n = 0; n < sm::kKeys; ++n) want += S[r * sm::kKeys + n] * KV[n * sm::kDqk + col];
        if (got != want)
          return "PV: warpgroup " + std::to_string(c) + " thread " + std::to_string(t) + " register " + std::to_string(i) +
                 " is not O[" + std::to_string(r) + "][" + std::to_string(col) + "]";
      }
  }
  return "";
}

TEST(MlaAttentionSm90Layout, KernelLayoutsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) EXPECT_EQ(emulate(KernelSide{}, seed), "") << "seed " << seed;
}

// The kernel computes the key / column of accumulator register i as frag_d_col(t, 0) +
// frag_d_col(0, i) (one per-thread base, constants per register), and the shared-memory map
// of the design note must fit the opt-in limit with 1024-byte aligned chunks.
TEST(MlaAttentionSm90Layout, FragmentColumnSplitsIntoThreadAndRegisterParts) {
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 128; ++i) ASSERT_EQ(sm::frag_d_col(t, i), sm::frag_d_col(t, 0) + sm::frag_d_col(0, i)) << t << " " << i;
  static_assert(sm::kQBytes % 1024 == 0 && sm::kKvBytes % 1024 == 0 && sm::kQChunkBytes % 1024 == 0 &&
                sm::kKvChunkBytes % 1024 == 0);
}

// The writers' piece order: a bijection onto (row, piece), and the 16-byte stores of every
// quarter warp (8 consecutive indices) fall on 8 distinct 16-byte bank groups of the swizzled
// tile (no bank conflict), for the Q tile (64 rows) and the KV tile (32 rows).
TEST(MlaAttentionSm90Layout, WriterPiecesAreABijectionWithoutBankConflicts) {
  for (int rows : {sm::kRows, sm::kKeys}) {
    std::vector<int> seen(static_cast<size_t>(rows * 72), 0);
    for (int idx = 0; idx < rows * 72; ++idx) {
      int row, piece;
      sm::piece_of(idx, rows, row, piece);
      ASSERT_TRUE(row >= 0 && row < rows && piece >= 0 && piece < 72);
      ++seen[static_cast<size_t>(row * 72 + piece)];
    }
    for (int v : seen) ASSERT_EQ(v, 1);
    for (int q0 = 0; q0 < rows * 72; q0 += 8) {
      unsigned groups = 0;
      for (int idx = q0; idx < q0 + 8; ++idx) {
        int row, piece;
        sm::piece_of(idx, rows, row, piece);
        groups |= 1u << ((sm::sw128_offset(rows, row, piece * 8) / 16) % 8);
      }
      EXPECT_EQ(groups, 0xFFu) << "quarter warp at " << q0 << ", rows " << rows;
    }
  }
}

// The producer's closed form visits the same pieces as the general order.
TEST(MlaAttentionSm90Layout, ProducerPiecesAreTheWriterOrder) {
  for (int rows : {16, 32}) {
    const int per_u = rows / 16;
    for (int wt = 0; wt < 128; ++wt)
      for (int u = 0; u < 9; ++u)
        for (int h = 0; h < per_u; ++h) {
          int row, piece, row_ref, piece_ref;
          sm::producer_piece(wt, h, u, row, piece);
          sm::piece_of(wt + 128 * (u * per_u + h), rows, row_ref, piece_ref);
          ASSERT_EQ(row, row_ref) << "rows " << rows << " wt " << wt << " u " << u << " h " << h;
          ASSERT_EQ(piece, piece_ref) << "rows " << rows << " wt " << wt << " u " << u << " h " << h;
        }
  }
}

TEST(MlaAttentionSm90Layout, DescriptorFields) {
  // The fields as the PTX ISA table places them, for one Q, K and V descriptor.
  const uint64_t q = sm::q_desc(0x400, 5);  // chunk 1, step 1 inside it: 0x400 + 8192 + 32
  EXPECT_EQ(q & 0x3FFF, (0x400u + 8192 + 32) >> 4);
  EXPECT_EQ((q >> 16) & 0x3FFF, 1u);
  EXPECT_EQ((q >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ((q >> 49) & 7, 0u);
  EXPECT_EQ(q >> 62, 1u);
  const uint64_t v = sm::v_desc(0x12000, 1, 1);
  EXPECT_EQ(v & 0x3FFF, (0x12000u + 4 * 4096 + 2048) >> 4);
  EXPECT_EQ((v >> 16) & 0x3FFF, 4096u >> 4);
  EXPECT_EQ((v >> 32) & 0x3FFF, 1024u >> 4);
}

// The QK loop's descriptors (a base's low word plus a per-k-step immediate) equal q_desc /
// k_desc for every 1024-aligned base a Q or KV tile can have in the kernel's shared memory and
// every k-step: the start-address field never carries into the next field.
TEST(MlaAttentionSm90Layout, IncrementalQkDescriptorsEqualTheDirectOnes) {
  constexpr uint32_t kSmemLimit = 232448;  // the kernel's dynamic shared memory at most (sm_90)
  int checked = 0;
  for (uint32_t base = 0; base + sm::kQBytes <= kSmemLimit; base += 1024)
    for (int kk = 0; kk < sm::kQkSteps; ++kk) {
      ASSERT_EQ(sm::desc_of(sm::sw128_lo(base) + sm::q_step_lo(kk)), sm::q_desc(base, kk)) << base << " " << kk;
      ++checked;
    }
  for (uint32_t base = 0; base + sm::kKvBytes <= kSmemLimit; base += 1024)
    for (int kk = 0; kk < sm::kQkSteps; ++kk)
      ASSERT_EQ(sm::desc_of(sm::sw128_lo(base) + sm::k_step_lo(kk)), sm::k_desc(base, kk)) << base << " " << kk;
  EXPECT_GT(checked, 100 * sm::kQkSteps);
}

// The seesaw schedule's P exchange: the warpgroup that computed P (score registers, the
// accumulator map) stores bf16 pairs at p_offset; the other reads P as the A operand of its PV
// wgmma through p_desc(ks). Every (row, key) must come back, for both k-steps.
std::string emulate_p_exchange(const std::function<uint32_t(int, int)>& p_off,
                               const std::function<uint64_t(uint32_t, int)>& p_dsc) {
  constexpr uint32_t kBase = 0x2000, kSmem = 0x4000;
  std::vector<uint8_t> smem(kSmem, 0xff);
  std::vector<float> P(sm::kRows * sm::kKeys);
  for (size_t x = 0; x < P.size(); ++x) P[x] = static_cast<float>(static_cast<int>(x % 251) - 125);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 16; i += 2) {  // register pairs (i, i + 1): adjacent keys of one row
      const int row = sm::frag_d_row(t, i), key = sm::frag_d_col(t, i);
      if (sm::frag_d_row(t, i + 1) != row || sm::frag_d_col(t, i + 1) != key + 1) return "pair is not two adjacent keys";
      const uint32_t off = kBase + p_off(row, key);
      if (off % 4 != 0 || off + 4 > kSmem) return "P writer: unaligned or out of range";
      const uint16_t b0 = bf16_bits(P[row * sm::kKeys + key]), b1 = bf16_bits(P[row * sm::kKeys + key + 1]);
      std::memcpy(&smem[off], &b0, 2);
      std::memcpy(&smem[off + 2], &b1, 2);
    }
  for (int ks = 0; ks < sm::kKeys / 16; ++ks)
    for (int r = 0; r < sm::kRows; ++r)
      for (int k = 0; k < 16; ++k) {
        uint32_t a;
        if (!hw_addr(p_dsc(kBase, ks), Major::k, r, k, a) || a + 2 > kSmem) return "P descriptor unreadable";
        uint16_t b;
        std::memcpy(&b, &smem[a], 2);
        if (bf16_value(b) != P[r * sm::kKeys + 16 * ks + k])
          return "P read back wrong at row " + std::to_string(r) + " key " + std::to_string(16 * ks + k);
      }
  return "";
}

TEST(MlaAttentionSm90Layout, SeesawPExchangeRoundTrips) {
  EXPECT_EQ(emulate_p_exchange(sm::p_offset, sm::p_desc), "");
  // The 32 lanes of one warp's store of a register pair hit 32 distinct banks.
  for (int w = 0; w < 4; ++w)
    for (int i = 0; i < 16; i += 2) {
      std::vector<int> seen(32, 0);
      for (int lane = 0; lane < 32; ++lane) {
        const int t = 32 * w + lane;
        ++seen[(sm::p_offset(sm::frag_d_row(t, i), sm::frag_d_col(t, i)) / 4) % 32];
      }
      for (int b = 0; b < 32; ++b) EXPECT_EQ(seen[b], 1) << "warp " << w << " pair " << i << " bank " << b;
    }
  // Planted bugs.
  EXPECT_NE(emulate_p_exchange(sm::p_offset,
                               [](uint32_t base, int ks) {
                                 return sm::make_desc_interleave(base + ks * 2 * sm::kPLbo, sm::kPSbo, sm::kPLbo);
                               }),
            "")
      << "LBO and SBO swapped";
  EXPECT_NE(emulate_p_exchange(sm::p_offset,
                               [](uint32_t base, int ks) {
                                 return sm::make_desc_interleave(base + ks * sm::kPLbo, sm::kPLbo, sm::kPSbo);
                               }),
            "")
      << "k-step advancing one core matrix";
  EXPECT_NE(emulate_p_exchange([](int row, int key) { return static_cast<uint32_t>(row * 64 + key * 2); }, sm::p_desc),
            "")
      << "row-major P";
}

// Planted bugs: each one must be caught.
TEST(MlaAttentionSm90Layout, PlantedBugsAreCaught) {
  struct Bug {
    const char* name;
    std::function<void(KernelSide&)> plant;
  };
  const std::vector<Bug> bugs = {
      {"writer without the swizzle",
       [](KernelSide& k) { k.sw128_offset = [](int rows, int row, int col) {
         return static_cast<uint32_t>((col / 64) * rows * 128 + row * 128 + ((col % 64) / 8) * 16 + (col % 8) * 2); }; }},
      {"writer swizzles by row / 8",
       [](KernelSide& k) { k.sw128_offset = [](int rows, int row, int col) {
         return static_cast<uint32_t>((col / 64) * rows * 128 + row * 128 + ((((col % 64) / 8) ^ ((row / 8) % 8)) * 16) + (col % 8) * 2); }; }},
      {"K descriptor SBO 512",
       [](KernelSide& k) { k.k_desc = [](uint32_t base, int kk) {
         return sm::make_desc_sw128(base + (kk / 4) * sm::kKvChunkBytes + (kk % 4) * 32, sm::kLboUnused, 512); }; }},
      {"Q descriptor steps 16 bytes per k-step",
       [](KernelSide& k) { k.q_desc = [](uint32_t base, int kk) {
         return sm::make_desc_sw128(base + (kk / 4) * sm::kQChunkBytes + (kk % 4) * 16, sm::kLboUnused, sm::kSbo); }; }},
      {"Q descriptor without the swizzle mode",
       [](KernelSide& k) { k.q_desc = [](uint32_t base, int kk) { return sm::q_desc(base, kk) & ~(uint64_t{3} << 62); }; }},
      {"V descriptor with LBO and SBO swapped",
       [](KernelSide& k) { k.v_desc = [](uint32_t base, int c, int ks) {
         return sm::make_desc_sw128(base + (4 * c) * sm::kKvChunkBytes + ks * 16 * 128, sm::kSbo, sm::kKvChunkBytes); }; }},
      {"V descriptor k-step of 8 keys",
       [](KernelSide& k) { k.v_desc = [](uint32_t base, int c, int ks) {
         return sm::make_desc_sw128(base + (4 * c) * sm::kKvChunkBytes + ks * 8 * 128, sm::kKvChunkBytes, sm::kSbo); }; }},
      {"V descriptor column chunk c instead of 4 c",
       [](KernelSide& k) { k.v_desc = [](uint32_t base, int c, int ks) {
         return sm::make_desc_sw128(base + c * sm::kKvChunkBytes + ks * 16 * 128, sm::kKvChunkBytes, sm::kSbo); }; }},
      {"accumulator row halves swapped",
       [](KernelSide& k) { k.frag_d_row = [](int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (i % 2); };
                           k.frag_d_col = [](int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + (i / 2) % 2; }; }},
      {"accumulator column pair from the lane's high bits",
       [](KernelSide& k) { k.frag_d_col = [](int t, int i) { return 8 * (i / 4) + 2 * ((t % 32) / 8) + i % 2; }; }},
      {"P registers taken 4 per step",
       [](KernelSide& k) { k.p_reg_of = [](int ks, int e) { return (4 * ks + e) % 16; }; }},
      {"A fragment stated with columns and rows mixed",
       [](KernelSide& k) { k.frag_a_col = [](int t, int e) { return 8 * ((e / 2) % 2) + 2 * (t % 4) + e % 2; }; }},
  };
  for (const Bug& b : bugs) {
    KernelSide k;
    b.plant(k);
    EXPECT_NE(emulate(k, 1), "") << "planted bug not caught: " << b.name;
  }
}

}  // namespace
