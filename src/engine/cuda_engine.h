// CUDA runtime calls of the engine layer that the core does not offer (private to src/engine).
#pragma once

#include <cstddef>

#include "kestrel/core/device.h"

namespace kestrel::engine::detail {

// Stream-ordered copy of `bytes` from pageable host memory to device memory on `stream`
// (cudaMemcpyAsync). The driver stages pageable memory before returning, so `src` may be
// reused as soon as this returns. Not legal inside a stream capture.
void upload_async(void* dst_device, const void* src_host, size_t bytes, Stream stream);

}  // namespace kestrel::engine::detail
