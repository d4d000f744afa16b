// Host emulation of the planned wide bf16 keys-as-M kernel's products over one 64-key tile (64
// query rows per CTA; index maps and budget: src/ops/cuda/mla_attention_keys_m_bf16_wide_layout.h;
// no kernel uses them yet), with the hardware's side from the PTX ISA as in
// mla_attention_keys_m_bf16_layout_test.cpp (ldmatrix / ldmatrix.trans / stmatrix.trans as the
// ISA states them; wgmma's fragments and descriptor reads from tests/testing/sm90_hw_model.h):
//  - the tile as the tensor copies land it (128-byte swizzle, tile_offset), read at the kernel's
//    addresses (qk_unit, pv_unit), which must equal tile_offset's;
//  - QK (S^T = K Q^T, warpgroup c: rows 32 c .., N = 32): A by ldmatrix.x4, B = Q's 64-row chunks
//    through the descriptor (q_step_lo); the accumulators must hold K Q^T exactly;
//  - P^T by two stmatrix.x4.trans per warp, read back through PV's B descriptor (N = 64);
//  - PV (O^T = V^T P^T, warpgroup c: its 256 features, all 64 rows): A by ldmatrix.x4.trans; the
//    accumulators must hold (P V)[n][o_feature(...)] exactly, o_feature covering the 512 once;
//  - every ldmatrix / stmatrix matrix touches 8 distinct 16-byte bank groups (one wavefront).
// Integer-valued data (exact in bf16, sums exact in double). Each planted bug must be caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_keys_m_bf16_wide_layout.h"
#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "testing/sm90_hw_model.h"

namespace {

namespace kw = kestrel::ops::cuda::keys_m_bf16_wide;
namespace sm = kestrel::ops::cuda::sm90;
using namespace kestrel::testing_util::sm90_hw;

// The kernel side, replaceable for the planted bugs.
struct KernelSide {
  std::function<uint32_t(int, int)> tile_offset = kw::tile_offset;  // where the copies put (key, byte)
  std::function<int(int, int)> qk_key = kw::qk_key;
  std::function<int(int, int)> qk_byte = kw::qk_byte;
  std::function<uint32_t(int, int)> qk_unit = kw::qk_unit;
  std::function<int(int, int)> pv_key = kw::pv_key;
  std::function<int(int, int, int, int)> pv_feature = kw::pv_feature;
  std::function<uint32_t(int, int)> pv_unit = kw::pv_unit;
  std::function<int(int, int, int, int)> o_feature = kw::o_feature;
  std::function<int(int, int, int)> pt_row = kw::pt_row;
  std::function<int(int, int)> pt_key = kw::pt_key;
  std::function<uint32_t(int, int)> sw128 = kw::sw128;
  std::function<uint32_t(int)> q_step_lo = sm::q_step_lo;  // QK's B descriptor offset of k-step s
};

// ldmatrix.x4 (PTX ISA): lane L receives in register j row L / 4, elements 2 (L % 4) and + 1 of
// matrix j, whose row r is the 16 bytes at the address lane 8 j + r gives; with .trans element
// (row 2 (L % 4) + h, column L / 4) instead. The byte address of half h of register j of lane L.
uint32_t ldm_addr(const std::function<uint32_t(int)>& lane_addr, bool trans, int L, int j, int h) {
  if (!trans) return lane_addr(8 * j + L / 4) + 2 * (2 * (L % 4) + h);
  return lane_addr(8 * j + 2 * (L % 4) + h) + 2 * (L / 4);
}

struct Smem {
  std::vector<uint16_t> bits;  // bf16 bits, one per 2 bytes; NaN where nothing was written
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

// The wavefronts of one 8-row matrix (16 bytes a row): the most rows sharing a 16-byte group.
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

// Warp w's 16 rows of a wgmma A operand [64][16] by one ldmatrix.x4 at the lanes' addresses.
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
  constexpr int kKeys = kw::kKeys, kRows = kw::kRows, kWgRows = kw::kWgRows, kDqk = kw::kDqk, kDv = kw::kDv;
  std::vector<double> KV(kKeys * kDqk), Q(kRows * kDqk), P(kRows * kKeys);
  for (auto& x : KV) x = val(rng);
  for (auto& x : Q) x = val(rng);
  for (auto& x : P) x = val(rng);  // P^T's values (any integers: the layout, not the softmax)

