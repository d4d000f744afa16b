// Host emulation of the fp8 keys-as-M products of a 64-key tile (the plan in
// docs/ops/mla_attention.md; index functions in src/ops/cuda/mla_attention_keys_m_layout.h),
// with the hardware's side modelled from the PTX ISA (tests/testing/sm90_hw_model.h):
//  - QK (S^T = K Q^T): every thread builds its A registers from 16-byte loads of the e4m3 key
//    rows (natural order, as TMA lands them) and e4m3 -> f16 conversions of byte pairs; the
//    hardware reads register value e as A element (hw_a_row, hw_a_col); B = Q stored in f16 with
//    its features permuted (q_store_col) in the 128-byte swizzled K-major tile, read through the
//    descriptor; the accumulators must hold K Q^T exactly;
//  - P^T written by the accumulators' owners into a swizzled K-major tile (keys along K);
//  - PV (O^T = V^T P^T): A registers from each key's 16-byte load of value bytes, pairs of keys
//    joined by a byte permute and converted; the accumulator of row `row` of m-tile mt must hold
//    (P V)[n][pv_feature(mt, row)] exactly, and pv_feature must cover the 512 features once.
// Integer-valued data (exact in e4m3 and f16, sums exact in double): any misplaced element
// shows. Each planted bug must make the emulation fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_keys_m_layout.h"
#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "kestrel/core/convert.h"
#include "testing/sm90_hw_model.h"

namespace {

namespace km = kestrel::ops::cuda::keys_m;
namespace sm = kestrel::ops::cuda::sm90;
using namespace kestrel::testing_util::sm90_hw;

constexpr int kN = 32;  // query rows: decode at H = 32 (the N of both products)
static_assert(sm::kKeys == kN, "the Q and P^T tiles use the 32-row swizzled arrangement of sm90's KV tile");

// The kernel side, replaceable for the planted bugs.
struct KernelSide {
  std::function<int(int)> key_of_position = km::key_of_position;
  std::function<int(int)> q_store_col = km::q_store_col;
  std::function<int(int, int)> qk_load_offset = km::qk_load_offset;
  std::function<int(int, int)> qk_key = km::qk_key;
  std::function<int(int)> qk_reg_half = km::qk_reg_half;
  std::function<int(int, int)> qk_reg_byte = km::qk_reg_byte;
  std::function<int(int, int)> pv_feature = km::pv_feature;
  std::function<int(int)> pv_load_offset = km::pv_load_offset;
  std::function<int(int, int, int, int)> pv_key = km::pv_key;
  std::function<int(int, int)> pv_reg_byte = km::pv_reg_byte;
};

// Runs the emulation; "" when every element matched, else the first mismatch.
std::string emulate(const KernelSide& ks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4);
  std::vector<float> KV(km::kKeys * km::kDqk), Q(kN * km::kDqk);
  for (auto& x : KV) x = static_cast<float>(val(rng));
  for (auto& x : Q) x = static_cast<float>(val(rng));
  std::vector<uint8_t> tile(KV.size());  // the e4m3 tile: 64 key rows of 576 bytes
  for (size_t i = 0; i < KV.size(); ++i) tile[i] = kestrel::f32_to_fp8_e4m3(KV[i]);
  // cvt.rn.f16x2.e4m3x2 widens each byte exactly: the f16 holds the e4m3 value.
  const auto widen = [&](int key, int byte) -> double {
    return kestrel::f16_to_f32(kestrel::f32_to_f16(kestrel::fp8_e4m3_to_f32(tile[static_cast<size_t>(key * km::kDqk + byte)])));
  };

  constexpr uint32_t q_base = 0, p_base = static_cast<uint32_t>(sm::kKvBytes), kSmem = p_base + 1024 * 4;
  std::vector<uint8_t> smem(kSmem, 0xEE);
  const auto put_f16 = [&](uint32_t off, double v) {
    const uint16_t h = kestrel::f32_to_f16(static_cast<float>(v));
    std::memcpy(&smem[off], &h, 2);
  };
  const auto read = [&](uint64_t desc, int mn, int k, double& out) -> bool {
    uint32_t a;
    if (!hw_addr(desc, Major::k, mn, k, a) || a + 2 > kSmem) return false;
    uint16_t h;
    std::memcpy(&h, &smem[a], 2);
    out = kestrel::f16_to_f32(h);
    return true;
  };

