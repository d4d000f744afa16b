// mla_attention on CUDA, what the matrix does not show: which mode of the WGMMA kernel ran (TMA
// for a bf16 cache with page_size % 32 == 0, the relayout path otherwise; any page size giving
// the same bits; Q by tensor copy or not, with the same bits; P split or rounded
// once by the precision: the path is proven, not assumed, DESIGN.md rule 6), and a block-table entry outside the cache (device metadata
// the kernel cannot reject) turning exactly the queries that see it into NaN on both kernels
// and both modes, the rest matching the run without it bit for bit. Skipped without an sm_90a
// GPU (the WGMMA kernel's requirement).
#include <gtest/gtest.h>

#include "testing/host_tensors.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/mla_attention.h"

namespace kestrel::ops {
namespace {

struct Problem {
  int64_t H = 4, page_size = 64, pages = 0;
  DType cache_dt = DType::bf16;
  std::vector<int32_t> seq_lens, table, q_start;
  Tensor q, cache, o, lse, block_table, lens, starts;
  Tensor cache_storage;  // when set, `cache_view` (a view into it) is the cache the op reads
  TensorView cache_view;
  int64_t B() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t max_pages() const { return static_cast<int64_t>(table.size()) / B(); }
};

using testing_util::upload;

// Decode (one query per sequence) over lengths `lens`; pages handed out in order from 1.
Problem make(int64_t page_size, DType cache_dt, const std::vector<int32_t>& lens, uint64_t seed, int64_t H = 4) {
  Problem p;
  p.H = H;
  p.page_size = page_size;
  p.cache_dt = cache_dt;
  p.seq_lens = lens;
  int64_t widest = 0, used = 0;
  for (int32_t L : lens) {
    widest = std::max<int64_t>(widest, (L + page_size - 1) / page_size);
    used += (L + page_size - 1) / page_size;
  }
  p.pages = used + 2;
  p.table.assign(static_cast<size_t>(p.B() * (widest + 1)), -1);
  int32_t next = 1;
  for (int64_t b = 0; b < p.B(); ++b)
    for (int64_t k = 0; k < (lens[static_cast<size_t>(b)] + page_size - 1) / page_size; ++k)
      p.table[static_cast<size_t>(b * (widest + 1) + k)] = next++;
  for (int64_t b = 0; b <= p.B(); ++b) p.q_start.push_back(static_cast<int32_t>(b));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> q(static_cast<size_t>(p.B() * p.H * kMlaRow));
  for (auto& x : q) x = f32_to_bf16(u(rng));
  p.q = upload(q, {p.B(), p.H, kMlaRow}, DType::bf16, Device::cuda);
  if (cache_dt == DType::bf16) {
    std::vector<uint16_t> c(static_cast<size_t>(p.pages * page_size * kMlaRow));
    for (auto& x : c) x = f32_to_bf16(u(rng));
    p.cache = upload(c, {p.pages, page_size, kMlaRow}, DType::bf16, Device::cuda);
  } else {
    std::vector<uint8_t> c(static_cast<size_t>(p.pages * page_size * kMlaRow));
    for (auto& x : c) x = f32_to_fp8_e4m3(u(rng));
    p.cache = upload(c, {p.pages, page_size, kMlaRow}, DType::fp8_e4m3, Device::cuda);
  }
  p.o = Tensor::empty({p.B(), p.H, kMlaNope}, DType::bf16, Device::cuda);
  p.lse = Tensor::empty({p.B(), p.H}, DType::f32, Device::cuda);
  p.lens = upload(p.seq_lens, {p.B()}, DType::i32, Device::cuda);
  p.starts = upload(p.q_start, {p.B() + 1}, DType::i32, Device::cuda);
  p.block_table = upload(p.table, {p.B(), p.max_pages()}, DType::i32, Device::cuda);
  return p;
}

MlaAttentionArgs args(const Problem& p, MlaAttentionKernel kernel,
                      MlaAttentionPrecision precision = MlaAttentionPrecision::exact,
                      MlaAttentionCombine combine = MlaAttentionCombine::automatic) {
  MlaAttentionArgs a;
  a.o = p.o.view();
  a.lse = p.lse.view();
  a.q = p.q.view();
  a.cache = p.cache_storage.data() != nullptr ? p.cache_view : p.cache.view();
  a.block_table = p.block_table.view();
  a.seq_lens = p.lens.view();
  a.q_start = p.starts.view();
  a.softmax_scale = 0.0721687836f;
  a.cuda_kernel = kernel;
  a.precision = precision;
  a.cuda_combine = combine;
  return a;
}

// Runs the CUDA backend on `a` and returns the kernels it launched (their names).
std::vector<std::string> run_args(const MlaAttentionArgs& a) {
  std::vector<std::string> log;
  cuda::set_launch_log(&log);
  try {
    mla_attention(Backend::cuda, a);
    device_sync();
  } catch (...) {
    cuda::set_launch_log(nullptr);
    throw;
  }
  cuda::set_launch_log(nullptr);
  return log;
}

// Runs the op on `p` and returns the kernel names it launched.
std::vector<std::string> run(const Problem& p, MlaAttentionKernel kernel,
                             MlaAttentionPrecision precision = MlaAttentionPrecision::exact,
                             MlaAttentionCombine combine = MlaAttentionCombine::automatic,
                             MlaAttentionSchedule schedule = MlaAttentionSchedule::automatic, int32_t splits = 0) {
  MlaAttentionArgs a = args(p, kernel, precision, combine);
  a.cuda_schedule = schedule;
  a.cuda_splits = splits;
  return run_args(a);
}

bool launched(const std::vector<std::string>& log, const std::string& part) {
  for (const auto& n : log)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// Fresh o and lse filled with NaN (bf16 0x7fc1, f32 NaN): a run must rewrite every element.
void poison_outputs(Problem& p) {
  const int64_t Tq = p.q_start.back();
  p.o = upload(std::vector<uint16_t>(static_cast<size_t>(Tq * p.H * kMlaNope), 0x7fc1), {Tq, p.H, kMlaNope}, DType::bf16,
               Device::cuda);
  p.lse = upload(std::vector<float>(static_cast<size_t>(Tq * p.H), NAN), {Tq, p.H}, DType::f32, Device::cuda);
}

// Two runs of one call at the fast precision agree within its rounding: every o and lse finite,
// o within 2% of the largest |o| (a split or a run that lost or doubled keys would be off by the
// outputs' own size), lse within 1e-3.
void expect_fast_outputs_agree(const std::vector<uint16_t>& o, const std::vector<float>& lse, const std::vector<uint16_t>& o_ref,
                               const std::vector<float>& lse_ref, const std::string& what) {
  ASSERT_EQ(o.size(), o_ref.size()) << what;
  double worst = 0.0, scale = 0.0, worst_lse = 0.0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double a = bf16_to_f32(o[i]), b = bf16_to_f32(o_ref[i]);
    ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << what << ": o[" << i << "]";
    worst = std::max(worst, std::fabs(a - b));
    scale = std::max(scale, std::fabs(b));
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lse[i]) && std::isfinite(lse_ref[i])) << what << ": lse[" << i << "]";
    worst_lse = std::max(worst_lse, std::fabs(static_cast<double>(lse[i]) - lse_ref[i]));
  }
  EXPECT_GT(scale, 0.0) << what;
  EXPECT_LE(worst, 0.02 * scale) << what << ": largest |o| " << scale;
  EXPECT_LE(worst_lse, 1e-3) << what;
}

class MlaAttentionCuda : public testing::Test {
 protected:
  void SetUp() override {
    const Support s = backend_available(Backend::cuda);
    if (!s.ok) GTEST_SKIP() << "CUDA backend: " << s.reason;
    Problem probe = make(64, DType::bf16, {1}, 1);
    const Support w = mla_attention_supports(Backend::cuda, args(probe, MlaAttentionKernel::wgmma));
    if (!w.ok) GTEST_SKIP() << "the WGMMA kernel: " << w.reason;
  }
};

// An fp8 query for problem p (its bf16 q replaced).
void use_fp8_q(Problem& p, uint64_t seed) {
  std::vector<uint8_t> q8(static_cast<size_t>(p.B() * p.H * kMlaRow));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : q8) x = f32_to_fp8_e4m3(u(rng));
  p.q = testing_util::upload(q8, {p.B(), p.H, kMlaRow}, DType::fp8_e4m3, Device::cuda);
}

// The keys-as-M kernel runs when forced, with each precision's instantiation (the fast one with QK
// on the e4m3 operands), and is refused
// with the reason for what it does not take (a bf16 cache or a bf16 q); the automatic choice
// takes it for an fp8 H 32 decode of 8 x 8192 keys, its wide form for a short one at the fast
// precision, v2 for a short one at the exact precision, and v3 for a short call of 64 rows a
// sequence at the exact precision (the rule: mla_attention_cuda_kernel).
TEST_F(MlaAttentionCuda, KeysMKernelForFp8CacheAndQ) {
  Problem p = make(64, DType::fp8_e4m3, {100, 37, 700}, 5, 32);
  use_fp8_q(p, 6);
  const auto short_auto = run(p, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast);
  EXPECT_TRUE(launched(short_auto, "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK, 64 rows>"));
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::automatic, MlaAttentionPrecision::exact), "mla_attention_sm90_kernel<fp8 cache, fp8 q>"));
  Problem wider = make(64, DType::fp8_e4m3, {100, 37, 700}, 11, 64);  // as short, 64 rows a sequence
  use_fp8_q(wider, 12);
  EXPECT_TRUE(launched(run(wider, MlaAttentionKernel::automatic, MlaAttentionPrecision::exact), "mla_attention_keys_m_kernel<fp8 cache, fp8 q>"));
  Problem large = make(64, DType::fp8_e4m3, std::vector<int32_t>(8, 8192), 9, 32);
  use_fp8_q(large, 10);
  EXPECT_TRUE(launched(run(large, MlaAttentionKernel::automatic), "mla_attention_keys_m_kernel<fp8 cache, fp8 q>"));
  const auto exact = run(p, MlaAttentionKernel::wgmma_keys_m, MlaAttentionPrecision::exact);
  EXPECT_TRUE(launched(exact, "mla_attention_keys_m_kernel<fp8 cache, fp8 q>"));
  EXPECT_FALSE(launched(exact, "sm90"));
  const auto fast = run(p, MlaAttentionKernel::wgmma_keys_m, MlaAttentionPrecision::fast);
  EXPECT_TRUE(launched(fast, "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK>"));  // QK on e4m3 operands
  const Support bf16_q = mla_attention_supports(Backend::cuda, args(make(64, DType::fp8_e4m3, {10}, 7), MlaAttentionKernel::wgmma_keys_m));
  EXPECT_FALSE(bf16_q.ok);
  EXPECT_NE(bf16_q.reason.find("fp8_e4m3 cache with a bf16 q"), std::string::npos) << bf16_q.reason;
  const Support bf16_cache = mla_attention_supports(Backend::cuda, args(make(64, DType::bf16, {10}, 8), MlaAttentionKernel::wgmma_keys_m));
  EXPECT_FALSE(bf16_cache.ok);
  EXPECT_NE(bf16_cache.reason.find("got a bf16 cache"), std::string::npos) << bf16_cache.reason;
}

