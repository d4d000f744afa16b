// mla_prepare_fp8_fused, CUDA: mla_write_kv + mla_build_q for an fp8 cache in one launch.
//
// Work split: one warp per row. Warps [0, T) are the KV role (token t: resolve loc[t], write the
// 576-byte cache row, or skip and count a slot outside the cache); warps [T, T + T*H) are the Q
// role ((token, head) row of q_out). Each lane converts 16 nope elements (two 16-byte loads, one
// 16-byte store) and 2 pe elements (one 4-byte load, one 2-byte store): mla_rows.cuh's vector
// row, the same conversion as every other MLA writer, so the bytes equal the chain's.
// The host gate (mla_prepare_fp8_fused_gate) has already proven the alignment this needs.
#include "kestrel/ops/mla_prepare.h"
#include "mla_rows.cuh"

namespace kestrel::ops::cuda {

namespace {

struct MlaPrepareFusedParams {
  uint8_t* cache;          // [num_pages, page_size, 576] fp8, rows 16-byte aligned
  const void* loc;         // [T] i32 | i64
  const uint16_t* k_nope;  // [T, 512] bf16, rows 16-byte aligned
  const uint16_t* k_pe;    // [T, 64] bf16, rows 4-byte aligned
  uint8_t* q_out;          // [T, H, 576] fp8, rows 16-byte aligned
  const uint16_t* q_nope;  // [T, H, 512] bf16, rows 16-byte aligned
  const uint16_t* q_pe;    // [T, H, 64] bf16, rows 4-byte aligned
  int* invalid_count;      // [1] or nullptr
  int64_t cache_s0, cache_s1, loc_s0, k_nope_s0, k_pe_s0, q_out_s0, q_out_s1, q_nope_s0, q_nope_s1, q_pe_s0, q_pe_s1;
  int64_t page_size, slots, T, H;
  mla::DivScale kv_scale, q_scale;
  bool loc_i64;
};

// Warps per block: 4 while there are at most 768 rows (a decode step: more, smaller blocks
// reach more SMs), else 8 (fewer blocks to schedule when rows are plentiful).
constexpr int kMaxWarps = 8;
int warps_per_block(int64_t rows) { return rows <= 768 ? 4 : 8; }

// One row per warp, measured against more (each warp issuing the loads of all its rows before
// converting any) on the H200 (2026-11-29, us at T = 64 / 1024 / 4096, H = 32): 1 row 3.89 /
// 19.4 / 69.6, 2 rows 4.74 / 21.0 / 70.1, 4 rows 6.87 / 26.3 / 83.2. Later, with the
// power-of-two scale's multiply in place of 18 IEEE divisions per lane (mla_rows.cuh, DivScale;
// instructions -47%): 3.69 / 17.9 / 63.9 -> 3.07 / 15.9 / 56.3 (graph replay; docs/perf.md).
// A 32-bit index division in place of the 64-bit one measured no faster (3.06 us at T = 64).
__global__ void __launch_bounds__(kMaxWarps * 32) mla_prepare_fp8_fused_kernel(MlaPrepareFusedParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= p.T * (p.H + 1)) return;
  if (item < p.T) {  // KV role: token t = item
    const int64_t slot = mla::load_index(p.loc, p.loc_i64, item * p.loc_s0);
    const mla::RowIn in = mla::load_row_vec(p.k_nope + item * p.k_nope_s0, p.k_pe + item * p.k_pe_s0, lane);
    const int64_t row = mla::slot_offset_counted(slot, p.page_size, p.slots, p.cache_s0, p.cache_s1, p.invalid_count, lane);
    if (row < 0) return;  // outside the cache: skipped, counted
    mla::store_row_fp8_vec(p.cache + row, in, p.kv_scale, lane);
  } else {  // Q role: (token, head) row r
    const int64_t r = item - p.T, t = r / p.H, h = r % p.H;
    const mla::RowIn in =
        mla::load_row_vec(p.q_nope + t * p.q_nope_s0 + h * p.q_nope_s1, p.q_pe + t * p.q_pe_s0 + h * p.q_pe_s1, lane);
    mla::store_row_fp8_vec(p.q_out + t * p.q_out_s0 + h * p.q_out_s1, in, p.q_scale, lane);
  }
}

}  // namespace

void mla_prepare_fp8_fused(const MlaPrepareFp8Args& a, Stream stream) {
  // The dispatcher asked the gate; re-asking here keeps a direct call from running unaligned.
  if (Support g = mla_prepare_fp8_fused_gate(a); !g)
    throw Error(str("mla_prepare_fp8_fused: the fused kernel cannot take this call: ", g.reason));
  MlaPrepareFusedParams p{};
  p.cache = static_cast<uint8_t*>(a.cache.data);
  p.loc = a.loc.data;
  p.k_nope = static_cast<const uint16_t*>(a.k_nope.data);
  p.k_pe = static_cast<const uint16_t*>(a.k_pe.data);
  p.q_out = static_cast<uint8_t*>(a.q_out.data);
  p.q_nope = static_cast<const uint16_t*>(a.q_nope.data);
  p.q_pe = static_cast<const uint16_t*>(a.q_pe.data);
  p.invalid_count = a.invalid_count.defined() ? static_cast<int*>(a.invalid_count.data) : nullptr;
  p.cache_s0 = a.cache.stride(0); p.cache_s1 = a.cache.stride(1);
  p.loc_s0 = a.loc.stride(0);
  p.k_nope_s0 = a.k_nope.stride(0); p.k_pe_s0 = a.k_pe.stride(0);
  p.q_out_s0 = a.q_out.stride(0); p.q_out_s1 = a.q_out.stride(1);
  p.q_nope_s0 = a.q_nope.stride(0); p.q_nope_s1 = a.q_nope.stride(1);
  p.q_pe_s0 = a.q_pe.stride(0); p.q_pe_s1 = a.q_pe.stride(1);
  p.page_size = a.cache.size(1);
  p.slots = a.cache.size(0) * a.cache.size(1);
  p.T = a.loc.size(0);
  p.H = a.q_nope.size(1);
  p.kv_scale = mla::div_scale(a.kv_scale);
  p.q_scale = mla::div_scale(a.q_scale);
  p.loc_i64 = a.loc.dtype == DType::i64;
  if (p.T == 0) return;
  const int64_t rows = p.T * (p.H + 1);
  const int warps = warps_per_block(rows);
  const int blocks = checked_int((rows + warps - 1) / warps, "mla_prepare_fp8_fused", "blocks");
  mla_prepare_fp8_fused_kernel<<<blocks, warps * 32, 0, as_cuda(stream)>>>(p);
  KESTREL_LAUNCHED("mla_prepare_fp8_fused_kernel");
}

}  // namespace kestrel::ops::cuda
