// kda_chunk_prefill, CUDA, kernel 2 of 2: the state recurrence, one CTA per (sequence, head,
// 32 value columns), chunks in order (design note: kda_chunk_prefill.cu). Per chunk, from the
// intra-chunk kernel's workspace (Qg, Kg, Kd, Tm, Aqk, decay) and the chunk's v:
//   P5  O = Qg S (kept in registers), Y = V - Kg S -> yt;
//   P6  Vn = Tm Y -> vnt  (= U - W S with U = Tm V, W = Tm Kg: neither is formed);
//   P7  O += Aqk Vn, stored; S = diag(dec) S + Kd^T Vn; checkpoint after a full chunk.
// The state tile S[:, v0 .. v0+31] (128 x 32 f32) stays in shared memory across the sequence.
//
// Pipeline (cp.async, 16-byte copies, one group in flight at each wait):
//   B1  wait for Qg, Kg of this chunk; barrier;    then issue Kd, Tm, Aqk, dec of this chunk
//   P5  (reads qg, kg, st);                        then load next chunk's v into registers
//   B2  wait for Kd, Tm, Aqk, dec; barrier;        then issue Qg, Kg of the next chunk
//   P6  (reads tm, yt);  B3 barrier;  P7 (reads aqk, vnt, kd, dec; st: own elements only).
// Races, per buffer: qg / kg are written by the copies issued after B2 and read in P5 (after the
// next B1); kd / tm / aqk / dec written after B1 and read after B2 (P6, P7) of the same chunk,
// and the next copies into them are issued after the next B1, when every P7 read is done; yt
// written in P5, read in P6 (B2 between); vnt written in P6, read in P7 (B3), rewritten in the
// next P6 (two barriers later); st read by all in P5, written in P7 by its owner (B2, B3
// between), read again in the next P5 after B1.
//
// Thread maps (tid 0..255, warp w, lane l):
//   P5, P6, P7-out: rows i in {rg, rg + 32}, columns v in {vg + 8b}, rg = tid / 8, vg = tid % 8;
//   P7-state, state load/store: S^T rows v in {w + 8b}, key dims 4l .. 4l+3 (one float4).
//
// Shared memory (floats; 171,008 bytes):
//   st [32][132] S^T of the tile    qg, kg, kd [64][132]    tm, aqk [64][68]    yt, vnt [32][68]
//   dec [128]
#pragma once

#include "kda_chunk_prefill_common.cuh"