// The bf16-cache keys-as-M kernel runs when forced with a bf16 cache and the fast precision, with
// either q, and is refused with the reason for an fp8 cache and for the exact precision; the
// automatic choice takes it for a fast H 32 decode of 16 x 8192 keys and keeps v2 for the exact
// precision and for a short batch (the rule: mla_attention_cuda_kernel).
TEST_F(MlaAttentionCuda, KeysMBf16KernelForBf16CacheFastOnly) {
  Problem p = make(64, DType::bf16, {100, 37, 700}, 31, 32);
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::wgmma_keys_m_bf16, MlaAttentionPrecision::fast),
                       "mla_attention_keys_m_bf16_kernel<bf16 cache, bf16 q, fast P>"));
  Problem q8 = make(64, DType::bf16, {100, 37, 700}, 32, 32);
  use_fp8_q(q8, 33);
  EXPECT_TRUE(launched(run(q8, MlaAttentionKernel::wgmma_keys_m_bf16, MlaAttentionPrecision::fast),
                       "mla_attention_keys_m_bf16_kernel<bf16 cache, fp8 q, fast P>"));
  const Support exact = mla_attention_supports(Backend::cuda, args(p, MlaAttentionKernel::wgmma_keys_m_bf16));
  EXPECT_FALSE(exact.ok);
  EXPECT_NE(exact.reason.find("runs precision fast only"), std::string::npos) << exact.reason;
  MlaAttentionArgs fp8_cache = args(make(64, DType::fp8_e4m3, {10}, 34), MlaAttentionKernel::wgmma_keys_m_bf16);
  fp8_cache.precision = MlaAttentionPrecision::fast;
  const Support fp8 = mla_attention_supports(Backend::cuda, fp8_cache);
  EXPECT_FALSE(fp8.ok);
  EXPECT_NE(fp8.reason.find("takes a bf16 cache, got fp8_e4m3"), std::string::npos) << fp8.reason;
  Problem large = make(64, DType::bf16, std::vector<int32_t>(16, 8192), 35, 32);
  EXPECT_TRUE(launched(run(large, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast),
                       "mla_attention_keys_m_bf16_kernel<bf16 cache, bf16 q, fast P>"));
  EXPECT_TRUE(launched(run(large, MlaAttentionKernel::automatic, MlaAttentionPrecision::exact), "mla_attention_sm90_kernel<"));
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
}

