// MlaAttentionBackend: the prepare-path rule, and a layer call (prepare, attend).
#include "kestrel/engine/mla_attention_backend.h"

#include <cmath>

#include "kestrel/core/error.h"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/mla_attention.h"
#include "kestrel/ops/mla_build_q.h"
#include "kestrel/ops/mla_prepare.h"
#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::engine {

namespace {
constexpr const char* kOp = "MlaAttentionBackend";
}  // namespace

const char* mla_forward_mode_name(MlaForwardMode m) {
  switch (m) {
    case MlaForwardMode::decode: return "decode";
    case MlaForwardMode::extend: return "extend";
    case MlaForwardMode::target_verify: return "target_verify";
    case MlaForwardMode::draft_extend: return "draft_extend";
  }
  return "?";
}

const char* mla_prepare_kind_name(MlaPrepareKind k) {
  switch (k) {
    case MlaPrepareKind::fused_fp8: return "fused_fp8";
    case MlaPrepareKind::chain_fp8: return "chain_fp8";
    case MlaPrepareKind::build_q_fp8: return "build_q_fp8";
    case MlaPrepareKind::rope_fp8: return "rope_fp8";
    case MlaPrepareKind::write_kv_build_q_bf16: return "write_kv_build_q_bf16";
    case MlaPrepareKind::build_q_bf16: return "build_q_bf16";
  }
  return "?";
}

MlaPathChoice mla_choose_prepare(MlaForwardMode mode, DType cache_dtype, bool rope, bool save_kv,
                                 const ops::Support& fused) {
  if (cache_dtype != DType::fp8_e4m3 && cache_dtype != DType::bf16)
    fail_arg(kOp, "cache", "bf16 or fp8_e4m3", dtype_name(cache_dtype));
  const bool fp8 = cache_dtype == DType::fp8_e4m3;
  if (rope) {
    if (!fp8)
      fail_arg(kOp, "rope_cos_sin", "no RoPE table with a bf16 cache (mla_rope_quantize_fp8 writes fp8; apply RoPE "
                                    "to q_pe and k_pe before the backend)", "a table");
    if (!save_kv)
      fail_arg(kOp, "save_kv", "true with a RoPE table (mla_rope_quantize_fp8 always writes the cache)", "false");
    return {MlaPrepareKind::rope_fp8, "a RoPE table is given (rotated model)"};
  }
  if (!fp8)
    return {save_kv ? MlaPrepareKind::write_kv_build_q_bf16 : MlaPrepareKind::build_q_bf16, "the cache is bf16"};
  if (!save_kv) return {MlaPrepareKind::build_q_fp8, "save_kv is off (nothing to write)"};
  if (mode != MlaForwardMode::decode && mode != MlaForwardMode::target_verify)
    return {MlaPrepareKind::chain_fp8,
            str("mode ", mla_forward_mode_name(mode), ": the fused prepare serves decode and target_verify")};
  if (!fused) return {MlaPrepareKind::chain_fp8, str("fused gate closed: ", fused.reason)};
  return {MlaPrepareKind::fused_fp8, ""};
}

MlaAttentionBackend::MlaAttentionBackend(ops::Backend backend, const MlaStepBuffers& step, int64_t num_heads,
                                         float softmax_scale, ops::MlaAttentionPrecision precision)
    : backend_(backend), step_(step), num_heads_(num_heads), softmax_scale_(softmax_scale), precision_(precision) {
  if (step.device() != backend_device(backend))
    fail_arg(kOp, "step", str("buffers on ", device_name(backend_device(backend)), " (the backend's device)"),
             device_name(step.device()));
  if (num_heads < 1) fail_arg(kOp, "num_heads", ">= 1", str(num_heads));
  if (!(softmax_scale > 0.0f && std::isfinite(softmax_scale)))
    fail_arg(kOp, "softmax_scale", "a positive finite number", str(softmax_scale));
  const Device d = backend_device(backend);
  q_fp8_ = Tensor::empty({step.max_tokens(), num_heads, ops::kMlaRow}, DType::fp8_e4m3, d);
  q_bf16_ = Tensor::empty({step.max_tokens(), num_heads, ops::kMlaRow}, DType::bf16, d);
}

