// The KDA benchmarks, registered in one call from cases.h (one function per op, in bench/<op>.cpp).
#include "cases.h"
#include "kda_bench.h"

namespace kestrel::bench {

void add_kda_benches(Registry& r) {
  add_kda_packed_decode_benches(r);
  add_kda_recurrent_benches(r);
  add_kda_chunk_prefill_benches(r);
}

}  // namespace kestrel::bench
