// mla_attention, CPU reference properties (the matrix compares backends with it, so it must be
// right on its own): one key gives o = v and lse = its score; verify (q_len n) equals n decode
// calls with the causal lengths; an fp8 cache equals a bf16 cache holding dec(byte) * scale
// (dequant-then-attend, DESIGN.md principle 3); an fp8 query equals a bf16 query holding its
// decoded values bit for bit (q_scale 1, and any power-of-two q_scale with dec * q_scale in the
// bf16 query), with either cache; the scores use the documented factor (softmax_scale *
// kv_scale * q_scale, in f64); bad metadata is an error that names the entry, a bad q_scale
// one that names q_scale.
#include <gtest/gtest.h>

#include "testing/expect_error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
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
  std::vector<uint8_t> q_fp8;  // random e4m3 bytes (no NaN), independent of q
  std::vector<float> lse;
  std::vector<uint16_t> cache_bf16;
  std::vector<uint8_t> cache_fp8;
  std::vector<int32_t> table, seq_lens, q_start;

  MlaAttentionArgs args(bool fp8, float kv_scale, bool fp8_q = false, float q_scale = 1.0f) {
    MlaAttentionArgs a;
    o.assign(static_cast<size_t>(Tq * H * kMlaNope), 0);
    lse.assign(static_cast<size_t>(Tq * H), 0.0f);
    a.o = TensorView::contiguous(o.data(), Device::cpu, DType::bf16, {Tq, H, kMlaNope});
    a.lse = TensorView::contiguous(lse.data(), Device::cpu, DType::f32, {Tq, H});
    a.q = fp8_q ? TensorView::contiguous(q_fp8.data(), Device::cpu, DType::fp8_e4m3, {Tq, H, kMlaRow})
                : TensorView::contiguous(q.data(), Device::cpu, DType::bf16, {Tq, H, kMlaRow});
    a.cache = fp8 ? TensorView::contiguous(cache_fp8.data(), Device::cpu, DType::fp8_e4m3, {pages, kPage, kMlaRow})
                  : TensorView::contiguous(cache_bf16.data(), Device::cpu, DType::bf16, {pages, kPage, kMlaRow});
    a.block_table = TensorView::contiguous(table.data(), Device::cpu, DType::i32, {B, static_cast<int64_t>(table.size()) / B});
    a.seq_lens = TensorView::contiguous(seq_lens.data(), Device::cpu, DType::i32, {B});
    a.q_start = TensorView::contiguous(q_start.data(), Device::cpu, DType::i32, {B + 1});
    a.softmax_scale = 0.0721687836f;
    a.kv_scale = kv_scale;
    a.q_scale = q_scale;
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
  for (int64_t i = 0; i < n * H * kMlaRow; ++i) {
    uint8_t byte = static_cast<uint8_t>(rng());
    if ((byte & 0x7f) == 0x7f) byte = 0xb8;  // no NaN bytes
    p.q_fp8.push_back(byte);
  }
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

// The CUDA kernel rule (pure, docs/ops/mla_attention.md): automatic is a WGMMA kernel on
// compute capability 9.0 only (the keys-as-M one for fp8 calls with work enough); a forced kernel
// stays forced (supports() then says whether the device and dtypes allow it).
TEST(MlaAttentionRule, CudaKernelChoice) {
  using K = MlaAttentionKernel;
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 8192, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 8, 0, true, 32, 128, 8192, false), K::mma_sync);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 10, 0, true, 32, 128, 8192, false), K::mma_sync);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 12, 0, false, 32, 1, 1024, false), K::mma_sync);
  EXPECT_EQ(mla_attention_cuda_kernel(K::mma_sync, 9, 0, true, 32, 128, 8192, false), K::mma_sync);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma, 8, 6, false, 32, 1, 1024, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma_keys_m, 9, 0, false, 128, 1, 64, false), K::wgmma_keys_m);
  // The keys-as-M kernel: fp8 cache and q, at the exact precision rows > 32 or batch x kv_len >= 24576.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 8, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 1, 128, 1024, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 33, 128, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 2, 8191, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 32768, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 16384, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 1, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 96, 1, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 1, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 33, 1, 1, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 24575, 1, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 24576, 1, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 3, 8191, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 3, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 1, 4096, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 8192, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 8, 9, true, 32, 128, 8192, false), K::mma_sync);
  // At the fast precision v3 at any size, in its wide form (64 query rows per CTA) when 64-row
  // tiles carry less than a quarter padding and batch x ceil(rows / 64) x kv_len >= 98304, or when
  // rows <= 32 and that work is at most 16384; a forced kernel stays forced.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 128, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 128, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 49, 128, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 48, 128, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 96, 128, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 160, 128, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 128, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 128, 8192, false), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 12, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 12, 8191, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 8, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 1, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 1, 32768, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 192, 1, 32768, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 1, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 128, 1, 1024, true), K::wgmma_keys_m);
  // rows <= 32 (the H 32 decode) with little work: wide up to 16384 (B 1 at 8k-16k, B 8 at 1k);
  // the 32-row form at 32768 (B 1 at 32k, B 32 at 1k).
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 8192, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 8, 1024, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 16384, true), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 16385, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 32768, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 32, 1024, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 8, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 33, 1, 1024, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 32, 1, 1024, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 128, 8192, true), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma_keys_m, 9, 0, true, 128, 128, 8192, true), K::wgmma_keys_m);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma_keys_m_wide, 9, 0, true, 32, 1, 64, false), K::wgmma_keys_m_wide);
  // The bf16 keys-as-M kernel: a bf16 cache (any q), the fast precision, rows <= 32, batch x kv_len
  // >= 131072; v2 otherwise; a forced kernel stays forced.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 8192, true, true), K::wgmma_keys_m_bf16);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 1024, true, true), K::wgmma_keys_m_bf16);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 127, 1024, true, true), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 4, 32768, true, true), K::wgmma_keys_m_bf16);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 1, 32768, true, true), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 1, 128, 8192, true, true), K::wgmma_keys_m_bf16);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 33, 128, 8192, true, true), K::wgmma_seesaw64);  // v4 (below)
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 128, 8192, true, true), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 8192, false, true), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 32, 128, 8192, true, false), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 8, 0, false, 32, 128, 8192, true, true), K::mma_sync);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma_keys_m_bf16, 9, 0, true, 128, 1, 64, false), K::wgmma_keys_m_bf16);
  // v4: a bf16 cache (any q), the fast precision, rows > 32, pages of a multiple of 64 keys, and
  // splits of at least 4096 keys (kv_len / the split count for 64-row tiles on num_sms SMs).
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 4096, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 4095, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 8192, true, true, 128, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 8192, true, true, 32, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 8192, false, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 128, 8192, true, false, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, true, 64, 128, 8192, true, false, 64, 132), K::wgmma_keys_m_wide);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 8, 0, false, 64, 128, 8192, true, true, 64, 132), K::mma_sync);
  // B 32 H 128 (two row tiles): 64 CTAs x 2 splits of 4096 keys at 8k: yes; B 8: 16 CTAs x 8 splits,
  // of 1024 keys at 8k, of 4096 at 32k; B 1 H 128: 66 splits, 32768 / 66 = 496 keys.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 32, 8192, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 8, 8192, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 8, 32768, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 1, 32768, true, true, 64, 132), K::wgmma);
  // Shorter splits when the batch's 64-row tiles outnumber the SMs (v4 walks the batch), from 1024
  // keys: B 128 H 128 at 1k (256 tiles); not at 1023 keys, nor at 132 tiles on 132 SMs.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 128, 1024, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 128, 1023, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 133, 1024, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 64, 132, 1024, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 65, 66, 1024, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 65, 67, 1024, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 128, 1024, true, true, 32, 132), K::wgmma);
  // Without the walk, kMlaAttentionSeesaw64SharedMinRowTiles = 3 or more row tiles a sequence
  // (rows > 128) from splits of kMlaAttentionSeesaw64SharedMinSplitKeys = 640 keys: B 44 verify 2
  // at H 96 (132 tiles, one split) at 640 keys yes, 639 no; B 8 verify 8 at H 128 (16 row tiles,
  // one split) at 1k yes; two row tiles a sequence (rows 128: B 66, one split of 1024 keys) no; B
  // 1 H 96 verify 8 at 8k (12 tiles, 11 splits of 744 keys) yes, at 4k (372 keys) no; pages of 32
  // keys no.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 192, 44, 640, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 192, 44, 639, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 1024, 8, 1024, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 66, 1024, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 768, 1, 8192, true, true, 64, 132), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 768, 1, 4096, true, true, 64, 132), K::wgmma);
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 1024, 8, 1024, true, true, 32, 132), K::wgmma);
  // Fewer SMs, fewer splits: B 8 H 128 at 8k on 16 SMs is one split of 8192.
  EXPECT_EQ(mla_attention_cuda_kernel(K::automatic, 9, 0, false, 128, 8, 8192, true, true, 64, 16), K::wgmma_seesaw64);
  EXPECT_EQ(mla_attention_cuda_kernel(K::wgmma_seesaw64, 9, 0, true, 32, 1, 64, false, false, 16, 132), K::wgmma_seesaw64);
}

