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
#include <array>
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
  std::function<int(int)> key_of_position = [](int p) { return km::key_of_position(p); };
  std::function<int(int)> q_store_col = km::q_store_col;
  std::function<int(int, int)> qk_load_offset = km::qk_load_offset;
  std::function<int(int, int)> qk_key = km::qk_key;
  std::function<int(int)> qk_reg_half = km::qk_reg_half;
  std::function<int(int, int)> qk_reg_byte = km::qk_reg_byte;
  std::function<int(int, int)> pv_feature = [](int mt, int row) { return km::pv_feature(mt, row); };
  std::function<int(int)> pv_load_offset = [](int t) { return km::pv_load_offset(t); };
  std::function<int(int, int, int, int)> pv_key = [](int s, int t, int j, int lohi) { return km::pv_key(s, t, j, lohi); };
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

// ---- QK on e4m3 operands (the fast precision): per k-step one ldmatrix.x4 (b16) of the key rows
// gives the A registers (PTX ISA: lane l gives the address of row l % 8 of matrix l / 8, 16
// bytes; lane l receives bytes 4 (l % 4) .. + 3 of row l / 4 of matrix j in register j); Q is
// stored as e4m3 bytes in natural order and read through the k-step descriptors (a k32 step
// covers the 32 bytes a k16 one does).
constexpr size_t kFastTileBytes = static_cast<size_t>(km::row_offset8(km::kKeys - 1) + km::kDqk);

struct Qk8Side {
  std::function<int(int, int)> ldm_key = km::qk8_ldm_key;
  std::function<int(int, int)> ldm_offset = km::qk8_ldm_offset;
  std::function<int(int)> q8_store_byte = [](int f) { return f; };
};

std::string emulate_qk8(const Qk8Side& ks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4);
  std::vector<float> K(km::kKeys * km::kDqk), Q(kN * km::kDqk);
  for (auto& x : K) x = static_cast<float>(val(rng));
  for (auto& x : Q) x = static_cast<float>(val(rng));
  std::vector<uint8_t> tile(kFastTileBytes, 0x7F);  // e4m3 NaN between the blocks
  for (int k = 0; k < km::kKeys; ++k)
    for (int f = 0; f < km::kDqk; ++f) tile[static_cast<size_t>(km::row_offset8(k) + f)] = kestrel::f32_to_fp8_e4m3(K[k * km::kDqk + f]);
  const uint32_t kSmem = static_cast<uint32_t>(sm::kKvBytes);
  std::vector<uint8_t> smem(kSmem, 0x7F);  // an unwritten byte read shows as NaN
  for (int n = 0; n < kN; ++n)
    for (int f = 0; f < km::kDqk; ++f) {
      const int col = ks.q8_store_byte(f);
      if (col < 0 || col >= km::kDqk) return "the Q byte column is out of range";
      smem[sm::sw128_offset(kN, n, col / 2) + col % 2] = kestrel::f32_to_fp8_e4m3(Q[n * km::kDqk + f]);
    }
  std::vector<double> D(km::kKeys * kN, 0.0);
  for (int s = 0; s < km::kQk8Steps; ++s) {
    std::vector<double> A(km::kKeys * 32, NAN);
    for (int w = 0; w < 4; ++w)
      for (int j = 0; j < 4; ++j)      // matrix j of the warp's ldmatrix.x4
        for (int r = 0; r < 8; ++r) {  // its row r: the address lane 8 j + r gives
          const int lane = 8 * j + r, key = ks.ldm_key(w, lane), off = ks.ldm_offset(s, lane);
          if (key < 0 || key >= km::kKeys || off % 16 != 0 || off < 0 || off + 16 > km::kDqk)
            return "QK8: an ldmatrix row address is outside the tile or not 16-byte aligned";
          for (int q4 = 0; q4 < 4; ++q4) {  // lane 4 r + q4 receives bytes 4 q4 .. + 3 in register j
            const int t = 32 * w + 4 * r + q4;
            for (int b = 0; b < 4; ++b) {
              const int e = 4 * j + b;
              A[hw_a8_row(t, e) * 32 + hw_a8_col(t, e)] =
                  kestrel::fp8_e4m3_to_f32(tile[static_cast<size_t>(km::row_offset8(key) + off + 4 * q4 + b)]);
            }
          }
        }
    const uint64_t db = sm::k_desc(0, s);  // the descriptor of the f16 k-step s: the same 32 bytes
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 32; ++k) {
        uint32_t addr;
        if (!hw_addr8(db, n, k, addr) || addr >= kSmem) return "QK8: bad descriptor";
        const double b = kestrel::fp8_e4m3_to_f32(smem[addr]);
        for (int m = 0; m < km::kKeys; ++m) D[m * kN + n] += A[m * 32 + k] * b;
      }
  }
  for (int pos = 0; pos < km::kKeys; ++pos) {
    const int key = km::key_of_position(pos, true);
    for (int n = 0; n < kN; ++n) {
      double want = 0;
      for (int f = 0; f < km::kDqk; ++f) want += static_cast<double>(K[key * km::kDqk + f]) * Q[n * km::kDqk + f];
      if (!(D[pos * kN + n] == want))
        return "QK8: S^T row " + std::to_string(pos) + ", query " + std::to_string(n) + " is not the score";
    }
  }
  return "";
}

