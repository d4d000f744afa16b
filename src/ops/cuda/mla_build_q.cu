// mla_build_q, CUDA: one warp per (token, head) row of q_out. fp8 output with 16-byte aligned,
// contiguous rows takes the vector row (mla_rows.cuh), everything else the strided row; both
// are bit-identical to the CPU reference.
#include "kestrel/ops/mla_build_q.h"
#include "mla_rows.cuh"

namespace kestrel::ops::cuda {

namespace {

struct MlaBuildQParams {
  void* q_out;             // [T, H, 576] bf16 | fp8
  const uint16_t* q_nope;  // [T, H, 512] bf16
  const uint16_t* q_pe;    // [T, H, 64] bf16
  int64_t o_s0, o_s1, o_s2, n_s0, n_s1, n_s2, p_s0, p_s1, p_s2;
  int64_t T, H;
  mla::DivScale scale;
};

// 8 warps per block: there are T * H rows, plenty to fill the GPU.
constexpr int kWarps = 8;

template <bool kFp8, bool kVec>
__global__ void __launch_bounds__(kWarps * 32) mla_build_q_kernel(MlaBuildQParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= p.T * p.H) return;
  const int64_t t = r / p.H, h = r % p.H;
  const uint16_t* nope = p.q_nope + t * p.n_s0 + h * p.n_s1;
  const uint16_t* pe = p.q_pe + t * p.p_s0 + h * p.p_s1;
  const int64_t off = t * p.o_s0 + h * p.o_s1;
  if constexpr (kVec) {
    mla::warp_row_fp8_vec(static_cast<uint8_t*>(p.q_out) + off, nope, pe, p.scale, lane);
  } else {
    void* out = static_cast<char*>(p.q_out) + off * (kFp8 ? 1 : 2);
    mla::warp_row_strided<kFp8>(out, p.o_s2, nope, p.n_s2, pe, p.p_s2, p.scale, lane);
  }
}

}  // namespace

Support mla_build_q_supports(const MlaBuildQArgs& a) {
  if ((a.q_out.size(0) * a.q_out.size(1) + kWarps - 1) / kWarps > INT32_MAX)
    return Support::no("T * H too large for the grid");
  return Support::yes();
}

void mla_build_q(const MlaBuildQArgs& a, Stream stream) {
  MlaBuildQParams p{};
  p.q_out = a.q_out.data;
  p.q_nope = static_cast<const uint16_t*>(a.q_nope.data);
  p.q_pe = static_cast<const uint16_t*>(a.q_pe.data);
  p.o_s0 = a.q_out.stride(0); p.o_s1 = a.q_out.stride(1); p.o_s2 = a.q_out.stride(2);
  p.n_s0 = a.q_nope.stride(0); p.n_s1 = a.q_nope.stride(1); p.n_s2 = a.q_nope.stride(2);
  p.p_s0 = a.q_pe.stride(0); p.p_s1 = a.q_pe.stride(1); p.p_s2 = a.q_pe.stride(2);
  p.T = a.q_out.size(0);
  p.H = a.q_out.size(1);
  p.scale = mla::div_scale(a.scale);
  if (p.T * p.H == 0) return;
  const int blocks = static_cast<int>((p.T * p.H + kWarps - 1) / kWarps);
  const cudaStream_t s = as_cuda(stream);
  if (a.q_out.dtype == DType::bf16) {
    mla_build_q_kernel<false, false><<<blocks, kWarps * 32, 0, s>>>(p);
  } else if (mla::vector_ready(a.q_out, 16) && mla::vector_ready(a.q_nope, 16) && mla::vector_ready(a.q_pe, 4)) {
    mla_build_q_kernel<true, true><<<blocks, kWarps * 32, 0, s>>>(p);
  } else {
    mla_build_q_kernel<true, false><<<blocks, kWarps * 32, 0, s>>>(p);
  }
  KESTREL_LAUNCHED("mla_build_q_kernel");
}

}  // namespace kestrel::ops::cuda
