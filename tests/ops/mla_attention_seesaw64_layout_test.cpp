// Host emulation of the 64-key seesaw kernel's data movement (src/ops/cuda/mla_attention_seesaw64.cu):
// the kernel's index maps (mla_attention_seesaw64_layout.h) on one side, the PTX ISA model of the
// wgmma operand hardware (tests/testing/sm90_hw_model.h) on the other.
//  - Q and a 64-key KV tile as the writers place them (Q by the consumers at sw128_offset; the
//    tile by TMA boxes, whose 128-byte swizzle is the same map);
//  - QK over 36 k-steps, m64n64k16: k-steps 0-31 with both operands through descriptors, 32-35
//    with Q's chunk 8 from registers, loaded by each thread at q8_offset;
//  - P as PV's A from registers (the score accumulators packed in pairs) and, for the other
//    warpgroup, through shared memory (p_offset writes, read back through Q's k-step descriptors);
//  - PV of each warpgroup's 256 columns, 4 k-steps, V read MN-major through v_desc;
//  - every warp's P store and chunk-8 load hits 32 distinct banks.
// Integer-valued data, so every sum is exact and a misplaced element shows. Planted bugs must
// make the emulation fail.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_seesaw64_layout.h"
#include "testing/sm90_hw_model.h"

namespace {

namespace sm = kestrel::ops::cuda::sm90;
namespace s64 = kestrel::ops::cuda::seesaw64;
using namespace kestrel::testing_util::sm90_hw;

struct KernelSide {
  std::function<uint32_t(int, int, int)> q8_offset = s64::q8_offset;
  std::function<uint64_t(uint32_t, int, int)> v_desc = s64::v_desc;
  std::function<uint32_t(int, int)> p_offset = s64::p_offset;
  std::function<uint32_t(int)> kv_step_lo = sm::q_step_lo;  // the KV tile's QK k-steps
};

std::string emulate(const KernelSide& ks, uint64_t seed) {
  constexpr uint32_t kSmem = 232448;
  const uint32_t q_base = s64::kOffQ, kv_base = s64::kOffStages + s64::kStageBytes;  // stage 1
  std::vector<uint8_t> smem(kSmem, 0xEE);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-3, 3);
  std::vector<float> Q(s64::kRows * s64::kDqk), KV(s64::kKeys * s64::kDqk);
  for (auto& x : Q) x = static_cast<float>(val(rng));
  for (auto& x : KV) x = static_cast<float>(val(rng));
  const auto put = [&](uint32_t base, const std::vector<float>& m) {
    for (int r = 0; r < 64; ++r)
      for (int col = 0; col < s64::kDqk; ++col) {
        const uint16_t b = bf16_bits(m[r * s64::kDqk + col]);
        std::memcpy(&smem[base + sm::sw128_offset(64, r, col)], &b, 2);
      }
  };
  put(q_base, Q);
  put(kv_base, KV);
  const auto read = [&](uint64_t desc, Major mj, int mn, int k, float& out) {
    uint32_t a;
    if (!hw_addr(desc, mj, mn, k, a) || a + 2 > kSmem) return false;
    uint16_t b;
    std::memcpy(&b, &smem[a], 2);
    out = bf16_value(b);
    return true;
  };