// v4 (the 64-key seesaw) runs when forced with a bf16 cache and the fast precision, with either q,
// and is refused with the reason for an fp8 cache and for the exact precision; the automatic choice
// (mla_attention_cuda_kernel) takes it for a fast decode whose CTAs stream 4096 keys each (17
// sequences x 8 row tiles of H 512 fill the SMs with one split), and keeps v2 for the exact
// precision, for pages of 32 keys and for short splits unless the batch's row tiles outnumber the
// SMs (then from 1024 keys) or, without the walk, a sequence has three or more row tiles and its
// splits 640 keys or more; at H 32 the bf16 keys-as-M kernel.
TEST_F(MlaAttentionCuda, Seesaw64KernelForBf16CacheFastOnly) {
  constexpr const char* kV4 = "mla_attention_seesaw64_kernel<bf16 cache, bf16 q, fast P>";
  Problem p = make(64, DType::bf16, {100, 37, 700}, 41, 64);
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast), kV4));
  Problem q8 = make(64, DType::bf16, {100, 37, 700}, 42, 64);
  use_fp8_q(q8, 43);
  EXPECT_TRUE(launched(run(q8, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast),
                       "mla_attention_seesaw64_kernel<bf16 cache, fp8 q, fast P>"));
  const Support exact = mla_attention_supports(Backend::cuda, args(p, MlaAttentionKernel::wgmma_seesaw64));
  EXPECT_FALSE(exact.ok);
  EXPECT_NE(exact.reason.find("runs precision fast only"), std::string::npos) << exact.reason;
  MlaAttentionArgs fp8_cache = args(make(64, DType::fp8_e4m3, {10}, 44, 64), MlaAttentionKernel::wgmma_seesaw64);
  fp8_cache.precision = MlaAttentionPrecision::fast;
  const Support fp8 = mla_attention_supports(Backend::cuda, fp8_cache);
  EXPECT_FALSE(fp8.ok);
  EXPECT_NE(fp8.reason.find("takes a bf16 cache, got fp8_e4m3"), std::string::npos) << fp8.reason;
  const std::vector<int32_t> long_splits(17, static_cast<int32_t>(kMlaAttentionSeesaw64MinSplitKeys));
  Problem large = make(64, DType::bf16, long_splits, 45, 512);
  const auto auto_log = run(large, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast);
  EXPECT_TRUE(launched(auto_log, kV4));
  EXPECT_FALSE(launched(auto_log, "mla_attention_sm90_kernel<"));
  EXPECT_FALSE(launched(auto_log, "combine"));  // one split
  EXPECT_TRUE(launched(run(large, MlaAttentionKernel::automatic, MlaAttentionPrecision::exact), "mla_attention_sm90_kernel<"));
  Problem paged32 = make(32, DType::bf16, long_splits, 46, 512);
  EXPECT_TRUE(launched(run(paged32, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
  Problem short_splits = make(64, DType::bf16, {4096, 4096}, 48, 64);  // 2 CTAs' worth: many splits
  EXPECT_TRUE(launched(run(short_splits, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
  Problem h32 = make(64, DType::bf16, std::vector<int32_t>(16, 8192), 47, 32);
  EXPECT_TRUE(launched(run(h32, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_keys_m_bf16_kernel<"));
  // Shorter sequences with more row tiles than SMs (17 x 8 = 136 > 132 on an H100 / H200): v4
  // walks the batch from kMlaAttentionSeesaw64WalkMinKeys keys of plan, v2 below. (The plan's
  // length is the block table's width in keys: make's tables hold one page more than the longest
  // sequence, so 896 keys plan 960.)
  const int sms = kestrel::ops::cuda::num_sms();
  const int walk_batch = sms / 8 + 1;
  Problem walk = make(64, DType::bf16, std::vector<int32_t>(walk_batch, kMlaAttentionSeesaw64WalkMinKeys), 49, 512);
  const auto walk_log = run(walk, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast);
  EXPECT_TRUE(launched(walk_log, kV4));
  EXPECT_FALSE(launched(walk_log, "combine"));
  Problem short_walk = make(64, DType::bf16, std::vector<int32_t>(walk_batch, kMlaAttentionSeesaw64WalkMinKeys - 128), 50, 512);
  EXPECT_TRUE(launched(run(short_walk, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
  // One wave of those (8 row tiles a sequence, one split): v4 from kMlaAttentionSeesaw64SharedMinSplitKeys
  // keys of plan (1088 here), v2 below (512 keys plan 576).
  Problem one_wave = make(64, DType::bf16, std::vector<int32_t>(sms / 8, kMlaAttentionSeesaw64WalkMinKeys), 51, 512);
  EXPECT_TRUE(launched(run(one_wave, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), kV4));
  Problem short_wave = make(64, DType::bf16, std::vector<int32_t>(sms / 8, 512), 341, 512);
  EXPECT_TRUE(launched(run(short_wave, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
}

// v4's schedules on one batch of B sequences of 8k keys at H heads (decode, 64-row tiles): the rule's
// split count and whether `automatic` takes the flattened runs (mla_attention_seesaw64_flat_wins),
// asserted at 132 SMs as `splits_132` / `flat_132` and from the launch log on any card. Automatic
// and forced uniform splits both match v2 on the same call (one split there, a CTA per row tile)
// within the fast precision's rounding: a split or a run that lost or doubled keys would be off
// by the outputs' own size. Outputs poisoned before each call.
void expect_v4_schedules_match_v2(int64_t B, int64_t H, int64_t splits_132, bool flat_132) {
  const int64_t sms = kestrel::ops::cuda::num_sms();
  Problem p = make(64, DType::bf16, std::vector<int32_t>(static_cast<size_t>(B), 8192), 52 + static_cast<uint64_t>(B), H);
  const int64_t row_tiles = (H + 63) / 64, kv_len = p.max_pages() * 64;
  const int64_t splits =
      mla_attention_seesaw64_splits(B, row_tiles, kv_len, sms, mla_attention_num_splits(B, row_tiles, kv_len, sms));
  const bool flat = mla_attention_seesaw64_flat_wins(B, row_tiles, splits, sms, mla_attention_seesaw64_flat_plan(B, row_tiles, kv_len, sms));
  if (sms == 132) {
    EXPECT_EQ(splits, splits_132);
    EXPECT_EQ(flat, flat_132);
  }
  const auto run_v4 = [&](MlaAttentionSchedule schedule) {
    poison_outputs(p);
    return run(p, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast, MlaAttentionCombine::automatic, schedule);
  };
  const auto auto_log = run_v4(MlaAttentionSchedule::automatic);
  EXPECT_TRUE(launched(auto_log, "mla_attention_seesaw64_kernel<")) << "the rule chose another kernel";
  EXPECT_EQ(launched(auto_log, "flat runs"), flat);
  const std::vector<uint16_t> o_auto = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse_auto = testing_util::download<float>(p.lse);
  const auto uniform_log = run_v4(MlaAttentionSchedule::uniform);
  EXPECT_TRUE(launched(uniform_log, "mla_attention_seesaw64_kernel<"));
  EXPECT_FALSE(launched(uniform_log, "flat runs"));
  EXPECT_EQ(launched(uniform_log, "combine"), splits > 1);
  const std::vector<uint16_t> o_uni = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse_uni = testing_util::download<float>(p.lse);
  poison_outputs(p);
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::wgmma, MlaAttentionPrecision::fast), "mla_attention_sm90_kernel<"));
  const std::vector<uint16_t> o2 = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse2 = testing_util::download<float>(p.lse);
  expect_fast_outputs_agree(o_auto, lse_auto, o2, lse2, "automatic");
  expect_fast_outputs_agree(o_uni, lse_uni, o2, lse2, "uniform splits");
}

// v4's balanced split (mla_attention_seesaw64_splits): 32 sequences at H 384 are 192 row tiles,
// 1.45 waves on 132 SMs; two splits in three waves cost less than two walked waves, so the uniform
// schedule launches v4 and the combine. That grid runs past one wave without walking, where
// `automatic` takes the flattened runs instead.
TEST_F(MlaAttentionCuda, Seesaw64BalancedSplitsMatchV2) { expect_v4_schedules_match_v2(32, 384, 2, true); }

// One wave that leaves a quarter of the SMs idle: 8 sequences at H 768 (B 8 H 96 verify 8) are 96
// row tiles, one split; `automatic` takes 11 flattened runs a row tile (132 CTAs of 6016 keys).
TEST_F(MlaAttentionCuda, Seesaw64OneWaveIdleTakesFlatRuns) { expect_v4_schedules_match_v2(8, 768, 1, true); }

// v4's flattened schedule (MlaAttentionSchedule::flat; the rule mla_attention_seesaw64_flat_plan):
// 30 ragged sequences (0 to 4,100 keys, some within one run, some cut across two or three; runs
// that pay the leads) at H 384 (6 row tiles): v4 and the combine launch, and o and lse match v2's (one split, a CTA per row
// tile) within the fast precision's rounding; the whole sequences' rows are written by the
// attention kernel, which the combine must leave alone (it would merge unwritten slots), and the
// cut ones by the combine. Outputs poisoned before each call. Then the same call with the uniform
// schedule gives the same within the same bound.
TEST_F(MlaAttentionCuda, Seesaw64FlatScheduleMatchesV2) {
  std::mt19937 rng(3202);
  std::vector<int32_t> lens(30);
  for (int32_t& L : lens) L = static_cast<int32_t>(rng() % 4101);
  lens[3] = 0;
  lens[7] = 1;
  lens[11] = 4096;
  Problem p = make(64, DType::bf16, lens, 53, 384);
  const auto run_schedule = [&](MlaAttentionKernel kernel, MlaAttentionSchedule schedule) {
    poison_outputs(p);
    return run(p, kernel, MlaAttentionPrecision::fast, MlaAttentionCombine::automatic, schedule);
  };
  const int64_t sms = kestrel::ops::cuda::num_sms();
  const MlaFlatPlan plan = mla_attention_seesaw64_flat_plan(30, 6, p.max_pages() * 64, sms);
  ASSERT_GT(plan.parts, 0) << "the plan must cut sequences for this test";
  ASSERT_GT(plan.lead, 0) << "the plan's runs must pay the sequences' leads for this test";
  const auto flat_log = run_schedule(MlaAttentionKernel::wgmma_seesaw64, MlaAttentionSchedule::flat);
  EXPECT_TRUE(launched(flat_log, "mla_attention_seesaw64_kernel<bf16 cache, bf16 q, fast P> flat runs"));
  EXPECT_TRUE(launched(flat_log, "combine"));
  const std::vector<uint16_t> o_flat = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse_flat = testing_util::download<float>(p.lse);
  EXPECT_FALSE(launched(run_schedule(MlaAttentionKernel::wgmma_seesaw64, MlaAttentionSchedule::uniform), "flat runs"));
  const std::vector<uint16_t> o_uni = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse_uni = testing_util::download<float>(p.lse);
  run_schedule(MlaAttentionKernel::wgmma, MlaAttentionSchedule::automatic);
  const std::vector<uint16_t> o2 = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse2 = testing_util::download<float>(p.lse);
  for (const auto* got : {&o_flat, &o_uni}) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < o2.size(); ++i) {
      const double x = bf16_to_f32((*got)[i]), want = bf16_to_f32(o2[i]);
      ASSERT_TRUE(std::isfinite(x) && std::isfinite(want)) << "o[" << i << "]" << (got == &o_flat ? " (flat)" : " (uniform)");
      worst = std::max(worst, std::fabs(x - want));
      scale = std::max(scale, std::fabs(want));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 0.02 * scale) << (got == &o_flat ? "flat" : "uniform") << ", largest |o| " << scale;
  }
  for (const auto* got : {&lse_flat, &lse_uni})
    for (size_t i = 0; i < lse2.size(); ++i) {
      const bool both_empty = std::isinf((*got)[i]) && std::isinf(lse2[i]) && (*got)[i] < 0 && lse2[i] < 0;
      ASSERT_TRUE(both_empty || std::fabs(static_cast<double>((*got)[i]) - lse2[i]) <= 1e-3)
          << "lse[" << i << "] " << (*got)[i] << " against " << lse2[i];
    }
}

// Runs `a` with o re-pointed at a view [Tq, H, 512] of a [Tq, heads, cols] tensor filled with
// NaN bf16 (0x7fc1) and returns the launch log; every element of the view must then hold `want`'s
// (o packed) and the padding must keep its NaN.
std::vector<std::string> run_into_padded_o(MlaAttentionArgs a, int64_t Tq, int64_t H, int64_t heads, int64_t cols,
                                           const std::vector<uint16_t>& want) {
  Tensor wide = upload(std::vector<uint16_t>(static_cast<size_t>(Tq * heads * cols), 0x7fc1), {Tq, heads, cols}, DType::bf16, Device::cuda);
  a.o = wide.view().slice(1, 0, H).slice(2, 0, kMlaNope);
  const std::vector<std::string> log = run_args(a);
  const std::vector<uint16_t> got = testing_util::download<uint16_t>(wide);
  for (int64_t tok = 0; tok < Tq; ++tok)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < cols; ++d) {
        const bool in_view = h < H && d < kMlaNope;
        const uint16_t x = got[static_cast<size_t>((tok * heads + h) * cols + d)];
        const uint16_t expect = in_view ? want[static_cast<size_t>((tok * H + h) * kMlaNope + d)] : 0x7fc1;
        if (x != expect) {  // (the first wrong element, not all of them)
          ADD_FAILURE() << (in_view ? "o" : "padding written") << ": token " << tok << " head " << h << " column " << d << ": 0x"
                        << std::hex << x << " against 0x" << expect << std::dec;
          return log;
        }
      }
  return log;
}

// v4's o boxes by tensor copy need o's tokens H rows apart (o_s0 == H o_s1, 16-byte rows; the
// rows may be padded apart); an o whose tokens are further apart goes row by row. Both give the
// packed o's bits and leave the padding alone.
TEST_F(MlaAttentionCuda, Seesaw64OBoxesOnlyForTokensHRowsApart) {
  std::vector<int32_t> lens(140);
  for (size_t b = 0; b < lens.size(); ++b) lens[b] = static_cast<int32_t>(1 + (b * 37) % 300);
  Problem packed = make(64, DType::bf16, lens, 3101, 64);  // 140 row tiles of 64 rows: one split
  poison_outputs(packed);
  EXPECT_TRUE(launched(run(packed, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast), "+ o boxes by tensor copy"));
  const std::vector<uint16_t> want = testing_util::download<uint16_t>(packed.o);
  const int64_t Tq = packed.q_start.back(), H = packed.H;
  struct Padding {
    int64_t heads, cols;  // o is [Tq, heads, cols], viewed as [Tq, H, 512]
    bool boxes;
  };
  for (const Padding pad : {Padding{H, kMlaNope + 64, true}, Padding{H + 1, kMlaNope, false}}) {
    Problem p = make(64, DType::bf16, lens, 3101, 64);  // the same values
    const auto log = run_into_padded_o(args(p, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast), Tq, H, pad.heads,
                                       pad.cols, want);
    EXPECT_TRUE(launched(log, "seesaw64"));
    EXPECT_EQ(launched(log, "+ o boxes by tensor copy"), pad.boxes) << "o as [" << pad.heads << ", " << pad.cols << "] a token";
  }
}

// v3 wide's o boxes by tensor copy, as v4's: taken for one split with o's tokens H rows apart, for
// the whole 64-row tiles (at H 96 each sequence's first; its second, 32 rows, goes row by row); an
// o whose tokens are further apart goes row by row. Both give the packed o's bits and leave the
// padding alone.
TEST_F(MlaAttentionCuda, WideKeysMOBoxesOnlyForTokensHRowsApart) {
  std::vector<int32_t> lens(140);
  for (size_t b = 0; b < lens.size(); ++b) lens[b] = static_cast<int32_t>(1 + (b * 37) % 300);
  const auto problem = [&] {  // 280 row tiles: one split; the same values each time
    Problem p = make(64, DType::fp8_e4m3, lens, 4611, 96);
    use_fp8_q(p, 4612);
    return p;
  };
  Problem packed = problem();
  poison_outputs(packed);
  EXPECT_TRUE(launched(run(packed, MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionPrecision::fast),
                       "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK, 64 rows> + o boxes by tensor copy"));
  const std::vector<uint16_t> want = testing_util::download<uint16_t>(packed.o);
  const std::vector<float> want_lse = testing_util::download<float>(packed.lse);
  for (float x : want_lse) ASSERT_FALSE(std::isnan(x)) << "every lse written";
  const int64_t Tq = packed.q_start.back(), H = packed.H;
  struct Padding {
    int64_t heads, cols;  // o is [Tq, heads, cols], viewed as [Tq, H, 512]
    bool boxes;
  };
  for (const Padding pad : {Padding{H, kMlaNope + 64, true}, Padding{H + 1, kMlaNope, false}}) {
    Problem p = problem();
    poison_outputs(p);
    const auto log = run_into_padded_o(args(p, MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionPrecision::fast), Tq, H, pad.heads,
                                       pad.cols, want);
    EXPECT_TRUE(launched(log, "64 rows>"));
    EXPECT_EQ(launched(log, "+ o boxes by tensor copy"), pad.boxes) << "o as [" << pad.heads << ", " << pad.cols << "] a token";
    EXPECT_EQ(testing_util::download<float>(p.lse), want_lse) << "lse as with the packed o";
  }
}

// v3 wide's o boxes, one split forced, on a ragged fp8 batch (an e4m3 q from `seed`, the cache from
// seed + 1, H 32): the packed o (boxes; walking the batch with the lead where `walks`), free of NaN
// and the same bits in `reps` more runs, against o with padded heads (rows, no walk), bit for bit,
// o and lse.
void expect_wide_boxes_match_rows(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& lens, uint64_t seed, int reps,
                                  bool walks = false) {
  constexpr int64_t H = 32;
  std::vector<int32_t> q_start = {0};
  for (int32_t n : q_lens) q_start.push_back(q_start.back() + n);
  const int64_t Tq = q_start.back();
  std::vector<uint8_t> q8(static_cast<size_t>(Tq * H * kMlaRow));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : q8) x = f32_to_fp8_e4m3(u(rng));
  const auto problem = [&] {
    Problem p = make(64, DType::fp8_e4m3, lens, seed + 1, H);
    p.q_start = q_start;
    p.starts = upload(q_start, {p.B() + 1}, DType::i32, Device::cuda);
    p.q = upload(q8, {Tq, H, kMlaRow}, DType::fp8_e4m3, Device::cuda);
    poison_outputs(p);
    return p;
  };
  const auto run_one_split = [](Problem& p) {
    return run(p, MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionPrecision::fast, MlaAttentionCombine::automatic,
               MlaAttentionSchedule::automatic, 1);
  };
  Problem packed = problem();
  const auto packed_log = run_one_split(packed);
  EXPECT_TRUE(launched(packed_log, "64 rows> + o boxes by tensor copy"));
  EXPECT_EQ(launched(packed_log, "walking the batch"), walks);
  const std::vector<uint16_t> want = testing_util::download<uint16_t>(packed.o);
  const std::vector<float> want_lse = testing_util::download<float>(packed.lse);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_LE(want[i] & 0x7fffu, 0x7f80u) << "o[" << i << "] NaN";
  for (int rep = 0; rep < reps; ++rep) {
    Problem again = problem();
    run_one_split(again);
    ASSERT_EQ(testing_util::download<uint16_t>(again.o), want) << "run " << rep + 2;
    ASSERT_EQ(testing_util::download<float>(again.lse), want_lse) << "run " << rep + 2;
  }
  Problem p = problem();
  MlaAttentionArgs a = args(p, MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionPrecision::fast);
  a.cuda_splits = 1;
  const auto rows_log = run_into_padded_o(a, Tq, H, H + 1, kMlaNope, want);
  EXPECT_TRUE(launched(rows_log, "64 rows>"));
  EXPECT_FALSE(launched(rows_log, "+ o boxes by tensor copy"));
  EXPECT_FALSE(launched(rows_log, "walking"));
  EXPECT_EQ(testing_util::download<float>(p.lse), want_lse) << "lse as with the packed o";
}

// Where a CTA walks several row tiles (a ragged verify batch: sequence 0 has 16 queries, more rows
// than the grid plans): the boxes are staged in the stages, which the producers fill with the next
// row tile's KV only after the staged o left them (the row tile barrier). Several runs: the race
// this guards against, found by the matrix in the forty-seventh session, showed as NaN rows.
TEST_F(MlaAttentionCuda, WideKeysMOBoxesWhileWalkingRowTiles) {
  expect_wide_boxes_match_rows({16, 2, 3, 1, 2, 4, 2, 2}, {900, 40, 333, 7, 1000, 64, 129, 700}, 4731, 4);
}

// Past one wave (SMs + 9 sequences of one 64-row tile, 0-2600 keys, some with 2-4 queries: more
// rows than the grid plans, walked within the sequence too): the wide form walks the batch with
// its lead (mla_attention_keys_m_walkers: Q and the first two tiles of a row tile loaded under the
// end of the one before, the boxes in the stages of tiles ti_end + 2 + c), three runs bit for bit
// against the rows (no walk). Sequences of 0, 1 and 64 keys: row tiles without tiles or with fewer
// than three (the handover at their end).
TEST_F(MlaAttentionCuda, WideKeysMWalksPastOneWaveWithItsLead) {
  const int64_t n = kestrel::ops::cuda::num_sms() + 9;
  std::vector<int32_t> q_lens(static_cast<size_t>(n)), lens(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    q_lens[static_cast<size_t>(b)] = b % 29 == 3 ? 4 : b % 17 == 5 ? 2 : 1;
    const int64_t k = (b * 389) % 2601;
    lens[static_cast<size_t>(b)] = static_cast<int32_t>(b % 13 == 0 ? b % 3 == 0 ? 0 : 1 : b % 11 == 1 ? 64 : std::max<int64_t>(k, 4));
  }
  EXPECT_GT(mla_attention_keys_m_walkers(n, 1, 1, kestrel::ops::cuda::num_sms()), 0);
  expect_wide_boxes_match_rows(q_lens, lens, 5131, 2, true);
}

// For one split of any length (the 2048-key bound went in the forty-ninth session): up to 7000
// keys; sequences 0 and 4 (12 and 8 queries against the 6 the grid plans) walk row tiles too.
TEST_F(MlaAttentionCuda, WideKeysMOBoxesForLongOneSplitCalls) {
  expect_wide_boxes_match_rows({12, 2, 4, 1, 8}, {7000, 2049, 4100, 3000, 2600}, 4811, 1);
}

// v3's Q by tensor copy (both fast forms): taken when q's tokens lie H rows apart with 16-byte rows
// (here also rows padded to 640 bytes), else Q goes through the consumers' registers (heads padded
// apart). The copy brings the next sequence's rows into a partial row tile's padding (the wide form
// at H 96: each sequence's second tile; the 32-row form at H 16: every tile), where the registers'
// path writes zeros; those columns are never stored, so every form gives the same bits.
TEST_F(MlaAttentionCuda, KeysMQByTensorCopyOnlyForTokensHRowsApart) {
  std::vector<int32_t> lens(140);
  for (size_t b = 0; b < lens.size(); ++b) lens[b] = static_cast<int32_t>(1 + (b * 53) % 900);
  struct Form {
    MlaAttentionKernel kernel;
    int64_t H;
    const char* name;
  };
  for (const Form form : {Form{MlaAttentionKernel::wgmma_keys_m_wide, 96, "64 rows> + o boxes by tensor copy + q by tensor copy"},
                          Form{MlaAttentionKernel::wgmma_keys_m, 16, "fast P, e4m3 QK> + q by tensor copy"}}) {
    SCOPED_TRACE(form.name);
    const auto problem = [&] {  // the same values each time
      Problem p = make(64, DType::fp8_e4m3, lens, 4621, form.H);
      use_fp8_q(p, 4622);
      poison_outputs(p);
      return p;
    };
    Problem packed = problem();
    EXPECT_TRUE(launched(run(packed, form.kernel, MlaAttentionPrecision::fast), form.name));
    const std::vector<uint16_t> want = testing_util::download<uint16_t>(packed.o);
    const std::vector<float> want_lse = testing_util::download<float>(packed.lse);
    for (float x : want_lse) ASSERT_FALSE(std::isnan(x)) << "every lse written";
    const std::vector<uint8_t> q8 = testing_util::download<uint8_t>(packed.q);
    const int64_t Tq = packed.q_start.back(), H = packed.H;
    struct Padding {
      int64_t heads, cols;  // q is [Tq, heads, cols], viewed as [Tq, H, 576]
      bool q_tma;
    };
    for (const Padding pad : {Padding{H, kMlaRow + 64, true}, Padding{H + 1, kMlaRow, false}}) {
      Problem p = problem();
      std::vector<uint8_t> wide(static_cast<size_t>(Tq * pad.heads * pad.cols), 0x7f);  // e4m3 NaN in the padding
      for (int64_t tok = 0; tok < Tq; ++tok)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < kMlaRow; ++d)
            wide[static_cast<size_t>((tok * pad.heads + h) * pad.cols + d)] = q8[static_cast<size_t>((tok * H + h) * kMlaRow + d)];
      Tensor q = upload(wide, {Tq, pad.heads, pad.cols}, DType::fp8_e4m3, Device::cuda);
      MlaAttentionArgs a = args(p, form.kernel, MlaAttentionPrecision::fast);
      a.q = q.view().slice(1, 0, H).slice(2, 0, kMlaRow);
      const std::vector<std::string> log = run_args(a);
      EXPECT_TRUE(launched(log, "keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK"));
      EXPECT_EQ(launched(log, "+ q by tensor copy"), pad.q_tma) << "q as [" << pad.heads << ", " << pad.cols << "] a token";
      EXPECT_EQ(testing_util::download<float>(p.lse), want_lse) << "q as [" << pad.heads << ", " << pad.cols << "] a token";
      EXPECT_EQ(testing_util::download<uint16_t>(p.o), want) << "q as [" << pad.heads << ", " << pad.cols << "] a token";
    }
  }
}

// v4 past one wave (more CTAs than SMs, one split): a grid of one wave whose CTAs walk the batch,
// each CTA's tile counts running on from one sequence to the next. Every sequence must get the
// bits it gets in a batch of its own small enough for one CTA each (the batch cut into groups by
// views of block_table, seq_lens and q_start); lengths vary, with empty and one-key sequences,
// tiles that end inside their page, and both producers (pages of 64 keys and of 32).
TEST_F(MlaAttentionCuda, Seesaw64WalksABatchPastOneWaveWithEachSequencesBits) {
  std::mt19937 rng(2907);
  std::vector<int32_t> lens(1000);
  for (auto& L : lens) L = static_cast<int32_t>(rng() % 400);
  lens[3] = 0;
  lens[4] = 1;
  lens[5] = 64;
  lens[6] = 1500;
  for (const int64_t page : {64, 32}) {
    Problem whole = make(page, DType::bf16, lens, 2908 + page, 64);
    poison_outputs(whole);
    // (each row tile whole, o's tokens H rows apart: o goes out as boxes by tensor copy)
    EXPECT_TRUE(launched(run(whole, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast),
                         "mla_attention_seesaw64_kernel<bf16 cache, bf16 q, fast P> + o boxes by tensor copy"));
    Problem groups = make(page, DType::bf16, lens, 2908 + page, 64);  // the same values
    poison_outputs(groups);
    // Groups of 100 sequences: 100 CTAs (H 64: one row tile a sequence), one wave and one split
    // on the H200's 132 SMs (a group of more than half the SMs is not split: no combine ran).
    constexpr int64_t kGroup = 100;
    std::vector<std::string> log;
    cuda::set_launch_log(&log);
    for (int64_t b0 = 0; b0 < groups.B(); b0 += kGroup) {
      const int64_t n = std::min<int64_t>(kGroup, groups.B() - b0);
      MlaAttentionArgs a = args(groups, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast);
      a.block_table = a.block_table.slice(0, b0, n);
      a.seq_lens = a.seq_lens.slice(0, b0, n);
      a.q_start = a.q_start.slice(0, b0, n + 1);
      mla_attention(Backend::cuda, a);
    }
    device_sync();
    cuda::set_launch_log(nullptr);
    ASSERT_FALSE(launched(log, "combine")) << "a group of " << kGroup << " sequences was split (fewer than 100 SMs?)";
    const std::vector<uint16_t> o = testing_util::download<uint16_t>(whole.o);
    EXPECT_EQ(o, testing_util::download<uint16_t>(groups.o)) << "page " << page;
    EXPECT_EQ(testing_util::download<float>(whole.lse), testing_util::download<float>(groups.lse)) << "page " << page;
    size_t finite = 0;
    for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x)) && x != 0;
    EXPECT_GT(finite, o.size() / 2) << "page " << page << ": the outputs are mostly finite, non-zero values";
  }
}

// Its wide form (64 query rows per CTA) runs when forced with the fast precision, is refused with
// the reason for the exact one, and is the automatic choice for an fp8 fast call with 64+ rows
// per sequence and work enough (here H 128: two 64-row tiles per sequence, 8 x 2 x 8192 tile-keys);
// the 32-row form stays the choice at H 32 and for the exact precision.
TEST_F(MlaAttentionCuda, WideKeysMKernelForFastCallsWithManyRows) {
  constexpr const char* kWide = "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK, 64 rows>";
  Problem p = make(64, DType::fp8_e4m3, {100, 37, 700}, 21, 32);
  use_fp8_q(p, 22);
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionPrecision::fast), kWide));
  const Support exact = mla_attention_supports(Backend::cuda, args(p, MlaAttentionKernel::wgmma_keys_m_wide));
  EXPECT_FALSE(exact.ok);
  EXPECT_NE(exact.reason.find("runs precision fast only"), std::string::npos) << exact.reason;
  Problem many_rows = make(64, DType::fp8_e4m3, std::vector<int32_t>(8, 8192), 23, 128);
  use_fp8_q(many_rows, 24);
  EXPECT_TRUE(launched(run(many_rows, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast), kWide));
  EXPECT_TRUE(launched(run(many_rows, MlaAttentionKernel::automatic, MlaAttentionPrecision::exact),
                       "mla_attention_keys_m_kernel<fp8 cache, fp8 q>"));
  Problem h32 = make(64, DType::fp8_e4m3, std::vector<int32_t>(8, 8192), 25, 32);
  use_fp8_q(h32, 26);
  EXPECT_TRUE(launched(run(h32, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast),
                       "mla_attention_keys_m_kernel<fp8 cache, fp8 q, fast P, e4m3 QK>"));
}

TEST_F(MlaAttentionCuda, TmaModeForBf16CachesPagedBy32) {
  for (int64_t ps : {32, 64, 128}) {
    const auto log = run(make(ps, DType::bf16, {100, 37, 64}, 2), MlaAttentionKernel::automatic);
    EXPECT_TRUE(launched(log, "mla_attention_sm90_kernel<bf16 cache, bf16 q, tma>")) << "page_size " << ps;
  }
  for (int64_t ps : {3, 16, 48}) {  // a 32-key tile would straddle pages
    const auto log = run(make(ps, DType::bf16, {100, 37, 64}, 3), MlaAttentionKernel::automatic);
    EXPECT_TRUE(launched(log, "mla_attention_sm90_kernel<bf16 cache, bf16 q>")) << "page_size " << ps;
    EXPECT_FALSE(launched(log, "tma")) << "page_size " << ps;
  }
  const auto fp8 = run(make(64, DType::fp8_e4m3, {100, 37}, 4), MlaAttentionKernel::automatic);
  EXPECT_TRUE(launched(fp8, "mla_attention_sm90_kernel<fp8 cache, bf16 q>"));
  EXPECT_FALSE(launched(fp8, "tma"));
}

// n sequence lengths taking `some` in turn.
std::vector<int32_t> cycled(const std::vector<int32_t>& some, size_t n) {
  std::vector<int32_t> lens;
  for (size_t i = 0; i < n; ++i) lens.push_back(some[i % some.size()]);
  return lens;
}

// The same logical KV rows (row (b, pos) from a generator that knows nothing of pages) in a
// cache paged by `page_size`, with `capacity` positions per block-table row: the split count
// depends on the capacity only, so two page sizes with the same capacity give the same plan.
// Pages in order, or with `reversed` each sequence's pages in descending order (consecutive
// pages of a sequence then never lie back to back in the cache).
Problem make_paged(int64_t page_size, DType cache_dt, const std::vector<int32_t>& lens, int64_t capacity,
                   uint64_t seed, int64_t H = 4, bool reversed = false) {
  Problem p = make(page_size, cache_dt, lens, seed, H);  // q, outputs, metadata shapes
  const int64_t width = capacity / page_size;
  p.pages = 1;
  p.table.assign(static_cast<size_t>(p.B() * width), -1);
  for (int64_t b = 0; b < p.B(); ++b) {
    const int64_t count = (lens[static_cast<size_t>(b)] + page_size - 1) / page_size;
    for (int64_t k = 0; k < count; ++k)
      p.table[static_cast<size_t>(b * width + k)] = static_cast<int32_t>(p.pages + (reversed ? count - 1 - k : k));
    p.pages += count;
  }
  ++p.pages;  // one spare page
  const size_t n = static_cast<size_t>(p.pages * page_size * kMlaRow);
  std::mt19937_64 fill(seed + 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> c(n);
  for (auto& x : c) x = u(fill);  // rows no sequence owns: read (tile tails) but never attended
  for (int64_t b = 0; b < p.B(); ++b)
    for (int64_t pos = 0; pos < lens[static_cast<size_t>(b)]; ++pos) {
      std::mt19937_64 row_rng(seed * 1000003u + static_cast<uint64_t>(b) * 65537u + static_cast<uint64_t>(pos));
      const int64_t at = p.table[static_cast<size_t>(b * width + pos / page_size)] * page_size + pos % page_size;
      for (int64_t d = 0; d < kMlaRow; ++d) c[static_cast<size_t>(at * kMlaRow + d)] = u(row_rng);
    }
  if (cache_dt == DType::bf16) {
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(c[i]);
    p.cache = upload(h, {p.pages, page_size, kMlaRow}, DType::bf16, Device::cuda);
  } else {
    std::vector<uint8_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_fp8_e4m3(c[i]);
    p.cache = upload(h, {p.pages, page_size, kMlaRow}, DType::fp8_e4m3, Device::cuda);
  }
  p.block_table = upload(p.table, {p.B(), width}, DType::i32, Device::cuda);
  return p;
}

// v3's balanced split count (mla_attention_keys_m_splits): 96 decode sequences at H 32 over a
// block table of 16384 keys are 96 row tiles of the 32-row kernel, one wave on 132 SMs that leaves
// 36 idle; the rule takes 4 splits (3 waves) and the combine. A forced count of the same (the
// cuda_splits argument) gives the same bits, and one split (no combine) the same values within
// the fast precision's rounding: a split that lost or doubled keys would be off by the outputs'
// own size. Ragged lengths, some under one split's share; an fp8 cache and q; outputs poisoned
// before each call.
TEST_F(MlaAttentionCuda, KeysMBalancedSplitsAreTaken) {
  const int64_t sms = kestrel::ops::cuda::num_sms();
  std::vector<int32_t> lens(96);
  for (size_t b = 0; b < lens.size(); ++b) lens[b] = static_cast<int32_t>(1 + (b * 389) % 3000);
  Problem p = make_paged(64, DType::fp8_e4m3, lens, 16384, 3901, 32);
  use_fp8_q(p, 3902);
  const int64_t splits = mla_attention_keys_m_splits(96, 1, 16384, sms, mla_attention_num_splits(96, 1, 16384, sms));
  if (sms == 132) {
    EXPECT_EQ(splits, 4);
  }
  if (splits < 2) GTEST_SKIP() << "on " << sms << " SMs the rule keeps one split for this batch";
  const auto run_v3 = [&](int32_t forced) {
    poison_outputs(p);
    return run(p, MlaAttentionKernel::automatic, MlaAttentionPrecision::fast, MlaAttentionCombine::automatic,
               MlaAttentionSchedule::automatic, forced);
  };
  const auto auto_log = run_v3(0);
  EXPECT_TRUE(launched(auto_log, "mla_attention_keys_m_kernel<")) << "the rule chose another kernel";
  EXPECT_TRUE(launched(auto_log, "combine"));
  const std::vector<uint16_t> o_auto = testing_util::download<uint16_t>(p.o);
  const std::vector<float> lse_auto = testing_util::download<float>(p.lse);
  EXPECT_TRUE(launched(run_v3(static_cast<int32_t>(splits)), "combine"));
  EXPECT_EQ(testing_util::download<uint16_t>(p.o), o_auto);
  EXPECT_EQ(testing_util::download<float>(p.lse), lse_auto);
  const auto one_log = run_v3(1);
  EXPECT_TRUE(launched(one_log, "mla_attention_keys_m_kernel<"));
  EXPECT_FALSE(launched(one_log, "combine"));
  expect_fast_outputs_agree(o_auto, lse_auto, testing_util::download<uint16_t>(p.o), testing_util::download<float>(p.lse),
                            "balanced splits against one");
}

// v3's 32-row form with splits of at most 2048 keys (mla_attention_keys_m_partial_boxes) stages a
// row tile's f32 partial as 16 boxes in the stages and sends a whole row tile's by tensor copy, a
// partial one's rows by the threads; longer splits and the wide form write their partials row by
// row. Ragged batches (H 16 verify of 1-4 queries and H 32 verify of 1-4: whole 32- and 64-row
// tiles and partial ones; H 32 decode: whole 32-row tiles, half 64-row ones), 2 splits (past 2048
// keys: rows), 3 and 5 forced, against one split (no partials) within the fast precision's
// rounding. Each call runs first on other values of the same shape, so that a partial row left
// unwritten would show that call's stale workspace (scratch_alloc hands the same block back).
TEST_F(MlaAttentionCuda, KeysMPartialsByTensorCopyForSplits) {
  struct Batch {
    int64_t H;
    std::vector<int32_t> q_lens, lens;
  };
  struct Form {
    MlaAttentionKernel kernel;
    const char* name;  // the launch name, up to the partials' suffix
    bool boxes;        // where mla_attention_keys_m_partial_boxes holds
  };
  for (const Form form : {Form{MlaAttentionKernel::wgmma_keys_m, "e4m3 QK> + q by tensor copy", true},
                          Form{MlaAttentionKernel::wgmma_keys_m_wide, "64 rows> + q by tensor copy", false}})
  for (const Batch& batch : {Batch{16, {1, 2, 3, 4, 2, 1, 4}, {1500, 3000, 700, 5000, 2100, 64, 4100}},
                             Batch{32, {2, 4, 1, 3}, {2500, 4100, 900, 3333}},
                             Batch{32, {1, 1, 1, 1, 1}, {3000, 4999, 1024, 200, 6000}}}) {
    std::vector<int32_t> q_start = {0};
    for (int32_t n : batch.q_lens) q_start.push_back(q_start.back() + n);
    const int64_t Tq = q_start.back(), H = batch.H;
    const auto problem = [&](uint64_t seed) {
      Problem p = make(64, DType::fp8_e4m3, batch.lens, seed, H);
      std::vector<uint8_t> q8(static_cast<size_t>(Tq * H * kMlaRow));
      std::mt19937_64 rng(seed + 1);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (auto& x : q8) x = f32_to_fp8_e4m3(u(rng));
      p.q_start = q_start;
      p.starts = upload(q_start, {p.B() + 1}, DType::i32, Device::cuda);
      p.q = upload(q8, {Tq, H, kMlaRow}, DType::fp8_e4m3, Device::cuda);
      poison_outputs(p);
      return p;
    };
    const auto run_split = [&](Problem& p, int32_t splits) {
      return run(p, form.kernel, MlaAttentionPrecision::fast, MlaAttentionCombine::automatic, MlaAttentionSchedule::automatic, splits);
    };
    Problem one = problem(5101 + static_cast<uint64_t>(H));
    EXPECT_FALSE(launched(run_split(one, 1), "partials")) << "one split writes o itself";
    const std::vector<uint16_t> o_one = testing_util::download<uint16_t>(one.o);
    const std::vector<float> lse_one = testing_util::download<float>(one.lse);
    for (int32_t splits : {2, 3, 5}) {  // (2: splits past 2048 keys in each batch, rows)
      const std::string what = str(form.name, ", H ", H, ", ", Tq, " tokens, ", splits, " splits");
      Problem stale = problem(6101 + static_cast<uint64_t>(splits));
      run_split(stale, splits);
      Problem p = problem(5101 + static_cast<uint64_t>(H));
      const auto log = run_split(p, splits);
      const bool boxes = form.boxes && mla_attention_keys_m_partial_boxes(p.max_pages() * p.page_size, splits);
      EXPECT_EQ(boxes, form.boxes && splits > 2) << what;  // both sides of the rule
      EXPECT_TRUE(launched(log, form.name)) << what;
      EXPECT_EQ(launched(log, "partials"), boxes) << what;
      EXPECT_TRUE(launched(log, "combine")) << what;
      expect_fast_outputs_agree(testing_util::download<uint16_t>(p.o), testing_util::download<float>(p.lse), o_one, lse_one, what);
    }
  }
}

// A sequence of one 64-key tile leaves v3's second consumer warpgroup without keys (its maximum
// -inf, its sum 0); the merge of the two halves must give that half the factor 0. Scores here
// all lie near -150 in log2 units (q all 1, every key's rope part -16: 64 x -16 against +-20 from
// the values, times 0.1), where exp2(0 - m) overflowed to inf and 0 * inf made the rows NaN. Both
// precisions (the fast one with 1 and 2 splits) against a double-precision reference of the same
// decoded bytes: o within 0.5% of the largest |v| (exact) or 3% (fast: P rounded once, QK's e4m3
// accumulation off by ~2^-13 of -1024 a score), lse within 1e-3 relative.
TEST_F(MlaAttentionCuda, KeysMHalfWithoutKeysBesideVeryLowScores) {
  const std::vector<int32_t> lens = {40, 64, 1, 100, 64, 3};
  Problem p = make(64, DType::fp8_e4m3, lens, 4903, 32);
  const int64_t B = p.B(), H = p.H;
  std::vector<uint8_t> q8(static_cast<size_t>(B * H * kMlaRow), f32_to_fp8_e4m3(1.0f));
  p.q = testing_util::upload(q8, {B, H, kMlaRow}, DType::fp8_e4m3, Device::cuda);
  std::vector<uint8_t> cache = testing_util::download<uint8_t>(p.cache);
  for (size_t r = 0; r < cache.size() / kMlaRow; ++r)
    for (int64_t d = kMlaNope; d < kMlaRow; ++d) cache[r * kMlaRow + static_cast<size_t>(d)] = f32_to_fp8_e4m3(-16.0f);
  p.cache = testing_util::upload(cache, {p.pages, p.page_size, kMlaRow}, DType::fp8_e4m3, Device::cuda);
  const float softmax_scale = 0.1f;
  // The reference: per sequence (every head sees the same q), softmax over its keys in double.
  std::vector<double> o_ref(static_cast<size_t>(B * kMlaNope)), lse_ref(static_cast<size_t>(B));
  double max_v = 0.0, max_score = -1e300;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = lens[static_cast<size_t>(b)];
    std::vector<double> score(static_cast<size_t>(L));
    const auto row = [&](int64_t pos) {
      const int64_t page = p.table[static_cast<size_t>(b * p.max_pages() + pos / p.page_size)];
      return &cache[static_cast<size_t>((page * p.page_size + pos % p.page_size) * kMlaRow)];
    };
    double m = -1e300;
    for (int64_t j = 0; j < L; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < kMlaRow; ++d) dot += fp8_e4m3_to_f32(row(j)[d]);
      score[static_cast<size_t>(j)] = softmax_scale * dot;
      m = std::max(m, score[static_cast<size_t>(j)]);
    }
    max_score = std::max(max_score, m);
    double l = 0.0;
    for (int64_t j = 0; j < L; ++j) {
      const double w = std::exp(score[static_cast<size_t>(j)] - m);
      l += w;
      for (int64_t d = 0; d < kMlaNope; ++d) {
        const double v = fp8_e4m3_to_f32(row(j)[d]);
        max_v = std::max(max_v, std::fabs(v));
        o_ref[static_cast<size_t>(b * kMlaNope + d)] += w * v;
      }
    }
    for (int64_t d = 0; d < kMlaNope; ++d) o_ref[static_cast<size_t>(b * kMlaNope + d)] /= l;
    lse_ref[static_cast<size_t>(b)] = m + std::log(l);
  }
  ASSERT_LT(max_score / std::log(2.0), -128.0) << "the scores must lie below -128 in log2 units";
  struct Mode {
    MlaAttentionPrecision precision;
    int32_t splits;
  };
  for (const Mode mode : {Mode{MlaAttentionPrecision::exact, 0}, Mode{MlaAttentionPrecision::fast, 1},
                          Mode{MlaAttentionPrecision::fast, 2}}) {
    const std::string what = std::string(mode.precision == MlaAttentionPrecision::fast ? "fast" : "exact") + ", " +
                             std::to_string(mode.splits) + " splits";
    poison_outputs(p);
    MlaAttentionArgs a = args(p, MlaAttentionKernel::wgmma_keys_m, mode.precision);
    a.softmax_scale = softmax_scale;
    a.cuda_splits = mode.splits;
    EXPECT_TRUE(launched(run_args(a), "mla_attention_keys_m_kernel<")) << what;
    const std::vector<uint16_t> o = testing_util::download<uint16_t>(p.o);
    const std::vector<float> lse = testing_util::download<float>(p.lse);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const double l_got = lse[static_cast<size_t>(b * H + h)], l_want = lse_ref[static_cast<size_t>(b)];
        ASSERT_NEAR(l_got, l_want, 1e-3 * std::fabs(l_want)) << what << ": lse of sequence " << b << ", head " << h;
        for (int64_t d = 0; d < kMlaNope; ++d) {
          const double got = bf16_to_f32(o[static_cast<size_t>((b * H + h) * kMlaNope + d)]);
          ASSERT_NEAR(got, o_ref[static_cast<size_t>(b * kMlaNope + d)],
                      (mode.precision == MlaAttentionPrecision::fast ? 0.03 : 0.005) * max_v)
              << what << ": o of sequence " << b << ", head " << h << ", feature " << d;
        }
      }
  }
}

