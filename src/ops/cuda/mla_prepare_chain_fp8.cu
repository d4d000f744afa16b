// mla_prepare_chain_fp8, CUDA: the unfused production chain, exactly 5 launches:
//   1. concat  q_cat [T, H, 576] bf16 <- [q_nope | q_pe]
//   2. cast    q_out                  <- enc(q_cat / q_scale)
//   3. cast    k_nope8 [T, 512] fp8   <- enc(k_nope / kv_scale)
//   4. cast    k_pe8 [T, 64] fp8      <- enc(k_pe / kv_scale)
//   5. scatter cache row loc[t]       <- [k_nope8[t] | k_pe8[t]] (slots outside are skipped and counted)
// It is the fallback when the fused kernel's gate says no, and its reference: it takes any
// strides and alignment. The temporaries come from the stream-ordered allocator
// (scratch_alloc / scratch_free: cudaMallocAsync on the caller's stream), so the chain is legal inside a CUDA
// graph capture and never synchronises the device. Elementwise kernels see every tensor as
// [n0, n1, n2] with element strides.
#include <algorithm>

#include "kestrel/ops/mla_prepare.h"
#include "mla_rows.cuh"

namespace kestrel::ops::cuda {

namespace {

struct Elementwise3 {
  void* out;        // [n0, n1, n2]
  const void* in;   // [n0, n1, n2] bf16
  int64_t n[3], so[3], si[3];
  int64_t numel;
  mla::DivScale scale;
};

constexpr int kThreads = 256;
// Enough blocks to fill an H200 many times over; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 1 << 16;

__device__ __forceinline__ void split3(const Elementwise3& p, int64_t i, int64_t& oo, int64_t& io) {
  const int64_t i2 = i % p.n[2], r = i / p.n[2];
  const int64_t i1 = r % p.n[1], i0 = r / p.n[1];
  oo = i0 * p.so[0] + i1 * p.so[1] + i2 * p.so[2];
  io = i0 * p.si[0] + i1 * p.si[1] + i2 * p.si[2];
}

// Launch 1: the concat. Two views of the destination (the nope and the pe columns) would need
// two launches, so this one kernel reads from either input by column.
struct ConcatParams {
  uint16_t* q_cat;          // [T, H, 576] bf16 contiguous
  const uint16_t* q_nope;   // [T, H, 512]
  const uint16_t* q_pe;     // [T, H, 64]
  int64_t n_s0, n_s1, n_s2, p_s0, p_s1, p_s2, H, numel;
};

__global__ void __launch_bounds__(kThreads) mla_chain_concat_q_kernel(ConcatParams p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.numel; i += step) {
    const int64_t j = i % mla::kRow, r = i / mla::kRow, h = r % p.H, t = r / p.H;
    p.q_cat[i] = j < mla::kNope ? p.q_nope[t * p.n_s0 + h * p.n_s1 + j * p.n_s2]
                                : p.q_pe[t * p.p_s0 + h * p.p_s1 + (j - mla::kNope) * p.p_s2];
  }
}

// Launches 2-4: bf16 -> fp8 with the shared encode.
__global__ void __launch_bounds__(kThreads) mla_chain_cast_kernel(Elementwise3 p) {
  const uint16_t* in = static_cast<const uint16_t*>(p.in);
  uint8_t* out = static_cast<uint8_t*>(p.out);
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.numel; i += step) {
    int64_t oo, io;
    split3(p, i, oo, io);
    out[oo] = mla::enc(mla::bf16_bits_to_f32(in[io]), p.scale);
  }
}

// Launch 5: one warp per token copies its two fp8 pieces into the cache row at loc[t].
struct ScatterParams {
  uint8_t* cache;          // [num_pages, page_size, 576] fp8, row stride 1
  const void* loc;         // [T]
  const uint8_t* k_nope8;  // [T, 512] contiguous
  const uint8_t* k_pe8;    // [T, 64] contiguous
  int* invalid_count;
  int64_t cache_s0, cache_s1, loc_s0, page_size, slots, T;
  bool loc_i64;
};

constexpr int kScatterWarps = 4;

__global__ void __launch_bounds__(kScatterWarps * 32) mla_chain_scatter_kernel(ScatterParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kScatterWarps + threadIdx.x / 32;
  if (t >= p.T) return;
  const int64_t s = mla::load_index(p.loc, p.loc_i64, t * p.loc_s0);
  const int64_t row = mla::slot_offset_counted(s, p.page_size, p.slots, p.cache_s0, p.cache_s1, p.invalid_count, lane);
  if (row < 0) return;
  for (int j = lane; j < mla::kRow; j += 32)
    p.cache[row + j] = j < mla::kNope ? p.k_nope8[t * mla::kNope + j] : p.k_pe8[t * mla::kPe + j - mla::kNope];
}

int grid_for(int64_t numel) { return static_cast<int>(std::min<int64_t>((numel + kThreads - 1) / kThreads, kMaxBlocks)); }

