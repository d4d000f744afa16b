// Ampere-style asynchronous global -> shared copies (cp.async), shared by the kernels that stage
// data in shared memory without holding it in registers while it is in flight.
#pragma once

#include <cstdint>

namespace kestrel::ops::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes, bypassing L1 (.cg); both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 8 bytes (.ca: the only cache mode for sizes below 16); both addresses 8-byte aligned.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits for every copy this thread issued (its own only: other threads' copies need a barrier).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// The same for every group but the newest (which may stay in flight).
__device__ __forceinline__ void cp_async_wait_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

}  // namespace kestrel::ops::cuda
