// kda_chunk_prefill, CUDA: what its two kernels share (kda_chunk_prefill.cu has the design note):
// sizes, the params struct, the workspace layout between the intra-chunk kernel and the state
// kernel, and the map from (sequence, chunk) to a workspace slot.
#pragma once

#include <cstddef>

#include <cuda_fp16.h>

#include "kda_common.cuh"
#include "kestrel/ops/kda_chunk_prefill.h"

namespace kestrel::ops::cuda::kda_chunk {

using kda::load_index;
using kda::load_real;
using kda::load4;

inline constexpr int kK = 128;        // key head dim the kernels are written for
inline constexpr int kC = 64;         // chunk (docs/ops/kda.md)
inline constexpr int kB = 16;         // rows per block of the chunk (the UT transform's blocks)
inline constexpr int kTileV = 32;     // value columns per state-kernel CTA
inline constexpr int kThreads = 256;  // 8 warps, both kernels
inline constexpr int kLdK = kK + 4;   // padded shared row of 128 floats (bank conflicts)
inline constexpr int kLdC = kC + 4;   // padded shared row of 64 floats
static_assert(kC == 4 * kB && kThreads == 256 && kTileV == 32, "the thread maps assume these sizes");

// Workspace of one (chunk slot, head): the image of the state kernel's operand buffers in shared
// memory, padded rows included, so that the state kernel loads each of its three groups with
// one bulk copy (TMA) instead of ~6,700 16-byte copies per chunk whose address registers stalled
// its warps. The pads (8 values per row: ldmatrix rows 4 banks apart) and Tm's / Aqk's blocks
// above the diagonal are never written nor read (copied as they are). The state kernel
// multiplies on f16 tensor cores (mma_bf16.cuh, mma_f16), so every operand is stored once, as
// f16 (round to nearest even; the precision argument is in kda_chunk_prefill_state.cuh):
//   qg     [64][128] f16   Qg = q_hat e^Gam                (O = Qg S)
//   kg     [64][128] f16   Kg = k_hat e^Gam                (Vn = Tm (V - Kg S))
//   tm     [64][64]  f16   Tm = (I + L)^-1 diag(beta), lower block triangle
//   kd     [64][128] f16   Kd = k_hat e^(Gam_last - Gam)   (S += Kd^T Vn)
//   aqk    [64][64]  f16   Aqk, lower block triangle incl. the diagonal
//   dec    [128]     f32   e^Gam_last (the state's decay over the chunk)
// Padded rows (C <= r < 64) are 0 in qg, kg, kd, and their rows and columns in tm are 0.
using f16 = __half;
inline constexpr int kLdA = kK + 8;  // rows of 128 f16 (qg, kg, kd): 272 bytes
inline constexpr int kLdT = kC + 8;  // rows of 64 f16 (tm, aqk): 144 bytes
struct alignas(16) WsImage {
  f16 qg[kC][kLdA];  // group 0: read in P5
  f16 kg[kC][kLdA];
  f16 tm[kC][kLdT];  // group 1: P6
  f16 kd[kC][kLdA];  // group 2: P7
  f16 aqk[kC][kLdT];
  float dec[kK];
};
inline constexpr int64_t kWsBytes = sizeof(WsImage);  // 71,168
static_assert(kWsBytes == kKdaChunkWorkspaceBytesPerSlotHead && kWsBytes % 16 == 0,
              "the size the header states; 16-byte aligned per (slot, head)");
// The three groups: byte offset and size of each inside the image.
__host__ __device__ constexpr uint32_t ws_group_offset(int g) {
  return g == 0 ? 0u : g == 1 ? 2u * kC * kLdA * 2 : 2u * kC * kLdA * 2 + kC * kLdT * 2;
}
__host__ __device__ constexpr uint32_t ws_group_bytes(int g) {
  return g == 0 ? 2u * kC * kLdA * 2 : g == 1 ? kC * kLdT * 2 : kC * kLdA * 2 + kC * kLdT * 2 + kK * 4;
}
static_assert(ws_group_offset(1) == offsetof(WsImage, tm) && ws_group_offset(2) == offsetof(WsImage, kd) &&
                  ws_group_offset(2) + ws_group_bytes(2) == kWsBytes && ws_group_bytes(1) % 16 == 0,
              "the groups tile the image");

struct Params {
  void* out;                 // [T, H, V] bf16 | f32 (dtype of qkv), any strides
  void* pool;                // [slots, H, V, K] f32 | bf16 (pool_bf16), slots aligned to 4 elements
  void* ckpt;                // [P, H, V, K] dtype of pool, or nullptr
  float* carry;              // bf16 pools over several windows: [N, H, V, K] f32, the state between
                             // them (an f32 pool carries it in the slot itself); else nullptr
  unsigned char* ws;         // [chunk slots, H, kWsBytes] (the layout above)
  const void* qkv;           // [T, >= 2HK + HV], channel stride 1
  const void* raw_g;         // [T, H, K] bf16 | f32
  const void* raw_beta;      // [T, H] bf16 | f32
  const float* A_log;        // [H]
  const float* dt_bias;      // [H * K]
  const void* cu_seqlens;    // [N + 1] i32 | i64
  const void* slots;         // [N] i32 | i64
  const void* has_init;      // [N] i32 | i64, or nullptr (every sequence reads its slot)
  const void* cu_ckpt;       // [N + 1] i32 | i64 with ckpt
  int64_t out_s0, out_s1, out_s2, qkv_s0, g_s0, g_s1, g_s2, beta_s0, beta_s1, alog_s0, dt_s0;
  int64_t pool_s0, ckpt_s0, cu_s0, slot_s0, init_s0, cuk_s0;
  int64_t chunk_slots;       // N + T / 64: every f(n) + c below is < this
  int64_t slot_lo, slot_hi;  // this launch's window of chunk slots; ws holds slots slot_lo .. slot_hi - 1
  int N, H, V, tiles;
  bool g_bf16, beta_bf16, cu64, slot64, init64, cuk64, has_lb;
  bool pool_bf16;            // the state pool and the checkpoints are bf16
  bool vec_rows;             // q, k rows and raw_g rows: 4 elements per lane as one aligned vector load
  float lb;
};

// Workspace slot of chunk c of sequence n: f(n) + c with f(n) = n + floor(cu[n] / 64). Known
// from cu_seqlens alone (no prefix sum over chunk counts), capture-stable, and injective: the
// last chunk of n, f(n) + ceil(len_n / 64) - 1, is below f(n + 1) = n + 1 + floor((cu[n] + len_n)
// / 64), since ceil(len / 64) <= floor((r + len) / 64) + 1 for any r >= 0. Hence every slot is
// below f(N) = N + floor(T / 64).
__device__ __forceinline__ int64_t chunk_slot_base(const Params& p, int64_t n) {
  return n + load_index(p.cu_seqlens, p.cu64, n * p.cu_s0) / kC;
}

// The workspace of chunk slot `chunk_slot` (inside the launch's window) and head h.
__device__ __forceinline__ unsigned char* ws_at(const Params& p, int64_t chunk_slot, int h) {
  return p.ws + ((chunk_slot - p.slot_lo) * p.H + h) * kWsBytes;
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

}  // namespace kestrel::ops::cuda::kda_chunk