TEST(MlaAttentionKeysMLayout, E4m3ProductMatchesTheHardwareModel) {
  for (uint64_t seed : {4u, 5u}) EXPECT_EQ(emulate_qk8(Qk8Side{}, seed), "") << "seed " << seed;
}

TEST(MlaAttentionKeysMLayout, E4m3PlantedBugsAreCaught) {
  std::vector<std::pair<const char*, Qk8Side>> bugs;
  Qk8Side b;
  b.q8_store_byte = [](int f) { return km::q_store_col(f); };  // the f16 path's feature order
  bugs.emplace_back("Q permuted", b);
  b = Qk8Side{};
  b.ldm_offset = [](int s, int lane) { return 32 * s + 16 * ((lane / 8) % 2); };
  bugs.emplace_back("matrices 1 and 2 swapped", b);
  b = Qk8Side{};
  b.ldm_key = [](int w, int lane) { return 16 * w + 8 * (lane / 16) + lane % 8; };
  bugs.emplace_back("row halves by the wrong lane bit", b);
  b = Qk8Side{};
  b.ldm_key = [](int w, int lane) { return km::qk8_ldm_key(w, lane ^ 1); };
  bugs.emplace_back("rows of a matrix swapped", b);
  for (const auto& [name, side] : bugs) EXPECT_NE(emulate_qk8(side, 4), "") << name;
}

// P^T written by stmatrix.trans (PTX ISA: lane l gives the address of row l % 8 of matrix l / 8;
// lane l holds elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of each matrix, the first in
// the low half; .trans stores element (r, c) at element r of row c's address): every P^T element
// (query row n, position p) must be the accumulator of S^T row p, column n.
std::string emulate_pt_store(const std::function<int(int)>& row_of_lane, const std::function<int(int, int)>& pos_of) {
  std::vector<int32_t> smem(kN * km::kKeys, -1);  // P^T as element indices: sw128_offset / 2
  for (int w = 0; w < 4; ++w)
    for (int h = 0; h < 2; ++h)
      for (int lane = 0; lane < 32; ++lane) {  // the address lane 8 j + c gives: matrix j (= nb), row c
        const int j = lane / 8, c = lane % 8, n = row_of_lane(lane), p0 = pos_of(w, h);
        if (n < 0 || n >= kN || p0 < 0 || p0 + 8 > km::kKeys || p0 % 8 != 0) return "a stmatrix address is out of the tile";
        for (int r = 0; r < 8; ++r) {
          const int src_lane = 4 * r + c / 2, i = 4 * j + 2 * h + c % 2;  // the register holding element (r, c)
          const int t = 32 * w + src_lane;
          const int value = hw_d_row(t, i) * kN + hw_d_col(t, i);  // which S^T element it holds
          smem[sm::sw128_offset(kN, n, p0) / 2 + r] = value;
        }
      }
  for (int n = 0; n < kN; ++n)
    for (int p = 0; p < km::kKeys; ++p)
      if (smem[sm::sw128_offset(kN, n, p) / 2] != p * kN + n)
        return "P^T row " + std::to_string(n) + " position " + std::to_string(p) + " is not S^T's";
  return "";
}