// The page size does not change the bits: the same logical rows paged by 64 (a bf16 cache: TMA
// mode) and by 16 (the relayout mode; fp8 caches take it for both) give the same o and lse, for
// both cache dtypes and both precisions (ragged lengths, tails inside a tile, several splits).
TEST_F(MlaAttentionCuda, PageSizeAndModeDoNotChangeTheBits) {
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    for (MlaAttentionPrecision pr : {MlaAttentionPrecision::exact, MlaAttentionPrecision::fast}) {
      const std::string what = str("dtype ", dtype_name(dt), " precision ", static_cast<int>(pr));
      const std::vector<int32_t> lens = {700, 37, 2000, 1, 1024};
      const Problem tma = make_paged(64, dt, lens, 2048, 8);
      const Problem relayout = make_paged(16, dt, lens, 2048, 8);
      const auto tma_log = run(tma, MlaAttentionKernel::wgmma, pr);
      const auto relayout_log = run(relayout, MlaAttentionKernel::wgmma, pr);
      EXPECT_EQ(launched(tma_log, ", tma"), dt == DType::bf16) << what;
      EXPECT_FALSE(launched(relayout_log, "tma")) << what;
      const std::vector<uint16_t> o = testing_util::download<uint16_t>(tma.o);
      EXPECT_EQ(o, testing_util::download<uint16_t>(relayout.o)) << what;
      EXPECT_EQ(testing_util::download<float>(tma.lse), testing_util::download<float>(relayout.lse)) << what;
      size_t finite = 0;
      for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x)) && x != 0;
      EXPECT_GT(finite, o.size() / 2) << what << ": the outputs are mostly finite, non-zero values";
    }
}

