// mla_rope_quantize_fp8, CUDA: one launch, one warp per row. Warps [0, T) are the KV role
// (token t: rotate k_pe at positions[t], quantise, write cache row loc[t]); warps [T, T + T*H)
// are the Q role ((token, head) row of q_out). Lane l converts nope elements l, l + 32, ... and
// rotates the pe pair l: (l, l + 32) for NeoX, (2l, 2l + 1) for interleaved.
//
// The rotation is written with explicit intrinsics, in the spec's order, so that nvcc cannot
// contract or reorder it: y_a = __fmaf_rn(x_a, c, -__fmul_rn(x_b, s)),
// y_b = __fmaf_rn(x_b, c, __fmul_rn(x_a, s)), then enc(y / scale) (mla_rows.cuh). The CPU reference
// does the same with std::fma, so the bytes match. A position outside the table zeroes the
// token's q rows and skips its cache row; a slot outside the cache skips the cache row; each
// is counted in invalid_count (once per token) when given. Nothing is read or written out of
// bounds. Any strides; this path serves rotated (DeepSeek-style) models, not Kimi's NoPE MLA.
#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "mla_rows.cuh"

namespace kestrel::ops::cuda {

namespace {

struct MlaRopeParams {
  uint8_t* q_out;          // [T, H, 576] fp8
  uint8_t* cache;          // [num_pages, page_size, 576] fp8, row stride 1
  const void* loc;         // [T] i32 | i64
  const uint16_t* q_nope;  // [T, H, 512] bf16
  const uint16_t* q_pe;    // [T, H, 64] bf16
  const uint16_t* k_nope;  // [T, 512] bf16
  const uint16_t* k_pe;    // [T, 64] bf16
  const float* cos_sin;    // [max_pos, 64] f32
  const void* positions;   // [T] i32 | i64
  int* invalid_count;      // [1] or nullptr
  int64_t o_s0, o_s1, o_s2, cache_s0, cache_s1, loc_s0, qn_s0, qn_s1, qn_s2, qp_s0, qp_s1, qp_s2;
  int64_t kn_s0, kn_s1, kp_s0, kp_s1, cs_s0, cs_s1, pos_s0;
  int64_t page_size, slots, max_pos, T, H;
  mla::DivScale q_scale, kv_scale;
  bool loc_i64, pos_i64, is_neox;
};

constexpr int kWarps = 8;

// One fp8 row: nope quantised, pe rotated (pair `lane`) then quantised.
__device__ __forceinline__ void rope_row(uint8_t* out, int64_t out_s, const uint16_t* nope, int64_t nope_s,
                                         const uint16_t* pe, int64_t pe_s, const float* cs, int64_t cs_s1,
                                         bool is_neox, mla::DivScale scale, int lane) {
  for (int j = lane; j < mla::kNope; j += 32) out[j * out_s] = mla::enc(mla::bf16_bits_to_f32(nope[j * nope_s]), scale);
  const int ia = is_neox ? lane : 2 * lane, ib = is_neox ? lane + mla::kPe / 2 : 2 * lane + 1;
  const float c = cs[lane * cs_s1], s = cs[(lane + mla::kPe / 2) * cs_s1];
  const float xa = mla::bf16_bits_to_f32(pe[ia * pe_s]), xb = mla::bf16_bits_to_f32(pe[ib * pe_s]);
  const float ya = __fmaf_rn(xa, c, -__fmul_rn(xb, s));
  const float yb = __fmaf_rn(xb, c, __fmul_rn(xa, s));
  out[(mla::kNope + ia) * out_s] = mla::enc(ya, scale);
  out[(mla::kNope + ib) * out_s] = mla::enc(yb, scale);
}

__global__ void __launch_bounds__(kWarps * 32) mla_rope_quantize_fp8_kernel(MlaRopeParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const bool kv_role = item < p.T;
  const int64_t t = kv_role ? item : (item - p.T) / (p.H > 0 ? p.H : 1);
  if (t >= p.T) return;
  const int64_t pos = mla::load_index(p.positions, p.pos_i64, t * p.pos_s0);
  const bool pos_ok = pos >= 0 && pos < p.max_pos;
  const float* cs = p.cos_sin + (pos_ok ? pos : 0) * p.cs_s0;
  if (kv_role) {
    const int64_t s = mla::load_index(p.loc, p.loc_i64, t * p.loc_s0);
    const int64_t row = mla::slot_offset(s, p.page_size, p.slots, p.cache_s0, p.cache_s1);
    if (lane == 0 && p.invalid_count) {
      const int bad = (pos_ok ? 0 : 1) + (row < 0 ? 1 : 0);
      if (bad) atomicAdd(p.invalid_count, bad);
    }
    if (!pos_ok || row < 0) return;
    rope_row(p.cache + row, 1, p.k_nope + t * p.kn_s0, p.kn_s1, p.k_pe + t * p.kp_s0, p.kp_s1, cs, p.cs_s1,
             p.is_neox, p.kv_scale, lane);
    return;
  }
  const int64_t h = (item - p.T) % p.H;
  uint8_t* out = p.q_out + t * p.o_s0 + h * p.o_s1;
  if (!pos_ok) {
    for (int j = lane; j < mla::kRow; j += 32) out[j * p.o_s2] = 0;
    return;
  }
  rope_row(out, p.o_s2, p.q_nope + t * p.qn_s0 + h * p.qn_s1, p.qn_s2, p.q_pe + t * p.qp_s0 + h * p.qp_s1, p.qp_s2,
           cs, p.cs_s1, p.is_neox, p.q_scale, lane);
}

}  // namespace

Support mla_rope_quantize_fp8_supports(const MlaRopeQuantizeFp8Args& a) {
  if ((a.loc.size(0) * (a.q_out.size(1) + 1) + kWarps - 1) / kWarps > INT32_MAX)
    return Support::no("T * (H + 1) too large for the grid");
  return Support::yes();
}

void mla_rope_quantize_fp8(const MlaRopeQuantizeFp8Args& a, Stream stream) {
  MlaRopeParams p{};
  p.q_out = static_cast<uint8_t*>(a.q_out.data);
  p.cache = static_cast<uint8_t*>(a.cache.data);
  p.loc = a.loc.data;
  p.q_nope = static_cast<const uint16_t*>(a.q_nope.data);
  p.q_pe = static_cast<const uint16_t*>(a.q_pe.data);
  p.k_nope = static_cast<const uint16_t*>(a.k_nope.data);
  p.k_pe = static_cast<const uint16_t*>(a.k_pe.data);
  p.cos_sin = static_cast<const float*>(a.cos_sin.data);
  p.positions = a.positions.data;
  p.invalid_count = a.invalid_count.defined() ? static_cast<int*>(a.invalid_count.data) : nullptr;
  p.o_s0 = a.q_out.stride(0); p.o_s1 = a.q_out.stride(1); p.o_s2 = a.q_out.stride(2);
  p.cache_s0 = a.cache.stride(0); p.cache_s1 = a.cache.stride(1);
  p.loc_s0 = a.loc.stride(0);
  p.qn_s0 = a.q_nope.stride(0); p.qn_s1 = a.q_nope.stride(1); p.qn_s2 = a.q_nope.stride(2);
  p.qp_s0 = a.q_pe.stride(0); p.qp_s1 = a.q_pe.stride(1); p.qp_s2 = a.q_pe.stride(2);
  p.kn_s0 = a.k_nope.stride(0); p.kn_s1 = a.k_nope.stride(1);
  p.kp_s0 = a.k_pe.stride(0); p.kp_s1 = a.k_pe.stride(1);
  p.cs_s0 = a.cos_sin.stride(0); p.cs_s1 = a.cos_sin.stride(1);
  p.pos_s0 = a.positions.stride(0);
  p.page_size = a.cache.size(1);
  p.slots = a.cache.size(0) * a.cache.size(1);
  p.max_pos = a.cos_sin.size(0);
  p.T = a.loc.size(0);
  p.H = a.q_out.size(1);
  p.q_scale = mla::div_scale(a.q_scale);
  p.kv_scale = mla::div_scale(a.kv_scale);
  p.loc_i64 = a.loc.dtype == DType::i64;
  p.pos_i64 = a.positions.dtype == DType::i64;
  p.is_neox = a.is_neox;
  if (p.T == 0) return;
  const int blocks = static_cast<int>((p.T * (p.H + 1) + kWarps - 1) / kWarps);
  mla_rope_quantize_fp8_kernel<<<blocks, kWarps * 32, 0, as_cuda(stream)>>>(p);
  KESTREL_LAUNCHED("mla_rope_quantize_fp8_kernel");
}

}  // namespace kestrel::ops::cuda
