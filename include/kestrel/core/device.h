// Devices, streams and raw memory: the only place the core touches the CUDA runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

enum class Device : uint8_t { cpu, cuda };

constexpr const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// A CUDA stream (cudaStream_t) held opaquely so that headers need no CUDA include.
// nullptr is the legacy default stream. Ignored by the CPU backend.
using Stream = void*;

// True when this build has the CUDA backend and a CUDA device is present. `why` (if given)
// receives the reason when it is false.
bool cuda_available(std::string* why = nullptr);
// "NVIDIA H200, sm_90, 132 SMs, 141 GB" or the reason there is none.
std::string cuda_device_summary();

void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* p);
// Copies `bytes` between any two devices (synchronous with respect to the host).
void memcpy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
// A new non-blocking CUDA stream, and its release (streams are opaque handles; nullptr is
// the legacy default stream). stream_create throws in a build or machine without CUDA.
Stream stream_create();
void stream_destroy(Stream stream);
// Waits for all work on `stream` (no-op for the CPU).
void stream_sync(Stream stream);
void device_sync();

}  // namespace kestrel
