// Host emulation of the bf16 keys-as-M products over one 64-key tile, for any query-row count
// the kernels use (the 32-row kernel, src/ops/cuda/mla_attention_keys_m_bf16.cu; the planned 64-row
// one, src/ops/cuda/mla_attention_keys_m_bf16_wide_layout.h), with the hardware's side from the
// PTX ISA (sm90_ldmatrix_model.h, sm90_hw_model.h):
//  - the tile where the copies put it (tile_offset), read at the kernel's addresses (qk_addr,
//    pv_addr), which must equal tile_offset's for the elements they stand for;
//  - QK (S^T = K Q^T, warpgroup c: rows wg_rows c .., N = wg_rows): A by ldmatrix.x4, B = Q rows
//    through the descriptor (Q stored by sw128, k-steps by q_step_lo); the accumulators must hold
//    K Q^T exactly;
//  - P^T by pt_calls stmatrix.x4.trans per warp (call h: accumulator groups 2 h, 2 h + 1), read
//    back through PV's B descriptor;
//  - PV (O^T = V^T P^T, warpgroup c: its 256 features, N = all rows): A by ldmatrix.x4.trans; the
//    accumulators must hold (P V)[n][o_feature(...)] exactly, o_feature covering the 512 once;
//  - the wavefronts of every ldmatrix / stmatrix matrix.
// Integer-valued data (exact in bf16, sums exact in double): a misplaced element shows. The
// tests plant bugs in the kernel side's maps and expect the emulation to fail.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "testing/sm90_hw_model.h"
#include "testing/sm90_ldmatrix_model.h"

namespace kestrel::testing_util::keys_m_bf16_emulation {

using namespace sm90_hw;

constexpr int kKeys = 64, kDqk = 576, kDv = 512, kQkSteps = kDqk / 16, kPvSteps = kKeys / 16, kPvTiles = 4;

// The kernel's side: its geometry and index maps, each replaceable for a planted bug. The address
// maps take the side itself, so that a bug planted in a primitive (qk_key, ...) reaches them.
struct KernelSide {
  int rows = 32, wg_rows = 16, pt_calls = 1;  // query rows per CTA, per warpgroup in QK; stores a warp
  std::function<uint32_t(int, int)> tile_offset;  // where the copies put byte `byte` of key `key`
  std::function<uint32_t(const KernelSide&, int, int, int)> qk_addr;           // (w, ks, lane)
  std::function<uint32_t(const KernelSide&, int, int, int, int, int)> pv_addr;  // (c, mm, w, ks, lane)
  std::function<int(int, int)> qk_key, qk_byte, pv_key;
  std::function<int(int, int, int, int)> pv_feature, o_feature;
  std::function<int(int, int, int)> pt_row;  // (c, h, lane)
  std::function<int(int, int)> pt_key;
  std::function<uint32_t(int, int)> sw128;     // Q and P^T: element (row, column)
  std::function<uint32_t(int)> q_step_lo;      // QK's B descriptor offset of k-step s (>> 4)
};

inline LayoutResult emulate(const KernelSide& ks, uint64_t seed) {
  namespace sm = kestrel::ops::cuda::sm90;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4);
  const int rows = ks.rows, wg = ks.wg_rows;
  std::vector<double> KV(kKeys * kDqk), Q(static_cast<size_t>(rows) * kDqk), P(static_cast<size_t>(rows) * kKeys);
  for (auto& x : KV) x = val(rng);
  for (auto& x : Q) x = val(rng);
  for (auto& x : P) x = val(rng);  // P^T's values (any integers: the layout, not the softmax)

  // Shared memory: Q [9 chunks][rows][128 B] at 0, P^T [rows][128 B] after it, the tile after that
  // (1,024-aligned), 80 KB of room.
  const uint32_t q_base = 0, pt_base = static_cast<uint32_t>(9 * rows * 128),
                 tile = pt_base + static_cast<uint32_t>(rows * 128), pt_end = tile;
  Smem smem(tile + 80 * 1024);
  LayoutResult res;
  const auto fail = [&](std::string e) {
    res.error = std::move(e);
    return res;
  };
  for (int k = 0; k < kKeys; ++k)
    for (int f = 0; f < kDqk; ++f)
      if (!smem.put(tile + ks.tile_offset(k, 2 * f), KV[k * kDqk + f])) return fail("tile outside shared memory");
  for (int n = 0; n < rows; ++n)
    for (int f = 0; f < kDqk; ++f)
      if (!smem.put(q_base + ks.sw128(n, f), Q[n * kDqk + f])) return fail("Q outside shared memory");

