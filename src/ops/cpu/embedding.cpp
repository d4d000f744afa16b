// embedding, CPU reference: the definition of the op (docs/ops/embedding.md). Elements are
// copied as raw bytes (a gather changes no value, NaN payloads included).
#include <cstdint>
#include <cstring>

#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/embedding.h"

namespace kestrel::ops::cpu {

void embedding(const EmbeddingArgs& a) {
  const int64_t T = a.ids.size(0), V = a.table.size(0), D = a.table.size(1);
  const int64_t es = static_cast<int64_t>(dtype_size(a.out.dtype));
  char* out = static_cast<char*>(a.out.data);
  const char* table = static_cast<const char*>(a.table.data);
  uint32_t invalid = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = load_index(a.ids, t * a.ids.stride(0));
    const bool valid = id >= 0 && id < V;
    if (!valid) ++invalid;
    for (int64_t d = 0; d < D; ++d) {
      char* dst = out + (t * a.out.stride(0) + d * a.out.stride(1)) * es;
      if (valid) {
        std::memcpy(dst, table + (id * a.table.stride(0) + d * a.table.stride(1)) * es, es);
      } else {
        std::memset(dst, 0, es);
      }
    }
  }
  if (a.invalid_count.defined()) {
    // i32 counter; wraps like the CUDA backend's atomicAdd.
    uint32_t c;
    std::memcpy(&c, a.invalid_count.data, 4);
    c += invalid;
    std::memcpy(a.invalid_count.data, &c, 4);
  }
}

}  // namespace kestrel::ops::cpu