// v4's split count (pure, docs/ops/mla_attention.md) on 132 SMs: the plan's unless another with
// splits of 4096 keys or more costs under 15/16 of it in waves x (keys a CTA + 512).
TEST(MlaAttentionRule, Seesaw64SplitsBalanceTheWaves) {
  // B 32 H 96 verify 4 (6 row tiles, 192 on 132 SMs): walked, 2 waves of 32k; 2 splits, 3 waves of 16k.
  EXPECT_EQ(mla_attention_seesaw64_splits(32, 6, 32768, 132, 1), 2);
  EXPECT_EQ(mla_attention_seesaw64_splits(32, 6, 8192, 132, 1), 2);
  EXPECT_EQ(mla_attention_seesaw64_splits(32, 6, 8191, 132, 1), 1);  // 2 splits would be under 4096 keys
  // B 8 H 96 verify 4 (48 tiles): the plan's 2 splits fill 96 SMs; 8 fill 3 waves of 384 CTAs.
  EXPECT_EQ(mla_attention_seesaw64_splits(8, 6, 32768, 132, 2), 8);
  EXPECT_EQ(mla_attention_seesaw64_splits(8, 12, 32768, 132, 1), 4);
  EXPECT_EQ(mla_attention_seesaw64_splits(32, 3, 32768, 132, 1), 4);
  // Balanced already: B 128 H 128 decode and verify 4 / 8 at H 32 (2 or 4 tiles a sequence) stay walked.
  EXPECT_EQ(mla_attention_seesaw64_splits(128, 2, 8192, 132, 1), 1);
  EXPECT_EQ(mla_attention_seesaw64_splits(128, 4, 8192, 132, 1), 1);
  EXPECT_EQ(mla_attention_seesaw64_splits(128, 2, 32768, 132, 1), 1);
  // Short keys: the plan stays (v4's splits would fall under 4096 keys).
  EXPECT_EQ(mla_attention_seesaw64_splits(128, 8, 1024, 132, 1), 1);
  EXPECT_EQ(mla_attention_seesaw64_splits(8, 2, 8192, 132, 8), 8);
}