void launch_cast(const TensorView& out, const TensorView& in, const Shape& n, const Shape& so, const Shape& si,
                 float scale, cudaStream_t s) {
  Elementwise3 p{};
  p.out = out.data;
  p.in = in.data;
  for (int d = 0; d < 3; ++d) { p.n[d] = n[d]; p.so[d] = so[d]; p.si[d] = si[d]; }
  p.numel = n[0] * n[1] * n[2];
  p.scale = mla::div_scale(scale);
  mla_chain_cast_kernel<<<grid_for(p.numel), kThreads, 0, s>>>(p);
  KESTREL_LAUNCHED("mla_chain_cast_kernel");
}

}  // namespace

Support mla_prepare_chain_fp8_supports(const MlaPrepareFp8Args& a) {
  if ((a.loc.size(0) + kScatterWarps - 1) / kScatterWarps > INT32_MAX) return Support::no("T too large for the grid");
  return Support::yes();
}

void mla_prepare_chain_fp8(const MlaPrepareFp8Args& a, Stream stream) {
  const int64_t T = a.loc.size(0), H = a.q_nope.size(1);
  if (T == 0) return;
  const cudaStream_t s = as_cuda(stream);
  // One allocation for the three temporaries: q_cat (bf16) first, then k_nope8 and k_pe8.
  const size_t q_cat_bytes = static_cast<size_t>(T * H * mla::kRow) * 2;
  const size_t bytes = q_cat_bytes + static_cast<size_t>(T * mla::kRow);
  void* scratch = scratch_alloc(bytes, s);
  uint16_t* q_cat = static_cast<uint16_t*>(scratch);
  uint8_t* k_nope8 = static_cast<uint8_t*>(scratch) + q_cat_bytes;
  uint8_t* k_pe8 = k_nope8 + T * mla::kNope;
  try {
    ConcatParams c{};
    c.q_cat = q_cat;
    c.q_nope = static_cast<const uint16_t*>(a.q_nope.data);
    c.q_pe = static_cast<const uint16_t*>(a.q_pe.data);
    c.n_s0 = a.q_nope.stride(0); c.n_s1 = a.q_nope.stride(1); c.n_s2 = a.q_nope.stride(2);
    c.p_s0 = a.q_pe.stride(0); c.p_s1 = a.q_pe.stride(1); c.p_s2 = a.q_pe.stride(2);
    c.H = H;
    c.numel = T * H * mla::kRow;
    if (c.numel > 0) {  // H == 0: no query rows, and no launch for them
      mla_chain_concat_q_kernel<<<grid_for(c.numel), kThreads, 0, s>>>(c);
      KESTREL_LAUNCHED("mla_chain_concat_q_kernel");
      const TensorView qc = TensorView::contiguous(q_cat, Device::cuda, DType::bf16, {T, H, mla::kRow});
      launch_cast(a.q_out, qc, {T, H, mla::kRow}, {a.q_out.stride(0), a.q_out.stride(1), a.q_out.stride(2)},
                  {H * mla::kRow, mla::kRow, 1}, a.q_scale, s);
    }
    const TensorView kn = TensorView::contiguous(k_nope8, Device::cuda, DType::fp8_e4m3, {T, mla::kNope});
    const TensorView kp = TensorView::contiguous(k_pe8, Device::cuda, DType::fp8_e4m3, {T, mla::kPe});
    launch_cast(kn, a.k_nope, {T, 1, mla::kNope}, {mla::kNope, 0, 1}, {a.k_nope.stride(0), 0, a.k_nope.stride(1)},
                a.kv_scale, s);
    launch_cast(kp, a.k_pe, {T, 1, mla::kPe}, {mla::kPe, 0, 1}, {a.k_pe.stride(0), 0, a.k_pe.stride(1)},
                a.kv_scale, s);
    ScatterParams sp{};
    sp.cache = static_cast<uint8_t*>(a.cache.data);
    sp.loc = a.loc.data;
    sp.k_nope8 = k_nope8;
    sp.k_pe8 = k_pe8;
    sp.invalid_count = a.invalid_count.defined() ? static_cast<int*>(a.invalid_count.data) : nullptr;
    sp.cache_s0 = a.cache.stride(0); sp.cache_s1 = a.cache.stride(1);
    sp.loc_s0 = a.loc.stride(0);
    sp.page_size = a.cache.size(1);
    sp.slots = a.cache.size(0) * a.cache.size(1);
    sp.T = T;
    sp.loc_i64 = a.loc.dtype == DType::i64;
    mla_chain_scatter_kernel<<<static_cast<int>((T + kScatterWarps - 1) / kScatterWarps), kScatterWarps * 32, 0, s>>>(sp);
    KESTREL_LAUNCHED("mla_chain_scatter_kernel");
  } catch (...) {
    cudaFreeAsync(scratch, s);
    throw;
  }
  scratch_free(scratch, s);
}

}  // namespace kestrel::ops::cuda