  // Shared memory as the budget lays it out: Q, two stages (the tile in the first), P^T.
  const uint32_t q_base = kw::kOffQ, tile = kw::kOffStages, pt_base = kw::kOffPt;
  Smem smem(kw::kOffSmall);
  Result res;
  const auto fail = [&](std::string e) {
    res.error = std::move(e);
    return res;
  };
  for (int k = 0; k < kKeys; ++k)
    for (int f = 0; f < kDqk; ++f)
      if (!smem.put(tile + ks.tile_offset(k, 2 * f), KV[k * kDqk + f])) return fail("tile outside shared memory");
  for (int n = 0; n < kRows; ++n)
    for (int f = 0; f < kDqk; ++f)
      if (!smem.put(q_base + ks.sw128(n, f), Q[n * kDqk + f])) return fail("Q outside shared memory");

  for (int c = 0; c < 2; ++c) {
    // ---- QK: S^T[key][n] for rows 32 c + n, n < 32.
    std::vector<double> D(kKeys * kWgRows, 0.0);
    for (int s = 0; s < kw::kQkSteps; ++s) {
      std::vector<double> A(kKeys * 16, NAN);
      for (int w = 0; w < 4; ++w) {
        const auto lane_addr = [&](int l) {
          return tile + ks.qk_key(w, l) * 128 + ks.qk_unit(s % 4, l) + (s / 4) * kw::kChunkBytes;
        };
        for (int l = 0; l < 32; ++l)
          if (lane_addr(l) != tile + ks.tile_offset(ks.qk_key(w, l), ks.qk_byte(s, l))) return fail("QK: qk_unit is not tile_offset");
        if (!load_a(smem, lane_addr, false, w, A, res)) return fail("QK: A read outside the tile");
      }
      const uint64_t db = sm::desc_of(sm::sw128_lo(q_base + c * kWgRows * 128) + ks.q_step_lo(s));
      for (int n = 0; n < kWgRows; ++n)
        for (int k = 0; k < 16; ++k) {
          uint32_t a;
          double b;
          if (!hw_addr(db, Major::k, n, k, a) || !smem.get(a, b)) return fail("QK: bad B descriptor");
          for (int m = 0; m < kKeys; ++m) D[m * kWgRows + n] += A[m * 16 + k] * b;
        }
    }
    for (int key = 0; key < kKeys; ++key)
      for (int n = 0; n < kWgRows; ++n) {
        double want = 0;
        for (int f = 0; f < kDqk; ++f) want += KV[key * kDqk + f] * Q[(kWgRows * c + n) * kDqk + f];
        if (D[key * kWgRows + n] != want)
          return fail("QK: S^T[" + std::to_string(key) + "][" + std::to_string(n) + "] of warpgroup " + std::to_string(c));
      }

    // ---- P^T by two stmatrix.x4.trans per warp: accumulator register i of thread t (D fragment,
    // N = 32) holds P at (key hw_d_row, row 32 c + hw_d_col); register j of call h packs
    // i = 4 (2 h + j / 2) + 2 (j % 2) and i + 1. Stored matrix j's row r (lane 8 j + r's address)
    // gets element e from lane 4 e + r / 2, half r % 2 (the transpose of the fragment).
    for (int w = 0; w < 4; ++w)
      for (int h = 0; h < 2; ++h) {
        const auto lane_addr = [&](int l) { return pt_base + ks.sw128(ks.pt_row(c, h, l), ks.pt_key(w, l)); };
        for (int j = 0; j < 4; ++j) {
          res.worst_wavefronts = std::max(res.worst_wavefronts, wavefronts(lane_addr, j));
          for (int r = 0; r < 8; ++r)
            for (int e = 0; e < 8; ++e) {
              const int t = 32 * w + 4 * e + r / 2, i = 4 * (2 * h + j / 2) + 2 * (j % 2) + r % 2;
              const int key = hw_d_row(t, i), n = kWgRows * c + hw_d_col(t, i);
              if (lane_addr(8 * j + r) + 2 * e >= static_cast<uint32_t>(pt_base + kw::kPtBytes))
                return fail("P^T store past its buffer");
              if (!smem.put(lane_addr(8 * j + r) + 2 * e, P[n * kKeys + key])) return fail("P^T store outside");
            }
        }
      }
  }