// v3 wide's walk with the lead (pure): one split past one wave, floor(SMs / row tiles) CTAs a row
// tile (at least one, at most the batch); none with splits (partials, no o boxes) or within a wave.
TEST(MlaAttentionRule, KeysMWideWalksPastOneWave) {
  EXPECT_EQ(mla_attention_keys_m_walkers(128, 2, 1, 132), 66);  // decode B128 H 128, verify 4 B128 H 32: 256 row tiles
  EXPECT_EQ(mla_attention_keys_m_walkers(140, 1, 1, 132), 132);
  EXPECT_EQ(mla_attention_keys_m_walkers(66, 2, 1, 132), 0);    // 132 row tiles: one wave
  EXPECT_EQ(mla_attention_keys_m_walkers(128, 2, 2, 132), 0);   // splits
  EXPECT_EQ(mla_attention_keys_m_walkers(3, 200, 1, 132), 1);   // more row tiles a sequence than SMs
  EXPECT_EQ(mla_attention_keys_m_walkers(0, 2, 1, 132), 0);
}

// v3's split count (pure, docs/ops/mla_attention.md) on 132 SMs: v4's balance with splits of
// 1024 keys or more and no walk. The H 96 batches whose row tiles leave SMs idle rebalance.
TEST(MlaAttentionRule, KeysMSplitsBalanceTheWaves) {
  // B 32 H 96 decode (3 tiles of 32 rows) and verify 2 (3 of 64): 96 CTAs on 132 SMs; from ~11k
  // keys 4 splits, 3 waves (at 8k the three CTA costs outweigh the idle SMs: measured 0.976x).
  EXPECT_EQ(mla_attention_keys_m_splits(32, 3, 8192, 132, 1), 1);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 3, 16384, 132, 1), 4);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 3, 32768, 132, 1), 4);
  // B 32 H 96 verify 4 (192 tiles): two waves, the second half empty; 2 splits fill 3 waves.
  EXPECT_EQ(mla_attention_keys_m_splits(32, 6, 8192, 132, 1), 2);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 6, 32768, 132, 1), 2);
  // B 8 H 96 verify 4 (48 tiles, the plan's 2 splits on 96 SMs): 5 splits in two waves from ~15k
  // (measured 1.10x at 16k; at 8k 1.05x, under the 15/16 margin). Verify 8 (96 tiles): from ~11k.
  EXPECT_EQ(mla_attention_keys_m_splits(8, 6, 8192, 132, 2), 2);
  EXPECT_EQ(mla_attention_keys_m_splits(8, 6, 16384, 132, 2), 5);
  EXPECT_EQ(mla_attention_keys_m_splits(8, 6, 32768, 132, 2), 5);
  EXPECT_EQ(mla_attention_keys_m_splits(8, 12, 8192, 132, 1), 1);
  EXPECT_EQ(mla_attention_keys_m_splits(8, 12, 16384, 132, 1), 4);
  EXPECT_EQ(mla_attention_keys_m_splits(8, 12, 32768, 132, 1), 4);
  // No walk: at s = 1, 384 tiles are 3 waves (v4 would count its walk, the same here).
  EXPECT_EQ(mla_attention_keys_m_splits(128, 3, 8192, 132, 1), 1);
  // Balanced already: B 32 H 128 decode (2 wide tiles, 2 splits), B 32 H 32 decode (4 splits),
  // B 128 H 32 decode, B 32 H 128 verify 2.
  EXPECT_EQ(mla_attention_keys_m_splits(32, 2, 8192, 132, 2), 2);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 1, 8192, 132, 4), 4);
  EXPECT_EQ(mla_attention_keys_m_splits(128, 1, 32768, 132, 1), 1);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 4, 32768, 132, 1), 1);
  // Short keys: the plan stays (splits would fall under 1024 keys, or save too little).
  EXPECT_EQ(mla_attention_keys_m_splits(32, 3, 1024, 132, 1), 1);
  EXPECT_EQ(mla_attention_keys_m_splits(32, 3, 4096, 132, 1), 1);
  EXPECT_EQ(mla_attention_keys_m_splits(1, 1, 32768, 132, 132), 132);
  // A count chosen never costs more than the plan's (random shapes, v3's model restated).
  std::mt19937_64 rng(3901);
  const auto cost = [](int64_t B, int64_t rt, int64_t kv, int64_t s) {
    return (B * rt * s + 131) / 132 * ((kv + s - 1) / s + kMlaAttentionKeysMCtaCostKeys);
  };
  for (int iter = 0; iter < 300; ++iter) {
    const int64_t B = 1 + static_cast<int64_t>(rng() % 200), rt = 1 + static_cast<int64_t>(rng() % 16);
    const int64_t kv = 64 * (1 + static_cast<int64_t>(rng() % 1024));
    const int64_t plan = mla_attention_num_splits(B, rt, kv, 132), s = mla_attention_keys_m_splits(B, rt, kv, 132, plan);
    if (s == plan) continue;
    EXPECT_GE(kv / s, kMlaAttentionKeysMMinSplitKeys) << "B " << B << " tiles " << rt << " kv " << kv;
    EXPECT_LT(16 * cost(B, rt, kv, s), 15 * cost(B, rt, kv, plan)) << "B " << B << " tiles " << rt << " kv " << kv;
  }
}

