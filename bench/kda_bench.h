// What the KDA benchmarks share: K = V = 128 heads and the token inputs every KDA op takes (the
// first seven buffers of each case).
#pragma once

#include <cstdint>
#include <vector>

#include "fixed_ints.h"
#include "harness.h"
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

// Buffers 0 .. 6 of every KDA case, for `rows` tokens: out, the state pool of `slots` slots,
// mixed_qkv, raw_g, raw_beta, A_log, dt_bias.
inline std::vector<BufferDecl> token_buffers(int64_t rows, int64_t slots, int64_t H, DType pool) {
  return {{"out", DType::bf16, {rows, H, kV}},
          {"state_pool", pool, {slots, H, kV, kK}, Fill::signed_mag(0.05, 0.5)},
          {"mixed_qkv", DType::bf16, {rows, 2 * H * kK + H * kV}},
          {"raw_g", DType::bf16, {rows, H, kK}},
          {"raw_beta", DType::bf16, {rows, H}},
          {"A_log", DType::f32, {H}},
          {"dt_bias", DType::f32, {H * kK}}};
}

// Their bytes without the state: q, k, v, raw_g and raw_beta read, out written, A_log and
// dt_bias read once.
inline double token_bytes(int64_t rows, int64_t H) {
  return tensor_bytes(DType::bf16, {rows, 2 * H * kK + H * kV}) + tensor_bytes(DType::bf16, {rows, H, kK}) +
         tensor_bytes(DType::bf16, {rows, H}) + tensor_bytes(DType::bf16, {rows, H, kV}) +
         tensor_bytes(DType::f32, {H + H * kK});
}

// The op's arguments from buffers 0 .. 6.
template <typename Args>
void set_token_args(Args& a, const std::vector<TensorView>& b) {
  a.out = b[0];
  a.state_pool = b[1];
  a.mixed_qkv = b[2];
  a.raw_g = b[3];
  a.raw_beta = b[4];
  a.A_log = b[5];
  a.dt_bias = b[6];
}

}  // namespace kestrel::bench::kda