  // ---- PV: O^T[feature][n] over 4 k-steps, per warpgroup and m-tile, N = all 64 rows.
  std::vector<int> seen(kDv, 0);
  for (int c = 0; c < 2; ++c)
    for (int mm = 0; mm < kw::kPvTiles; ++mm) {
      std::vector<double> O(64 * kRows, 0.0);
      for (int s = 0; s < kw::kPvSteps; ++s) {
        std::vector<double> A(64 * 16, NAN);
        for (int w = 0; w < 4; ++w) {
          const auto lane_addr = [&](int l) {
            return tile + (4 * c + mm) * kw::kChunkBytes + ks.pv_key(0, l) * 128 + ks.pv_unit(w, l) + s * 16 * 128;
          };
          for (int l = 0; l < 32; ++l)
            if (lane_addr(l) != tile + ks.tile_offset(ks.pv_key(s, l), 2 * ks.pv_feature(c, mm, w, l)))
              return fail("PV: pv_unit is not tile_offset");
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
        for (int i = 0; i < 32; ++i) {  // m64n64: 32 accumulators a thread
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

TEST(MlaAttentionKeysMBf16WideLayout, ProductsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) {
    const Result r = emulate(KernelSide{}, seed);
    EXPECT_EQ(r.error, "") << "seed " << seed;
    EXPECT_EQ(r.worst_wavefronts, 1) << "every ldmatrix / stmatrix matrix in one wavefront";
  }
}

TEST(MlaAttentionKeysMBf16WideLayout, TheBudgetFitsWithoutSlack) {
  EXPECT_EQ(kw::kOffStages, 73728);
  EXPECT_EQ(kw::kOffPt, 73728 + 2 * 73728);
  EXPECT_LE(kw::kSmemBytes, kw::kSmemMax);
  EXPECT_GT(kw::kSmemBytes + 1024, kw::kSmemMax) << "the 1,024-byte alignment slack of today's kernels would not fit";
}

// Without the swizzle (the copies' layout and the kernel's units unswizzled alike) the products
// hold, and every ldmatrix matrix of the tile is 8 wavefronts: dense 1,152-byte rows need it.
TEST(MlaAttentionKeysMBf16WideLayout, UnswizzledTileConflicts) {
  KernelSide plain;
  plain.tile_offset = [](int key, int byte) { return static_cast<uint32_t>((byte / 128) * kw::kChunkBytes + key * 128 + byte % 128); };
  plain.qk_unit = [](int ks4, int lane) { return static_cast<uint32_t>((2 * ks4 + lane / 16) * 16); };
  plain.pv_unit = [](int w, int lane) { return static_cast<uint32_t>((2 * w + (lane / 8) % 2) * 16); };
  const Result r = emulate(plain, 3);
  EXPECT_EQ(r.error, "") << "the products do not depend on the swizzle";
  EXPECT_EQ(r.worst_wavefronts, 8) << "8 rows of a matrix in one bank group";
}

TEST(MlaAttentionKeysMBf16WideLayout, PlantedBugsAreCaught) {
  const auto caught = [](const KernelSide& ks, const char* what) { EXPECT_NE(emulate(ks, 4).error, "") << what; };
  KernelSide k;
  k.qk_unit = [](int ks4, int lane) { return static_cast<uint32_t>(((2 * ks4 + (lane / 8) % 2) ^ (lane % 8)) * 16); };
  caught(k, "QK units: halves from the wrong lanes");
  k = KernelSide{};
  k.pv_unit = [](int w, int lane) { return static_cast<uint32_t>(((2 * w + lane / 16) ^ (lane % 8)) * 16); };
  caught(k, "PV units: halves from the wrong lanes");
  k = KernelSide{};
  k.q_step_lo = sm::k_step_lo;  // 32-row chunks: the 32-row kernel's Q stride
  caught(k, "Q's k-steps with the 32-row chunk stride");
  k = KernelSide{};
  k.pt_row = [](int c, int h, int lane) { return 32 * c + 8 * (h + 2 * ((lane / 8) / 2)) + lane % 8; };
  caught(k, "P^T rows: the two stores' row groups interleaved");
  k = KernelSide{};
  k.pt_row = [](int c, int h, int lane) { return 16 * c + 8 * (2 * h + (lane / 8) / 2) + lane % 8; };
  caught(k, "P^T rows: the 32-row kernel's warpgroup offset");
  k = KernelSide{};
  k.sw128 = [](int n, int col) { return static_cast<uint32_t>((col / 64) * 32 * 128 + n * 128 + ((((col % 64) / 8) ^ (n % 8)) * 16) + (col % 8) * 2); };
  caught(k, "Q and P^T with the 32-row chunk stride");
  k = KernelSide{};
  k.o_feature = [](int c, int mm, int t, int i) { return 256 * c + 64 * mm + 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 4) % 2); };
  caught(k, "o features from the column bit");
}

}  // namespace
