// Hardware probe of the WGMMA layouts of the mla_attention v2 kernel, in isolation: one
// warpgroup writes a Q tile [64][576] and a KV tile [32][576] (bf16, integer values, so every
// sum is exact) into shared memory with the kernel's writer (sw128_offset, piece_of), then
//  - QK: the 36 k-steps of wgmma m64n32k16 with the kernel's descriptors (q_desc, k_desc);
//    the accumulators are read back through the kernel's fragment map (frag_d_row / _col)
//    and must equal Q K^T exactly;
//  - PV: P [64][32] placed in A registers through the kernel's A map (frag_a_row / _col),
//    V read MN-major through v_desc for both 256-column halves (wgmma m64n256k16, B
//    transposed); the accumulators must equal P V exactly;
//  - the score -> P register reuse of the kernel (p_reg_of): the QK accumulators, packed as the
//    kernel packs them, as the A operand of PV, must give S V;
//  - the seesaw hand-over: P stored to shared memory from the score-register map (p_offset)
//    and read by wgmma m64n256k16 with A from shared memory (p_desc, K-major, no swizzle) must
//    give P V.
// A failure names the first wrong element, so a layout error on the H200 shows here before it
// shows as a wrong attention output. Needs an sm_90 GPU: skipped, with the reason, elsewhere.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/cuda/mla_attention_sm90_layout.h"
#include "../../src/ops/cuda/sm90_ptx.cuh"
#include "kestrel/core/convert.h"
#include "kestrel/core/device.h"
#include "kestrel/core/error.h"