// v4's flattened schedule (pure): every planned tile of every sequence lies in exactly one
// part's run, each sequence's segments take slots 0 .. n(b) - 1 in order, a sequence of one
// segment is whole, the grid is one wave, no part goes without an item, and no part streams more
// than its run less the leads of the sequences it starts. Random shapes, then pinned ones.
TEST(MlaAttentionRule, Seesaw64FlatPlanCoversEveryTileOnce) {
  std::mt19937_64 rng(3201);
  int taken = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int64_t B = 1 + static_cast<int64_t>(rng() % 200), row_tiles = 1 + static_cast<int64_t>(rng() % 20);
    const int64_t kv_len = 1 + static_cast<int64_t>(rng() % 40000), sms = 1 + static_cast<int64_t>(rng() % 140);
    const MlaFlatPlan f = mla_attention_seesaw64_flat_plan(B, row_tiles, kv_len, sms);
    if (f.parts == 0) continue;
    ++taken;
    const std::string what = "B " + std::to_string(B) + " row tiles " + std::to_string(row_tiles) + " kv " +
                             std::to_string(kv_len) + " SMs " + std::to_string(sms);
    ASSERT_EQ(f.tiles, (kv_len + 63) / 64) << what;
    ASSERT_LE(f.parts * row_tiles, sms) << what;
    ASSERT_GE(f.slots, 2) << what;
    std::vector<int> seen(static_cast<size_t>(B * f.tiles), 0);
    std::vector<int64_t> next_slot(static_cast<size_t>(B), 0), max_slots(1, 0);
    int64_t most = 0;
    ASSERT_TRUE(f.lead == kMlaAttentionSeesaw64FlatLeadTiles || f.lead == 0) << what;
    ASSERT_GT(f.run, f.lead) << what;
    const int64_t v = f.tiles + f.lead;
    for (int64_t z = 0; z < f.parts; ++z) {  // the kernel's loop (for_each_item)
      const int64_t g0 = z * f.run, g1 = std::min(g0 + f.run, B * v);
      int64_t items = 0, streamed = 0, starts = 0;
      for (int64_t b = g0 / v; b * v + f.lead < g1; ++b) {
        const int64_t lo = std::max<int64_t>(g0 - b * v - f.lead, 0), hi = std::min<int64_t>(g1 - b * v - f.lead, f.tiles);
        const int64_t slot = z - mla_flat_first_part(b, f.tiles, f.lead, f.run), n = mla_flat_segments(b, f.tiles, f.lead, f.run);
        ASSERT_EQ(slot, next_slot[b]) << what << ": sequence " << b;
        ASSERT_LT(slot, n) << what;
        ASSERT_LT(lo, hi) << what << ": part " << z << " sequence " << b;
        ++next_slot[b];
        if (n == 1) {
          ASSERT_EQ(lo, 0) << what;
          ASSERT_EQ(hi, f.tiles) << what;
        }
        for (int64_t t = lo; t < hi; ++t) ++seen[b * f.tiles + t];
        ++items;
        streamed += hi - lo;
        starts += b * v >= g0;
      }
      ASSERT_GT(items, 0) << what << ": part " << z;
      ASSERT_LE(streamed + f.lead * starts, f.run) << what << ": part " << z;
    }
    for (int64_t b = 0; b < B; ++b) {
      ASSERT_EQ(next_slot[b], mla_flat_segments(b, f.tiles, f.lead, f.run)) << what << ": sequence " << b;
      most = std::max(most, next_slot[b]);
    }
    ASSERT_EQ(most, f.slots) << what;
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << what << ": tile " << i;
  }
  EXPECT_GT(taken, 100);
  // B 8 at 8k keys, H 96 verify 4 (6 row tiles) on 132 SMs: 22 parts of 49 virtual tiles (8
  // sequences of 128 tiles and a lead of 5; the uniform plan: 96 CTAs); B 128 H 128 decode at 8k:
  // 66 parts of 258 (against 2 walked sequences of 128). One row tile a sequence at one part: not
  // taken. Runs no longer than the lead: no leads.
  const MlaFlatPlan b8 = mla_attention_seesaw64_flat_plan(8, 6, 8192, 132);
  EXPECT_EQ(b8.parts, 22);
  EXPECT_EQ(b8.run, 49);
  EXPECT_EQ(b8.lead, 5);
  EXPECT_EQ(b8.slots, 4);
  EXPECT_EQ(mla_flat_run_keys(8, b8), 3008);
  const MlaFlatPlan b128 = mla_attention_seesaw64_flat_plan(128, 2, 8192, 132);
  EXPECT_EQ(b128.parts, 66);
  EXPECT_EQ(b128.run, 258);
  EXPECT_EQ(b128.slots, 2);
  const MlaFlatPlan short_runs = mla_attention_seesaw64_flat_plan(2, 1, 256, 8);  // 8 tiles on 8 parts
  EXPECT_EQ(short_runs.lead, 0);
  EXPECT_EQ(short_runs.run, 1);
  EXPECT_EQ(short_runs.parts, 8);
  EXPECT_EQ(mla_attention_seesaw64_flat_plan(4, 132, 8192, 132).parts, 0);
  EXPECT_EQ(mla_attention_seesaw64_flat_plan(132, 1, 8192, 132).parts, 0);  // one sequence a part: none cut
}