TEST(MlaAttentionKeysMLayout, PtStoreByStmatrixTransposes) {
  EXPECT_EQ(emulate_pt_store(km::pt_store_row, km::pt_store_pos), "");
  EXPECT_NE(emulate_pt_store([](int l) { return (l % 8) * 4 + l / 8; }, km::pt_store_pos), "") << "rows by matrix";
  EXPECT_NE(emulate_pt_store(km::pt_store_row, [](int w, int h) { return 16 * w + 8 * (1 - h); }), "") << "halves";
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
// ((address / 16) % 8), for key rows at row_off(key), the given key order and PV's loads at
// pv_load(t).
int worst_wavefronts(const std::function<int(int)>& row_off, const std::function<int(int)>& key_of, bool qk,
                     const std::function<int(int)>& pv_load = [](int t) { return km::pv_load_offset(t); }) {
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
        quarter([&](int t) { return row_off(key_of(16 * (t / 32) + (t % 32) / 4 + 8 * half)) + km::qk_load_offset(q, t); });
  } else {
    for (int s = 0; s < km::kPvSteps; ++s)
      for (int j = 0; j < 4; ++j)
        for (int lohi = 0; lohi < 2; ++lohi)
          quarter([&](int t) {
            return row_off(key_of(16 * s + 8 * (j / 2) + 2 * (t % 4) + lohi)) + pv_load(t);
          });
  }
  return worst;
}

// The layout's choice (kRowBytes, key_of_position; the header says why): both products' loads
// are one wavefront per quarter warp; the natural 576-byte rows in natural order are not (PV
// 4-way), and no reordering of the keys within each 8 positions serves both at 592 bytes.
std::function<int(int)> rows_apart(int bytes) {
  return [bytes](int key) { return key * bytes; };
}