  // Q, features permuted: feature f of row n at column q_store_col(f) of the 32-row tile.
  for (int n = 0; n < kN; ++n)
    for (int f = 0; f < km::kDqk; ++f) {
      const int col = ks.q_store_col(f);
      if (col < 0 || col >= km::kDqk) return "q_store_col out of range";
      put_f16(q_base + sm::sw128_offset(kN, n, col), Q[n * km::kDqk + f]);
    }

  // ---- QK: D[position][n] over the 36 k-steps (row p of S^T: key key_of_position(p)), A from
  // the threads' registers.
  std::vector<double> D(km::kKeys * kN, 0.0);
  for (int s = 0; s < km::kQkSteps; ++s) {
    std::vector<double> A(km::kKeys * 16, NAN);
    for (int t = 0; t < 128; ++t) {
      const int load = ks.qk_load_offset(s / 4, t);
      if (load % 16 != 0 || load < 0 || load + 16 > km::kDqk) return "QK: a load is not 16 aligned bytes of the row";
      for (int j = 0; j < 4; ++j) {
        const int key = ks.qk_key(t, ks.qk_reg_half(j)), byte = ks.qk_reg_byte(s % 4, j);
        if (byte < 0 || byte + 2 > 16) return "QK: a register's bytes are outside its load";
        for (int lohi = 0; lohi < 2; ++lohi) {
          const int e = 2 * j + lohi;
          A[hw_a_row(t, e) * 16 + hw_a_col(t, e)] = widen(key, load + byte + lohi);
        }
      }
    }
    const uint64_t db = sm::k_desc(q_base, s);  // Q as B: K-major, N = 32 rows, k-step s
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 16; ++k) {
        double b;
        if (!read(db, n, k, b)) return "QK: bad descriptor";
        for (int m = 0; m < km::kKeys; ++m) D[m * kN + n] += A[m * 16 + k] * b;
      }
  }
  std::vector<int> keys_seen(km::kKeys, 0);
  for (int pos = 0; pos < km::kKeys; ++pos) {
    const int key = ks.key_of_position(pos);
    if (key < 0 || key >= km::kKeys || keys_seen[key]++ != 0) return "key_of_position is not a permutation";
    for (int n = 0; n < kN; ++n) {
      double want = 0;
      for (int f = 0; f < km::kDqk; ++f) want += static_cast<double>(KV[key * km::kDqk + f]) * Q[n * km::kDqk + f];
      if (D[pos * kN + n] != want)
        return "QK: S^T row " + std::to_string(pos) + " (key " + std::to_string(key) + "), query " + std::to_string(n) +
               " is not the score";
    }
  }

  // ---- P^T: a bounded integer function of the score (exact in f16; any per-element function
  // commutes with the maps), written by each accumulator's owner: register i of thread t is
  // (position hw_d_row, query row hw_d_col), stored at (row n, column position) of the 32-row tile.
  std::vector<double> P(kN * km::kKeys);  // P[n][position]
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < kN / 2; ++i) {
      const int pos = hw_d_row(t, i), n = hw_d_col(t, i);
      const double p = std::fmod(D[pos * kN + n], 7.0);
      P[n * km::kKeys + pos] = p;
      put_f16(p_base + sm::sw128_offset(kN, n, pos), p);
    }

  // ---- PV: per m-tile, 4 k-steps of 16 keys, A = V^T from the threads' registers.
  std::vector<int> covered(km::kDv, 0);
  for (int mt = 0; mt < km::kPvTiles; ++mt) {
    std::vector<double> O(64 * kN, 0.0);
    for (int s = 0; s < km::kPvSteps; ++s) {
      std::vector<double> A(64 * 16, NAN);
      for (int t = 0; t < 128; ++t) {
        const int load = ks.pv_load_offset(t);
        if (load % 16 != 0 || load < 0 || load + 16 > km::kDv) return "PV: a load is not 16 aligned bytes of the values";
        for (int j = 0; j < 4; ++j)
          for (int lohi = 0; lohi < 2; ++lohi) {
            const int e = 2 * j + lohi, key = ks.pv_key(s, t, j, lohi), byte = ks.pv_reg_byte(mt, j);
            if (key < 0 || key >= km::kKeys || byte < 0 || byte >= 16) return "PV: a register's key or byte is out of range";
            A[hw_a_row(t, e) * 16 + hw_a_col(t, e)] = widen(key, load + byte);
          }
      }
      const uint64_t db = sm::k_desc(p_base, s);  // P^T as B: K-major (keys), N = 32 rows
      for (int n = 0; n < kN; ++n)
        for (int k = 0; k < 16; ++k) {
          double b;
          if (!read(db, n, k, b)) return "PV: bad descriptor";
          for (int m = 0; m < 64; ++m) O[m * kN + n] += A[m * 16 + k] * b;
        }
    }
    // The output: register i of thread t is (row hw_d_row, query row hw_d_col) of the m-tile,
    // value feature pv_feature(mt, row).
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < kN / 2; ++i) {
        const int row = hw_d_row(t, i), n = hw_d_col(t, i), f = ks.pv_feature(mt, row);
        if (f < 0 || f >= km::kDv) return "pv_feature out of range";
        if (n == 0) ++covered[f];
        double want = 0;
        for (int pos = 0; pos < km::kKeys; ++pos) want += P[n * km::kKeys + pos] * KV[ks.key_of_position(pos) * km::kDqk + f];
        if (O[row * kN + n] != want)
          return "PV: m-tile " + std::to_string(mt) + " row " + std::to_string(row) + " query " + std::to_string(n) +
                 " is not O[" + std::to_string(n) + "][" + std::to_string(f) + "]";
      }
  }
  for (int f = 0; f < km::kDv; ++f)
    if (covered[f] != 1) return "pv_feature does not cover value feature " + std::to_string(f) + " exactly once";
  return "";
}

