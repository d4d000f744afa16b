// Host emulation of the bf16-cache keys-as-M products of one 64-key tile (the kernel:
// src/ops/cuda/mla_attention_keys_m_bf16.cu; its index maps: mla_attention_keys_m_bf16_layout.h),
// with the hardware's side from the PTX ISA: ldmatrix / ldmatrix.trans / stmatrix.trans as the
// ISA states them (below), wgmma's A and D fragments and descriptor reads from
// tests/testing/sm90_hw_model.h.
//  - QK (S^T = K Q^T, per warpgroup c: its 16 query rows): A by ldmatrix.x4 of the key rows, B =
//    Q rows 16 c .. through the descriptor; the accumulators must hold K Q^T exactly;
//  - P^T by stmatrix.x4.trans of the accumulators, read back through PV's B descriptor;
//  - PV (O^T = V^T P^T, warpgroup c: its 256 features, all 32 rows): A by ldmatrix.x4.trans; the
//    accumulator must hold (P V)[n][o_feature(...)] exactly, o_feature covering the 512 once;
//  - every ldmatrix / stmatrix matrix touches 8 distinct 16-byte bank groups (one wavefront).
// Integer-valued data (exact in bf16, sums exact in double): a misplaced element shows. Each
// planted bug must make the emulation fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_keys_m_bf16_layout.h"
#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "testing/sm90_hw_model.h"

namespace {

namespace kmb = kestrel::ops::cuda::keys_m_bf16;
namespace sm = kestrel::ops::cuda::sm90;
using namespace kestrel::testing_util::sm90_hw;

// The kernel side, replaceable for the planted bugs.
struct KernelSide {
  int row_bytes = kmb::kRowBytes;
  std::function<int(int, int)> qk_key = kmb::qk_key;
  std::function<int(int, int)> qk_byte = kmb::qk_byte;
  std::function<int(int, int)> pv_key = kmb::pv_key;
  std::function<int(int, int, int, int)> pv_feature = kmb::pv_feature;
  std::function<int(int, int, int, int)> o_feature = kmb::o_feature;
  std::function<int(int, int)> pt_row = kmb::pt_row;
  std::function<int(int, int)> pt_key = kmb::pt_key;
  std::function<uint32_t(int, int)> sw128 = kmb::sw128;
};

// ldmatrix.x4 (PTX ISA, "ldmatrix"): lane L receives in register j row L / 4, elements 2 (L % 4)
// and + 1 of matrix j, whose row r is the 16 bytes at the address lane 8 j + r gives; with .trans
// element (row 2 (L % 4) + h, column L / 4) instead. Returns the byte address of half h of
// register j of lane L.
uint32_t ldm_addr(const std::function<uint32_t(int)>& lane_addr, bool trans, int L, int j, int h) {
  if (!trans) return lane_addr(8 * j + L / 4) + 2 * (2 * (L % 4) + h);
  return lane_addr(8 * j + 2 * (L % 4) + h) + 2 * (L / 4);
}

struct Smem {
  std::vector<uint16_t> bits;  // bf16 bits, one per 2 bytes
  explicit Smem(size_t bytes) : bits(bytes / 2, 0xFFFF) {}
  bool get(uint32_t addr, double& v) const {
    if (addr % 2 != 0 || addr / 2 >= bits.size()) return false;
    v = bf16_value(bits[addr / 2]);
    return !std::isnan(v);
  }
  bool put(uint32_t addr, double v) {
    if (addr % 2 != 0 || addr / 2 >= bits.size()) return false;
    bits[addr / 2] = bf16_bits(static_cast<float>(v));
    return true;
  }
};

// The wavefronts of one 8-row matrix (16 bytes a row): the most rows that share a 16-byte group of
// the 128-byte bank line.
int wavefronts(const std::function<uint32_t(int)>& lane_addr, int j) {
  int count[8] = {}, worst = 0;
  for (int r = 0; r < 8; ++r) ++count[(lane_addr(8 * j + r) / 16) % 8];
  for (int c : count) worst = c > worst ? c : worst;
  return worst;
}

struct Result {
  std::string error;
  int worst_wavefronts = 0;
};

// Warp w's 16 rows of a wgmma A operand [64][16] by one ldmatrix.x4 (trans or not) at the lanes'
// addresses: every value lands at its A element (hw_a_row, hw_a_col); the matrices' wavefronts
// go to res. False when a read leaves the written shared memory.
bool load_a(const Smem& smem, const std::function<uint32_t(int)>& lane_addr, bool trans, int w, std::vector<double>& A,
            Result& res) {
  for (int j = 0; j < 4; ++j) res.worst_wavefronts = std::max(res.worst_wavefronts, wavefronts(lane_addr, j));
  for (int L = 0; L < 32; ++L)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        double v;
        if (!smem.get(ldm_addr(lane_addr, trans, L, j, h), v)) return false;
        const int t = 32 * w + L, e = 2 * j + h;
        A[hw_a_row(t, e) * 16 + hw_a_col(t, e)] = v;
      }
  return true;
}

