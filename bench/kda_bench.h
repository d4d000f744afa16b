// What the KDA benchmarks share: K = V = 128 heads, and distinct slot ids for the state pool.
#pragma once

#include <cstdint>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "kestrel/core/device.h"
#include "kestrel/core/tensor.h"

namespace kestrel::bench {
class Registry;
// One registration function per KDA op, in bench/<op>.cpp; add_kda_benches calls them all.
void add_kda_packed_decode_benches(Registry& r);
void add_kda_recurrent_benches(Registry& r);
void add_kda_chunk_prefill_benches(Registry& r);
}  // namespace kestrel::bench

namespace kestrel::bench::kda {

inline constexpr int64_t kK = 128, kV = 128;

// The harness fills index buffers with random integers, but sequences must own distinct slots
// (two CTAs updating one slot would race, and would time cache hits). The first time a run
// sees an i32 slot buffer it writes 1, 2, ..., n into it. That happens in the harness's
// warm-up, which runs every rotation set once before any timing or graph capture, so the
// synchronous copy is never timed or captured.
class DistinctSlots {
 public:
  void ensure(const TensorView& ids, Stream stream) const {
    if (!seen_->insert(ids.data).second) return;
    std::vector<int32_t> v(static_cast<size_t>(ids.numel()));
    std::iota(v.begin(), v.end(), 1);
    stream_sync(stream);
    memcpy_bytes(ids.data, Device::cuda, v.data(), Device::cpu, v.size() * sizeof(int32_t));
  }

 private:
  std::shared_ptr<std::set<const void*>> seen_ = std::make_shared<std::set<const void*>>();
};

}  // namespace kestrel::bench::kda
