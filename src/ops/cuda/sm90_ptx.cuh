// Hopper (sm_90a) PTX wrappers: mbarriers, 1-D bulk copies, proxy fences, named barriers,
// setmaxnreg and the two wgmma shapes of the mla_attention v2 kernel. Shared with the hardware
// probe of those layouts (tests/core/mla_sm90_wgmma_probe_test.cu).
#pragma once

#include <cstdint>

namespace kestrel::ops::cuda::sm90 {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once (one thread arriving for the warps it waited for).
__device__ __forceinline__ void mbar_arrive_count(uint32_t bar, uint32_t count) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// One contiguous global -> shared copy of `bytes` (a multiple of 16; both addresses 16-byte
// aligned), completing as transaction bytes on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// One contiguous shared -> global copy of `bytes` (a multiple of 16; both addresses 16-byte
// aligned) in the thread's bulk async-group; the writer's generic stores to `src` must be fenced
// to the async proxy first (fence_proxy_async) and made visible to this thread (a barrier).
__device__ __forceinline__ void bulk_copy_s2g(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
// A 2-D tensor copy shared -> global through the tensor map at `map` (a __grid_constant__ kernel
// parameter), box origin (c0, c1) in elements, in the thread's bulk async-group; the map's swizzle
// decides the shared layout, and boxes past the tensor's end are clipped. The same fencing as
// bulk_copy_s2g.
__device__ __forceinline__ void tma_store_2d(const void* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's bulk groups have read their shared sources (which may then be reused).
__device__ __forceinline__ void bulk_wait_group_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// An L2 policy for data read again soon by another kernel (a split's partials): evict it last.
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// Two floats to global memory under an L2 cache policy.
__device__ __forceinline__ void st_global_f2_hint(float* dst, float a, float b, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(dst), "f"(a), "f"(b), "l"(policy) : "memory");
}
// An L2 policy for data read once (a stream): evict it first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// bulk_copy_g2s with an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void bulk_copy_g2s_hint(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar), "l"(policy)
               : "memory");
}
// A 3-D tensor copy global -> shared through the tensor map at `map` (a __grid_constant__
// kernel parameter), box origin (c0, c1, c2) in elements, completing as transaction bytes on
// `bar`; the map's swizzle decides the shared-memory layout.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// tma_load_3d with an L2 cache policy (l2_evict_first_policy, or a policy constant).
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, "
      "%4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}
// The same for a 2-D tensor map, box origin (c0, c1).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// Fetches a tensor map (a __grid_constant__ kernel parameter) ahead of its first copy.
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Generic-proxy shared-memory writes of this thread become visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Arrive on a named barrier without waiting (the producer side of a bar.arrive / bar.sync pair:
// `count` counts the arriving and the syncing threads together).
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// setmaxnreg moves registers between a CTA's warpgroups within what the CTA holds at launch: with
// __launch_bounds__(threads, 1) that is 65,536 / threads a thread rounded down to a multiple of 8
// (ptxas's cap), times threads (168 x 384 = 64,512). A setmaxnreg.inc asking for more than the
// other warpgroups gave back waits forever: on the H200, 232 for 256 consumer threads and 48 for
// 128 producer threads (65,536) hung the kernel. Each kernel asserts its split against this.
constexpr int setmaxnreg_pool(int threads) { return (65536 / threads) / 8 * 8 * threads; }
static_assert(setmaxnreg_pool(384) == 64512);

template <int kRegs> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// An opaque copy: values derived from it inside a loop are computed there, not hoisted out and
// kept live (the 36 Q / K descriptors of a tile would otherwise pin 72 registers).
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}
// Keeps the compiler from moving accesses to wgmma registers across a fence / wait.
template <int kN> __device__ __forceinline__ void fence_operands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN> __device__ __forceinline__ void fence_operands(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The wgmma wrappers take the operand type as kF16: false = bf16 (A and B), true = f16; the two
// share layouts and descriptors (2-byte elements), only the instruction's type differs.

// S[64 x 32] (+)= A[64 x 16] B[16 x 32]: A = Q, B = K (both K-major in shared memory),
// f32 accumulators (16 per thread); scale_d == 0 overwrites d.
#define KESTREL_WGMMA_M64N32K16_SS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                   \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE                                              \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),    \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N32K16_SS("f16.f16 ");
  } else {
    KESTREL_WGMMA_M64N32K16_SS("bf16.bf16 ");
  }
}

