// mla_rope_quantize_fp8, CPU reference: the definition of the op, including the exact fp32
// operation order that the CUDA kernel repeats (docs/ops/mla_rope_quantize_fp8.md):
//   y_a = fma(x_a, c, -(x_b * s)),  y_b = fma(x_b, c, x_a * s),  stored = enc(y / scale)
// std::fma is correctly rounded like CUDA's __fmaf_rn; the lone products are single roundings
// on both sides, and nothing here can be contracted (each product feeds an fma argument).
#include <cmath>
#include <cstring>

#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "mla_common.h"

namespace kestrel::ops::cpu {

namespace {

// Rotates the 64 pe values `x` (f32, read from bf16) with cos|sin row `cs` of the table.
void rotate(float* y, const float* x, const TensorView& cos_sin, int64_t pos, bool is_neox) {
  for (int64_t i = 0; i < kMlaPe / 2; ++i) {
    const float c = load_f32(cos_sin, pos * cos_sin.stride(0) + i * cos_sin.stride(1));
    const float s = load_f32(cos_sin, pos * cos_sin.stride(0) + (i + kMlaPe / 2) * cos_sin.stride(1));
    const int64_t ia = is_neox ? i : 2 * i, ib = is_neox ? i + kMlaPe / 2 : 2 * i + 1;
    y[ia] = std::fma(x[ia], c, -(x[ib] * s));
    y[ib] = std::fma(x[ib], c, x[ia] * s);
  }
}

// One destination row: enc(nope / scale) then enc(rot(pe) / scale).
void write_row(const TensorView& dst, int64_t off, int64_t dst_s, const TensorView& nope, int64_t nope_off,
               int64_t nope_s, const TensorView& pe, int64_t pe_off, int64_t pe_s, const TensorView& cos_sin,
               int64_t pos, bool is_neox, float scale) {
  mla::convert_run(dst, off, dst_s, nope, nope_off, nope_s, kMlaNope, scale);
  float x[kMlaPe], y[kMlaPe];
  for (int64_t j = 0; j < kMlaPe; ++j) x[j] = load_f32(pe, pe_off + j * pe_s);
  rotate(y, x, cos_sin, pos, is_neox);
  uint8_t* d = static_cast<uint8_t*>(dst.data);
  for (int64_t j = 0; j < kMlaPe; ++j) d[off + (kMlaNope + j) * dst_s] = f32_to_fp8_e4m3(y[j] / scale);
}

}  // namespace

void mla_rope_quantize_fp8(const MlaRopeQuantizeFp8Args& a) {
  constexpr const char* op = "mla_rope_quantize_fp8";
  const int64_t T = a.loc.size(0), H = a.q_out.size(1), max_pos = a.cos_sin.size(0);
  const bool counted = a.invalid_count.defined();
  const int64_t bad = mla::scan_indices(op, "positions", a.positions, 0, max_pos, counted) +
                      mla::scan_indices(op, "loc", a.loc, 0, a.cache.size(0) * a.cache.size(1), counted);
  const TensorView& o = a.q_out;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = load_index(a.positions, t * a.positions.stride(0));
    const bool pos_ok = pos >= 0 && pos < max_pos;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * o.stride(0) + h * o.stride(1);
      if (!pos_ok) {  // no rotation to apply: the query rows are zero
        for (int64_t j = 0; j < kMlaRow; ++j) static_cast<uint8_t*>(o.data)[row + j * o.stride(2)] = 0;
        continue;
      }
      write_row(o, row, o.stride(2), a.q_nope, t * a.q_nope.stride(0) + h * a.q_nope.stride(1), a.q_nope.stride(2),
                a.q_pe, t * a.q_pe.stride(0) + h * a.q_pe.stride(1), a.q_pe.stride(2), a.cos_sin, pos, a.is_neox,
                a.q_scale);
    }
    const int64_t kv_row = mla::slot_offset(a.cache, load_index(a.loc, t * a.loc.stride(0)));
    if (!pos_ok || kv_row < 0) continue;
    write_row(a.cache, kv_row, 1, a.k_nope, t * a.k_nope.stride(0), a.k_nope.stride(1), a.k_pe,
              t * a.k_pe.stride(0), a.k_pe.stride(1), a.cos_sin, pos, a.is_neox, a.kv_scale);
  }
  mla::add_to_counter(a.invalid_count, bad);
}

}  // namespace kestrel::ops::cpu
