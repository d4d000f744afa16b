// The argument checks shared by every KDA op (docs/ops/kda.md, "Errors").
#include "kestrel/ops/kda_common.h"

#include <cmath>
#include <cstdint>

#include "kestrel/ops/checks.h"

namespace kestrel::ops::kda_detail {

void check_element_aligned(const char* op, const char* arg, const TensorView& t) {
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % dtype_size(t.dtype) != 0)
    fail_arg(op, arg, str("a data pointer aligned to its element size (", dtype_size(t.dtype), " bytes)"),
             str("address ", t.data));
}

void check_on_device_of(const char* op, const char* arg, const TensorView& t, const TensorView& out) {
  check_same_device(op, arg, t, "out", out);
}

void check_index_vector(const char* op, const char* arg, const TensorView& t, int64_t n, const char* what) {
  check_rank(op, arg, t, 1, str("[", what, "]").c_str());
  check_dtype(op, arg, t, {DType::i32, DType::i64});
  check_strides(op, arg, t);
  check_element_aligned(op, arg, t);
  check_size(op, arg, t, 0, n, what);
}

KdaDims check_token_inputs(const char* op, const TensorView& out, const TensorView& mixed_qkv,
                           const TensorView& raw_g, const TensorView& raw_beta, const TensorView& A_log,
                           const TensorView& dt_bias, std::optional<float> lower_bound, int64_t rows,
                           const char* rows_what) {
  // rank
  check_rank(op, "out", out, 3, "[rows, H, V]");
  check_rank(op, "mixed_qkv", mixed_qkv, 2, "[rows, >= 2*H*K + H*V]");
  check_rank(op, "raw_g", raw_g, 3, "[rows, H, K]");
  check_rank(op, "raw_beta", raw_beta, 2, "[rows, H]");
  check_rank(op, "A_log", A_log, 1, "[H]");
  check_rank(op, "dt_bias", dt_bias, 1, "[H * K]");
  // device
  check_on_device_of(op, "mixed_qkv", mixed_qkv, out);
  check_on_device_of(op, "raw_g", raw_g, out);
  check_on_device_of(op, "raw_beta", raw_beta, out);
  check_on_device_of(op, "A_log", A_log, out);
  check_on_device_of(op, "dt_bias", dt_bias, out);
  // dtype
  check_dtype(op, "out", out, {DType::bf16, DType::f32});
  check_same_dtype(op, "mixed_qkv", mixed_qkv, "out", out);
  check_dtype(op, "raw_g", raw_g, {DType::bf16, DType::f32});
  check_dtype(op, "raw_beta", raw_beta, {DType::bf16, DType::f32});
  check_dtype(op, "A_log", A_log, {DType::f32});
  check_dtype(op, "dt_bias", dt_bias, {DType::f32});
  // layout
  for (auto [name, t] : {std::pair{"out", &out}, {"mixed_qkv", &mixed_qkv}, {"raw_g", &raw_g},
                         {"raw_beta", &raw_beta}, {"A_log", &A_log}, {"dt_bias", &dt_bias}}) {
    check_strides(op, name, *t);
    check_element_aligned(op, name, *t);
  }
  check_no_self_overlap(op, "out", out);
  if (mixed_qkv.size(1) > 1 && mixed_qkv.stride(1) != 1)
    fail_arg(op, "mixed_qkv", "rows with channel stride 1 (q | k | v contiguous in a row)",
             str("strides ", mixed_qkv.strides_str()));
  // shapes
  const KdaDims d{raw_g.size(1), raw_g.size(2), out.size(2)};
  if (d.H < 1 || d.K < 1 || d.V < 1)
    fail_arg(op, "raw_g", "H >= 1 and K >= 1 (and out V >= 1)",
             str("raw_g ", raw_g.shape_str(), ", out ", out.shape_str()));
  check_size(op, "out", out, 0, rows, rows_what);
  check_size(op, "out", out, 1, d.H, "H (raw_g.size(1))");
  check_size(op, "mixed_qkv", mixed_qkv, 0, rows, rows_what);
  if (mixed_qkv.size(1) < 2 * d.H * d.K + d.H * d.V)
    fail_arg(op, "mixed_qkv", str("at least 2*H*K + H*V = ", 2 * d.H * d.K + d.H * d.V, " columns (H ", d.H, ", K ",
                                  d.K, ", V ", d.V, ")"),
             str("shape ", mixed_qkv.shape_str()));
  check_size(op, "raw_g", raw_g, 0, rows, rows_what);
  check_size(op, "raw_beta", raw_beta, 0, rows, rows_what);
  check_size(op, "raw_beta", raw_beta, 1, d.H, "H (raw_g.size(1))");
  check_size(op, "A_log", A_log, 0, d.H, "H (raw_g.size(1))");
  check_size(op, "dt_bias", dt_bias, 0, d.H * d.K, "H * K (raw_g.size(1) * raw_g.size(2))");
  if (lower_bound && !(std::isfinite(*lower_bound) && *lower_bound < 0.0f))
    fail_arg(op, "lower_bound", "a finite negative number (K3: -5)", str(*lower_bound));
  return d;
}