MlaForwardRecord MlaAttentionBackend::forward(const MlaLayerOutputs& out, MlaForwardMode mode, const MlaLayerInputs& in,
                                              Stream stream) {
  // ---- the call fits the step (the ops check everything else, naming the argument)
  KESTREL_CHECK(step_.refreshed(), kOp, ": the step buffers were never refreshed");
  const int64_t T = step_.tokens(), H = num_heads_;
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q_nope", &in.q_nope}, {"q_pe", &in.q_pe},
                                {"k_nope", &in.k_nope}, {"k_pe", &in.k_pe}, {"o", &out.o}}) {
    if (!t->defined() || t->rank < 1) fail_arg(kOp, name, "a tensor", "none");
    if (t->size(0) != T) fail_arg(kOp, name, str("T = ", T, " rows (the step's padded tokens)"), t->shape_str());
  }
  if (in.q_nope.rank != 3 || in.q_nope.size(1) != H)
    fail_arg(kOp, "q_nope", str("[T, H = ", H, ", 512]"), in.q_nope.shape_str());
  if (!in.cache.defined()) fail_arg(kOp, "cache", "a tensor", "none");
  if (step_.live_batch() > 0) {
    if (mode == MlaForwardMode::decode && step_.max_q_len() != 1)
      fail_arg(kOp, "mode", "a step with q_len 1 per sequence for decode",
               str("q_len ", step_.min_q_len(), " .. ", step_.max_q_len()));
    if (mode == MlaForwardMode::target_verify && step_.min_q_len() != step_.max_q_len())
      fail_arg(kOp, "mode", "one q_len (1 + drafts) for every sequence in target_verify",
               str("q_len ", step_.min_q_len(), " .. ", step_.max_q_len()));
  }
  const bool rope = in.rope_cos_sin.defined();
  if (rope && !step_.has_positions())
    fail_arg(kOp, "positions", "token positions in the step buffers for a RoPE table", "a step refreshed without them");

  const TensorView q8 = q_fp8_.view().slice(0, 0, T);   // [T, H, 576] fp8
  const TensorView q16 = q_bf16_.view().slice(0, 0, T);  // [T, H, 576] bf16
  const TensorView loc = step_.loc();
  ops::MlaPrepareFp8Args prep;
  prep.cache = in.cache;
  prep.loc = loc;
  prep.k_nope = in.k_nope;
  prep.k_pe = in.k_pe;
  prep.q_out = q8;
  prep.q_nope = in.q_nope;
  prep.q_pe = in.q_pe;
  prep.kv_scale = in.kv_scale;
  prep.q_scale = in.q_scale;

  // ---- the one decision: the fused kernel is asked only where the rule consults it
  ops::Support fused = ops::Support::no("not asked");
  const bool fused_candidate = in.cache.dtype == DType::fp8_e4m3 && !rope && in.save_kv &&
                               (mode == MlaForwardMode::decode || mode == MlaForwardMode::target_verify);
  if (fused_candidate) {
    ops::mla_prepare_fp8_check(prep);
    fused = ops::mla_prepare_fp8_fused_gate(prep);
    if (fused) fused = ops::mla_prepare_fp8_fused_supports(backend_, prep);
  }
  const MlaPathChoice choice = mla_choose_prepare(mode, in.cache.dtype, rope, in.save_kv, fused);

  MlaForwardRecord rec;
  rec.prepare = choice.kind;
  rec.why_not_fused = choice.why_not_fused;
  const uint64_t c0 = ops::cuda::launch_count();
  bool q_is_fp8 = true;
  switch (choice.kind) {
    case MlaPrepareKind::fused_fp8:
      ops::mla_prepare_fp8_fused(backend_, prep, stream);
      rec.kv_written = true;
      break;
    case MlaPrepareKind::chain_fp8:
      ops::mla_prepare_chain_fp8(backend_, prep, stream);
      rec.kv_written = true;
      break;
    case MlaPrepareKind::build_q_fp8:
      ops::mla_build_q(backend_, {.q_out = q8, .q_nope = in.q_nope, .q_pe = in.q_pe, .scale = in.q_scale}, stream);
      break;
    case MlaPrepareKind::rope_fp8: {
      ops::MlaRopeQuantizeFp8Args r;
      r.q_out = q8;
      r.cache = in.cache;
      r.loc = loc;
      r.q_nope = in.q_nope;
      r.q_pe = in.q_pe;
      r.k_nope = in.k_nope;
      r.k_pe = in.k_pe;
      r.cos_sin = in.rope_cos_sin;
      r.positions = step_.positions();
      r.is_neox = in.rope_is_neox;
      r.q_scale = in.q_scale;
      r.kv_scale = in.kv_scale;
      ops::mla_rope_quantize_fp8(backend_, r, stream);
      rec.kv_written = true;
      break;
    }
    case MlaPrepareKind::write_kv_build_q_bf16:
      ops::mla_write_kv(backend_,
                        {.cache = in.cache, .loc = loc, .k_nope = in.k_nope, .k_pe = in.k_pe, .invalid_count = {}, .scale = in.kv_scale},
                        stream);
      rec.kv_written = true;
      [[fallthrough]];
    case MlaPrepareKind::build_q_bf16:
      ops::mla_build_q(backend_, {.q_out = q16, .q_nope = in.q_nope, .q_pe = in.q_pe, .scale = in.q_scale}, stream);
      q_is_fp8 = false;
      break;
  }
  const uint64_t c1 = ops::cuda::launch_count();
  // The prepared query goes straight to attention: an fp8 query (the fused prepare's sentinel,
  // or the chain's, build_q's, rope's) with its q_scale, which mla_attention folds into the
  // QK product; a bf16 query with q_scale 1 (mla_build_q into bf16 already required it).
  ops::MlaAttentionArgs att;
  att.o = out.o;
  att.lse = out.lse;
  att.q = q_is_fp8 ? q8 : q16;
  att.cache = in.cache;
  att.block_table = step_.block_table();
  att.seq_lens = step_.seq_lens();
  att.q_start = step_.q_start();
  att.softmax_scale = softmax_scale_;
  att.kv_scale = in.kv_scale;
  att.q_scale = q_is_fp8 ? in.q_scale : 1.0f;
  att.precision = precision_;
  ops::mla_attention(backend_, att, stream);
  const uint64_t c2 = ops::cuda::launch_count();
  rec.prepare_launches = c1 - c0;
  rec.attention_launches = c2 - c1;
  last_ = rec;
  return rec;
}

}  // namespace kestrel::engine
