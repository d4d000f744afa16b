// What the KDA ops share: the chunk length, the gate's optional lower bound, and the argument
// checks every KDA op runs (in the order of DESIGN.md rule 8). Spec: docs/ops/kda.md.
#pragma once

#include <cstdint>
#include <optional>

#include "kestrel/core/tensor.h"

namespace kestrel::ops {

// Tokens per chunk of kda_chunk_prefill, and the spacing of its state checkpoints.
inline constexpr int64_t kKdaChunk = 64;

// Head dims of one KDA layer, as the checks read them from the arguments.
struct KdaDims {
  int64_t H = 0;  // heads
  int64_t K = 0;  // key head dim (q, k, gate, state rows)
  int64_t V = 0;  // value head dim (v, output, state columns)
};

// Dims of the short convolution, as the checks read them.
struct KdaConvDims {
  int64_t C = 0;  // channels (2HK + HV for the packed q | k | v)
  int64_t W = 0;  // taps (4 for Kimi)
  int64_t R = 0;  // conv state rows per slot, W - 1 + E (E extra rows for speculative tokens)
};

namespace kda_detail {

// The per-token inputs every KDA op takes, checked together:
//   out       [rows, H, V]            bf16 | f32, any strides, no self-overlap
//   mixed_qkv [rows, >= 2HK + HV]     dtype of out, channel stride 1 (q | k | v, head-major)
//   raw_g     [rows, H, K]            bf16 | f32, any strides
//   raw_beta  [rows, H]               bf16 | f32, any strides
//   A_log     [H]                     f32, any stride
//   dt_bias   [H * K]                 f32, any stride
// plus a finite negative lower bound when one is given. Returns H, K, V.
KdaDims check_token_inputs(const char* op, const TensorView& out, const TensorView& mixed_qkv,
                           const TensorView& raw_g, const TensorView& raw_beta, const TensorView& A_log,
                           const TensorView& dt_bias, std::optional<float> lower_bound, int64_t rows,
                           const char* rows_what);

// A recurrent-state pool (rank 4) [slots, H, V, K] f32 | bf16, each slot contiguous (K innermost), any
// slot stride that keeps slots apart; `arg` names it in messages. A bf16 pool holds the f32 state
// rounded to nearest even (docs/ops/kda.md "State dtype").
void check_state_pool(const char* op, const char* arg, const TensorView& pool, const KdaDims& d);

// An index vector [n] of i32 | i64 with any stride (a column of a table is fine).
void check_index_vector(const char* op, const char* arg, const TensorView& t, int64_t n, const char* what);

// The data pointer is aligned to the element size (a misaligned row start is an error).
void check_element_aligned(const char* op, const char* arg, const TensorView& t);

// The device of `t` equals the device of `out`.
void check_on_device_of(const char* op, const char* arg, const TensorView& t, const TensorView& out);

// The tensors both conv ops take:
//   out [rows, C] bf16 | f32, any strides, no self-overlap (may be x)
//   conv_state [slots, R, C] dtype of x, any strides, no self-overlap, R >= W - 1
//   x [rows, C] dtype of out, any strides;  weight [C, W] bf16 | f32, any strides, W >= 2
KdaConvDims check_conv_inputs(const char* op, const TensorView& out, const TensorView& conv_state,
                              const TensorView& x, const TensorView& weight);

}  // namespace kda_detail
}  // namespace kestrel::ops