// The keys-as-M kernel fills its 64-key tiles whatever the page size, so the page size does not
// change its bits either (both precisions; tails inside a tile, several splits).
TEST_F(MlaAttentionCuda, KeysMPageSizeDoesNotChangeTheBits) {
  for (MlaAttentionPrecision pr : {MlaAttentionPrecision::exact, MlaAttentionPrecision::fast}) {
    const std::string what = str("precision ", static_cast<int>(pr));
    const std::vector<int32_t> lens = {700, 37, 2000, 1, 1024};
    Problem by64 = make_paged(64, DType::fp8_e4m3, lens, 2048, 8, 32);
    Problem by16 = make_paged(16, DType::fp8_e4m3, lens, 2048, 8, 32);
    use_fp8_q(by64, 11);
    use_fp8_q(by16, 11);
    EXPECT_TRUE(launched(run(by64, MlaAttentionKernel::wgmma_keys_m, pr), "keys_m")) << what;
    EXPECT_TRUE(launched(run(by16, MlaAttentionKernel::wgmma_keys_m, pr), "keys_m")) << what;
    const std::vector<uint16_t> o = testing_util::download<uint16_t>(by64.o);
    EXPECT_EQ(o, testing_util::download<uint16_t>(by16.o)) << what;
    EXPECT_EQ(testing_util::download<float>(by64.lse), testing_util::download<float>(by16.lse)) << what;
    size_t finite = 0;
    for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x)) && x != 0;
    EXPECT_GT(finite, o.size() / 2) << what << ": the outputs are mostly finite, non-zero values";
  }
}

