// mla_attention, CPU reference properties (the matrix compares backends with it, so it must be
// right on its own): one key gives o = v and lse = its score; verify (q_len n) equals n decode
// calls with the causal lengths; an fp8 cache equals a bf16 cache holding dec(byte) * scale
// (dequant-then-attend, DESIGN.md principle 3); bad metadata is an error that names the entry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/ops/mla_attention.h"

namespace kestrel::ops {
namespace {

constexpr int64_t kPage = 4;

struct Problem {
  int64_t H, Tq, B, pages;
  std::vector<uint16_t> q, o;
  std::vector<float> lse;
  std::vector<uint16_t> cache_bf16;
  std::vector<uint8_t> cache_fp8;
  std::vector<int32_t> table, seq_lens, q_start;

  MlaAttentionArgs args(bool fp8, float kv_scale) {
    MlaAttentionArgs a;
    o.assign(static_cast<size_t>(Tq * H * kMlaNope), 0);
    lse.assign(static_cast<size_t>(Tq * H), 0.0f);
    a.o = TensorView::contiguous(o.data(), Device::cpu, DType::bf16, {Tq, H, kMlaNope});
    a.lse = TensorView::contiguous(lse.data(), Device::cpu, DType::f32, {Tq, H});
    a.q = TensorView::contiguous(q.data(), Device::cpu, DType::bf16, {Tq, H, kMlaRow});
    a.cache = fp8 ? TensorView::contiguous(cache_fp8.data(), Device::cpu, DType::fp8_e4m3, {pages, kPage, kMlaRow})
                  : TensorView::contiguous(cache_bf16.data(), Device::cpu, DType::bf16, {pages, kPage, kMlaRow});
    a.block_table = TensorView::contiguous(table.data(), Device::cpu, DType::i32, {B, static_cast<int64_t>(table.size()) / B});
    a.seq_lens = TensorView::contiguous(seq_lens.data(), Device::cpu, DType::i32, {B});
    a.q_start = TensorView::contiguous(q_start.data(), Device::cpu, DType::i32, {B + 1});
    a.softmax_scale = 0.0721687836f;
    a.kv_scale = kv_scale;
    return a;
  }
};

// One sequence of L positions on pages 1..; fp8 bytes random, bf16 = dec(byte) * 0.5 exactly.
Problem make(int64_t H, int64_t n, int64_t L, uint64_t seed) {
  Problem p;
  p.H = H; p.Tq = n; p.B = 1;
  p.pages = 1 + (L + kPage - 1) / kPage;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int64_t i = 0; i < n * H * kMlaRow; ++i) p.q.push_back(f32_to_bf16(u(rng)));
  for (int64_t i = 0; i < p.pages * kPage * kMlaRow; ++i) {
    uint8_t byte = static_cast<uint8_t>(rng());
    if ((byte & 0x7f) == 0x7f) byte = 0x3c;  // no NaN bytes
    p.cache_fp8.push_back(byte);
    p.cache_bf16.push_back(f32_to_bf16(fp8_e4m3_to_f32(byte) * 0.5f));
  }
  for (int64_t k = 0; k < p.pages - 1; ++k) p.table.push_back(static_cast<int32_t>(p.pages - 1 - k));  // reversed
  p.table.push_back(-1);
  p.seq_lens = {static_cast<int32_t>(L)};
  p.q_start = {0, static_cast<int32_t>(n)};
  return p;
}

TEST(MlaAttentionCpu, OneKeyGivesItsValueAndScore) {
  Problem p = make(3, 1, 1, 1);
  mla_attention(Backend::cpu, p.args(false, 1.0f));
  const int64_t row = p.table[0] * kPage * kMlaRow;  // position 0
  for (int64_t h = 0; h < 3; ++h) {
    double dot = 0;
    for (int64_t d = 0; d < kMlaRow; ++d)
      dot += static_cast<double>(bf16_to_f32(p.q[h * kMlaRow + d])) * bf16_to_f32(p.cache_bf16[row + d]);
    EXPECT_FLOAT_EQ(p.lse[h], static_cast<float>(0.0721687836 * dot));
    for (int64_t d = 0; d < kMlaNope; ++d)  // values (a -0 key value gives +0: 0 + w * -0)
      ASSERT_EQ(bf16_to_f32(p.o[h * kMlaNope + d]), bf16_to_f32(p.cache_bf16[row + d])) << "h " << h << " d " << d;
  }
}

TEST(MlaAttentionCpu, VerifyEqualsDecodePerQuery) {
  const int64_t n = 5, L = 23, H = 2;
  Problem p = make(H, n, L, 2);
  mla_attention(Backend::cpu, p.args(false, 1.0f));
  for (int64_t i = 0; i < n; ++i) {
    Problem d = p;
    d.Tq = 1;
    d.q.assign(p.q.begin() + i * H * kMlaRow, p.q.begin() + (i + 1) * H * kMlaRow);
    d.seq_lens = {static_cast<int32_t>(L - n + i + 1)};
    d.q_start = {0, 1};
    mla_attention(Backend::cpu, d.args(false, 1.0f));
    for (int64_t k = 0; k < H * kMlaNope; ++k) ASSERT_EQ(d.o[k], p.o[i * H * kMlaNope + k]) << "query " << i;
    for (int64_t h = 0; h < H; ++h) ASSERT_EQ(d.lse[h], p.lse[i * H + h]) << "query " << i;
  }
}

TEST(MlaAttentionCpu, Fp8EqualsDequantisedBf16) {
  Problem p = make(4, 3, 30, 3);
  mla_attention(Backend::cpu, p.args(true, 0.5f));
  const std::vector<uint16_t> o8 = p.o;
  const std::vector<float> l8 = p.lse;
  mla_attention(Backend::cpu, p.args(false, 1.0f));
  EXPECT_EQ(o8, p.o);
  EXPECT_EQ(l8, p.lse);
}

TEST(MlaAttentionCpu, NothingToAttend) {
  Problem p = make(2, 3, 1, 4);  // L = 1 < n = 3: queries 0 and 1 see no key
  mla_attention(Backend::cpu, p.args(false, 1.0f));
  for (int64_t k = 0; k < 2 * 2 * kMlaNope; ++k) ASSERT_EQ(p.o[k], 0) << k;
  for (int64_t k = 0; k < 4; ++k) EXPECT_TRUE(std::isinf(p.lse[k]) && p.lse[k] < 0);
  EXPECT_TRUE(std::isfinite(p.lse[4]));
}

TEST(MlaAttentionCpu, BadMetadataNamesTheEntry) {
  Problem p = make(1, 1, 9, 5);
  p.table[1] = static_cast<int32_t>(p.pages);  // position 4's page is outside the cache
  try {
    mla_attention(Backend::cpu, p.args(false, 1.0f));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_table[0, 1]"), std::string::npos) << e.what();
  }
  Problem q = make(1, 1, 9, 6);
  q.q_start = {0, 2};
  EXPECT_THROW(mla_attention(Backend::cpu, q.args(false, 1.0f)), Error);
  Problem r = make(1, 1, 9, 7);
  r.seq_lens = {1000};
  EXPECT_THROW(mla_attention(Backend::cpu, r.args(false, 1.0f)), Error);
  Problem s = make(1, 1, 9, 8);
  EXPECT_THROW(mla_attention(Backend::cpu, s.args(false, 0.5f)), Error);  // bf16 cache needs kv_scale 1
}

}  // namespace
}  // namespace kestrel::ops
