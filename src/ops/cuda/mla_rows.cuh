// Device pieces shared by the MLA cache and prepare kernels: slot resolution and the one row
// conversion [nope (512) | pe (64)] (bf16 in) -> bf16 (a raw copy) or fp8 (enc(x / scale)).
// Every kernel that writes an MLA row goes through these, so the fused kernel, the chain and
// the single ops cannot disagree about a byte. The quantisation is x / scale correctly rounded
// (the IEEE division, __fdiv_rn, or a multiply that gives the same bits: DivScale) followed by
// the saturating encode, exactly the CPU reference's f32_to_fp8_e4m3(x / scale).
#pragma once

#include <cstdint>

#include "common.cuh"
#include "div_scale.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops::cuda::mla {

inline constexpr int kNope = 512, kPe = 64, kRow = 576;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// x / scale: DivScale (div_scale.h) says whether the multiply by the exact inverse stands in for
// the division (a power-of-two scale: the same bits), chosen on the host once per launch.
// with_divide calls f(div) with div(x) = x / scale, the way chosen once for the whole body (a
// branch per element would serialise the elements' conversions).
template <typename F>
__device__ __forceinline__ void with_divide(DivScale s, F&& f) {
  if (s.inv != 0.0f) {
    f([inv = s.inv](float x) { return __fmul_rn(x, inv); });
  } else {
    f([scale = s.scale](float x) { return __fdiv_rn(x, scale); });
  }
}

// The saturating e4m3 encode of an already divided value.
__device__ __forceinline__ uint8_t encode(float q) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}
// enc(x / scale) for one element (scalar paths).
__device__ __forceinline__ uint8_t enc(float x, DivScale s) {
  return encode(s.inv != 0.0f ? __fmul_rn(x, s.inv) : __fdiv_rn(x, s.scale));
}

__device__ __forceinline__ int64_t load_index(const void* p, bool i64, int64_t off) {
  return i64 ? static_cast<const int64_t*>(p)[off] : static_cast<int64_t>(static_cast<const int32_t*>(p)[off]);
}

// Element offset of slot s's row, or -1 when s is outside [0, slots): the row is then skipped,
// never written out of bounds.
__device__ __forceinline__ int64_t slot_offset(int64_t s, int64_t page_size, int64_t slots, int64_t page_stride,
                                               int64_t row_stride) {
  if (s < 0 || s >= slots) return -1;
  return (s / page_size) * page_stride + (s % page_size) * row_stride;
}

// slot_offset for a row written by one warp: a slot outside the cache is also counted, once
// (lane 0), in *invalid_count when the caller passed a counter.
__device__ __forceinline__ int64_t slot_offset_counted(int64_t s, int64_t page_size, int64_t slots, int64_t page_stride,
                                                       int64_t row_stride, int* invalid_count, int lane) {
  const int64_t row = slot_offset(s, page_size, slots, page_stride, row_stride);
  if (row < 0 && lane == 0 && invalid_count) atomicAdd(invalid_count, 1);
  return row;
}

// One row by one warp, any element strides: lane l converts elements l, l + 32, ...
// kFp8: out is fp8 bytes; else out is bf16 (raw 16-bit copies, scale unused).
template <bool kFp8>
__device__ __forceinline__ void warp_row_strided(void* out, int64_t out_s, const uint16_t* nope, int64_t nope_s,
                                                 const uint16_t* pe, int64_t pe_s, DivScale scale, int lane) {
  for (int j = lane; j < kRow; j += 32) {
    const uint16_t h = j < kNope ? nope[j * nope_s] : pe[(j - kNope) * pe_s];
    if constexpr (kFp8) {
      static_cast<uint8_t*>(out)[j * out_s] = enc(bf16_bits_to_f32(h), scale);
    } else {
      static_cast<uint16_t*>(out)[j * out_s] = h;
    }
  }
}

// One fp8 row by one warp with vector access. Requires: out 16-byte aligned, nope 16-byte
// aligned, pe 4-byte aligned, all three contiguous. Lane l reads nope[16l, 16l + 16) as two
// 16-byte loads and stores 16 fp8 bytes with one 16-byte store; it reads pe[2l, 2l + 2) with
// one 4-byte load and stores 2 bytes at out + 512 + 2l. 36 stores of 16 B + 32 of 2 B per row.
// Split in two so that a warp can have several rows' loads in flight before converting any.
struct RowIn {
  uint4 v0, v1;  // nope[16l, 16l + 16)
  uint32_t pe;   // pe[2l, 2l + 2)
};

__device__ __forceinline__ RowIn load_row_vec(const uint16_t* nope, const uint16_t* pe, int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(nope) + 2 * lane;
  return {__ldg(src), __ldg(src + 1), __ldg(reinterpret_cast<const unsigned int*>(pe) + lane)};
}

__device__ __forceinline__ void store_row_fp8_vec(uint8_t* out, const RowIn& in, DivScale scale, int lane) {
  with_divide(scale, [&](auto div) {
    // Two bf16 (first in the low half) -> two e4m3 bytes (first in the low byte), one paired
    // conversion (the same rounding as two single ones).
    auto enc2 = [&](uint32_t two) {
      const float2 q = make_float2(div(bf16_bits_to_f32(two & 0xffffu)), div(bf16_bits_to_f32(two >> 16)));
      return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3));
    };
    const uint32_t w[8] = {in.v0.x, in.v0.y, in.v0.z, in.v0.w, in.v1.x, in.v1.y, in.v1.z, in.v1.w};
    uint32_t packed[4];
    for (int k = 0; k < 4; ++k) packed[k] = enc2(w[2 * k]) | enc2(w[2 * k + 1]) << 16;  // elements 4k .. 4k + 3
    reinterpret_cast<uint4*>(out)[lane] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    reinterpret_cast<uint16_t*>(out + kNope)[lane] = static_cast<uint16_t>(enc2(in.pe));
  });
}

__device__ __forceinline__ void warp_row_fp8_vec(uint8_t* out, const uint16_t* nope, const uint16_t* pe, DivScale scale,
                                                 int lane) {
  store_row_fp8_vec(out, load_row_vec(nope, pe, lane), scale, lane);
}

// Host side: whether `t` (unit inner stride, base and outer strides of dims longer than one
// aligned to `align` bytes) can take vector access. The fused kernel's gate applies the same
// rule with reasons (mla_prepare_fp8_fused_gate).
inline bool vector_ready(const TensorView& t, int64_t align) {
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  if (t.stride(-1) != 1 || reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align) != 0) return false;
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.size(d) > 1 && (t.stride(d) * es) % align != 0) return false;
  return true;
}

}  // namespace kestrel::ops::cuda::mla