// v4's o boxes are its own kernel, taken for splits of at most kMlaAttentionSeesaw64OBoxMaxKeys
// keys of the planning length (mla_attention_seesaw64_o_boxes): the same sequences under a block
// table of that many keys take it, under a wider one the row copies' kernel, with the same bits
// (140 row tiles of 64 rows on one split either way; outputs poisoned first).
TEST_F(MlaAttentionCuda, Seesaw64OBoxesOnlyForShortSplits) {
  std::vector<int32_t> lens(140);
  for (size_t b = 0; b < lens.size(); ++b) lens[b] = static_cast<int32_t>(1 + (b * 53) % 900);
  Problem short_plan = make_paged(64, DType::bf16, lens, kMlaAttentionSeesaw64OBoxMaxKeys, 3301, 64);
  Problem long_plan = make_paged(64, DType::bf16, lens, 2 * kMlaAttentionSeesaw64OBoxMaxKeys, 3301, 64);
  poison_outputs(short_plan);
  poison_outputs(long_plan);
  const auto short_log = run(short_plan, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast);
  const auto long_log = run(long_plan, MlaAttentionKernel::wgmma_seesaw64, MlaAttentionPrecision::fast);
  EXPECT_TRUE(launched(short_log, "mla_attention_seesaw64_kernel<bf16 cache, bf16 q, fast P> + o boxes by tensor copy"));
  EXPECT_TRUE(launched(long_log, "mla_attention_seesaw64_kernel<bf16 cache, bf16 q, fast P>"));
  EXPECT_FALSE(launched(long_log, "o boxes"));
  EXPECT_FALSE(launched(short_log, "combine"));  // one split: each sequence's o written by its CTA
  EXPECT_FALSE(launched(long_log, "combine"));
  const std::vector<uint16_t> o = testing_util::download<uint16_t>(short_plan.o);
  EXPECT_EQ(o, testing_util::download<uint16_t>(long_plan.o));
  EXPECT_EQ(testing_util::download<float>(short_plan.lse), testing_util::download<float>(long_plan.lse));
  size_t finite = 0;
  for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x)) && x != 0;
  EXPECT_GT(finite, o.size() / 2) << "the outputs are mostly finite, non-zero values";
}