namespace kestrel::ops::cuda::kda_chunk {

struct alignas(16) StateSmem {
  float st[kTileV][kLdK];
  float qg[kC][kLdK];
  float kg[kC][kLdK];
  float kd[kC][kLdK];
  float tm[kC][kLdC];
  float aqk[kC][kLdC];
  float yt[kTileV][kLdC];
  float vnt[kTileV][kLdC];
  float dec[kK];
};
static_assert(sizeof(StateSmem) == 171008, "the note above states this size");

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// rows x 128 floats of the workspace into a padded [rows][kLdK] shared array, by all threads.
template <int kRows>
__device__ __forceinline__ void copy_rows128(float (*dst)[kLdK], const float* src, int tid) {
#pragma unroll
  for (int x = tid; x < kRows * (kK / 4); x += kThreads) {
    const int i = x / (kK / 4), d = 4 * (x % (kK / 4));
    cp_async16(&dst[i][d], src + i * kK + d);
  }
}

__device__ __forceinline__ void copy_rows64(float (*dst)[kLdC], const float* src, int tid) {
#pragma unroll
  for (int x = tid; x < kC * (kC / 4); x += kThreads) {
    const int i = x / (kC / 4), j = 4 * (x % (kC / 4));
    cp_async16(&dst[i][j], src + i * kC + j);
  }
}

__device__ __forceinline__ void issue_qk(StateSmem& s, const float* ws, int tid) {
  copy_rows128<kC>(s.qg, ws + kWsQg, tid);
  copy_rows128<kC>(s.kg, ws + kWsKg, tid);
  cp_async_commit();
}

__device__ __forceinline__ void issue_rest(StateSmem& s, const float* ws, int tid) {
  copy_rows128<kC>(s.kd, ws + kWsKd, tid);
  copy_rows64(s.tm, ws + kWsTm, tid);
  copy_rows64(s.aqk, ws + kWsAqk, tid);
  if (tid < kK / 4) cp_async16(&s.dec[4 * tid], ws + kWsDec + 4 * tid);
  cp_async_commit();
}

__device__ __forceinline__ float dot4s(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

// 2 x 4 outputs (rows i0, i0 + 32; columns c0 + 8b) of A [64 x ld] times B^T [32 x ld]^T over
// n inner elements, both row-major with the inner dim contiguous.
__device__ __forceinline__ void mm_2x4(const float* a0, const float* a1, const float* b0, int ldb, int n,
                                       float (&acc)[2][4]) {
#pragma unroll 4
  for (int x = 0; x < n; x += 4) {
    const float4 av0 = ld4(a0 + x), av1 = ld4(a1 + x);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float4 bv = ld4(b0 + 8 * b * ldb + x);
      acc[0][b] = dot4s(av0, bv, acc[0][b]);
      acc[1][b] = dot4s(av1, bv, acc[1][b]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) kda_chunk_prefill_state_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StateSmem& s = *reinterpret_cast<StateSmem*>(smem_raw);
  const int tile = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.tiles));
  const int64_t nh = blockIdx.x / static_cast<unsigned>(p.tiles);
  const int h = static_cast<int>(nh % p.H);
  const int64_t n = nh / p.H;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int v0 = tile * kTileV;
  const int64_t bos = load_index(p.cu_seqlens, p.cu64, n * p.cu_s0);
  const int64_t len = load_index(p.cu_seqlens, p.cu64, (n + 1) * p.cu_s0) - bos;
  const int64_t slot = load_index(p.slots, p.slot64, n * p.slot_s0);
  T* out = static_cast<T*>(p.out);
  const int64_t out_h = static_cast<int64_t>(h) * p.out_s1;
  if (slot <= 0) {  // padding: zero output rows, no state read or written (uniform: no barrier yet)
    for (int64_t x = tid; x < len * kTileV; x += kThreads)
      out[(bos + x / kTileV) * p.out_s0 + out_h + (v0 + x % kTileV) * p.out_s2] = from_f32<T>(0.0f);
    return;
  }
  const bool read_state = p.has_init == nullptr || load_index(p.has_init, p.init64, n * p.init_s0) != 0;
  const int64_t head = static_cast<int64_t>(h) * p.V * kK;  // the head's offset inside a slot
  float* slot_head = p.pool + slot * p.pool_s0 + head;
  const int64_t ck0 = p.ckpt != nullptr ? load_index(p.cu_ckpt, p.cuk64, n * p.cuk_s0) : 0;
  const int64_t ws0 = chunk_slot_base(p, n);  // workspace slot of chunk 0

  // The state tile, S^T rows v = warp + 8b, key dims 4 lane .. 4 lane + 3 (own elements).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    const float4 x = read_state ? ld4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
    st4(&s.st[v][4 * lane], x);
  }
  if (len > 0) issue_qk(s, ws_at(p, ws0, h), tid);

  const int rg = tid / 8, vg = tid % 8;  // P5 / P6 / P7-out map: rows rg, rg + 32; columns vg + 8b
  const int64_t HK = static_cast<int64_t>(p.H) * kK;
  const T* vsrc = static_cast<const T*>(p.qkv) + 2 * HK + static_cast<int64_t>(h) * p.V + v0 + vg;
  float vr[2][4];  // this thread's v elements of the current chunk
  auto load_v = [&](int64_t c0) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int i = rg + 32 * a;
#pragma unroll
      for (int b = 0; b < 4; ++b) vr[a][b] = i < C ? to_f32(vsrc[(bos + c0 + i) * p.qkv_s0 + 8 * b]) : 0.0f;
    }
  };
  if (len > 0) load_v(0);

