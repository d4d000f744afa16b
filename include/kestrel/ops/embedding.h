// embedding: out[t, :] = table[ids[t], :], a row gather; an id outside [0, V) gives a zero row
// and is counted. Spec: docs/ops/embedding.md.
#pragma once

#include "kestrel/ops/backend.h"

namespace kestrel::ops {

struct EmbeddingArgs {
  TensorView out;            // [T, D] bf16 | f16 | f32, any strides
  TensorView table;          // [V, D] same dtype as out, any strides
  TensorView ids;            // [T]    i32 | i64, any stride
  TensorView invalid_count;  // optional [1] i32: += the number of ids outside [0, V)
};

void embedding_check(const EmbeddingArgs& a);
Support embedding_supports(Backend b, const EmbeddingArgs& a);
// Checks, asks the backend, runs. Throws kestrel::Error on bad input or an unsupported call.
void embedding(Backend b, const EmbeddingArgs& a, Stream stream = nullptr);

namespace cpu {
void embedding(const EmbeddingArgs& a);
}
namespace cuda {
Support embedding_supports(const EmbeddingArgs& a);
void embedding(const EmbeddingArgs& a, Stream stream);
}  // namespace cuda

}  // namespace kestrel::ops