// S[64 x 32] (+)= A B with A from registers (4 registers per thread) and B K-major in shared
// memory: the keys-as-M fp8 kernel (mla_attention_keys_m.cu). INSTR is the instruction's shape and
// types, IMMS its immediates after scale-d (scale-a, scale-b, and for 16-bit types trans-b).
// scale_d == 0 overwrites d.
#define KESTREL_WGMMA_M64N32_RS(INSTR, IMMS)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                                   \
               "wgmma.mma_async.sync.aligned." INSTR                                                           \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, " IMMS ";\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),    \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
// A [64 x 16] in 16-bit values (4 x 2 per thread, the fragment layout of
// mla_attention_sm90_layout.h's frag_a_*): the e4m3 cache bytes widened in registers.
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N32_RS("m64n32k16.f32.f16.f16", "1, 1, 0");
  } else {
    KESTREL_WGMMA_M64N32_RS("m64n32k16.f32.bf16.bf16", "1, 1, 0");
  }
}
// S[64 x 16] (+)= A B in bf16, A from registers, B K-major in shared memory (8 f32 accumulators
// per thread): the bf16-cache keys-as-M kernel's QK (keys from registers, 16 query rows a
// warpgroup). scale_d == 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n16k16_bf16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}
// A [64 x 32] in e4m3 (4 x 4 bytes per thread: the k16 fragment in bytes), B e4m3 (8-bit
// operands have no transpose): the keys-as-M kernel's QK at the fast precision. The path keeps
// each addend only down to 2^-13 of the largest one's leading bit
// (tests/core/fp8_mma_accumulation_probe_test.cu).
__device__ __forceinline__ void wgmma_m64n32k32_e4m3_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b,
                                                        int scale_d) {
  KESTREL_WGMMA_M64N32_RS("m64n32k32.f32.e4m3.e4m3", "1, 1");
}

// m64n64k16 with 32 f32 accumulators per thread, A from registers (the `_rs` forms: 4 registers)
// or K-major in shared memory (`_ss`), B K-major in shared memory; kF16 as above.
#define KESTREL_WGMMA_D32_REGS \
  " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define KESTREL_WGMMA_D32_OPERANDS(d)                                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),   \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),  \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KESTREL_WGMMA_M64N64K16_RS(TYPE)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE KESTREL_WGMMA_D32_REGS                     \
               "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                                \
               : KESTREL_WGMMA_D32_OPERANDS(d)                                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
#define KESTREL_WGMMA_M64N64K16_SS(TYPE)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE KESTREL_WGMMA_D32_REGS                     \
               "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                              \
               : KESTREL_WGMMA_D32_OPERANDS(d)                                                               \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// The wide keys-as-M kernel's PV (V^T from registers, P^T), and the 64-key seesaw kernel's QK over
// Q's last column chunk (held in registers). scale_d == 0 overwrites d.
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d = 1) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N64K16_RS("f16.f16");
  } else {
    KESTREL_WGMMA_M64N64K16_RS("bf16.bf16");
  }
}
__device__ __forceinline__ void wgmma_m64n64k16_f16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  wgmma_m64n64k16_rs<true>(d, a, desc_b, 1);
}
// The 64-key seesaw kernel's QK: S[64 x 64] (+)= Q K^T, both from shared memory.
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N64K16_SS("f16.f16");
  } else {
    KESTREL_WGMMA_M64N64K16_SS("bf16.bf16");
  }
}