#pragma unroll 1
  for (int64_t c0 = 0; c0 < len; c0 += kC) {
    const int C = static_cast<int>(len - c0 < kC ? len - c0 : kC);
    const int64_t row0 = bos + c0;
    const float* ws = ws_at(p, ws0 + c0 / kC, h);
    // ---- B1
    cp_async_wait_all();
    __syncthreads();
    issue_rest(s, ws, tid);
    // ---- P5: O = Qg S (kept), Y = V - Kg S -> yt.
    float o[2][4] = {};
    {
      float pk[2][4] = {};
      mm_2x4(&s.qg[rg][0], &s.qg[rg + 32][0], &s.st[vg][0], kLdK, kK, o);
      mm_2x4(&s.kg[rg][0], &s.kg[rg + 32][0], &s.st[vg][0], kLdK, kK, pk);
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) s.yt[vg + 8 * b][rg + 32 * a] = vr[a][b] - pk[a][b];
    }
    if (c0 + kC < len) load_v(c0 + kC);
    // ---- B2
    cp_async_wait_all();
    __syncthreads();
    if (c0 + kC < len) issue_qk(s, ws + static_cast<int64_t>(p.H) * kWsFloats, tid);  // the next slot, same head
    // ---- P6: Vn = Tm Y -> vnt (Tm is lower triangular: columns past the row's block are 0).
    const int jend = ((rg + 32) / kB + 1) * kB;  // the same for the 4 row groups of a warp
    {
      float vn[2][4] = {};
      mm_2x4(&s.tm[rg][0], &s.tm[rg + 32][0], &s.yt[vg][0], kLdC, jend, vn);
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) s.vnt[vg + 8 * b][rg + 32 * a] = vn[a][b];
    }
    // ---- B3
    __syncthreads();
    // ---- P7: O += Aqk Vn, stored; S = diag(dec) S + Kd^T Vn; checkpoint.
    mm_2x4(&s.aqk[rg][0], &s.aqk[rg + 32][0], &s.vnt[vg][0], kLdC, jend, o);
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const int i = rg + 32 * a;
      if (i < C) {
        T* dst = out + (row0 + i) * p.out_s0 + out_h;
#pragma unroll
        for (int b = 0; b < 4; ++b) dst[(v0 + vg + 8 * b) * p.out_s2] = from_f32<T>(o[a][b]);
      }
    }
    {
      const int d = 4 * lane;
      const float4 decay = ld4(&s.dec[d]);
      float4 acc[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float4 sv = ld4(&s.st[warp + 8 * b][d]);
        acc[b] = make_float4(sv.x * decay.x, sv.y * decay.y, sv.z * decay.z, sv.w * decay.w);
      }
#pragma unroll 2
      for (int j = 0; j < kC; j += 4) {
        const float4 kd0 = ld4(&s.kd[j][d]), kd1 = ld4(&s.kd[j + 1][d]);
        const float4 kd2 = ld4(&s.kd[j + 2][d]), kd3 = ld4(&s.kd[j + 3][d]);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const float4 vn = ld4(&s.vnt[warp + 8 * b][j]);
          acc[b].x = fmaf(vn.w, kd3.x, fmaf(vn.z, kd2.x, fmaf(vn.y, kd1.x, fmaf(vn.x, kd0.x, acc[b].x))));
          acc[b].y = fmaf(vn.w, kd3.y, fmaf(vn.z, kd2.y, fmaf(vn.y, kd1.y, fmaf(vn.x, kd0.y, acc[b].y))));
          acc[b].z = fmaf(vn.w, kd3.z, fmaf(vn.z, kd2.z, fmaf(vn.y, kd1.z, fmaf(vn.x, kd0.z, acc[b].z))));
          acc[b].w = fmaf(vn.w, kd3.w, fmaf(vn.z, kd2.w, fmaf(vn.y, kd1.w, fmaf(vn.x, kd0.w, acc[b].w))));
        }
      }
      float* ck = p.ckpt != nullptr && C == kC ? p.ckpt + (ck0 + c0 / kC) * p.ckpt_s0 + head : nullptr;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int v = warp + 8 * b;
        st4(&s.st[v][d], acc[b]);
        if (ck != nullptr) st4(ck + static_cast<int64_t>(v0 + v) * kK + d, acc[b]);
      }
    }
  }
  // The final state (each thread stores the elements it owns; an empty sequence stores its
  // initial state, or zeros).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int v = warp + 8 * b;
    st4(slot_head + static_cast<int64_t>(v0 + v) * kK + 4 * lane, ld4(&s.st[v][4 * lane]));
  }
}

}  // namespace kestrel::ops::cuda::kda_chunk