Result emulate(const KernelSide& ks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4);
  constexpr int kKeys = kmb::kKeys, kRows = kmb::kRows, kDqk = kmb::kDqk, kDv = kmb::kDv;
  std::vector<double> KV(kKeys * kDqk), Q(kRows * kDqk), P(kRows * kKeys);
  for (auto& x : KV) x = val(rng);
  for (auto& x : Q) x = val(rng);
  for (auto& x : P) x = val(rng);  // P^T's values (any integers: the layout, not the softmax)

  // Shared memory: Q [9 chunks][32][128 B] at 0, P^T [32][128 B] at 36,864, the tile at 40,960.
  constexpr uint32_t q_base = 0, pt_base = 36864, tile = 40960;
  Smem smem(tile + kKeys * static_cast<uint32_t>(ks.row_bytes) + 64);
  Result res;
  const auto fail = [&](std::string e) {
    res.error = std::move(e);
    return res;
  };
  for (int k = 0; k < kKeys; ++k)
    for (int f = 0; f < kDqk; ++f)
      if (!smem.put(tile + k * ks.row_bytes + 2 * f, KV[k * kDqk + f])) return fail("tile outside shared memory");
  for (int n = 0; n < kRows; ++n)
    for (int f = 0; f < kDqk; ++f) smem.put(q_base + ks.sw128(n, f), Q[n * kDqk + f]);

  for (int c = 0; c < 2; ++c) {
    // ---- QK: S^T[key][n] for rows 16 c + n, n < 16.
    std::vector<double> D(kKeys * kmb::kWgRows, 0.0);
    for (int s = 0; s < kmb::kQkSteps; ++s) {
      std::vector<double> A(kKeys * 16, NAN);
      for (int w = 0; w < 4; ++w) {
        const auto lane_addr = [&](int l) { return tile + ks.qk_key(w, l) * ks.row_bytes + ks.qk_byte(s, l); };
        if (!load_a(smem, lane_addr, false, w, A, res)) return fail("QK: A read outside the tile");
      }
      const uint64_t db = sm::desc_of(sm::sw128_lo(q_base + c * kmb::kWgRows * 128) + sm::k_step_lo(s));
      for (int n = 0; n < kmb::kWgRows; ++n)
        for (int k = 0; k < 16; ++k) {
          uint32_t a;
          double b;
          if (!hw_addr(db, Major::k, n, k, a) || !smem.get(a, b)) return fail("QK: bad B descriptor");
          for (int m = 0; m < kKeys; ++m) D[m * kmb::kWgRows + n] += A[m * 16 + k] * b;
        }
    }
    for (int key = 0; key < kKeys; ++key)
      for (int n = 0; n < kmb::kWgRows; ++n) {
        double want = 0;
        for (int f = 0; f < kDqk; ++f) want += KV[key * kDqk + f] * Q[(16 * c + n) * kDqk + f];
        if (D[key * kmb::kWgRows + n] != want)
          return fail("QK: S^T[" + std::to_string(key) + "][" + std::to_string(n) + "] of warpgroup " + std::to_string(c));
      }

    // ---- P^T by stmatrix.x4.trans: accumulator register i of thread t (D fragment, N = 16)
    // holds P at (key hw_d_row, row 16 c + hw_d_col); register j packs i = 4 (j / 2) + 2 (j % 2)
    // and i + 1. Stored matrix j's row r (lane 8 j + r's address) gets element e from lane
    // 4 e + r / 2, half r % 2 (the transpose of the fragment).
    for (int w = 0; w < 4; ++w) {
      const auto lane_addr = [&](int l) { return pt_base + ks.sw128(ks.pt_row(c, l), ks.pt_key(w, l)); };
      for (int j = 0; j < 4; ++j) {
        res.worst_wavefronts = std::max(res.worst_wavefronts, wavefronts(lane_addr, j));
        for (int r = 0; r < 8; ++r)
          for (int e = 0; e < 8; ++e) {
            const int t = 32 * w + 4 * e + r / 2, i = 4 * (j / 2) + 2 * (j % 2) + r % 2;
            const int key = hw_d_row(t, i), n = 16 * c + hw_d_col(t, i);
            if (!smem.put(lane_addr(8 * j + r) + 2 * e, P[n * kKeys + key])) return fail("P^T store outside");
          }
      }
    }
  }

  // ---- PV: O^T[feature][n] over 4 k-steps, per warpgroup and m-tile.
  std::vector<int> seen(kDv, 0);
  for (int c = 0; c < 2; ++c)
    for (int mm = 0; mm < kmb::kPvTiles; ++mm) {
      std::vector<double> O(64 * kRows, 0.0);
      for (int s = 0; s < kmb::kPvSteps; ++s) {
        std::vector<double> A(64 * 16, NAN);
        for (int w = 0; w < 4; ++w) {
          const auto lane_addr = [&](int l) {
            return tile + ks.pv_key(s, l) * ks.row_bytes + 2 * ks.pv_feature(c, mm, w, l);
          };
          if (!load_a(smem, lane_addr, true, w, A, res)) return fail("PV: A read outside the tile");
        }
        const uint64_t db = sm::desc_of(sm::sw128_lo(pt_base) + sm::k_step_lo(s));
        for (int n = 0; n < kRows; ++n)
          for (int k = 0; k < 16; ++k) {
            uint32_t a;
            double b;
            if (!hw_addr(db, Major::k, n, k, a) || !smem.get(a, b)) return fail("PV: bad B descriptor (P^T)");
            for (int m = 0; m < 64; ++m) O[m * kRows + n] += A[m * 16 + k] * b;
          }
      }
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < 16; ++i) {
          const int f = ks.o_feature(c, mm, t, i), n = hw_d_col(t, i);
          if (f < 0 || f >= kDv) return fail("o_feature out of range");
          if (n == 0) ++seen[static_cast<size_t>(f)];
          double want = 0;
          for (int key = 0; key < kKeys; ++key) want += KV[key * kDqk + f] * P[n * kKeys + key];
          if (O[hw_d_row(t, i) * kRows + n] != want)
            return fail("PV: O^T of feature " + std::to_string(f) + " row " + std::to_string(n));
        }
    }
  for (int f = 0; f < kDv; ++f)
    if (seen[static_cast<size_t>(f)] != 1) return fail("o_feature does not cover feature " + std::to_string(f) + " once");
  return res;
}