// When `automatic` takes v4's flattened runs (mla_attention_seesaw64_flat_wins), on the grid
// at 132 SMs: the five shapes whose uniform splits run 2.9 waves without walking (measured 1.07-
// 1.15x faster flattened, H100, thirty-third session) and those whose one wave is 96 CTAs (B 8
// verify 4 / 8, B 32 verify 2, H 96) at 8k and 16k take it (forty-second session); a nearly full
// wave (B 32 decode at H 96: 128 CTAs; B 8 verify 2 at H 96: 120), a walked batch (B 128), one
// split of 4096 keys (the 96-CTA shapes at 4k: 0.89-0.95x) and runs of 1k keys keep the uniform
// splits.
TEST(MlaAttentionRule, Seesaw64FlatScheduleWhereMeasuredFaster) {
  const auto takes = [](int64_t B, int64_t row_tiles, int64_t kv_len) {
    const int64_t splits = mla_attention_seesaw64_splits(B, row_tiles, kv_len, 132, mla_attention_num_splits(B, row_tiles, kv_len, 132));
    return mla_attention_seesaw64_flat_wins(B, row_tiles, splits, 132, mla_attention_seesaw64_flat_plan(B, row_tiles, kv_len, 132));
  };
  EXPECT_TRUE(takes(8, 6, 32768));    // verify 4, H 96, B 8 at 32k: 1.15x
  EXPECT_TRUE(takes(32, 6, 8192));    // verify 4, B 32 at 8k: 1.08x
  EXPECT_TRUE(takes(32, 3, 32768));   // verify 2, B 32 at 32k: 1.08x
  EXPECT_TRUE(takes(32, 6, 32768));   // verify 4, B 32 at 32k: 1.12x
  EXPECT_TRUE(takes(8, 12, 32768));   // verify 8, B 8 at 32k: 1.07x
  EXPECT_TRUE(takes(8, 6, 8192));     // verify 4, B 8 at 8k, 96 CTAs of 2 splits, runs of 3008 keys: 1.085x
  EXPECT_TRUE(takes(8, 6, 16384));    // and at 16k: 1.16x
  EXPECT_TRUE(takes(8, 12, 8192));    // verify 8, B 8, 96 CTAs of one split, runs of 6016 keys: 1.10x
  EXPECT_TRUE(takes(8, 12, 16384));   // 1.09x
  EXPECT_TRUE(takes(32, 3, 8192));    // verify 2, B 32, 96 CTAs: 1.01x
  EXPECT_TRUE(takes(32, 3, 16384));   // 1.09x
  EXPECT_FALSE(takes(8, 12, 4096));   // one split of 4096 keys against runs of 3008: 0.95x
  EXPECT_FALSE(takes(32, 3, 4096));   // 0.89x
  EXPECT_FALSE(takes(32, 2, 8192));   // decode H 96, B 32 at 8k, 128 CTAs: 0.89x
  EXPECT_FALSE(takes(8, 3, 8192));    // verify 2, B 8, 120 CTAs: 0.85x
  EXPECT_FALSE(takes(8, 12, 1024));   // verify 8, B 8 at 1k, 96 CTAs: runs of 768 keys
  EXPECT_FALSE(takes(128, 12, 8192)); // verify 8, B 128: walked
  EXPECT_FALSE(takes(128, 2, 1024));  // decode, B 128 at 1k: walked, runs of 1k
  // Past one wave but runs of fewer than kMlaAttentionSeesaw64MinSplitKeys keys: not taken.
  const MlaFlatPlan f = mla_attention_seesaw64_flat_plan(40, 6, 2048, 132);
  ASSERT_GT(f.parts, 0);
  EXPECT_LT(mla_flat_run_keys(40, f), kMlaAttentionSeesaw64MinSplitKeys);
  EXPECT_FALSE(mla_attention_seesaw64_flat_wins(40, 6, 2, 132, f));
  EXPECT_TRUE(mla_attention_seesaw64_flat_wins(40, 6, 2, 132, mla_attention_seesaw64_flat_plan(40, 6, 8192, 132)));
  EXPECT_FALSE(mla_attention_seesaw64_flat_wins(40, 6, 1, 132, mla_attention_seesaw64_flat_plan(40, 6, 8192, 132)));  // walked
  // One wave: taken where at least an eighth of the SMs would idle (108 of 132 CTAs; 120 keep the
  // uniform splits), with runs of at least kMlaAttentionSeesaw64MinSplitKeys keys over one split,
  // or kMlaAttentionSeesaw64FlatIdleMinKeys over splits.
  const MlaFlatPlan one = mla_attention_seesaw64_flat_plan(9, 12, 8192, 132), nearly_full = mla_attention_seesaw64_flat_plan(10, 12, 8192, 132);
  ASSERT_GT(one.parts, 0);
  ASSERT_GT(nearly_full.parts, 0);
  ASSERT_GE(mla_flat_run_keys(10, nearly_full), kMlaAttentionSeesaw64FlatIdleMinKeys);
  EXPECT_TRUE(mla_attention_seesaw64_flat_wins(9, 12, 1, 132, one));             // 108 CTAs
  EXPECT_FALSE(mla_attention_seesaw64_flat_wins(10, 12, 1, 132, nearly_full));   // 120 CTAs
  const MlaFlatPlan runs_3008 = mla_attention_seesaw64_flat_plan(8, 12, 4096, 132);  // 96 row tiles
  ASSERT_GT(runs_3008.parts, 0);
  ASSERT_EQ(mla_flat_run_keys(8, runs_3008), 3008);
  EXPECT_FALSE(mla_attention_seesaw64_flat_wins(8, 12, 1, 132, runs_3008));  // one split: runs under 4096 keys
  EXPECT_TRUE(mla_attention_seesaw64_flat_wins(8, 6, 2, 132, mla_attention_seesaw64_flat_plan(8, 6, 8192, 132)));  // 3008 over splits
  const MlaFlatPlan runs_1536 = mla_attention_seesaw64_flat_plan(8, 6, 4096, 132);
  ASSERT_GT(runs_1536.parts, 0);
  ASSERT_LT(mla_flat_run_keys(8, runs_1536), kMlaAttentionSeesaw64FlatIdleMinKeys);
  EXPECT_FALSE(mla_attention_seesaw64_flat_wins(8, 6, 2, 132, runs_1536));  // over splits, runs under 2048 keys
}

