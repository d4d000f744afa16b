// The MLA attention backend: one per model, shared by its MLA layers. Per layer call it
// prepares the new tokens (KV rows into the layer's paged cache, the absorbed query) and runs
// mla_attention, choosing the prepare path by one rule (DESIGN.md rules 3, 4, 6):
//
//   fp8 cache, mode decode or target_verify, no RoPE, save_kv, fused gate open (which includes
//   a resolvable write location)          -> mla_prepare_fp8_fused: 1 launch; its fp8 query is
//                                             the one sentinel: no separate KV write, no query build
//   fp8 cache, save_kv, no RoPE, otherwise -> mla_prepare_chain_fp8 (5 launches on CUDA)
//   fp8 cache, save_kv off, no RoPE        -> mla_build_q (fp8), no KV write
//   fp8 cache, RoPE table given            -> mla_rope_quantize_fp8 (rotated models)
//   bf16 cache, save_kv                    -> mla_write_kv + mla_build_q (bf16)
//   bf16 cache, save_kv off                -> mla_build_q (bf16)
//   RoPE with a bf16 cache or without save_kv: an error (no op does it).
// Decode and target verify run the same code; verify is decode with q_len > 1. The prepared
// query goes straight to mla_attention in the dtype it was built in: an fp8 query with its
// q_scale (mla_attention reads fp8 q and folds q_scale into the QK product), a bf16 query with
// q_scale 1. No widening launch: an fp8 decode/verify layer call is the prepare (1 fused or 5
// chained launches) + mla_attention (1, or 2 with a split-KV combine).
// All per-step metadata comes from MlaStepBuffers and all temporaries are allocated once, so
// a CUDA graph captured over forward stays valid. Doc: docs/engine/mla_attention_backend.md.
#pragma once

#include <cstdint>
#include <string>

#include "kestrel/engine/mla_step_buffers.h"
#include "kestrel/ops/backend.h"
#include "kestrel/ops/mla_attention.h"  // MlaAttentionPrecision

namespace kestrel::engine {

// SGLang's forward modes that reach MLA attention (reference/mla.md 1.7).
enum class MlaForwardMode : uint8_t { decode, extend, target_verify, draft_extend };
const char* mla_forward_mode_name(MlaForwardMode m);

// How the new tokens were prepared (the path a layer call took).
enum class MlaPrepareKind : uint8_t {
  fused_fp8,              // mla_prepare_fp8_fused
  chain_fp8,              // mla_prepare_chain_fp8
  build_q_fp8,            // mla_build_q into fp8, no KV write (save_kv off)
  rope_fp8,               // mla_rope_quantize_fp8
  write_kv_build_q_bf16,  // mla_write_kv + mla_build_q into bf16
  build_q_bf16,           // mla_build_q into bf16, no KV write (save_kv off)
};
const char* mla_prepare_kind_name(MlaPrepareKind k);

struct MlaPathChoice {
  MlaPrepareKind kind = MlaPrepareKind::chain_fp8;
  std::string why_not_fused;  // empty when kind is fused_fp8
};

// The dispatch rule as a pure function. `fused` is the fused kernel's answer for this call
// (mla_prepare_fp8_fused_gate, then the backend's supports); it is consulted only for an fp8
// cache without RoPE with save_kv in mode decode or target_verify. Throws kestrel::Error for
// the combinations no op serves (RoPE with a bf16 cache; RoPE without save_kv).
MlaPathChoice mla_choose_prepare(MlaForwardMode mode, DType cache_dtype, bool rope, bool save_kv,
                                 const ops::Support& fused);

// One MLA layer's inputs for the current step (T = the step buffers' padded tokens).
struct MlaLayerInputs {
  TensorView q_nope;        // [T, H, 512] bf16, any strides (absorbed q_nope W_UK)
  TensorView q_pe;          // [T, H, 64]  bf16, any strides
  TensorView k_nope;        // [T, 512] bf16, any strides (c_kv, normalised)
  TensorView k_pe;          // [T, 64]  bf16, any strides
  TensorView cache;         // [num_pages, page_size, 576] bf16 | fp8_e4m3: this layer's paged cache
  bool save_kv = true;      // write the new tokens' rows at the step's write locations
  TensorView rope_cos_sin;  // optional [max_pos, 64] f32: rotated (DeepSeek-style) models only;
                            // positions come from the step buffers. Kimi is NoPE: leave it empty
  bool rope_is_neox = true;
  float kv_scale = 1.0f;    // fp8 cache: stored = enc(k / kv_scale); bf16: 1
  float q_scale = 1.0f;     // fp8 query: enc(q / q_scale), passed to mla_attention, which folds it
                            // into the QK product; bf16 cache (bf16 query): 1
};

struct MlaLayerOutputs {
  TensorView o;    // [T, H, 512] bf16, any strides
  TensorView lse;  // optional [T, H] f32, natural log
};

// What a layer call did: the path, and on CUDA the launches each phase made (launch_count
// deltas; 0 on the CPU backend).
struct MlaForwardRecord {
  MlaPrepareKind prepare = MlaPrepareKind::chain_fp8;
  std::string why_not_fused;
  bool kv_written = false;    // the new rows were written (by whichever prepare op)
  uint64_t prepare_launches = 0, attention_launches = 0;
};

class MlaAttentionBackend {
 public:
  // `step` must outlive the backend and live on backend's device; num_heads = H of every MLA
  // layer; softmax_scale > 0 (Kimi: 192^-0.5). Allocates the query buffers once:
  // [max_tokens, H, 576] in fp8 and in bf16. `precision` goes to every mla_attention call
  // (exact by default; fast rounds P once, as FlashMLA does: docs/ops/mla_attention.md).
  MlaAttentionBackend(ops::Backend backend, const MlaStepBuffers& step, int64_t num_heads, float softmax_scale,
                      ops::MlaAttentionPrecision precision = ops::MlaAttentionPrecision::exact);

  // One layer call on `stream` (the CPU backend ignores it): prepare by mla_choose_prepare,
  // then mla_attention on the prepared query (fp8 or bf16, as built) over the step buffers'
  // block table, seq_lens and q_start. Throws kestrel::Error on bad input (the ops' checks
  // name the argument) or when the mode does not fit the step (decode: every live q_len 1;
  // target_verify: equal q_lens).
  MlaForwardRecord forward(const MlaLayerOutputs& out, MlaForwardMode mode, const MlaLayerInputs& in,
                           Stream stream = nullptr);

  const MlaForwardRecord& last() const { return last_; }
  ops::Backend backend() const { return backend_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  ops::Backend backend_;
  const MlaStepBuffers& step_;
  int64_t num_heads_;
  float softmax_scale_;
  ops::MlaAttentionPrecision precision_;
  Tensor q_fp8_;   // [max_tokens, H, 576] fp8_e4m3: the query of the fp8-cache paths
  Tensor q_bf16_;  // [max_tokens, H, 576] bf16: the query of the bf16-cache paths
  MlaForwardRecord last_;
};

}  // namespace kestrel::engine
