// ldmatrix / ldmatrix.trans as the PTX ISA states them, a bf16 shared-memory image and the bank
// wavefronts of one 8-row matrix: the host side shared by the keys-as-M layout proofs whose A
// operands come from shared memory by ldmatrix (tests/ops/mla_attention_keys_m_bf16_layout_test.cpp,
// tests/ops/mla_attention_keys_m_bf16_wide_layout_test.cpp). Written from the ISA text, independent
// of any kernel header; the wgmma side is sm90_hw_model.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "testing/sm90_hw_model.h"

namespace kestrel::testing_util::sm90_hw {

// ldmatrix.x4: lane L receives in register j row L / 4, elements 2 (L % 4) and + 1 of matrix j,
// whose row r is the 16 bytes at the address lane 8 j + r gives; with .trans element
// (row 2 (L % 4) + h, column L / 4) instead. Returns the byte address of half h of register j of
// lane L. (stmatrix.trans is the same map in the other direction: stored matrix j's row r gets
// element e from lane 4 e + r / 2, half r % 2.)
inline uint32_t ldm_addr(const std::function<uint32_t(int)>& lane_addr, bool trans, int L, int j, int h) {
  if (!trans) return lane_addr(8 * j + L / 4) + 2 * (2 * (L % 4) + h);
  return lane_addr(8 * j + 2 * (L % 4) + h) + 2 * (L / 4);
}

// Shared memory as bf16 values, one per 2 bytes; NaN where nothing was written, so that a read of
// an unwritten element fails.
struct Smem {
  std::vector<uint16_t> bits;
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
inline int wavefronts(const std::function<uint32_t(int)>& lane_addr, int j) {
  int count[8] = {}, worst = 0;
  for (int r = 0; r < 8; ++r) ++count[(lane_addr(8 * j + r) / 16) % 8];
  for (int c : count) worst = c > worst ? c : worst;
  return worst;
}

// What an emulation found: the first error (empty if none) and the worst matrix's wavefronts.
struct LayoutResult {
  std::string error;
  int worst_wavefronts = 0;
};

// Warp w's 16 rows of a wgmma A operand [64][16] by one ldmatrix.x4 (trans or not) at the lanes'
// addresses: every value lands at its A element (hw_a_row, hw_a_col); the matrices' wavefronts go
// to res. False when a read leaves the written shared memory.
inline bool load_a(const Smem& smem, const std::function<uint32_t(int)>& lane_addr, bool trans, int w,
                   std::vector<double>& A, LayoutResult& res) {
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

}  // namespace kestrel::testing_util::sm90_hw