  // QK. Chunk 8's A fragments as the kernel loads them: thread t, k-step 32 + s, register j.
  std::vector<double> D(64 * 64, 0.0);
  for (int kk = 0; kk < s64::kQkSteps; ++kk) {
    const uint64_t db = sm::desc_of(sm::sw128_lo(kv_base) + ks.kv_step_lo(kk));
    if (kk < s64::kQkSmemSteps) {
      const uint64_t da = sm::desc_of(sm::sw128_lo(q_base) + sm::q_step_lo(kk));
      for (int r = 0; r < 64; ++r)
        for (int n = 0; n < 64; ++n)
          for (int k = 0; k < 16; ++k) {
            float a, b;
            if (!read(da, Major::k, r, k, a) || !read(db, Major::k, n, k, b)) return "QK: bad descriptor";
            D[r * 64 + n] += static_cast<double>(a) * b;
          }
      continue;
    }
    std::vector<double> A(64 * 16, 1e300);
    for (int t = 0; t < 128; ++t)
      for (int e = 0; e < 8; ++e) {
        const uint32_t off = q_base + ks.q8_offset(t, kk - s64::kQkSmemSteps, e / 2);
        if (off % 4 != 0 || off + 4 > kSmem) return "chunk 8: unaligned or out-of-range load";
        uint16_t b;
        std::memcpy(&b, &smem[off + 2 * (e % 2)], 2);
        A[hw_a_row(t, e) * 16 + hw_a_col(t, e)] = bf16_value(b);
      }
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 64; ++n)
        for (int k = 0; k < 16; ++k) {
          float b;
          if (!read(db, Major::k, n, k, b)) return "QK: bad descriptor";
          D[r * 64 + n] += A[r * 16 + k] * b;
        }
  }
  std::vector<double> S(64 * 64, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 64; ++n)
      for (int f = 0; f < s64::kDqk; ++f) S[r * 64 + n] += static_cast<double>(Q[r * s64::kDqk + f]) * KV[n * s64::kDqk + f];
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 32; ++i) {
      const int r = sm::frag_d_row(t, i), n = sm::frag_d_col(t, i);
      if (D[hw_d_row(t, i) * 64 + hw_d_col(t, i)] != S[r * 64 + n])
        return "scores: thread " + std::to_string(t) + " register " + std::to_string(i) + " is not S[" + std::to_string(r) +
               "][" + std::to_string(n) + "]";
    }

  // P = S as PV's A from the same thread's registers; through P's shared buffer at P0, values that
  // bf16 holds exactly (S's are too large): Pv.
  std::vector<double> P_reg(64 * 64, 1e300), P_smem(64 * 64, 1e300), Pv(64 * 64);
  for (int x = 0; x < 64 * 64; ++x) Pv[x] = static_cast<double>((x * 37) % 251 - 125);
  for (int kstep = 0; kstep < s64::kPvSteps; ++kstep)
    for (int t = 0; t < 128; ++t)
      for (int e = 0; e < 8; ++e) {
        const int i = sm::p_reg_of(kstep, e);
        if (i < 0 || i >= 32) return "P: register out of range";
        P_reg[hw_a_row(t, e) * 64 + 16 * kstep + hw_a_col(t, e)] = D[hw_d_row(t, i) * 64 + hw_d_col(t, i)];
      }
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 32; i += 2) {
      const int r = sm::frag_d_row(t, i), n = sm::frag_d_col(t, i);
      const uint32_t off = s64::kOffP0 + ks.p_offset(r, n);
      if (off % 4 != 0 || off + 4 > s64::kOffP0 + s64::kPBytes) return "P writer: unaligned or outside P0";
      const uint16_t b0 = bf16_bits(static_cast<float>(Pv[r * 64 + n])), b1 = bf16_bits(static_cast<float>(Pv[r * 64 + n + 1]));
      std::memcpy(&smem[off], &b0, 2);
      std::memcpy(&smem[off + 2], &b1, 2);
    }
  for (int kstep = 0; kstep < s64::kPvSteps; ++kstep) {
    const uint64_t da = sm::desc_of(sm::sw128_lo(s64::kOffP0) + sm::q_step_lo(kstep));
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < 16; ++k) {
        float a;
        if (!read(da, Major::k, r, k, a)) return "P: bad descriptor";
        P_smem[r * 64 + 16 * kstep + k] = a;
      }
  }
  for (int x = 0; x < 64 * 64; ++x) {
    if (P_reg[x] != S[x]) return "P from registers is not S at row " + std::to_string(x / 64) + " key " + std::to_string(x % 64);
    if (P_smem[x] != Pv[x]) return "P through shared memory is not S at row " + std::to_string(x / 64) + " key " + std::to_string(x % 64);
  }

  // PV: warpgroup c, N = 256 columns 256 c .., K = 64 keys in 4 steps.
  for (int c = 0; c < 2; ++c) {
    std::vector<double> O(64 * 256, 0.0);
    for (int kstep = 0; kstep < s64::kPvSteps; ++kstep) {
      const uint64_t db = ks.v_desc(kv_base, c, kstep);
      for (int n = 0; n < 256; ++n)
        for (int k = 0; k < 16; ++k) {
          float v;
          if (!read(db, Major::mn, n, k, v)) return "PV: bad descriptor";
          for (int r = 0; r < 64; ++r) O[r * 256 + n] += S[r * 64 + 16 * kstep + k] * v;
        }
    }
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 128; ++i) {
        const int r = sm::frag_d_row(t, i), col = 256 * c + sm::frag_d_col(t, i);
        double want = 0;
        for (int n = 0; n < 64; ++n) want += S[r * 64 + n] * KV[n * s64::kDqk + col];
        if (O[hw_d_row(t, i) * 256 + hw_d_col(t, i)] != want)
          return "PV: warpgroup " + std::to_string(c) + " thread " + std::to_string(t) + " register " + std::to_string(i) +
                 " is not O[" + std::to_string(r) + "][" + std::to_string(col) + "]";
      }
  }
  return "";
}