// Four 8 x 8 b16 matrices from the accumulator fragment (lane l holds row l / 4, columns
// 2 (l % 4) and + 1 of each, the lower column in the low half), stored transposed: row c of
// matrix j (its column c) goes to the 16 bytes at the address lane 8 j + c gives.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// The 128 f32 accumulators of an m64n256 wgmma: the register list in the PTX string and the
// operand list (d[0] .. d[127], read and written), shared by the two wrappers below.
#define KESTREL_WGMMA_D128_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
#define KESTREL_WGMMA_D128_OPERANDS(d) \
  "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]), \
  "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), \
  "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
  "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]), \
  "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]), \
  "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]), \
  "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]), \
  "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63]), \
  "+f"((d)[64]), "+f"((d)[65]), "+f"((d)[66]), "+f"((d)[67]), "+f"((d)[68]), "+f"((d)[69]), "+f"((d)[70]), "+f"((d)[71]), \
  "+f"((d)[72]), "+f"((d)[73]), "+f"((d)[74]), "+f"((d)[75]), "+f"((d)[76]), "+f"((d)[77]), "+f"((d)[78]), "+f"((d)[79]), \
  "+f"((d)[80]), "+f"((d)[81]), "+f"((d)[82]), "+f"((d)[83]), "+f"((d)[84]), "+f"((d)[85]), "+f"((d)[86]), "+f"((d)[87]), \
  "+f"((d)[88]), "+f"((d)[89]), "+f"((d)[90]), "+f"((d)[91]), "+f"((d)[92]), "+f"((d)[93]), "+f"((d)[94]), "+f"((d)[95]), \
  "+f"((d)[96]), "+f"((d)[97]), "+f"((d)[98]), "+f"((d)[99]), "+f"((d)[100]), "+f"((d)[101]), "+f"((d)[102]), "+f"((d)[103]), \
  "+f"((d)[104]), "+f"((d)[105]), "+f"((d)[106]), "+f"((d)[107]), "+f"((d)[108]), "+f"((d)[109]), "+f"((d)[110]), "+f"((d)[111]), \
  "+f"((d)[112]), "+f"((d)[113]), "+f"((d)[114]), "+f"((d)[115]), "+f"((d)[116]), "+f"((d)[117]), "+f"((d)[118]), "+f"((d)[119]), \
  "+f"((d)[120]), "+f"((d)[121]), "+f"((d)[122]), "+f"((d)[123]), "+f"((d)[124]), "+f"((d)[125]), "+f"((d)[126]), "+f"((d)[127])

// O[64 x 256] += A[64 x 16] B[16 x 256]: A = P from registers (4 x 2 values per thread), B = V
// MN-major in shared memory (imm-trans-b = 1), f32 accumulators (128 per thread).
#define KESTREL_WGMMA_M64N256K16_RS(TYPE)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE KESTREL_WGMMA_D128_REGS \
               "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                          \
               : KESTREL_WGMMA_D128_OPERANDS(d)                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1))
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N256K16_RS("f16.f16 ");
  } else {
    KESTREL_WGMMA_M64N256K16_RS("bf16.bf16 ");
  }
}

// The same with A from shared memory (K-major, desc_a): P written by the other warpgroup.
#define KESTREL_WGMMA_M64N256K16_SS(TYPE)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE KESTREL_WGMMA_D128_REGS \
               "%128, %129, p, 1, 1, 0, 1;\n}\n"                                           \
               : KESTREL_WGMMA_D128_OPERANDS(d)                                            \
               : "l"(desc_a), "l"(desc_b), "n"(1))
template <bool kF16 = false>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kF16) {
    KESTREL_WGMMA_M64N256K16_SS("f16.f16 ");
  } else {
    KESTREL_WGMMA_M64N256K16_SS("bf16.bf16 ");
  }
}

}  // namespace kestrel::ops::cuda::sm90