// The split count (pure, docs/ops/mla_attention.md) on 132 SMs: one wave of CTAs, splits of at
// least 64 keys of the planning length, or of 32 where that grid leaves half the SMs free.
TEST(MlaAttentionRule, SplitCount) {
  EXPECT_EQ(mla_attention_num_splits(1, 1, 1024, 132), 32);     // B = 1, H = 32: 32 splits of 32
  EXPECT_EQ(mla_attention_num_splits(1, 1, 2048, 132), 64);     // 64 of 32: 64 CTAs, half of 132 free
  EXPECT_EQ(mla_attention_num_splits(1, 1, 4096, 132), 64);     // 64 of 64 (128 of 32 would not leave half)
  EXPECT_EQ(mla_attention_num_splits(1, 1, 8192, 132), 128);
  EXPECT_EQ(mla_attention_num_splits(1, 1, 32768, 132), 132);   // one CTA per SM
  EXPECT_EQ(mla_attention_num_splits(1, 2, 1024, 132), 32);     // H = 96 / 128, or verify 4 at H = 32
  EXPECT_EQ(mla_attention_num_splits(1, 3, 1024, 132), 16);     // verify 2 at H = 96: 96 CTAs of 32 would not
  EXPECT_EQ(mla_attention_num_splits(1, 4, 1024, 132), 16);     // verify 8 at H = 32
  EXPECT_EQ(mla_attention_num_splits(8, 1, 1024, 132), 16);     // B = 8
  EXPECT_EQ(mla_attention_num_splits(8, 1, 8192, 132), 16);
  EXPECT_EQ(mla_attention_num_splits(128, 1, 8192, 132), 1);
  EXPECT_EQ(mla_attention_num_splits(128, 2, 8192, 132), 1);    // more CTAs than SMs: one split
  EXPECT_EQ(mla_attention_num_splits(1, 1, 40, 132), 1);        // shorter than one short split
  EXPECT_EQ(mla_attention_num_splits(1, 1, 1 << 20, 132), 132);
  EXPECT_EQ(mla_attention_num_splits(1, 1, 1 << 20, 600), kMlaAttentionMaxSplits);
  for (int64_t kv : {32, 64, 1000, 1024, 2047, 2048, 4096, 8192, 32768})
    for (int64_t base : {1, 2, 3, 8, 33, 128})
      for (int64_t sms : {78, 132}) {
        const int64_t s = mla_attention_num_splits(base, 1, kv, sms);
        EXPECT_GE(s, 1);
        EXPECT_LE(s, kMlaAttentionMaxSplits);
        EXPECT_LE(base * s, std::max<int64_t>(base, sms)) << kv << " " << base << " " << sms;  // one wave
        EXPECT_GE(kv / s, std::min<int64_t>(kv, kMlaAttentionShortSplitKeys)) << kv << " " << base << " " << sms;
      }
}

// The look-ahead rule (pure, docs/ops/mla_attention.md): TMA mode, splits of at least 1024 keys,
// and not with P rounded once over at most 32 rows (the memory-bound decode at H = 32).
TEST(MlaAttentionRule, Lookahead) {
  EXPECT_TRUE(mla_attention_lookahead(true, true, 8192, 32));     // B128 8k H32 decode, exact
  EXPECT_FALSE(mla_attention_lookahead(true, false, 8192, 32));   // ... P rounded once
  EXPECT_TRUE(mla_attention_lookahead(true, false, 8192, 33));
  EXPECT_TRUE(mla_attention_lookahead(true, false, 8192, 128));   // H = 128, or verify 4 at H = 32
  EXPECT_TRUE(mla_attention_lookahead(true, true, 1024, 1));
  EXPECT_FALSE(mla_attention_lookahead(true, true, 1023, 128));   // B8 8k: 16 splits of 512
  EXPECT_FALSE(mla_attention_lookahead(false, true, 8192, 128));  // fp8 caches, bf16 relayout
  EXPECT_FALSE(mla_attention_lookahead(true, true, 0, 128));
  // With the split count: B = 1 never (splits of at most 256 keys at 32k), B = 128 at 8k always.
  for (int64_t kv : {1024, 8192, 32768}) {
    const int64_t s = mla_attention_num_splits(1, 1, kv, 132);
    EXPECT_FALSE(mla_attention_lookahead(true, true, (kv + s - 1) / s, 32)) << kv;
    const int64_t s128 = mla_attention_num_splits(128, 1, kv, 132);
    EXPECT_EQ(mla_attention_lookahead(true, true, (kv + s128 - 1) / s128, 32), kv >= 1024) << kv;
  }
}

// The combine rules (pure, docs/ops/mla_attention.md): a quarter row per CTA up to num_sms rows;
// launched early (a programmatic dependent) behind grids that leave half the SMs free; and Q by
// tensor copy for splits of at most 2048 keys.
// One warp per row for many rows and at most 4 splits (B = 32 at 32k keys, H = 32: 1024 rows of 4
// splits); a row per CTA beyond that and for few rows.
TEST(MlaAttentionRule, CombineByWarps) {
  EXPECT_TRUE(mla_attention_combine_by_warps(1024, 4, 132));
  EXPECT_TRUE(mla_attention_combine_by_warps(133, 2, 132));
  EXPECT_FALSE(mla_attention_combine_by_warps(1024, 5, 132));
  EXPECT_FALSE(mla_attention_combine_by_warps(132, 4, 132));
  EXPECT_FALSE(mla_attention_combine_by_warps(1024, 1, 132));
  static_assert(mla_attention_combine_by_warps(4096, kMlaAttentionCombineWarpMaxSplits, 132));
}

