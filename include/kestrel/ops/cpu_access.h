// Element access for the CPU reference backend: read any float dtype as f32, write f32 back
// with the exact rounding of core/convert.h. Plain on purpose.
#pragma once

#include <cstring>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"

namespace kestrel::ops::cpu {

inline float load_f32(const TensorView& t, int64_t off) {
  const char* p = static_cast<const char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
  switch (t.dtype) {
    case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
    case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
    case DType::fp8_e4m3: return fp8_e4m3_to_f32(static_cast<uint8_t>(*p));
    default: throw Error("cpu::load_f32: not a float dtype");
  }
}

inline void store_f32(const TensorView& t, int64_t off, float v) {
  char* p = static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
  switch (t.dtype) {
    case DType::f32: std::memcpy(p, &v, 4); return;
    case DType::bf16: { uint16_t h = f32_to_bf16(v); std::memcpy(p, &h, 2); return; }
    case DType::f16: { uint16_t h = f32_to_f16(v); std::memcpy(p, &h, 2); return; }
    case DType::fp8_e4m3: *p = static_cast<char>(f32_to_fp8_e4m3(v)); return;
    default: throw Error("cpu::store_f32: not a float dtype");
  }
}

// Rounds v to the dtype and back: the value a store then load would give.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(v));
    case DType::f16: return f16_to_f32(f32_to_f16(v));
    case DType::fp8_e4m3: return fp8_e4m3_to_f32(f32_to_fp8_e4m3(v));
    default: return v;
  }
}

// Calls f(out_offset, x_offset) for every element of `out` (rank 1 .. 4) and the element of
// `x` (same shape) at the same index, in row-major order; offsets are in elements.
template <typename F>
void for_each_pair(const TensorView& out, const TensorView& x, F&& f) {
  // Views of rank 1..4 seen as rank 4 with leading size-1 dims.
  int64_t n[4] = {1, 1, 1, 1}, so[4] = {0, 0, 0, 0}, sx[4] = {0, 0, 0, 0};
  const int lead = 4 - out.rank;
  for (int d = 0; d < out.rank; ++d) {
    n[lead + d] = out.size(d);
    so[lead + d] = out.stride(d);
    sx[lead + d] = x.stride(d);
  }
  for (int64_t i0 = 0; i0 < n[0]; ++i0)
    for (int64_t i1 = 0; i1 < n[1]; ++i1)
      for (int64_t i2 = 0; i2 < n[2]; ++i2)
        for (int64_t i3 = 0; i3 < n[3]; ++i3)
          f(i0 * so[0] + i1 * so[1] + i2 * so[2] + i3 * so[3], i0 * sx[0] + i1 * sx[1] + i2 * sx[2] + i3 * sx[3]);
}

inline int64_t load_index(const TensorView& t, int64_t off) {
  const char* p = static_cast<const char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
  if (t.dtype == DType::i32) { int32_t i; std::memcpy(&i, p, 4); return i; }
  int64_t i;
  std::memcpy(&i, p, 8);
  return i;
}

}  // namespace kestrel::ops::cpu