TEST(MlaAttentionKeysMLayout, ProductsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u, 3u}) EXPECT_EQ(emulate(KernelSide{}, seed), "") << "seed " << seed;
}

// q_store_col inverts qk_feature (the statement of the QK permutation in the header), and both
// are bijections on the 576 features.
TEST(MlaAttentionKeysMLayout, QStoreColumnInvertsTheFeatureOrder) {
  std::vector<int> seen(km::kDqk, 0);
  for (int s = 0; s < km::kQkSteps; ++s)
    for (int c = 0; c < 16; ++c) {
      const int f = km::qk_feature(s, c);
      ASSERT_TRUE(f >= 0 && f < km::kDqk);
      ++seen[f];
      EXPECT_EQ(km::q_store_col(f), 16 * s + c) << "s " << s << " c " << c;
    }
  for (int v : seen) EXPECT_EQ(v, 1);
}

// The 16-byte shared-memory loads of both products: the largest number of wavefronts a quarter
// warp (8 lanes) needs, i.e. the most lanes whose addresses share a 16-byte bank group
// ((address / 16) % 8), for key rows `row_bytes` apart and the given key order.
int worst_wavefronts(int row_bytes, const std::function<int(int)>& key_of, bool qk) {
  int worst = 0;
  const auto quarter = [&](const std::function<int(int)>& addr_of_lane) {
    for (int q0 = 0; q0 < 128; q0 += 8) {
      int count[8] = {};
      for (int t = q0; t < q0 + 8; ++t) ++count[(addr_of_lane(t) / 16) % 8];
      for (int c : count) worst = c > worst ? c : worst;
    }
  };
  if (qk) {
    for (int q = 0; q < km::kQkSteps / 4; ++q)
      for (int half = 0; half < 2; ++half)
        quarter([&](int t) { return key_of(16 * (t / 32) + (t % 32) / 4 + 8 * half) * row_bytes + km::qk_load_offset(q, t); });
  } else {
    for (int s = 0; s < km::kPvSteps; ++s)
      for (int j = 0; j < 4; ++j)
        for (int lohi = 0; lohi < 2; ++lohi)
          quarter([&](int t) {
            return key_of(16 * s + 8 * (j / 2) + 2 * (t % 4) + lohi) * row_bytes + km::pv_load_offset(t);
          });
  }
  return worst;
}

