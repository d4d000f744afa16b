// The per-step metadata of the MLA layers in capture-stable buffers (DESIGN.md rule 5, STYLE
// principle 6: plan once, run per layer). One MlaStepBuffers per model, shared by every MLA
// layer: allocated once for max_batch sequences, max_tokens new tokens and max_pages pages per
// sequence; each step refresh() copies the live values to the same addresses, so a CUDA graph
// captured over MlaAttentionBackend::forward keeps reading the right data on every replay.
// Doc: docs/engine/mla_attention_backend.md.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kestrel/core/tensor.h"

namespace kestrel::engine {

// The live metadata of one step, on the host. B = seq_lens.size(), T = q_start[B].
struct MlaStepMeta {
  std::span<const int64_t> loc;          // [T] cache slot of each new token (slot s = row s % page_size of page s / page_size)
  std::span<const int64_t> positions;    // [T] token positions, or empty (only rotated models read them)
  std::span<const int32_t> seq_lens;     // [B] KV length of each sequence, its new tokens included
  std::span<const int32_t> q_start;      // [B + 1] new tokens of b are q_start[b] .. q_start[b + 1] - 1
  std::span<const int32_t> block_table;  // [B, block_table_width] row-major: the pages of each sequence
  int64_t block_table_width = 0;         // <= max_pages
};

class MlaStepBuffers {
 public:
  MlaStepBuffers(Device device, int64_t max_batch, int64_t max_tokens, int64_t max_pages);

  // Copies `m` into the buffers, stream-ordered on `stream` (CUDA: one cudaMemcpyAsync from a
  // host mirror; never inside a capture), padded to `batch` sequences and `tokens` tokens (the
  // sizes of the step or of the captured graph: B <= batch <= max_batch, T <= tokens <=
  // max_tokens; padded tokens need a padded sequence: tokens > T requires batch > B):
  //   loc[t]         live slots, then 0 for every t >= T up to max_tokens: padded rows write
  //                  the sink (slot 0, page 0), never a live row (rule 7);
  //   positions[t]   live positions (0 when `m.positions` is empty), then 0;
  //   seq_lens[b]    live lengths, then 0: padded sequences attend nothing (o = 0, lse = -inf);
  //   q_start[b]     live offsets; q_start[b] = T for B < b < batch and q_start[batch] = tokens,
  //                  so all padded tokens belong to the last padded sequence (length 0);
  //   block_table    live rows, entries past block_table_width and padded rows = 0 (the sink).
  // Checks the host metadata (sizes, q_start[0] = 0, non-decreasing, lengths >= 0) and throws
  // kestrel::Error naming the field.
  void refresh(const MlaStepMeta& m, int64_t batch, int64_t tokens, Stream stream = nullptr);

  // Views of the buffers at the sizes of the last refresh (stable addresses).
  TensorView loc() const;          // [tokens] i64
  TensorView positions() const;    // [tokens] i64
  TensorView block_table() const;  // [batch, max_pages] i32
  TensorView seq_lens() const;     // [batch] i32
  TensorView q_start() const;      // [batch + 1] i32

  Device device() const { return device_; }
  int64_t max_batch() const { return max_batch_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_pages() const { return max_pages_; }
  int64_t batch() const { return batch_; }             // padded sizes of the last refresh
  int64_t tokens() const { return tokens_; }
  int64_t live_batch() const { return live_batch_; }   // live sizes of the last refresh
  int64_t live_tokens() const { return live_tokens_; }
  // Shortest and longest live q_len of the last refresh (0 when no live sequence): forward
  // checks its mode against them (decode: all 1; target_verify: all equal).
  int64_t min_q_len() const { return min_q_len_; }
  int64_t max_q_len() const { return max_q_len_; }
  bool has_positions() const { return has_positions_; }
  bool refreshed() const { return refreshed_; }

 private:
  Device device_;
  int64_t max_batch_, max_tokens_, max_pages_;
  // Byte offsets of the five arrays in one allocation (and in its host mirror).
  int64_t off_loc_ = 0, off_pos_ = 0, off_seq_ = 0, off_qs_ = 0, off_bt_ = 0, bytes_ = 0;
  Tensor storage_;
  std::vector<uint8_t> host_;
  int64_t batch_ = 0, tokens_ = 0, live_batch_ = 0, live_tokens_ = 0, min_q_len_ = 0, max_q_len_ = 0;
  bool has_positions_ = false, refreshed_ = false;
  uint8_t* base() const { return static_cast<uint8_t*>(storage_.data()); }
};

}  // namespace kestrel::engine