TEST(MlaAttentionKeysMLayout, TileLoadsAreFreeOfBankConflicts) {
  const auto ordered = [](int p) { return km::key_of_position(p); };
  EXPECT_EQ(worst_wavefronts(rows_apart(km::kRowBytes), ordered, true), 1);
  EXPECT_EQ(worst_wavefronts(rows_apart(km::kRowBytes), ordered, false), 1);
  const auto natural = [](int p) { return p; };
  EXPECT_EQ(worst_wavefronts(rows_apart(576), natural, true), 1);
  EXPECT_EQ(worst_wavefronts(rows_apart(576), natural, false), 4);
  std::vector<int> perm = {0, 1, 2, 3, 4, 5, 6, 7};
  int both = 0;
  do {
    const auto key_of = [&](int p) { return (p & ~7) | perm[static_cast<size_t>(p & 7)]; };
    both += worst_wavefronts(rows_apart(592), key_of, true) == 1 && worst_wavefronts(rows_apart(592), key_of, false) == 1;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(both, 0);
  for (int p = 0; p < km::kKeys; ++p) EXPECT_EQ(km::key_of_position(p) / 8, p / 8) << "a key stays in its 8 positions";
  static_assert(km::kRowBytes % 16 == 0 && km::kRowBytes >= km::kDqk);
}

// The fast precision's layout (blocks of 16 cache rows, km::row_offset8, and its key order): each
// 8-row matrix of QK's ldmatrix is one wavefront (8 distinct 16-byte bank groups), and PV's
// 16-byte loads stay conflict-free.
int worst_ldm_wavefronts(const std::function<int(int)>& row_off, const std::function<int(int)>& key_of) {
  int worst = 0;
  for (int s = 0; s < km::kQk8Steps; ++s)
    for (int w = 0; w < 4; ++w)
      for (int j = 0; j < 4; ++j) {
        int count[8] = {};
        for (int r = 0; r < 8; ++r) {
          const int lane = 8 * j + r;
          const int key = key_of(16 * w + 8 * ((lane / 8) % 2) + lane % 8);
          ++count[((row_off(key) + km::qk8_ldm_offset(s, lane)) / 16) % 8];
        }
        for (int c : count) worst = c > worst ? c : worst;
      }
  return worst;
}

std::function<int(int)> blocks_apart(int bytes) {
  return [bytes](int key) { return (key / km::kBlockRows8) * bytes + (key % km::kBlockRows8) * km::kDqk; };
}

TEST(MlaAttentionKeysMLayout, FastLayoutLoadsAreFreeOfBankConflicts) {
  const auto fast = [](int p) { return km::key_of_position(p, true); };
  const auto fast_pv = [](int t) { return km::pv_load_offset(t, true); };
  const std::function<int(int)> layout = [](int key) { return km::row_offset8(key); };
  EXPECT_EQ(worst_ldm_wavefronts(layout, fast), 1);
  EXPECT_EQ(worst_wavefronts(layout, fast, false, fast_pv), 1);  // PV
  // Each block is one copy: its 16 rows back to back (576 bytes apart) from a 16-byte-aligned
  // start, inside the stage, the blocks apart.
  for (int b = 0; b < km::kKeys / km::kBlockRows8; ++b) {
    const int start = layout(km::kBlockRows8 * b);
    EXPECT_EQ(start % 16, 0) << "block " << b;
    for (int i = 0; i < km::kBlockRows8; ++i) EXPECT_EQ(layout(km::kBlockRows8 * b + i), start + km::kDqk * i);
    if (b > 0) {
      EXPECT_GE(start, layout(km::kBlockRows8 * b - 1) + km::kDqk) << "block " << b << " overlaps the one before";
    }
  }
  // The twenty-first session's blocks (9,232 bytes apart: phases 0 / 16 / 32 / 48) were
  // conflict-free too; 0 / 32 / 0 / 32 (the two fastest phases only) is not.
  EXPECT_EQ(worst_ldm_wavefronts(blocks_apart(9232), fast), 1);
  EXPECT_EQ(worst_wavefronts(blocks_apart(9232), fast, false, fast_pv), 1);
  const auto phases_0_32 = [](int key) { return km::row_offset8(key) - km::block_phase8(key / 16) + 32 * ((key / 16) % 2); };
  EXPECT_EQ(worst_ldm_wavefronts(phases_0_32, fast), 2);
  // What each choice buys: the blocks as the copies would land them fastest (9,216 bytes apart,
  // the source's address mod 128) put every row in 2 bank groups; the natural key order puts an
  // ldmatrix's 8 rows in 4 groups; the exact layout's unit order leaves PV 2-way.
  EXPECT_EQ(worst_ldm_wavefronts(blocks_apart(9216), fast), 4);
  EXPECT_EQ(worst_ldm_wavefronts(layout, [](int p) { return p; }), 4);
  EXPECT_EQ(worst_wavefronts(layout, fast, false), 2);
  std::vector<int> seen(km::kKeys, 0);
  for (int p = 0; p < km::kKeys; ++p) ++seen[static_cast<size_t>(fast(p))];
  for (int v : seen) EXPECT_EQ(v, 1) << "the fast key order is a permutation";
  static_assert(km::kBlockBytes8 % 16 == 0 && km::kBlockBytes8 >= km::kBlockRows8 * km::kDqk);
}

// The softmax's mask forms a thread's two keys (S^T rows 16 w + g and 16 w + g + 8) as the first
// plus key_of_position(8), in both orders.
TEST(MlaAttentionKeysMLayout, SecondRowKeyIsTheFirstPlusKey8) {
  for (bool e4m3 : {false, true})
    for (int w = 0; w < 4; ++w)
      for (int g = 0; g < 8; ++g)
        EXPECT_EQ(km::key_of_position(16 * w + g + 8, e4m3), km::key_of_position(16 * w + g, e4m3) + km::key_of_position(8, e4m3))
            << "e4m3 " << e4m3 << " w " << w << " g " << g;
}

// PV's loads address k-step ks, half h as k-step 0's plus pv_step_offset(ks, h): one offset for
// every thread and key pair, in both layouts (the kernel adds it as an immediate).
TEST(MlaAttentionKeysMLayout, PvStepOffsetIsTheSameForEveryThread) {
  for (bool e4m3 : {false, true})
    for (int t = 0; t < 128; ++t)
      for (int ks = 0; ks < km::kPvSteps; ++ks)
        for (int j = 0; j < 4; ++j)
          for (int lohi = 0; lohi < 2; ++lohi)
            ASSERT_EQ(km::row_offset(km::pv_key(ks, t, j, lohi, e4m3), e4m3),
                      km::row_offset(km::pv_key(0, t, 0, lohi, e4m3), e4m3) + km::pv_step_offset(ks, j / 2, e4m3))
                << "e4m3 " << e4m3 << " t " << t << " ks " << ks << " j " << j << " lohi " << lohi;
}

// v3 wide's o boxes: the kernel's per-slot offset (two bases and a constant) is the 128-byte
// swizzle's offset of the thread's 16 bytes (row n = 8 (k / 2) + 2 q4 + k % 2, features 8 u ..), and
// the 128 threads' 16 slots cover each warpgroup's 32 KB staging exactly once, in 16-byte units.
TEST(MlaAttentionKeysMLayout, WideOBoxStoresAreTheSwizzledUnits) {
  std::vector<int> seen(4 * 64 * 128 / 16, 0);
  for (int t = 0; t < 128; ++t)
    for (int k = 0; k < 16; ++k) {
      const int q4 = t % 4, n = 8 * (k / 2) + 2 * q4 + k % 2, u = km::pv_wide_unit(t / 32, (t % 32) / 4);
      const uint32_t at = km::o_box_store_offset(km::o_box_base(t, k % 2), k);
      ASSERT_EQ(at, sm::sw128_offset(64, n, 8 * u)) << "t " << t << " k " << k;
      ++seen[at / 16];
    }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "16-byte unit " << i;
}

// One store of the staged partials: where the kernel's offsets put it, where the box's 128-byte
// swizzle (sm90::sw128_offset, the hardware's pattern for a 1024-aligned box of 128-byte rows)
// puts the unit it holds, and where the unpermuted order (unit = step) would put it.
struct StagedStore {
  uint32_t at, want, unpermuted;
};
// The staged-partials checks over the stores of each quarter warp's instructions (8 each): every
// store where the swizzle puts its unit, the staging's `units` 16-byte units covered exactly once,
// each instruction's stores in 8 distinct 16-byte bank groups (one wavefront), and the unpermuted
// order's 2-way conflict (so that the test can tell).
void expect_staged_partials(const std::vector<std::array<StagedStore, 8>>& instructions, size_t units) {
  std::vector<int> seen(units, 0);
  int worst = 0, worst_unpermuted = 0;
  for (const auto& ins : instructions) {
    int groups[8] = {}, groups_unpermuted[8] = {};
    for (const StagedStore& st : ins) {
      ASSERT_EQ(st.at, st.want);
      ASSERT_LT(st.at / 16, units);
      ++seen[st.at / 16];
      ++groups[(st.at / 16) % 8];
      ++groups_unpermuted[(st.unpermuted / 16) % 8];
    }
    for (int x : groups) worst = std::max(worst, x);
    for (int x : groups_unpermuted) worst_unpermuted = std::max(worst_unpermuted, x);
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "16-byte unit " << i;
  EXPECT_EQ(worst, 1) << "each quarter warp's stores in 8 bank groups";
  EXPECT_EQ(worst_unpermuted, 2) << "the unpermuted order's 2-way conflict (the test can tell)";
}

// v3's 32-row split partials staged as boxes: each writer's store (slot k, step s) lands where the
// 128-byte swizzle puts its unit (box u / 2 of 32 rows x 32 f32: unit 4 (u % 2) + i of row n_k,
// i = partial_unit_at_step), the writers (warps 2 c, 2 c + 1 of warpgroup c, features 256 c ..)
// cover the 16 boxes exactly once, and each quarter warp's stores are one wavefront.
TEST(MlaAttentionKeysMLayout, StagedPartialsAreTheSwizzledUnitsWithoutBankConflicts) {
  const auto swizzled = [](int u, int n, int i) {  // a box row is 128 bytes: unit j at bf16 column 8 j
    return static_cast<uint32_t>((u / 2) * km::kPartialBoxBytes) + sm::sw128_offset(32, n, 8 * (4 * (u % 2) + i));
  };
  std::vector<std::array<StagedStore, 8>> instructions;
  for (int c = 0; c < 2; ++c)
    for (int k = 0; k < 8; ++k)
      for (int s = 0; s < 4; ++s)
        for (int qw = 0; qw < 8; ++qw) {  // the quarter warps of the two writer warps
          const int w = 2 * c + qw / 4;
          std::array<StagedStore, 8> ins{};
          for (int l = 0; l < 8; ++l) {
            const int t = 32 * w + 8 * (qw % 4) + l, g = (t % 32) / 4, q4 = t % 4;
            const int u = km::pv_unit(w, g, true), n = 8 * (k / 2) + 2 * q4 + k % 2;
            ASSERT_EQ(u / 16, c) << "warpgroup c writes features 256 c ..";
            ins[static_cast<size_t>(l)] = {km::partial_store_offset(km::partial_box_base(t, k % 2), k, s),
                                           swizzled(u, n, km::partial_unit_at_step(g, s)), swizzled(u, n, s)};
          }
          instructions.push_back(ins);
        }
  expect_staged_partials(instructions, km::kPartialBoxes * km::kPartialBoxBytes / 16);
}

// The products and P^T in the fast layout's key order, PV units and features (its PV and mask):
// the same emulation with those functions; the exact layout's feature order must then fail.
TEST(MlaAttentionKeysMLayout, ProductsMatchInTheFastLayoutsKeyOrder) {
  KernelSide ks;
  ks.key_of_position = [](int p) { return km::key_of_position(p, true); };
  ks.qk_key = [](int t, int half) { return km::key_of_position(16 * (t / 32) + (t % 32) / 4 + 8 * half, true); };
  ks.pv_key = [](int s, int t, int j, int lohi) { return km::pv_key(s, t, j, lohi, true); };
  ks.pv_feature = [](int mt, int row) { return km::pv_feature(mt, row, true); };
  ks.pv_load_offset = [](int t) { return km::pv_load_offset(t, true); };
  EXPECT_EQ(emulate(ks, 7), "");
  ks.pv_feature = [](int mt, int row) { return km::pv_feature(mt, row); };  // the exact layout's features
  EXPECT_NE(emulate(ks, 7), "") << "the fast loads with the exact layout's feature order";
}

// ---- PV of the wide instantiation (64 query rows, value features split between the warpgroups):
// warpgroup c's thread t builds its A registers of m-tile mm from one 8-byte load per key at
// pv_wide_load_offset(c, t) (bytes pv_reg_byte(mm, j)), B = P^T of 64 rows (two 32-row halves
// written as in the 32-row kernel, rows 32 .. 63 kPtBytes further) read through the k-step
// descriptor with N = 64; accumulator i of thread t (m64n64: 32 a thread) must hold
// (P V)[n][pv_wide_feature(c, mm, row)], and the two warpgroups must cover the 512 features once.
struct WideSide {
  std::function<int(int, int)> load_offset = km::pv_wide_load_offset;
  std::function<int(int, int, int)> feature = km::pv_wide_feature;
  std::function<int(int, int)> reg_byte = km::pv_reg_byte;
  int p_half_bytes = 32 * 128;  // where P^T's rows 32 .. 63 start
};

std::string emulate_pv_wide(const WideSide& ws, uint64_t seed) {
  constexpr int kRows = km::kWideRows;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4), pval(0, 6);
  std::vector<float> V(km::kKeys * km::kDqk);
  for (auto& x : V) x = static_cast<float>(val(rng));
  std::vector<uint8_t> tile(kFastTileBytes, 0x7F);  // NaN between the blocks
  for (int k = 0; k < km::kKeys; ++k)
    for (int f = 0; f < km::kDqk; ++f) tile[static_cast<size_t>(km::row_offset8(k) + f)] = kestrel::f32_to_fp8_e4m3(V[k * km::kDqk + f]);
  std::vector<double> P(kRows * km::kKeys);  // P[n][key]
  constexpr uint32_t kSmem = 2 * 32 * 128;
  std::vector<uint8_t> smem(kSmem, 0xFF);  // an unwritten f16 read is NaN
  for (int n = 0; n < kRows; ++n)
    for (int pos = 0; pos < km::kKeys; ++pos) {  // P^T's K index is the position (the kernel's order)
      const int key = km::key_of_position(pos, true);
      const double v = pval(rng);
      P[n * km::kKeys + key] = v;
      const uint16_t h = kestrel::f32_to_f16(static_cast<float>(v));
      const uint32_t off = static_cast<uint32_t>((n / 32) * ws.p_half_bytes) + sm::sw128_offset(32, n % 32, pos);
      if (off + 2 > kSmem) return "P^T's second half is outside the buffer";
      std::memcpy(&smem[off], &h, 2);
    }
  std::vector<int> covered(km::kDv, 0);
  for (int c = 0; c < 2; ++c)
    for (int mm = 0; mm < km::kPvTilesWide; ++mm) {
      std::vector<double> O(64 * kRows, 0.0);
      for (int s = 0; s < km::kPvSteps; ++s) {
        std::vector<double> A(64 * 16, NAN);
        for (int t = 0; t < 128; ++t) {
          const int load = ws.load_offset(c, t);
          if (load % 8 != 0 || load < 0 || load + 8 > km::kDv) return "PV wide: a load is not 8 aligned bytes of the values";
          for (int j = 0; j < 4; ++j)
            for (int lohi = 0; lohi < 2; ++lohi) {
              const int e = 2 * j + lohi, key = km::pv_key(s, t, j, lohi, true), byte = ws.reg_byte(mm, j);
              if (byte < 0 || byte >= 8) return "PV wide: a register's byte is outside the load";
              A[hw_a_row(t, e) * 16 + hw_a_col(t, e)] =
                  kestrel::fp8_e4m3_to_f32(tile[static_cast<size_t>(km::row_offset8(key) + load + byte)]);
            }
        }
        const uint64_t db = sm::k_desc(0, s);  // P^T as B: K-major (keys), N = 64 rows
        for (int n = 0; n < kRows; ++n)
          for (int k = 0; k < 16; ++k) {
            uint32_t a;
            if (!hw_addr(db, Major::k, n, k, a) || a + 2 > kSmem) return "PV wide: bad descriptor";
            uint16_t h;
            std::memcpy(&h, &smem[a], 2);
            const double b = kestrel::f16_to_f32(h);
            for (int m = 0; m < 64; ++m) O[m * kRows + n] += A[m * 16 + k] * b;
          }
      }
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < kRows / 2; ++i) {
          const int row = hw_d_row(t, i), n = hw_d_col(t, i), f = ws.feature(c, mm, row);
          if (f < 0 || f >= km::kDv) return "pv_wide_feature out of range";
          if (n == 0) ++covered[f];
          double want = 0;
          for (int key = 0; key < km::kKeys; ++key) want += P[n * km::kKeys + key] * V[key * km::kDqk + f];
          if (!(O[row * kRows + n] == want))
            return "PV wide: warpgroup " + std::to_string(c) + " m-tile " + std::to_string(mm) + " row " +
                   std::to_string(row) + " query " + std::to_string(n) + " is not O[n][" + std::to_string(f) + "]";
        }
    }
  for (int f = 0; f < km::kDv; ++f)
    if (covered[f] != 1) return "the warpgroups do not cover value feature " + std::to_string(f) + " exactly once";
  return "";
}