  for (int c = 0; c < 2; ++c) {
    // ---- QK: S^T[key][n] for rows wg c + n, n < wg.
    std::vector<double> D(static_cast<size_t>(kKeys) * wg, 0.0);
    for (int s = 0; s < kQkSteps; ++s) {
      std::vector<double> A(kKeys * 16, NAN);
      for (int w = 0; w < 4; ++w) {
        const auto lane_addr = [&](int l) { return tile + ks.qk_addr(ks, w, s, l); };
        for (int l = 0; l < 32; ++l)
          if (lane_addr(l) != tile + ks.tile_offset(ks.qk_key(w, l), ks.qk_byte(s, l))) return fail("QK: the kernel's address is not tile_offset");
        if (!load_a(smem, lane_addr, false, w, A, res)) return fail("QK: A read outside the tile");
      }
      const uint64_t db = sm::desc_of(sm::sw128_lo(q_base + static_cast<uint32_t>(c * wg * 128)) + ks.q_step_lo(s));
      for (int n = 0; n < wg; ++n)
        for (int k = 0; k < 16; ++k) {
          uint32_t a;
          double b;
          if (!hw_addr(db, Major::k, n, k, a) || !smem.get(a, b)) return fail("QK: bad B descriptor");
          for (int m = 0; m < kKeys; ++m) D[m * wg + n] += A[m * 16 + k] * b;
        }
    }
    for (int key = 0; key < kKeys; ++key)
      for (int n = 0; n < wg; ++n) {
        double want = 0;
        for (int f = 0; f < kDqk; ++f) want += KV[key * kDqk + f] * Q[(wg * c + n) * kDqk + f];
        if (D[key * wg + n] != want)
          return fail("QK: S^T[" + std::to_string(key) + "][" + std::to_string(n) + "] of warpgroup " + std::to_string(c));
      }

    // ---- P^T by stmatrix.x4.trans: accumulator register i of thread t (D fragment, N = wg)
    // holds P at (key hw_d_row, row wg c + hw_d_col); register j of call h packs
    // i = 4 (2 h + j / 2) + 2 (j % 2) and i + 1. Stored matrix j's row r (lane 8 j + r's address)
    // gets element e from lane 4 e + r / 2, half r % 2 (the transpose of the fragment).
    for (int w = 0; w < 4; ++w)
      for (int h = 0; h < ks.pt_calls; ++h) {
        const auto lane_addr = [&](int l) { return pt_base + ks.sw128(ks.pt_row(c, h, l), ks.pt_key(w, l)); };
        for (int j = 0; j < 4; ++j) {
          res.worst_wavefronts = std::max(res.worst_wavefronts, wavefronts(lane_addr, j));
          for (int r = 0; r < 8; ++r)
            for (int e = 0; e < 8; ++e) {
              const int t = 32 * w + 4 * e + r / 2, i = 4 * (2 * h + j / 2) + 2 * (j % 2) + r % 2;
              const int key = hw_d_row(t, i), n = wg * c + hw_d_col(t, i);
              const uint32_t at = lane_addr(8 * j + r) + 2 * e;
              if (at < pt_base || at >= pt_end || !smem.put(at, P[n * kKeys + key])) return fail("P^T store outside its buffer");
            }
        }
      }
  }

  // ---- PV: O^T[feature][n] over 4 k-steps, per warpgroup and m-tile, N = all rows.
  std::vector<int> seen(kDv, 0);
  for (int c = 0; c < 2; ++c)
    for (int mm = 0; mm < kPvTiles; ++mm) {
      std::vector<double> O(static_cast<size_t>(64) * rows, 0.0);
      for (int s = 0; s < kPvSteps; ++s) {
        std::vector<double> A(64 * 16, NAN);
        for (int w = 0; w < 4; ++w) {
          const auto lane_addr = [&](int l) { return tile + ks.pv_addr(ks, c, mm, w, s, l); };
          for (int l = 0; l < 32; ++l)
            if (lane_addr(l) != tile + ks.tile_offset(ks.pv_key(s, l), 2 * ks.pv_feature(c, mm, w, l)))
              return fail("PV: the kernel's address is not tile_offset");
          if (!load_a(smem, lane_addr, true, w, A, res)) return fail("PV: A read outside the tile");
        }
        const uint64_t db = sm::desc_of(sm::sw128_lo(pt_base) + sm::k_step_lo(s));
        for (int n = 0; n < rows; ++n)
          for (int k = 0; k < 16; ++k) {
            uint32_t a;
            double b;
            if (!hw_addr(db, Major::k, n, k, a) || !smem.get(a, b)) return fail("PV: bad B descriptor (P^T)");
            for (int m = 0; m < 64; ++m) O[m * rows + n] += A[m * 16 + k] * b;
          }
      }
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < rows / 2; ++i) {  // m64nN: N / 2 accumulators a thread
          const int f = ks.o_feature(c, mm, t, i), n = hw_d_col(t, i);
          if (f < 0 || f >= kDv) return fail("o_feature out of range");
          if (n == 0) ++seen[static_cast<size_t>(f)];
          double want = 0;
          for (int key = 0; key < kKeys; ++key) want += KV[key * kDqk + f] * P[n * kKeys + key];
          if (O[hw_d_row(t, i) * rows + n] != want)
            return fail("PV: O^T of feature " + std::to_string(f) + " row " + std::to_string(n));
        }
    }
  for (int f = 0; f < kDv; ++f)
    if (seen[static_cast<size_t>(f)] != 1) return fail("o_feature does not cover feature " + std::to_string(f) + " once");
  return res;
}

}  // namespace kestrel::testing_util::keys_m_bf16_emulation