TEST(MlaAttentionRule, CombinePartsSpreadFewRows) {
  EXPECT_EQ(mla_attention_combine_parts(1, 132), 4);
  EXPECT_EQ(mla_attention_combine_parts(32, 132), 4);
  EXPECT_EQ(mla_attention_combine_parts(132, 132), 4);
  EXPECT_EQ(mla_attention_combine_parts(133, 132), 1);
  EXPECT_EQ(mla_attention_combine_parts(4096, 132), 1);
  EXPECT_EQ(mla_attention_combine_parts(96, 78), 1);
  EXPECT_TRUE(mla_attention_combine_early(32, 132));   // B = 1, H = 32, 1k keys: 32 splits
  EXPECT_TRUE(mla_attention_combine_early(66, 132));
  EXPECT_FALSE(mla_attention_combine_early(67, 132));
  EXPECT_FALSE(mla_attention_combine_early(128, 132));  // B = 1 at 8k keys: 128 splits
  EXPECT_TRUE(mla_attention_q_by_tensor_copy(1024, 32));   // B = 1, 1k keys: 32 keys a split
  EXPECT_TRUE(mla_attention_q_by_tensor_copy(32768, 16));  // exactly 2048
  EXPECT_FALSE(mla_attention_q_by_tensor_copy(32769, 16));
  EXPECT_FALSE(mla_attention_q_by_tensor_copy(8192, 1));   // B = 128 at 8k keys: one split
}

TEST(MlaAttentionRule, Seesaw64OBoxesForShortSplits) {
  EXPECT_TRUE(mla_attention_seesaw64_o_boxes(1024, 1));   // B 128 at 1k keys (measured 1.02-1.05x)
  EXPECT_TRUE(mla_attention_seesaw64_o_boxes(2048, 1));   // the bound
  EXPECT_FALSE(mla_attention_seesaw64_o_boxes(2049, 1));
  EXPECT_FALSE(mla_attention_seesaw64_o_boxes(4096, 1));  // neutral there
  EXPECT_FALSE(mla_attention_seesaw64_o_boxes(8192, 1));  // B 128 at 8k keys (0.98x)
  EXPECT_TRUE(mla_attention_seesaw64_o_boxes(8192, 4));   // keys a split
  EXPECT_FALSE(mla_attention_seesaw64_o_boxes(8193, 4));
  EXPECT_FALSE(mla_attention_seesaw64_o_boxes(1024, 0));  // no plan
}

// v3 wide's o boxes: one split (partials stay f32 rows), whatever its length (the 2048-key bound
// went in the forty-ninth session, measured in the forty-eighth with the spill-free stores).
TEST(MlaAttentionRule, KeysMOBoxesForOneSplit) {
  EXPECT_TRUE(mla_attention_keys_m_o_boxes(1));
  EXPECT_FALSE(mla_attention_keys_m_o_boxes(2));  // partials
  EXPECT_FALSE(mla_attention_keys_m_o_boxes(4));  // (unlike v4's: splits write partials here)
  EXPECT_FALSE(mla_attention_keys_m_o_boxes(0));  // no plan
}

// v3's partial boxes (the 32-row form): splits of at most 2048 keys of the planning length.
TEST(MlaAttentionRule, KeysMPartialBoxesForShortSplits) {
  EXPECT_FALSE(mla_attention_keys_m_partial_boxes(1024, 1));   // one split writes o
  EXPECT_FALSE(mla_attention_keys_m_partial_boxes(1024, 0));   // no plan
  EXPECT_TRUE(mla_attention_keys_m_partial_boxes(1024, 32));   // B 1 at 1k keys
  EXPECT_TRUE(mla_attention_keys_m_partial_boxes(8192, 8));    // decode B8 8k H 32 (measured 1.09x)
  EXPECT_TRUE(mla_attention_keys_m_partial_boxes(32768, 16));  // exactly 2048 (B8 32k: 1.014x)
  EXPECT_FALSE(mla_attention_keys_m_partial_boxes(32769, 16));
  EXPECT_FALSE(mla_attention_keys_m_partial_boxes(32768, 8));  // 4096 keys a split (0.985-0.988x)
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

// Every e4m3 value is a bf16 value, and dec(byte) * 2^k too (no bf16 underflow): the bf16 query
// holding dec(q) * q_scale gives the bits of the fp8 query with q_scale, for q_scale 1 and
// powers of two (in f64, ((softmax_scale * kv_scale) * 2^k) * dot == (softmax_scale * kv_scale)
// * (2^k dot) exactly), with a bf16 and with an fp8 cache.
TEST(MlaAttentionCpu, Fp8QueryEqualsDequantisedBf16Query) {
  for (bool fp8_cache : {false, true})
    for (float q_scale : {1.0f, 0.25f, 8.0f}) {
      SCOPED_TRACE(std::string(fp8_cache ? "fp8 cache" : "bf16 cache") + ", q_scale " + std::to_string(q_scale));
      Problem p = make(4, 3, 30, 9);
      const float kv_scale = fp8_cache ? 0.5f : 1.0f;
      mla_attention(Backend::cpu, p.args(fp8_cache, kv_scale, true, q_scale));
      const std::vector<uint16_t> o8 = p.o;
      const std::vector<float> l8 = p.lse;
      for (size_t i = 0; i < p.q.size(); ++i) {
        const float v = fp8_e4m3_to_f32(p.q_fp8[i]) * q_scale;
        p.q[i] = f32_to_bf16(v);
        ASSERT_EQ(bf16_to_f32(p.q[i]), v) << "not exact in bf16: byte " << int(p.q_fp8[i]);
      }
      mla_attention(Backend::cpu, p.args(fp8_cache, kv_scale));
      EXPECT_EQ(o8, p.o);
      EXPECT_EQ(l8, p.lse);
      bool any_nonzero = false;
      for (uint16_t x : o8) any_nonzero |= (x & 0x7fff) != 0;
      EXPECT_TRUE(any_nonzero);
    }
}

// The documented score: s = (softmax_scale * kv_scale * q_scale) * sum_d dec(q_d) dec(k_d),
// the factor left to right in f64 from the f32 scalars, the sum in f64; with one key lse = s.
// q_scale 0.75 (not a power of two) and an fp8 query and cache.
TEST(MlaAttentionCpu, Fp8QueryScoreUsesTheFoldedScale) {
  Problem p = make(3, 1, 1, 10);
  const float q_scale = 0.75f, kv_scale = 0.5f;
  const MlaAttentionArgs a = p.args(true, kv_scale, true, q_scale);
  mla_attention(Backend::cpu, a);
  const int64_t row = p.table[0] * kPage * kMlaRow;  // position 0
  for (int64_t h = 0; h < 3; ++h) {
    double dot = 0;
    for (int64_t d = 0; d < kMlaRow; ++d)
      dot += static_cast<double>(fp8_e4m3_to_f32(p.q_fp8[h * kMlaRow + d])) * fp8_e4m3_to_f32(p.cache_fp8[row + d]);
    const double factor = static_cast<double>(a.softmax_scale) * static_cast<double>(kv_scale) * static_cast<double>(q_scale);
    EXPECT_EQ(p.lse[h], static_cast<float>(factor * dot)) << "h " << h;
    for (int64_t d = 0; d < kMlaNope; ++d)  // one key: o = dec(v) * kv_scale
      ASSERT_EQ(bf16_to_f32(p.o[h * kMlaNope + d]), bf16_to_f32(f32_to_bf16(fp8_e4m3_to_f32(p.cache_fp8[row + d]) * kv_scale)))
          << "h " << h << " d " << d;
  }
}

TEST(MlaAttentionCpu, QScaleIsChecked) {
  using testing_util::throws_error_with;
  Problem p = make(2, 1, 5, 11);
  // bf16 q: q_scale must be exactly 1.
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, p.args(false, 1.0f, false, 0.5f)); },
                                {"mla_attention", "q_scale", "bf16 q"}));
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, p.args(true, 0.5f, false, 2.0f)); },
                                {"q_scale", "bf16 q"}));
  // fp8 q: positive and finite.
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, p.args(true, 0.5f, true, bad)); },
                                  {"q_scale", "positive finite"}));
  // q dtypes other than bf16 and fp8 are refused, naming q.
  MlaAttentionArgs a = p.args(false, 1.0f);
  std::vector<float> qf(static_cast<size_t>(p.Tq * p.H * kMlaRow), 0.0f);
  a.q = TensorView::contiguous(qf.data(), Device::cpu, DType::f32, {p.Tq, p.H, kMlaRow});
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"q", "bf16 or fp8_e4m3", "f32"}));
  // Accepted: fp8 q with any positive finite q_scale, bf16 q with 1.
  EXPECT_NO_THROW(mla_attention(Backend::cpu, p.args(false, 1.0f, true, 3.0f)));
  EXPECT_NO_THROW(mla_attention(Backend::cpu, p.args(false, 1.0f, false, 1.0f)));
}

