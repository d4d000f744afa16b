// A model of the Hopper wgmma operand hardware, written from the PTX ISA text and independent
// of any kernel header, for the host emulations of the sm90 kernels' layouts
// (tests/ops/mla_attention_sm90_layout_test.cpp, tests/ops/mla_attention_keys_m_layout_test.cpp):
// the shared-memory address of an operand element read through a 64-bit matrix descriptor, the
// register fragment maps of .m64nNk16 (A from registers, accumulator D) and of .m64nNk32's 8-bit
// A, bf16 / f16 bits of integer-valued test data (f16 and e4m3: kestrel/core/convert.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace kestrel::testing_util::sm90_hw {

enum class Major { k, mn };

struct Desc {
  uint32_t start, lbo, sbo, base_offset, swizzle;
};
inline Desc decode(uint64_t d) {
  return Desc{static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
              static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<uint32_t>((d >> 49) & 7),
              static_cast<uint32_t>(d >> 62)};
}

// Byte address of 16-bit (bf16 / f16) operand element (mn, k), k in [0, 16), of a wgmma .k16
// operand with a 128-byte swizzle, or K-major without one (any other mode is reported as a failure).
//   K-major : ((8,m),(T,2k)) : ((8T,SBO),(1,T))
//   MN-major: ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))
// offsets in elements (strides SBO, LBO given in bytes, so / 2), T = 8; then Swizzle<3,4,3> on
// the byte address.
inline bool hw_addr(uint64_t desc, Major major, int mn, int k, uint32_t& addr) {
  const Desc d = decode(desc);
  if (d.swizzle == 0 && major == Major::k && d.base_offset == 0) {
    // No swizzle (interleave), K-major: ((8,m),(T,2k)) : ((T,SBO),(1,LBO)), T = 8 values; no
    // address permutation. (The kernel uses it only for P read as the A operand.)
    const uint64_t el = static_cast<uint64_t>(mn % 8) * 8 + static_cast<uint64_t>(mn / 8) * (d.sbo / 2) + (k % 8) +
                        static_cast<uint64_t>(k / 8) * (d.lbo / 2);
    addr = d.start + static_cast<uint32_t>(2 * el);
    return true;
  }
  if (d.swizzle != 1 || d.base_offset != 0) return false;
  uint64_t el;
  if (major == Major::k) {
    el = static_cast<uint64_t>(mn % 8) * 64 + static_cast<uint64_t>(mn / 8) * (d.sbo / 2) + (k % 8) + (k / 8) * 8;
  } else {
    el = static_cast<uint64_t>(mn % 8) + static_cast<uint64_t>((mn / 8) % 8) * 8 + static_cast<uint64_t>(mn / 64) * (d.lbo / 2) +
         static_cast<uint64_t>(k % 8) * 64 + static_cast<uint64_t>(k / 8) * (d.sbo / 2);
  }
  const uint32_t a = d.start + static_cast<uint32_t>(2 * el);
  addr = a ^ (((a >> 7) & 7u) << 4);
  return true;
}

// Byte address of 8-bit (e4m3) operand element (mn, k), k in [0, 32), of a wgmma .k32 operand,
// K-major with a 128-byte swizzle (the only 8-bit form: 8-bit operands cannot be MN-major):
// ((8,m),(T,2k)) : ((8T,SBO),(1,T)) with T = 16 values, i.e. the 16-bit form in bytes.
inline bool hw_addr8(uint64_t desc, int mn, int k, uint32_t& addr) {
  const Desc d = decode(desc);
  if (d.swizzle != 1 || d.base_offset != 0) return false;
  const uint32_t a = d.start + static_cast<uint32_t>((mn % 8) * 128 + (mn / 8) * d.sbo + k);
  addr = a ^ (((a >> 7) & 7u) << 4);
  return true;
}

// Hardware fragment maps (PTX ISA figures for .m64nNk16 D and A): the reference.
inline int hw_d_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i >> 1) & 1); }
inline int hw_d_col(int t, int i) { return 8 * (i >> 2) + 2 * (t % 4) + (i & 1); }
inline int hw_a_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((e >> 1) & 1); }
inline int hw_a_col(int t, int e) { return 8 * (e >> 2) + 2 * (t % 4) + (e & 1); }
// .m64nNk32 A with 8-bit values (PTX ISA): value e (0 .. 15) is byte e % 4 of register e / 4.
inline int hw_a8_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((e >> 2) & 1); }
inline int hw_a8_col(int t, int e) { return 16 * (e >> 3) + 4 * (t % 4) + (e & 3); }

inline uint16_t bf16_bits(float f) {  // integer-valued test data: exact in bf16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kestrel::testing_util::sm90_hw