namespace kestrel {
namespace {

namespace sm = ops::cuda::sm90;

#define PROBE_CUDA(expr)                                                                                    \
  do {                                                                                                      \
    const cudaError_t err_ = (expr);                                                                        \
    if (err_ != cudaSuccess)                                                                                \
      throw ::kestrel::Error(::kestrel::str("CUDA error ", cudaGetErrorName(err_), " in ", #expr, " at ", \
                                            __FILE__, ":", __LINE__));                                      \
  } while (0)

constexpr int kSmem = sm::kQBytes + sm::kKvBytes + sm::kPBytes + 1024;

__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) { return uint32_t{lo} | uint32_t{hi} << 16; }

// q [64][576], kv [32][576], p [64][32] bf16 bits; s_out [64][32] f32 (QK), o_out [64][512]
// f32 (P V), so_out [64][512] f32 (S V with S from the QK registers, as the kernel reuses them).
__global__ void __launch_bounds__(128) wgmma_probe_kernel(const uint16_t* q, const uint16_t* kv, const uint16_t* p,
                                                          float* s_out, float* o_out, float* so_out, float* po_out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_addr = ops::cuda::sm90::opaque(static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)));
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  uint8_t* base_ptr = smem_raw + (base - raw_addr);
  const int t = static_cast<int>(threadIdx.x);
  for (int idx = t; idx < sm::kRows * 72; idx += 128) {
    int row, piece;
    sm::piece_of(idx, sm::kRows, row, piece);
    *reinterpret_cast<uint4*>(base_ptr + sm::sw128_offset(sm::kRows, row, piece * 8)) =
        *reinterpret_cast<const uint4*>(q + row * sm::kDqk + piece * 8);
  }
  for (int idx = t; idx < sm::kKeys * 72; idx += 128) {
    int row, piece;
    sm::piece_of(idx, sm::kKeys, row, piece);
    *reinterpret_cast<uint4*>(base_ptr + sm::kQBytes + sm::sw128_offset(sm::kKeys, row, piece * 8)) =
        *reinterpret_cast<const uint4*>(kv + row * sm::kDqk + piece * 8);
  }
  sm::fence_proxy_async();
  __syncthreads();
  const uint32_t q_smem = base, kv_smem = base + sm::kQBytes;

  float sc[16];
  for (int i = 0; i < 16; ++i) sc[i] = 0.0f;
  sm::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < sm::kQkSteps; ++kk) sm::wgmma_m64n32k16_ss(sc, sm::q_desc(q_smem, kk), sm::k_desc(kv_smem, kk), kk > 0);
  sm::wgmma_commit();
  sm::wgmma_wait<0>();
  sm::fence_operands(sc);
  for (int i = 0; i < 16; ++i) s_out[sm::frag_d_row(t, i) * sm::kKeys + sm::frag_d_col(t, i)] = sc[i];

  // P V with P from global through the A map, and S V with S from the score registers.
  uint32_t a[2][4], as[2][4];
  for (int ks = 0; ks < 2; ++ks)
    for (int j = 0; j < 4; ++j) {
      const int e0 = 2 * j, e1 = 2 * j + 1;
      a[ks][j] = pack2(p[sm::frag_a_row(t, e0) * sm::kKeys + 16 * ks + sm::frag_a_col(t, e0)],
                       p[sm::frag_a_row(t, e1) * sm::kKeys + 16 * ks + sm::frag_a_col(t, e1)]);
      // Scores are small integers: exact in bf16.
      const __nv_bfloat162 v = __floats2bfloat162_rn(sc[sm::p_reg_of(ks, e0)], sc[sm::p_reg_of(ks, e1)]);
      as[ks][j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  // One PV product for value columns c*256 .. with A from `A`, written through the D map.
  auto pv = [&](const uint32_t (&A)[2][4], float* out, int c) {
    float o[128];
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    sm::wgmma_fence();
    for (int ks = 0; ks < 2; ++ks) sm::wgmma_m64n256k16_rs(o, A[ks], sm::v_desc(kv_smem, c, ks));
    sm::wgmma_commit();
    sm::wgmma_wait<0>();
    sm::fence_operands(o);
    for (int i = 0; i < 128; ++i) out[sm::frag_d_row(t, i) * sm::kDv + c * sm::kVColsPerWg + sm::frag_d_col(t, i)] = o[i];
  };
#pragma unroll 1
  for (int c = 0; c < 2; ++c) {
    pv(a, o_out, c);
    pv(as, so_out, c);
  }
  // P handed over through shared memory: stored from the score-register map, read as A.
  const uint32_t p_smem = base + sm::kQBytes + sm::kKvBytes;
  for (int i = 0; i < 16; i += 2) {
    const int row = sm::frag_d_row(t, i), key = sm::frag_d_col(t, i);
    *reinterpret_cast<uint32_t*>(base_ptr + sm::kQBytes + sm::kKvBytes + sm::p_offset(row, key)) =
        pack2(p[row * sm::kKeys + key], p[row * sm::kKeys + key + 1]);
  }
  sm::fence_proxy_async();
  __syncthreads();
#pragma unroll 1
  for (int c = 0; c < 2; ++c) {
    float o[128];
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    sm::wgmma_fence();
    for (int ks = 0; ks < 2; ++ks) sm::wgmma_m64n256k16_ss(o, sm::p_desc(p_smem, ks), sm::v_desc(kv_smem, c, ks));
    sm::wgmma_commit();
    sm::wgmma_wait<0>();
    sm::fence_operands(o);
    for (int i = 0; i < 128; ++i)
      po_out[sm::frag_d_row(t, i) * sm::kDv + c * sm::kVColsPerWg + sm::frag_d_col(t, i)] = o[i];
  }
#endif
}

uint16_t bf16_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

TEST(MlaSm90WgmmaProbeCuda, LayoutsOnHardware) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  int dev = 0, major = 0, minor = 0;
  PROBE_CUDA(cudaGetDevice(&dev));
  PROBE_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  PROBE_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) GTEST_SKIP() << "needs compute capability 9.0, device is " << major << "." << minor;

  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> val(-3, 3);
  std::vector<float> Q(sm::kRows * sm::kDqk), KV(sm::kKeys * sm::kDqk), P(sm::kRows * sm::kKeys);
  for (auto& x : Q) x = static_cast<float>(val(rng));
  for (auto& x : KV) x = static_cast<float>(val(rng));
  for (auto& x : P) x = static_cast<float>(val(rng));
  std::vector<uint16_t> q16(Q.size()), kv16(KV.size()), p16(P.size());
  for (size_t i = 0; i < Q.size(); ++i) q16[i] = bf16_of(Q[i]);
  for (size_t i = 0; i < KV.size(); ++i) kv16[i] = bf16_of(KV[i]);
  for (size_t i = 0; i < P.size(); ++i) p16[i] = bf16_of(P[i]);

  uint16_t *dq, *dkv, *dp;
  float *ds, *dout, *dso, *dpo;
  PROBE_CUDA(cudaMalloc(&dq, q16.size() * 2));
  PROBE_CUDA(cudaMalloc(&dkv, kv16.size() * 2));
  PROBE_CUDA(cudaMalloc(&dp, p16.size() * 2));
  PROBE_CUDA(cudaMalloc(&ds, sm::kRows * sm::kKeys * 4));
  PROBE_CUDA(cudaMalloc(&dout, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaMalloc(&dso, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaMalloc(&dpo, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaMemcpy(dq, q16.data(), q16.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CUDA(cudaMemcpy(dkv, kv16.data(), kv16.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CUDA(cudaMemcpy(dp, p16.data(), p16.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CUDA(cudaMemset(ds, 0xFF, sm::kRows * sm::kKeys * 4));  // NaN: unwritten elements show
  PROBE_CUDA(cudaMemset(dout, 0xFF, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaMemset(dso, 0xFF, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaMemset(dpo, 0xFF, sm::kRows * sm::kDv * 4));
  PROBE_CUDA(cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  wgmma_probe_kernel<<<1, 128, kSmem>>>(dq, dkv, dp, ds, dout, dso, dpo);
  PROBE_CUDA(cudaGetLastError());
  PROBE_CUDA(cudaDeviceSynchronize());
  std::vector<float> S(sm::kRows * sm::kKeys), O(sm::kRows * sm::kDv), SO(sm::kRows * sm::kDv), PO(sm::kRows * sm::kDv);
  PROBE_CUDA(cudaMemcpy(S.data(), ds, S.size() * 4, cudaMemcpyDeviceToHost));
  PROBE_CUDA(cudaMemcpy(O.data(), dout, O.size() * 4, cudaMemcpyDeviceToHost));
  PROBE_CUDA(cudaMemcpy(SO.data(), dso, SO.size() * 4, cudaMemcpyDeviceToHost));
  PROBE_CUDA(cudaMemcpy(PO.data(), dpo, PO.size() * 4, cudaMemcpyDeviceToHost));
  for (void* ptr : {static_cast<void*>(dq), static_cast<void*>(dkv), static_cast<void*>(dp), static_cast<void*>(ds),
                    static_cast<void*>(dout), static_cast<void*>(dso), static_cast<void*>(dpo)})
    cudaFree(ptr);

  std::vector<double> Sref(S.size(), 0.0);
  for (int r = 0; r < sm::kRows; ++r)
    for (int n = 0; n < sm::kKeys; ++n)
      for (int f = 0; f < sm::kDqk; ++f) Sref[r * sm::kKeys + n] += static_cast<double>(Q[r * sm::kDqk + f]) * KV[n * sm::kDqk + f];
  for (int x = 0; x < sm::kRows * sm::kKeys; ++x)
    ASSERT_EQ(S[x], Sref[x]) << "QK: S[" << x / sm::kKeys << "][" << x % sm::kKeys << "] (q_desc / k_desc / swizzle / D map)";
  for (int r = 0; r < sm::kRows; ++r)
    for (int col = 0; col < sm::kDv; ++col) {
      double want = 0, want_s = 0;
      for (int n = 0; n < sm::kKeys; ++n) {
        want += static_cast<double>(P[r * sm::kKeys + n]) * KV[n * sm::kDqk + col];
        // The kernel packs the f32 scores to bf16 (round to nearest even), as here; the
        // products and their sums stay exact in f32 (|sum| < 2^24).
        want_s += static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(Sref[r * sm::kKeys + n])))) *
                  KV[n * sm::kDqk + col];
      }
      ASSERT_EQ(O[r * sm::kDv + col], want) << "PV: O[" << r << "][" << col << "] (v_desc / A map / D map)";
      ASSERT_EQ(SO[r * sm::kDv + col], want_s) << "score registers as P: O[" << r << "][" << col << "] (p_reg_of)";
      ASSERT_EQ(PO[r * sm::kDv + col], want) << "P through shared memory: O[" << r << "][" << col << "] (p_offset / p_desc)";
    }
}

}  // namespace
}  // namespace kestrel