// The warp-per-row combine (many rows, at most 4 splits) gives the bits of the CTA-per-row one:
// 40 sequences of up to 2000 keys at H = 32 (1280 rows; 3 splits of a 2048-key capacity), the
// keys-as-M kernel with an fp8 cache and the WGMMA one with bf16, lengths such that some splits
// hold no keys (lse -inf) and one sequence attends nothing; outputs poisoned first.
TEST_F(MlaAttentionCuda, CombineByWarpsGivesTheSameBits) {
  const std::vector<int32_t> some = {2000, 37, 1500, 1, 1024, 700, 0, 1999, 1300, 640};
  const std::vector<int32_t> lens = cycled(some, 40);
  struct Case {
    DType dt;
    MlaAttentionKernel kernel;
  };
  for (const Case& c : {Case{DType::fp8_e4m3, MlaAttentionKernel::wgmma_keys_m}, Case{DType::bf16, MlaAttentionKernel::wgmma}}) {
    const std::string what = str("dtype ", dtype_name(c.dt));
    Problem warps = make_paged(64, c.dt, lens, 2048, 31, 32);
    Problem rows = make_paged(64, c.dt, lens, 2048, 31, 32);
    if (c.dt == DType::fp8_e4m3) {
      use_fp8_q(warps, 17);
      use_fp8_q(rows, 17);
    }
    for (Problem* p : {&warps, &rows}) poison_outputs(*p);
    const auto warps_log = run(warps, c.kernel, MlaAttentionPrecision::fast);
    const auto rows_log = run(rows, c.kernel, MlaAttentionPrecision::fast, MlaAttentionCombine::per_row);
    EXPECT_TRUE(launched(warps_log, "mla_attention_combine_kernel<warp per row>")) << what;
    EXPECT_TRUE(launched(rows_log, "mla_attention_combine_kernel")) << what;
    EXPECT_FALSE(launched(rows_log, "warp per row")) << what;
    const std::vector<uint16_t> o = testing_util::download<uint16_t>(warps.o);
    const std::vector<float> lse = testing_util::download<float>(warps.lse);
    EXPECT_EQ(o, testing_util::download<uint16_t>(rows.o)) << what;
    EXPECT_EQ(lse, testing_util::download<float>(rows.lse)) << what;
    size_t finite = 0, empty = 0;
    for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x));
    for (float x : lse) empty += x == -INFINITY;
    EXPECT_EQ(finite, o.size()) << what << ": every output row is rewritten and finite";
    EXPECT_EQ(empty, static_cast<size_t>(4 * 32)) << what << ": the 4 sequences without keys have lse -inf";
  }
}

// The fast layout's producer copies each 16-row block of a tile with one bulk copy when its rows
// lie back to back in the cache, else row by row (km::row_offset8): the same bytes land either
// way. Pages of 64 (every block inside a page: one copy each) against pages of 8 in descending
// order (every block straddles two pages that are not adjacent: 16 copies) and a cache whose rows
// are 592 bytes apart (never back to back): the same o and lse bits, for the 32-row and the wide
// kernel, outputs poisoned first.
TEST_F(MlaAttentionCuda, KeysMBlockCopiesDoNotChangeTheBits) {
  const std::vector<int32_t> lens = {700, 37, 2000, 1, 1024, 129};
  for (MlaAttentionKernel kernel : {MlaAttentionKernel::wgmma_keys_m, MlaAttentionKernel::wgmma_keys_m_wide}) {
    const std::string what = str("kernel ", static_cast<int>(kernel));
    Problem blocks = make_paged(64, DType::fp8_e4m3, lens, 2048, 12, 64);
    Problem rows = make_paged(8, DType::fp8_e4m3, lens, 2048, 12, 64, /*reversed=*/true);
    Problem strided = make_paged(64, DType::fp8_e4m3, lens, 2048, 12, 64);
    // The same rows in a cache with 16 bytes after each: a view of [pages, 64, 592] bytes.
    {
      const std::vector<uint8_t> dense = testing_util::download<uint8_t>(strided.cache);
      std::vector<uint8_t> wide_rows(static_cast<size_t>(strided.pages * 64 * 592), 0x7f);
      for (int64_t r = 0; r < strided.pages * 64; ++r)
        std::copy_n(dense.begin() + r * kMlaRow, kMlaRow, wide_rows.begin() + r * 592);
      strided.cache_storage = upload(wide_rows, {strided.pages, 64, 592}, DType::fp8_e4m3, Device::cuda);
      strided.cache_view = strided.cache_storage.view().slice(2, 0, kMlaRow);
    }
    for (Problem* p : {&blocks, &rows, &strided}) {
      use_fp8_q(*p, 13);
      poison_outputs(*p);
      EXPECT_TRUE(launched(run(*p, kernel, MlaAttentionPrecision::fast), "keys_m")) << what;
    }
    const std::vector<uint16_t> o = testing_util::download<uint16_t>(blocks.o);
    const std::vector<float> lse = testing_util::download<float>(blocks.lse);
    EXPECT_EQ(o, testing_util::download<uint16_t>(rows.o)) << what;
    EXPECT_EQ(lse, testing_util::download<float>(rows.lse)) << what;
    EXPECT_EQ(o, testing_util::download<uint16_t>(strided.o)) << what;
    EXPECT_EQ(lse, testing_util::download<float>(strided.lse)) << what;
    size_t finite = 0;
    for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x));
    EXPECT_EQ(finite, o.size()) << what << ": every output row is rewritten and finite";
  }
}

// The bf16 keys-as-M kernel rescales each O^T column by the flag of the warpgroup that owns it:
// heads 16 .. 31 (warpgroup 1's rows) query along key 200's row, 40x, so their maximum jumps by far
// more than the slack at the tile of key 200 while heads 0 .. 15 (random queries) never rescale
// after the first tile. Both warpgroups hold O^T columns of every head, so a column rescaled by the
// wrong flag leaves heads 16 .. 31's o far from key 200's value row, which the softmax puts there
// (its weight is 1 within e^-500); heads 0 .. 15 match v2's fast precision within 2^-6. 70
// sequences: one split each on 132 SMs, so key 200 lies in a split's fourth tile (with 8 sequences
// the splits were single tiles, where every column grows at once, and the check saw nothing).
TEST_F(MlaAttentionCuda, KeysMBf16RescalesEachColumnByItsOwner) {
  constexpr int64_t kH = 32, kKey = 200;
  const std::vector<int32_t> lens(70, 300);
  EXPECT_EQ(mla_attention_num_splits(70, 1, 320, 132), 1);
  Problem p = make(64, DType::bf16, lens, 51, kH);
  const std::vector<uint16_t> cache = testing_util::download<uint16_t>(p.cache);
  std::vector<uint16_t> q = testing_util::download<uint16_t>(p.q);
  const auto key_row = [&](int64_t b) {
    const int64_t page = p.table[static_cast<size_t>(b * p.max_pages() + kKey / 64)];
    return cache.begin() + (page * 64 + kKey % 64) * kMlaRow;
  };
  for (int64_t b = 0; b < p.B(); ++b)
    for (int64_t h = 16; h < kH; ++h)
      for (int64_t d = 0; d < kMlaRow; ++d)
        q[static_cast<size_t>((b * kH + h) * kMlaRow + d)] = f32_to_bf16(40.0f * bf16_to_f32(key_row(b)[d]));
  p.q = upload(q, {p.B(), kH, kMlaRow}, DType::bf16, Device::cuda);
  poison_outputs(p);
  EXPECT_TRUE(launched(run(p, MlaAttentionKernel::wgmma_keys_m_bf16, MlaAttentionPrecision::fast), "keys_m_bf16"));
  const std::vector<uint16_t> o = testing_util::download<uint16_t>(p.o);
  run(p, MlaAttentionKernel::wgmma, MlaAttentionPrecision::fast);
  const std::vector<uint16_t> o_v2 = testing_util::download<uint16_t>(p.o);
  for (int64_t b = 0; b < p.B(); ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t f = 0; f < kMlaNope; ++f) {
        const size_t i = static_cast<size_t>((b * kH + h) * kMlaNope + f);
        const float want = h >= 16 ? bf16_to_f32(key_row(b)[f]) : bf16_to_f32(o_v2[i]);
        ASSERT_NEAR(bf16_to_f32(o[i]), want, h >= 16 ? 1e-2f : 1.0f / 64) << "sequence " << b << " head " << h << " feature " << f;
      }
}

// The look-ahead tests' check: both problems' outputs poisoned (NaN), run on v2 (forced: the
// automatic choice may take the bf16 keys-as-M kernel), then `tma` (TMA mode, names `tma_name`
// asserted present or absent as `tma_expected`) and `relayout` (never looks ahead) give the same
// o and lse bits, and every o is rewritten and finite.
void expect_lookahead_bits(Problem& tma, Problem& relayout, MlaAttentionPrecision pr, const std::string& tma_name,
                           bool tma_expected, const std::string& what) {
  for (Problem* p : {&tma, &relayout}) poison_outputs(*p);
  const auto tma_log = run(tma, MlaAttentionKernel::wgmma, pr);
  const auto relayout_log = run(relayout, MlaAttentionKernel::wgmma, pr);
  EXPECT_TRUE(launched(tma_log, ", tma")) << what;
  EXPECT_EQ(launched(tma_log, tma_name), tma_expected) << what;
  EXPECT_FALSE(launched(relayout_log, "look-ahead")) << what;
  EXPECT_FALSE(launched(relayout_log, "tma")) << what;
  const std::vector<uint16_t> o = testing_util::download<uint16_t>(tma.o);
  EXPECT_EQ(o, testing_util::download<uint16_t>(relayout.o)) << what;
  EXPECT_EQ(testing_util::download<float>(tma.lse), testing_util::download<float>(relayout.lse)) << what;
  size_t finite = 0;
  for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x));
  EXPECT_EQ(finite, o.size()) << what << ": every output row is rewritten and finite (o = 0 where a query attends nothing)";
}

// The look-ahead (warpgroup 0 issues its next QK before it waits for warpgroup 1's P; the
// kernel's name says ", look-ahead") changes the schedule, not the arithmetic: the same rows
// paged by 64 (TMA mode: look-ahead where mla_attention_lookahead says so) and by 16 (the
// relayout mode, which never looks ahead) give the same o and lse. 136 sequences, so one split
// each (up to 271 SMs); lengths from 1 to 2000, so CTAs of one launch take either schedule and
// odd and even tile counts both end a row tile; outputs poisoned first. Exact P at H = 4 and P
// rounded once at H = 64 look ahead; P rounded once at H = 4 (32 rows or fewer) does not.
TEST_F(MlaAttentionCuda, LookaheadDoesNotChangeTheBits) {
  const std::vector<int32_t> some = {1100, 37, 1500, 1, 1024, 700, 2000, 1057, 1023, 1987};
  const std::vector<int32_t> lens = cycled(some, 136);
  struct Case {
    MlaAttentionPrecision pr;
    int64_t H;
    bool lookahead;
  };
  for (const Case& c : {Case{MlaAttentionPrecision::exact, 4, true}, Case{MlaAttentionPrecision::fast, 64, true},
                        Case{MlaAttentionPrecision::fast, 4, false}}) {
    const std::string what = str("precision ", static_cast<int>(c.pr), " H ", c.H);
    Problem tma = make_paged(64, DType::bf16, lens, 2048, 21, c.H);
    Problem relayout = make_paged(16, DType::bf16, lens, 2048, 21, c.H);
    expect_lookahead_bits(tma, relayout, c.pr, ", look-ahead>", c.lookahead, what);
  }
}