TEST(MlaAttentionKeysMBf16Layout, ProductsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) {
    const Result r = emulate(KernelSide{}, seed);
    EXPECT_EQ(r.error, "") << "seed " << seed;
    EXPECT_EQ(r.worst_wavefronts, 1) << "every ldmatrix / stmatrix matrix in one wavefront";
  }
}

TEST(MlaAttentionKeysMBf16Layout, DenseRowsConflict) {
  KernelSide dense;
  dense.row_bytes = kmb::kCacheRowBytes;  // 1,152: every row at one address mod 128
  const Result r = emulate(dense, 3);
  EXPECT_EQ(r.error, "") << "the products do not depend on the row pitch";
  EXPECT_EQ(r.worst_wavefronts, 8) << "8 rows of a matrix in one bank group";
}

TEST(MlaAttentionKeysMBf16Layout, PlantedBugsAreCaught) {
  const auto caught = [](const KernelSide& ks, const char* what) { EXPECT_NE(emulate(ks, 4).error, "") << what; };
  KernelSide k;
  k.qk_key = [](int w, int lane) { return 16 * w + lane % 8 + 8 * (lane / 16); };  // halves swapped with bytes
  caught(k, "QK keys");
  k = KernelSide{};
  k.qk_byte = [](int s, int lane) { return 32 * s + 16 * ((lane / 8) % 2); };
  caught(k, "QK bytes");
  k = KernelSide{};
  k.pv_key = [](int s, int lane) { return 16 * s + lane % 8 + 8 * ((lane / 8) % 2); };
  caught(k, "PV keys");
  k = KernelSide{};
  k.pv_feature = [](int c, int mm, int w, int lane) { return 256 * c + 64 * mm + 16 * w + 8 * (lane / 16); };
  caught(k, "PV features");
  k = KernelSide{};
  k.o_feature = [](int c, int mm, int t, int i) { return 256 * c + 64 * mm + 16 * (t / 32) + (t % 32) / 4 + 8 * (i % 2); };
  caught(k, "o features");
  k = KernelSide{};
  k.pt_row = [](int c, int lane) { return 16 * c + 8 * ((lane / 8) % 2) + lane % 8; };
  caught(k, "P^T rows");
  k = KernelSide{};
  k.pt_key = [](int w, int lane) { return 16 * w + 8 * ((lane / 8) / 2); };
  caught(k, "P^T keys");
  k = KernelSide{};
  k.sw128 = [](int n, int col) { return static_cast<uint32_t>((col / 64) * 32 * 128 + n * 128 + (col % 64) * 2); };
  caught(k, "Q and P^T without the swizzle");
}

}  // namespace