TEST(MlaAttentionSeesaw64Layout, KernelLayoutsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) EXPECT_EQ(emulate(KernelSide{}, seed), "") << "seed " << seed;
}

TEST(MlaAttentionSeesaw64Layout, PStoresAndChunk8LoadsAreConflictFree) {
  for (int w = 0; w < 4; ++w) {
    for (int i = 0; i < 32; i += 2) {
      std::vector<int> seen(32, 0);
      for (int lane = 0; lane < 32; ++lane) {
        const int t = 32 * w + lane;
        ++seen[(s64::p_offset(sm::frag_d_row(t, i), sm::frag_d_col(t, i)) / 4) % 32];
      }
      for (int b = 0; b < 32; ++b) EXPECT_EQ(seen[b], 1) << "P store: warp " << w << " pair " << i << " bank " << b;
    }
    for (int s = 0; s < 4; ++s)
      for (int j = 0; j < 4; ++j) {
        std::vector<int> seen(32, 0);
        for (int lane = 0; lane < 32; ++lane) ++seen[(s64::q8_offset(32 * w + lane, s, j) / 4) % 32];
        for (int b = 0; b < 32; ++b) EXPECT_EQ(seen[b], 1) << "chunk-8 load: warp " << w << " step " << s << " reg " << j;
      }
  }
}

// Whether each warp's 4-byte stores of one register pair of o, at at(c, row, col), hit 32
// distinct banks (the staged epilogue's stores, row copies' or boxes' layout alike).
std::string o_store_bank_problem(const std::function<uint32_t(int, int, int)>& at) {
  for (int c = 0; c < 2; ++c)
    for (int w = 0; w < 4; ++w)
      for (int i = 0; i < 128; i += 2) {
        std::vector<int> seen(32, 0);
        for (int lane = 0; lane < 32; ++lane) {
          const int t = 32 * w + lane;
          ++seen[(at(c, sm::frag_d_row(t, i), sm::frag_d_col(t, i)) / 4) % 32];
        }
        for (int b = 0; b < 32; ++b)
          if (seen[b] != 1) return "bank " + std::to_string(b) + " hit " + std::to_string(seen[b]) + " times (warpgroup " +
                                   std::to_string(c) + ", warp " + std::to_string(w) + ", register " + std::to_string(i) + ")";
      }
  return "";
}

