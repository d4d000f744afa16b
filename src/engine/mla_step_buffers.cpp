// MlaStepBuffers: one allocation holding the five metadata arrays, a host mirror of the same
// layout, and refresh (check, fill the mirror with the live values and the padding, copy).
#include "kestrel/engine/mla_step_buffers.h"

#include <algorithm>
#include <cstring>

#include "cuda_engine.h"
#include "kestrel/core/error.h"

namespace kestrel::engine {

namespace {
constexpr const char* kOp = "MlaStepBuffers";
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

MlaStepBuffers::MlaStepBuffers(Device device, int64_t max_batch, int64_t max_tokens, int64_t max_pages)
    : device_(device), max_batch_(max_batch), max_tokens_(max_tokens), max_pages_(max_pages) {
  if (max_batch < 1) fail_arg(kOp, "max_batch", ">= 1", str(max_batch));
  if (max_tokens < 1) fail_arg(kOp, "max_tokens", ">= 1", str(max_tokens));
  if (max_pages < 1) fail_arg(kOp, "max_pages", ">= 1", str(max_pages));
  // Layout: loc i64 [max_tokens] | positions i64 [max_tokens] | seq_lens i32 [max_batch] |
  // q_start i32 [max_batch + 1] | block_table i32 [max_batch, max_pages]. The block table is
  // last so that refresh copies only the rows of the padded batch.
  off_loc_ = 0;
  off_pos_ = round_up(off_loc_ + 8 * max_tokens, 256);
  off_seq_ = round_up(off_pos_ + 8 * max_tokens, 256);
  off_qs_ = round_up(off_seq_ + 4 * max_batch, 256);
  off_bt_ = round_up(off_qs_ + 4 * (max_batch + 1), 256);
  bytes_ = round_up(off_bt_ + 4 * max_batch * max_pages, 256);
  storage_ = Tensor::storage(bytes_ / 8, DType::i64, device);
  host_.assign(static_cast<size_t>(bytes_), 0);
  // Until the first refresh the buffers hold zeros (every loc the sink, every length 0).
  memcpy_bytes(storage_.data(), device, host_.data(), Device::cpu, static_cast<size_t>(bytes_));
}

void MlaStepBuffers::refresh(const MlaStepMeta& m, int64_t batch, int64_t tokens, Stream stream) {
  // ---- check the host metadata
  const int64_t B = static_cast<int64_t>(m.seq_lens.size());
  if (static_cast<int64_t>(m.q_start.size()) != B + 1)
    fail_arg(kOp, "q_start", str("B + 1 = ", B + 1, " entries (B = seq_lens.size())"), str(m.q_start.size(), " entries"));
  if (m.q_start[0] != 0) fail_arg(kOp, "q_start", "q_start[0] == 0", str(m.q_start[0]));
  for (int64_t b = 0; b < B; ++b)
    if (m.q_start[b + 1] < m.q_start[b])
      fail_arg(kOp, "q_start", "non-decreasing offsets", str("q_start[", b + 1, "] = ", m.q_start[b + 1], " < q_start[", b,
                                                              "] = ", m.q_start[b]));
  const int64_t T = m.q_start[B];
  if (static_cast<int64_t>(m.loc.size()) != T)
    fail_arg(kOp, "loc", str("T = q_start[B] = ", T, " entries"), str(m.loc.size(), " entries"));
  if (!m.positions.empty() && static_cast<int64_t>(m.positions.size()) != T)
    fail_arg(kOp, "positions", str("empty or T = ", T, " entries"), str(m.positions.size(), " entries"));
  for (int64_t b = 0; b < B; ++b)
    if (m.seq_lens[b] < 0) fail_arg(kOp, "seq_lens", "lengths >= 0", str("seq_lens[", b, "] = ", m.seq_lens[b]));
  if (m.block_table_width < 0 || m.block_table_width > max_pages_)
    fail_arg(kOp, "block_table_width", str("0 .. max_pages = ", max_pages_), str(m.block_table_width));
  if (static_cast<int64_t>(m.block_table.size()) != B * m.block_table_width)
    fail_arg(kOp, "block_table", str("B * width = ", B * m.block_table_width, " entries"), str(m.block_table.size(), " entries"));
  if (batch < B || batch > max_batch_) fail_arg(kOp, "batch", str(B, " (live) .. ", max_batch_, " (max_batch)"), str(batch));
  if (tokens < T || tokens > max_tokens_) fail_arg(kOp, "tokens", str(T, " (live) .. ", max_tokens_, " (max_tokens)"), str(tokens));
  if (tokens > T && batch == B)
    fail_arg(kOp, "batch", str("> ", B, " live sequences: ", tokens - T, " padded tokens need a padded sequence"), str(batch));

  // ---- fill the mirror: live values, then the padding rules of the header
  auto* loc = reinterpret_cast<int64_t*>(host_.data() + off_loc_);
  auto* pos = reinterpret_cast<int64_t*>(host_.data() + off_pos_);
  auto* seq = reinterpret_cast<int32_t*>(host_.data() + off_seq_);
  auto* qs = reinterpret_cast<int32_t*>(host_.data() + off_qs_);
  auto* bt = reinterpret_cast<int32_t*>(host_.data() + off_bt_);
  std::fill(loc, loc + max_tokens_, int64_t{0});
  std::copy(m.loc.begin(), m.loc.end(), loc);
  std::fill(pos, pos + max_tokens_, int64_t{0});
  std::copy(m.positions.begin(), m.positions.end(), pos);
  std::fill(seq, seq + max_batch_, 0);
  std::copy(m.seq_lens.begin(), m.seq_lens.end(), seq);
  std::copy(m.q_start.begin(), m.q_start.end(), qs);
  for (int64_t b = B + 1; b <= max_batch_; ++b) qs[b] = static_cast<int32_t>(b < batch ? T : tokens);
  std::fill(bt, bt + batch * max_pages_, 0);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(m.block_table.begin() + b * m.block_table_width, m.block_table_width, bt + b * max_pages_);

  // ---- copy (stream-ordered on CUDA); the rows of the block table past `batch` are not read
  const size_t n = static_cast<size_t>(off_bt_ + 4 * batch * max_pages_);
  if (device_ == Device::cpu) {
    std::memcpy(base(), host_.data(), n);
  } else {
    detail::upload_async(base(), host_.data(), n, stream);
  }

  batch_ = batch;
  tokens_ = tokens;
  live_batch_ = B;
  live_tokens_ = T;
  min_q_len_ = max_q_len_ = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n_q = m.q_start[b + 1] - m.q_start[b];
    min_q_len_ = b == 0 ? n_q : std::min(min_q_len_, n_q);
    max_q_len_ = std::max(max_q_len_, n_q);
  }
  has_positions_ = !m.positions.empty();
  refreshed_ = true;
}

TensorView MlaStepBuffers::loc() const { return TensorView(base() + off_loc_, device_, DType::i64, {tokens_}, {1}); }
TensorView MlaStepBuffers::positions() const {
  return TensorView(base() + off_pos_, device_, DType::i64, {tokens_}, {1});
}
TensorView MlaStepBuffers::block_table() const {
  return TensorView(base() + off_bt_, device_, DType::i32, {batch_, max_pages_}, {max_pages_, 1});
}
TensorView MlaStepBuffers::seq_lens() const { return TensorView(base() + off_seq_, device_, DType::i32, {batch_}, {1}); }
TensorView MlaStepBuffers::q_start() const {
  return TensorView(base() + off_qs_, device_, DType::i32, {batch_ + 1}, {1});
}

}  // namespace kestrel::engine
