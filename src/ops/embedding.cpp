// embedding: the argument check shared by every backend, and the dispatch.
#include "kestrel/ops/embedding.h"

#include "kestrel/ops/checks.h"

namespace kestrel::ops {

void embedding_check(const EmbeddingArgs& a) {
  constexpr const char* op = "embedding";
  const bool counted = a.invalid_count.defined();
  check_rank(op, "out", a.out, 2, "[T, D]");
  check_rank(op, "table", a.table, 2, "[V, D]");
  check_rank(op, "ids", a.ids, 1, "[T]");
  if (counted) check_rank(op, "invalid_count", a.invalid_count, 1, "[1]");
  check_same_device(op, "table", a.table, "out", a.out);
  check_same_device(op, "ids", a.ids, "out", a.out);
  if (counted) check_same_device(op, "invalid_count", a.invalid_count, "out", a.out);
  check_dtype(op, "out", a.out, {DType::bf16, DType::f16, DType::f32});
  check_same_dtype(op, "table", a.table, "out", a.out);
  check_dtype(op, "ids", a.ids, {DType::i32, DType::i64});
  if (counted) check_dtype(op, "invalid_count", a.invalid_count, {DType::i32});
  check_strides(op, "out", a.out);
  check_strides(op, "table", a.table);
  check_strides(op, "ids", a.ids);
  if (counted) check_strides(op, "invalid_count", a.invalid_count);
  check_no_self_overlap(op, "out", a.out);
  const int64_t T = a.ids.size(0), D = a.table.size(1);
  check_size(op, "out", a.out, 0, T, "T (ids.size(0))");
  check_size(op, "out", a.out, 1, D, "D (table.size(1))");
  if (counted) check_size(op, "invalid_count", a.invalid_count, 0, 1, "one counter");
}

Support embedding_supports(Backend b, const EmbeddingArgs& a) {
  if (Support s = backend_available(b); !s) return s;
  return b == Backend::cpu ? Support::yes() : cuda::embedding_supports(a);
}

void embedding(Backend b, const EmbeddingArgs& a, Stream stream) {
  embedding_check(a);
  check_device("embedding", "out", a.out, backend_device(b));
  require_support("embedding", b, embedding_supports(b, a));
  if (b == Backend::cpu) {
    cpu::embedding(a);
  } else {
    cuda::embedding(a, stream);
  }
}

#if !KESTREL_WITH_CUDA
namespace cuda {
Support embedding_supports(const EmbeddingArgs&) { return Support::no("built without CUDA"); }
void embedding(const EmbeddingArgs&, Stream) { throw Error("embedding: built without CUDA"); }
}  // namespace cuda
#endif

}  // namespace kestrel::ops