// The precision is exact or fast; the CPU backend computes exactly in both (bit-identical),
// and a value outside the enum is refused naming precision.
TEST(MlaAttentionCpu, PrecisionIsCheckedAndTheCpuComputesExactlyInBoth) {
  using testing_util::throws_error_with;
  Problem p = make(3, 2, 40, 12);
  MlaAttentionArgs a = p.args(true, 0.5f);
  mla_attention(Backend::cpu, a);
  const std::vector<uint16_t> exact = p.o;
  a.precision = MlaAttentionPrecision::fast;
  std::fill(p.o.begin(), p.o.end(), uint16_t{0x7fc0});  // poisoned (bf16 NaN) before the call
  mla_attention(Backend::cpu, a);
  EXPECT_EQ(p.o, exact);
  a.precision = static_cast<MlaAttentionPrecision>(7);
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "precision", "exact", "7"}));
}

// A cuda_kernel outside the enum is refused naming it, on every backend (the argument checks are
// shared), instead of reaching the CUDA dispatch.
TEST(MlaAttentionCpu, CudaKernelOutsideTheEnumIsRefused) {
  using testing_util::throws_error_with;
  Problem p = make(3, 2, 40, 12);
  MlaAttentionArgs a = p.args(true, 0.5f);
  a.cuda_kernel = MlaAttentionKernel::wgmma_seesaw64;  // the last value: accepted (the CPU ignores it)
  mla_attention(Backend::cpu, a);
  a.cuda_kernel = static_cast<MlaAttentionKernel>(static_cast<int>(MlaAttentionKernel::wgmma_seesaw64) + 1);
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "cuda_kernel", "wgmma_seesaw64", "7"}));
  a.cuda_kernel = MlaAttentionKernel::automatic;
  a.cuda_schedule = MlaAttentionSchedule::flat;  // the last value: accepted
  mla_attention(Backend::cpu, a);
  a.cuda_schedule = static_cast<MlaAttentionSchedule>(3);
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "cuda_schedule", "::flat", "3"}));
}

// A forced split count outside 1 .. 256, or beside the flattened schedule (which plans its own
// segments), is refused naming cuda_splits and the value; a count inside is accepted (the CPU
// ignores it).
TEST(MlaAttentionCpu, CudaSplitsOutsideItsRangeIsRefused) {
  using testing_util::throws_error_with;
  Problem p = make(3, 2, 40, 12);
  MlaAttentionArgs a = p.args(true, 0.5f);
  a.cuda_splits = static_cast<int32_t>(kMlaAttentionMaxSplits);
  mla_attention(Backend::cpu, a);
  a.cuda_splits = static_cast<int32_t>(kMlaAttentionMaxSplits) + 1;
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "cuda_splits", "1 .. 256", "257"}));
  a.cuda_splits = -1;
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "cuda_splits", "-1"}));
  a.cuda_splits = 3;
  a.cuda_schedule = MlaAttentionSchedule::flat;
  EXPECT_TRUE(throws_error_with([&] { mla_attention(Backend::cpu, a); }, {"mla_attention", "cuda_splits", "flat", "3"}));
  a.cuda_schedule = MlaAttentionSchedule::uniform;
  mla_attention(Backend::cpu, a);
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