// The layout's choice (kRowBytes, key_of_position; the header says why): both products' loads
// are one wavefront per quarter warp; the natural 576-byte rows in natural order are not (PV
// 4-way), and no reordering of the keys within each 8 positions serves both at 592 bytes.
TEST(MlaAttentionKeysMLayout, TileLoadsAreFreeOfBankConflicts) {
  EXPECT_EQ(worst_wavefronts(km::kRowBytes, km::key_of_position, true), 1);
  EXPECT_EQ(worst_wavefronts(km::kRowBytes, km::key_of_position, false), 1);
  const auto natural = [](int p) { return p; };
  EXPECT_EQ(worst_wavefronts(576, natural, true), 1);
  EXPECT_EQ(worst_wavefronts(576, natural, false), 4);
  std::vector<int> perm = {0, 1, 2, 3, 4, 5, 6, 7};
  int both = 0;
  do {
    const auto key_of = [&](int p) { return (p & ~7) | perm[static_cast<size_t>(p & 7)]; };
    both += worst_wavefronts(592, key_of, true) == 1 && worst_wavefronts(592, key_of, false) == 1;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(both, 0);
  for (int p = 0; p < km::kKeys; ++p) EXPECT_EQ(km::key_of_position(p) / 8, p / 8) << "a key stays in its 8 positions";
  static_assert(km::kRowBytes % 16 == 0 && km::kRowBytes >= km::kDqk);
}

// Each planted bug breaks the emulation: it sees every class of error it is meant to see.
TEST(MlaAttentionKeysMLayout, PlantedBugsAreCaught) {
  std::vector<std::pair<const char*, KernelSide>> bugs;
  KernelSide b;
  b.q_store_col = [](int f) { return f; };  // Q in natural order
  bugs.emplace_back("Q not permuted", b);
  b = KernelSide{};
  b.qk_reg_byte = [](int r, int j) { return 4 * r + 2 * (1 - j / 2); };  // the two pairs swapped
  bugs.emplace_back("QK register pairs swapped", b);
  b = KernelSide{};
  b.qk_load_offset = [](int q, int t) { return 64 * q + 16 * ((t + 1) % 4); };
  bugs.emplace_back("QK load of the next thread", b);
  b = KernelSide{};
  b.qk_reg_half = [](int j) { return j / 2; };  // rows g and g + 8 mixed up
  bugs.emplace_back("QK key-row halves", b);
  b = KernelSide{};
  b.pv_feature = [](int mt, int row) { return 16 * (8 * (row / 16) + row % 8) + 8 * ((row % 16) / 8) + mt; };
  bugs.emplace_back("PV feature order not the loads' (a bijection still)", b);
  b = KernelSide{};
  b.pv_reg_byte = [](int mt, int j) { return 2 * mt + 1 - j % 2; };
  bugs.emplace_back("PV row halves swapped", b);
  b = KernelSide{};
  b.pv_key = [](int s, int t, int j, int lohi) { return km::pv_key(s, t, j, 1 - lohi); };
  bugs.emplace_back("PV key pair swapped", b);
  b = KernelSide{};
  b.pv_load_offset = [](int t) { return 16 * (8 * (t / 32) + ((t % 32) / 4 + 1) % 8); };
  bugs.emplace_back("PV load of the next row group", b);
  b = KernelSide{};
  b.pv_key = [](int s, int t, int j, int lohi) { return 16 * s + 8 * (j / 2) + 2 * (t % 4) + lohi; };
  bugs.emplace_back("PV columns in natural key order (QK's rows permuted)", b);
  b = KernelSide{};
  b.qk_key = [](int t, int half) { return 16 * (t / 32) + (t % 32) / 4 + 8 * half; };
  bugs.emplace_back("QK rows in natural key order (the stated order permuted)", b);
  for (const auto& [name, side] : bugs) EXPECT_NE(emulate(side, 1), "") << "planted bug not caught: " << name;
}

}  // namespace
