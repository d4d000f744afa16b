// Where does a CTA's dynamic shared memory start, with no static shared memory, at sizes up to
// the 232,448 bytes (227 KB) a CTA of sm_90 may have? The kernels add 1,024 bytes of slack to
// align their base for the 128-byte swizzle; a 64-row bf16 keys-as-M kernel with two 64-key
// stages (docs/ops/mla_attention.md, "Open after the twenty-third session") would need ~231,800
// bytes and has no room for that slack, so it must know the base is already aligned.
// Launches 132 CTAs of 384 threads at each size, each writing its last byte (a size the driver
// does not grant fails the launch) and reporting its base's shared-window address.
//
// Build and run on the GPU machine (not part of the CMake build; one file, no dependencies):
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o smem_base_probe tools/smem_base_probe.cu
//   ./smem_base_probe
// H200, 2026-12-02: the base is shared address 1,024 (the first KB is the system's) in every CTA
// at 196,784 / 229,376 / 231,424 / 232,448 bytes, i.e. 1,024-aligned; every launch succeeded.
#include <cstdio>

__global__ void touch(unsigned* base_of, int bytes) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(smem));
  smem[bytes - 1] = 1;
  if (threadIdx.x == 0) base_of[blockIdx.x] = a;
}

int main() {
  constexpr int kCtas = 132;
  unsigned* d = nullptr;
  cudaMalloc(&d, kCtas * sizeof(unsigned));
  for (int bytes : {196784, 229376, 231424, 232448}) {
    cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    touch<<<kCtas, 384, bytes>>>(d, bytes);
    const cudaError_t e = cudaDeviceSynchronize();
    unsigned h[kCtas] = {};
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    unsigned misaligned = 0;
    for (unsigned x : h) misaligned |= x & 1023u;
    std::printf("%d bytes: %s, CTA 0's base at shared address %u, a base not 1024-aligned: %s\n", bytes,
                cudaGetErrorString(e), h[0], misaligned ? "yes" : "no");
  }
  cudaFree(d);
  return 0;
}