// The same with verify blocks: 136 sequences at H = 64, one of 7 queries and the rest of 1 or 2,
// so the plan has ceil(Tq / B) = 2 queries (two 64-row tiles) per sequence and the CTAs of the
// 7-query sequence loop over its 7 row tiles (the look-ahead starts and ends each one); the
// 7-query sequence is long (1987 keys), so every one of its row tiles looks ahead.
TEST_F(MlaAttentionCuda, LookaheadDoesNotChangeTheBitsOverSeveralRowTiles) {
  constexpr int64_t H = 64;
  const std::vector<int32_t> some = {1100, 37, 1500, 1, 1024, 700, 2000, 1057, 1023, 1987};
  const std::vector<int32_t> lens = cycled(some, 136);
  std::vector<int32_t> q_lens;
  for (size_t i = 0; i < 136; ++i) q_lens.push_back(i == 9 ? 7 : static_cast<int32_t>(1 + i % 2));
  std::vector<int32_t> q_start = {0};
  for (int32_t n : q_lens) q_start.push_back(q_start.back() + n);
  const int64_t Tq = q_start.back();
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> q(static_cast<size_t>(Tq * H * kMlaRow));
  for (auto& x : q) x = f32_to_bf16(u(rng));
  Problem tma = make_paged(64, DType::bf16, lens, 2048, 22, H);
  Problem relayout = make_paged(16, DType::bf16, lens, 2048, 22, H);
  for (Problem* p : {&tma, &relayout}) {
    p->q_start = q_start;
    p->starts = upload(q_start, {p->B() + 1}, DType::i32, Device::cuda);
    p->q = upload(q, {Tq, H, kMlaRow}, DType::bf16, Device::cuda);
  }
  expect_lookahead_bits(tma, relayout, MlaAttentionPrecision::exact, ", tma, look-ahead>", true, "verify blocks");
}

// Q by tensor copy (a bf16 q whose tokens are H rows apart: the kernel's name says " + q by
// tensor copy") gives the bits of the generic Q paths: the same query values in a wider buffer
// (token stride (H + 1) * 576) take those. H = 32 and verify blocks of 7, 3, 1 and 2 queries, so
// that a 64-row Q box holds another sequence's rows or rows past the tensor (padded rows, whose
// values must not matter), and sequence 0 has more row tiles than the grid (a CTA's later row
// tile takes the generic path); both caches, both precisions.
TEST_F(MlaAttentionCuda, QByTensorCopyDoesNotChangeTheBits) {
  constexpr int64_t H = 32;
  const std::vector<int32_t> q_lens = {7, 3, 1, 2};
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    for (MlaAttentionPrecision pr : {MlaAttentionPrecision::exact, MlaAttentionPrecision::fast}) {
      const std::string what = str("dtype ", dtype_name(dt), " precision ", static_cast<int>(pr));
      Problem p = make(64, dt, {300, 1000, 65, 129}, 11);
      p.H = H;
      p.q_start = {0};
      for (int32_t n : q_lens) p.q_start.push_back(p.q_start.back() + n);
      const int64_t Tq = p.q_start.back();
      std::mt19937_64 rng(12);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<uint16_t> q(static_cast<size_t>(Tq * H * kMlaRow)), wide(static_cast<size_t>(Tq * (H + 1) * kMlaRow));
      for (auto& x : wide) x = f32_to_bf16(u(rng));
      for (int64_t t = 0; t < Tq; ++t)
        for (int64_t i = 0; i < H * kMlaRow; ++i)
          q[static_cast<size_t>(t * H * kMlaRow + i)] = wide[static_cast<size_t>(t * (H + 1) * kMlaRow + i)];
      p.q = upload(q, {Tq, H, kMlaRow}, DType::bf16, Device::cuda);
      const Tensor q_wide = upload(wide, {Tq, H + 1, kMlaRow}, DType::bf16, Device::cuda);
      // Outputs poisoned (NaN) before each run: every element must be rewritten.
      const auto poison = [&] {
        p.o = upload(std::vector<uint16_t>(static_cast<size_t>(Tq * H * kMlaNope), 0x7fc1), {Tq, H, kMlaNope}, DType::bf16,
                     Device::cuda);
        p.lse = upload(std::vector<float>(static_cast<size_t>(Tq * H), NAN), {Tq, H}, DType::f32, Device::cuda);
      };
      poison();
      p.starts = upload(p.q_start, {p.B() + 1}, DType::i32, Device::cuda);

      const auto tensor_log = run(p, MlaAttentionKernel::wgmma, pr);
      const std::vector<uint16_t> o = testing_util::download<uint16_t>(p.o);
      const std::vector<float> lse = testing_util::download<float>(p.lse);
      std::vector<std::string> generic_log;
      cuda::set_launch_log(&generic_log);
      poison();
      MlaAttentionArgs a = args(p, MlaAttentionKernel::wgmma, pr);
      a.q = q_wide.view().slice(1, 0, H);
      mla_attention(Backend::cuda, a);
      device_sync();
      cuda::set_launch_log(nullptr);
      EXPECT_TRUE(launched(tensor_log, " + q by tensor copy")) << what;
      EXPECT_FALSE(launched(generic_log, "q by tensor copy")) << what;
      EXPECT_EQ(testing_util::download<uint16_t>(p.o), o) << what;
      EXPECT_EQ(testing_util::download<float>(p.lse), lse) << what;
      size_t finite = 0;
      for (uint16_t x : o) finite += std::isfinite(bf16_to_f32(x)) && x != 0;
      EXPECT_GT(finite, o.size() / 2) << what << ": the outputs are mostly finite, non-zero values";
    }
}

// MlaAttentionPrecision::fast takes the WGMMA kernel's instantiation with P rounded once (its
// name says ", fast P"; exact's does not), and that rounding shows in o: the two differ in some
// elements (the matrix holds each to its own tolerance). v1 computes exactly in both modes:
// bit-identical results. Both caches, TMA and relayout modes (page 64 and 48), ragged lengths
// with several splits.
TEST_F(MlaAttentionCuda, FastPrecisionRoundsPOnceOnTheWgmmaKernelOnly) {
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    for (int64_t ps : {64, 48}) {
      const Problem p = make(ps, dt, {700, 37, 2000}, 6);
      const std::string what = str("dtype ", dtype_name(dt), " page ", ps);
      const auto exact_log = run(p, MlaAttentionKernel::wgmma, MlaAttentionPrecision::exact);
      const std::vector<uint16_t> exact = testing_util::download<uint16_t>(p.o);
      const auto fast_log = run(p, MlaAttentionKernel::wgmma, MlaAttentionPrecision::fast);
      const std::vector<uint16_t> fast = testing_util::download<uint16_t>(p.o);
      EXPECT_TRUE(launched(fast_log, "mla_attention_sm90_kernel<")) << what;
      EXPECT_TRUE(launched(fast_log, ", fast P>")) << what;
      EXPECT_TRUE(launched(exact_log, "mla_attention_sm90_kernel<")) << what;
      EXPECT_FALSE(launched(exact_log, "fast P")) << what;
      size_t differ = 0;
      for (size_t i = 0; i < exact.size(); ++i) differ += exact[i] != fast[i];
      EXPECT_GT(differ, exact.size() / 100) << what << ": P rounded once should move some o elements";

      run(p, MlaAttentionKernel::mma_sync, MlaAttentionPrecision::exact);
      const std::vector<uint16_t> v1_exact = testing_util::download<uint16_t>(p.o);
      const auto v1_fast_log = run(p, MlaAttentionKernel::mma_sync, MlaAttentionPrecision::fast);
      EXPECT_FALSE(launched(v1_fast_log, "fast P")) << what;
      EXPECT_EQ(testing_util::download<uint16_t>(p.o), v1_exact) << what << ": v1 ignores the precision";
    }
}

// Sequence 1's second page is outside the cache: its query becomes NaN (every key of a decode
// query is attended), the other sequences keep the bits of the run with a valid table.
TEST_F(MlaAttentionCuda, PageOutsideTheCacheMakesOnlyItsQueriesNan) {
  for (DType dt : {DType::bf16, DType::fp8_e4m3})
    for (MlaAttentionKernel k : {MlaAttentionKernel::wgmma, MlaAttentionKernel::mma_sync, MlaAttentionKernel::wgmma_keys_m,
                                 MlaAttentionKernel::wgmma_keys_m_wide, MlaAttentionKernel::wgmma_keys_m_bf16})
      for (int64_t ps : {32, 64}) {
        const bool keys_m = k == MlaAttentionKernel::wgmma_keys_m || k == MlaAttentionKernel::wgmma_keys_m_wide;
        if (keys_m && dt != DType::fp8_e4m3) continue;  // (fp8 only)
        if (k == MlaAttentionKernel::wgmma_keys_m_bf16 && dt != DType::bf16) continue;  // (bf16 only)
        // (the wide and the bf16 keys-as-M kernels run the fast precision only)
        const MlaAttentionPrecision pr =
            k == MlaAttentionKernel::wgmma_keys_m_wide || k == MlaAttentionKernel::wgmma_keys_m_bf16
                ? MlaAttentionPrecision::fast
                : MlaAttentionPrecision::exact;
        Problem p = make(ps, dt, {150, 130, 90}, 5);
        if (keys_m) use_fp8_q(p, 12);
        run(p, k, pr);
        const std::vector<uint16_t> good = testing_util::download<uint16_t>(p.o);
        std::vector<int32_t> bad_table = p.table;
        bad_table[static_cast<size_t>(1 * p.max_pages() + 1)] = static_cast<int32_t>(p.pages);  // one past the last page
        p.block_table = upload(bad_table, {p.B(), p.max_pages()}, DType::i32, Device::cuda);
        run(p, k, pr);
        const std::vector<uint16_t> bad = testing_util::download<uint16_t>(p.o);
        const size_t row = static_cast<size_t>(p.H * kMlaNope);
        for (size_t i = 0; i < good.size(); ++i) {
          const bool nan = std::isnan(bf16_to_f32(bad[i]));
          if (i / row == 1) {
            ASSERT_TRUE(nan) << "dtype " << dtype_name(dt) << " kernel " << static_cast<int>(k) << " page " << ps << " at " << i;
          } else {
            ASSERT_EQ(bad[i], good[i]) << "dtype " << dtype_name(dt) << " kernel " << static_cast<int>(k) << " page " << ps
                                       << " at " << i;
          }
        }
      }
}

}  // namespace
}  // namespace kestrel::ops