void check_state_pool(const char* op, const char* arg, const TensorView& pool, const KdaDims& d) {
  check_rank(op, arg, pool, 4, "[slots, H, V, K]");
  check_dtype(op, arg, pool, {DType::f32, DType::bf16});
  check_strides(op, arg, pool);
  check_element_aligned(op, arg, pool);
  const int64_t h = pool.size(1), v = pool.size(2), k = pool.size(3);
  if ((k > 1 && pool.stride(3) != 1) || (v > 1 && pool.stride(2) != k) || (h > 1 && pool.stride(1) != v * k) ||
      (pool.size(0) > 1 && pool.stride(0) < h * v * k))
    fail_arg(op, arg, str("each slot contiguous [H, V, K] (strides (>= ", h * v * k, ", ", v * k, ", ", k, ", 1))"),
             str("strides ", pool.strides_str(), " for shape ", pool.shape_str()));
  check_size(op, arg, pool, 1, d.H, "H (raw_g.size(1))");
  check_size(op, arg, pool, 2, d.V, "V (out.size(2))");
  check_size(op, arg, pool, 3, d.K, "K (raw_g.size(2))");
}

KdaConvDims check_conv_inputs(const char* op, const TensorView& out, const TensorView& conv_state,
                              const TensorView& x, const TensorView& weight) {
  check_rank(op, "out", out, 2, "[rows, C]");
  check_rank(op, "conv_state", conv_state, 3, "[slots, R, C]");
  check_rank(op, "x", x, 2, "[rows, C]");
  check_rank(op, "weight", weight, 2, "[C, W]");
  check_on_device_of(op, "conv_state", conv_state, out);
  check_on_device_of(op, "x", x, out);
  check_on_device_of(op, "weight", weight, out);
  check_dtype(op, "out", out, {DType::bf16, DType::f32});
  check_same_dtype(op, "x", x, "out", out);
  check_dtype(op, "weight", weight, {DType::bf16, DType::f32});
  check_same_dtype(op, "conv_state", conv_state, "x", x);
  for (auto [name, t] : {std::pair{"out", &out}, {"conv_state", &conv_state}, {"x", &x}, {"weight", &weight}}) {
    check_strides(op, name, *t);
    check_element_aligned(op, name, *t);
  }
  check_no_self_overlap(op, "out", out);
  check_no_self_overlap(op, "conv_state", conv_state);
  const KdaConvDims d{x.size(1), weight.size(1), conv_state.size(1)};
  check_size(op, "out", out, 0, x.size(0), "rows (x.size(0))");
  check_size(op, "out", out, 1, d.C, "C (x.size(1))");
  check_size(op, "weight", weight, 0, d.C, "C (x.size(1))");
  if (d.W < 2) fail_arg(op, "weight", "W >= 2 taps (Kimi: 4)", str("shape ", weight.shape_str()));
  if (d.R < d.W - 1)
    fail_arg(op, "conv_state", str("R >= W - 1 = ", d.W - 1, " rows per slot"), str("shape ", conv_state.shape_str()));
  check_size(op, "conv_state", conv_state, 2, d.C, "C (x.size(1))");
  return d;
}

}  // namespace kestrel::ops::kda_detail