TEST(MlaAttentionKeysMLayout, WidePvMatchesTheHardwareModel) {
  for (uint64_t seed : {8u, 9u}) EXPECT_EQ(emulate_pv_wide(WideSide{}, seed), "") << "seed " << seed;
}

TEST(MlaAttentionKeysMLayout, WidePvPlantedBugsAreCaught) {
  std::vector<std::pair<const char*, WideSide>> bugs;
  WideSide b;
  b.load_offset = [](int c, int t) { return km::pv_wide_load_offset(1 - c, t); };
  bugs.emplace_back("the other warpgroup's features loaded", b);
  b = WideSide{};
  b.reg_byte = [](int mm, int j) { return km::pv_reg_byte(mm ^ 1, j); };
  bugs.emplace_back("m-tiles' bytes swapped", b);
  b = WideSide{};
  b.feature = [](int c, int mm, int row) { return km::pv_wide_feature(c, mm, row ^ 8); };
  bugs.emplace_back("output rows' halves swapped", b);
  b = WideSide{};
  b.p_half_bytes = 0;
  bugs.emplace_back("P^T's second half written over the first", b);
  for (const auto& [what, side] : bugs) EXPECT_NE(emulate_pv_wide(side, 10), "") << what;
}

// The wide PV's 8-byte loads: a half warp (16 lanes) is one wavefront when no two of its lanes
// touch the same 4-byte bank at different addresses; with the fast layout's blocks, its key order
// and pv_wide_unit each half warp covers the 32 banks once.
int worst_wide_pv_banks(const std::function<int(int, int)>& load_offset) {
  int worst = 0;
  for (int c = 0; c < 2; ++c)
    for (int s = 0; s < km::kPvSteps; ++s)
      for (int j = 0; j < 4; ++j)
        for (int lohi = 0; lohi < 2; ++lohi)
          for (int h0 = 0; h0 < 128; h0 += 16) {
            int count[32] = {};
            for (int t = h0; t < h0 + 16; ++t) {
              const int addr = km::row_offset8(km::pv_key(s, t, j, lohi, true)) + load_offset(c, t);
              ++count[(addr / 4) % 32];
              ++count[(addr / 4 + 1) % 32];
            }
            for (int n : count) worst = n > worst ? n : worst;
          }
  return worst;
}

TEST(MlaAttentionKeysMLayout, WidePvLoadsAreFreeOfBankConflicts) {
  EXPECT_EQ(worst_wide_pv_banks(km::pv_wide_load_offset), 1);
  // The unit order 8 w + g (the wide PV's before the blocks) on the blocks: 2-way.
  EXPECT_EQ(worst_wide_pv_banks([](int c, int t) { return 256 * c + 8 * (8 * (t / 32) + (t % 32) / 4); }), 2);
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