// o's staging (s64::o_stage_*) as the kernel uses it: at(c, row, col) is where warpgroup c stores
// the bf16 pair of columns col, col + 1 of o's row `row`, from the start of the stage, and
// copy(row, k) the row's two bulk copies. Checks: each warp's 4-byte stores of one register pair
// hit 32 distinct banks; every (warpgroup, row, column) has its own bytes inside half c of the
// stage (half L: chunks 0-3; warpgroup 1 in chunks 4-7); each row's two copies, all sizes and
// addresses multiples of 16, write every byte of the row once, from where it was stored.
std::string o_staging_problem(const std::function<uint32_t(int, int, int)>& at,
                              const std::function<s64::OStageCopy(int, int)>& copy) {
  if (std::string bad = o_store_bank_problem(at); !bad.empty()) return bad;
  std::vector<int> owner(s64::kStageBytes, 0);
  for (int c = 0; c < 2; ++c)
    for (int row = 0; row < 64; ++row) {
      std::vector<int64_t> from(512, -1);  // the stage byte holding byte g of the row
      for (int col = 0; col < 256; col += 2) {
        const uint32_t a = at(c, row, col);
        if (a % 4 != 0) return "a pair unaligned at row " + std::to_string(row);
        if (a < c * s64::kOHalfBytes || a + 4 > (c + 1) * s64::kOHalfBytes)
          return "warpgroup " + std::to_string(c) + " outside its half at row " + std::to_string(row);
        for (int b = 0; b < 4; ++b) {
          if (owner[a + b]++ != 0) return "bytes shared at row " + std::to_string(row) + ", column " + std::to_string(col);
          from[2 * col + b] = a + b;
        }
      }
      std::vector<int> written(512, 0);
      for (int k = 0; k < 2; ++k) {
        const s64::OStageCopy cp = copy(row, k);
        if (cp.bytes == 0) continue;
        if (cp.src % 16 || cp.dst % 16 || cp.bytes % 16 || cp.dst + cp.bytes > 512)
          return "copy " + std::to_string(k) + " of row " + std::to_string(row) + " not 16-byte whole or past the row";
        for (uint32_t g = 0; g < cp.bytes; ++g) {
          ++written[cp.dst + g];
          if (from[cp.dst + g] != static_cast<int64_t>(c * s64::kOHalfBytes + cp.src + g))
            return "copy " + std::to_string(k) + " of row " + std::to_string(row) + " reads the wrong byte for " + std::to_string(cp.dst + g);
        }
      }
      for (int g = 0; g < 512; ++g)
        if (written[g] != 1) return "row " + std::to_string(row) + " byte " + std::to_string(g) + " written " + std::to_string(written[g]) + " times";
    }
  return "";
}

uint32_t o_stage_at(int c, int row, int col) { return s64::o_stage_half(c) + s64::o_stage_offset(row, 2u * col); }

TEST(MlaAttentionSeesaw64Layout, OStagingIsConflictFreeInItsHalfAndCopiedWhole) {
  EXPECT_EQ(o_staging_problem(o_stage_at, s64::o_stage_copy), "");
  // The test can fail: rows without the rotation put a warp's 8 rows in the same banks; warpgroup
  // 1 in half L's bytes; a row's second copy to the row's start; one copy of the rotated row.
  EXPECT_NE(o_staging_problem([](int c, int row, int col) { return s64::o_stage_half(c) + 512u * row + 2u * col; },
                              [](int row, int) { return s64::OStageCopy{512u * row, 0, 512}; }), "");
  EXPECT_NE(o_staging_problem([](int c, int row, int col) { return 16384u * c + s64::o_stage_offset(row, 2u * col); },
                              s64::o_stage_copy), "");
  EXPECT_NE(o_staging_problem(o_stage_at, [](int row, int k) {
              s64::OStageCopy cp = s64::o_stage_copy(row, k);
              if (k == 1) cp.dst = 0;
              return cp; }), "");
  EXPECT_NE(o_staging_problem(o_stage_at, [](int row, int k) {
              return k == 0 ? s64::OStageCopy{512u * row, 0, 512} : s64::OStageCopy{0, 0, 0}; }), "");
}

// o's boxes (s64::o_box_*) as the kernel stores them: at(c, row, col) as in o_staging_problem.
// Checks: each warp's 4-byte stores of one register pair hit 32 distinct banks; every (warpgroup,
// row, column) has its own bytes inside half c; and the tensor copy of box k of warpgroup c (at
// half c + k chunks: 64 rows x 128 bytes, the 128-byte swizzle as the PTX ISA's tensor-copy
// swizzle modes define it: the 16-byte unit index of a 128-byte row XOR the row's index in its
// 1,024-byte group) reads row r's columns 256 c + 64 k .. from where they were stored.
std::string o_box_problem(const std::function<uint32_t(int, int, int)>& at) {
  if (std::string bad = o_store_bank_problem(at); !bad.empty()) return bad;
  std::vector<int> owner(s64::kStageBytes, 0);
  for (int c = 0; c < 2; ++c)
    for (int row = 0; row < 64; ++row)
      for (int col = 0; col < 256; col += 2) {
        const uint32_t a = at(c, row, col);
        if (a % 4 != 0) return "a pair unaligned at row " + std::to_string(row);
        if (a < c * s64::kOHalfBytes || a + 4 > (c + 1) * s64::kOHalfBytes)
          return "warpgroup " + std::to_string(c) + " outside its half at row " + std::to_string(row);
        for (int b = 0; b < 4; ++b)
          if (owner[a + b]++ != 0) return "bytes shared at row " + std::to_string(row) + ", column " + std::to_string(col);
        const int k = col / 64, g = 2 * (col % 64);  // box, byte in the box's row
        const uint32_t copy_reads = s64::o_stage_half(c) + k * s64::kChunkBytes + row * 128 + (((g / 16) ^ (row % 8)) * 16) + g % 16;
        if (copy_reads != a)
          return "box " + std::to_string(k) + " of warpgroup " + std::to_string(c) + " reads row " + std::to_string(row) +
                 ", column " + std::to_string(col) + " at " + std::to_string(copy_reads) + ", stored at " + std::to_string(a);
      }
  return "";
}

TEST(MlaAttentionSeesaw64Layout, OBoxesAreConflictFreeAndWhatTheTensorCopyReads) {
  // The kernel's form: per (row, colw) one base, per 8-column unit k an XOR and a constant.
  const auto kernel_at = [](int c, int row, int col) {
    return s64::o_stage_half(c) + s64::o_box_at(s64::o_box_base(row, col % 8), col / 8);
  };
  EXPECT_EQ(o_box_problem(kernel_at), "");
  EXPECT_EQ(o_box_problem([](int c, int row, int col) { return s64::o_stage_half(c) + s64::o_box_offset(row, col); }), "");
  static_assert(s64::kOBoxes * s64::kAtomCols == sm::kDv / 2, "4 boxes cover a warpgroup's columns");
  // The test can fail: no swizzle (the 8 rows in the same banks, and not what the copy reads); the
  // XOR on the row's unit only (the base without row % 8); boxes 4 chunks apart (warpgroup 0 in
  // half R); the rotation of the row copies in place of the boxes.
  EXPECT_NE(o_box_problem([](int c, int row, int col) {
              return s64::o_stage_half(c) + (col / 64) * s64::kChunkBytes + row * 128u + 2u * (col % 64); }), "");
  EXPECT_NE(o_box_problem([](int c, int row, int col) {
              return s64::o_stage_half(c) + s64::o_box_at(row * 128u + 2u * (col % 8), col / 8); }), "");
  EXPECT_NE(o_box_problem([](int c, int row, int col) {
              return s64::o_stage_half(c) + 4 * s64::kChunkBytes * (col / 64 > 0) + s64::o_box_offset(row, col % 64); }), "");
  EXPECT_NE(o_box_problem(o_stage_at), "");
}

TEST(MlaAttentionSeesaw64Layout, PlantedBugsAreCaught) {
  const std::vector<std::pair<std::string, std::function<void(KernelSide&)>>> bugs = {
      {"V descriptor with v2's 32-key chunk stride",
       [](KernelSide& k) { k.v_desc = [](uint32_t st, int c, int kstep) {
         return sm::make_desc_sw128(st + 4 * c * s64::kChunkBytes + kstep * 16 * 128, 4096, sm::kSbo); }; }},
      {"V descriptor k-step of 8 keys",
       [](KernelSide& k) { k.v_desc = [](uint32_t st, int c, int kstep) {
         return sm::make_desc_sw128(st + 4 * c * s64::kChunkBytes + kstep * 8 * 128, s64::kChunkBytes, sm::kSbo); }; }},
      {"chunk 8 read from chunk 0",
       [](KernelSide& k) { k.q8_offset = [](int t, int s, int j) {
         return sm::sw128_offset(64, sm::frag_a_row(t, 2 * j), 16 * s + sm::frag_a_col(t, 2 * j)); }; }},
      {"chunk 8 fragment rows g and g + 8 swapped",
       [](KernelSide& k) { k.q8_offset = [](int t, int s, int j) {
         return sm::sw128_offset(64, sm::frag_a_row(t, 2 * (j ^ 1)), 512 + 16 * s + sm::frag_a_col(t, 2 * j)); }; }},
      {"P stored without the swizzle",
       [](KernelSide& k) { k.p_offset = [](int row, int key) { return static_cast<uint32_t>(row * 128 + key * 2); }; }},
      {"KV k-steps of v2's 32-key tile",
       [](KernelSide& k) { k.kv_step_lo = sm::k_step_lo; }},
  };
  for (const auto& [name, plant] : bugs) {
    KernelSide k;
    plant(k);
    EXPECT_NE(emulate(k, 3), "") << "planted bug not caught: " << name;
  }
}

}  // namespace
