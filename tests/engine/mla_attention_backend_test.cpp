// MlaAttentionBackend and MlaStepBuffers (DESIGN.md rules 3-7):
//  - the step buffers hold the live metadata and the padding rules (sink loc, length 0);
//  - the path rule for every mode x cache dtype x RoPE x save_kv x fused gate, on the CPU
//    backend, with results (o, lse, every cache byte) equal to calling the ops by hand (the
//    prepared fp8 query straight into mla_attention with its q_scale), padded rows written to
//    the sink only and no other cache row changed; with q_scale and kv_scale != 1 the scales
//    reach the ops, and with a power-of-two q_scale the result equals the former path that
//    widened the fp8 query to bf16 (fp8_dequantize) and folded q_scale into softmax_scale;
//  - on CUDA (names contain "Cuda", so scripts/gpu-check's memcheck runs them): the fused
//    prepare is 1 launch per layer call and the fp8 query goes to attention with no widening
//    launch (1 + attention launches), the closed gate gives the 5-launch chain with the same
//    bytes; a captured decode step and a captured verify step, replayed after refresh() with
//    new locations and new inputs, give the bytes of eager execution.
#include <gtest/gtest.h>

#include "testing/host_tensors.h"

#include "testing/expect_error.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"
#include "kestrel/engine/cuda_graph.h"
#include "kestrel/engine/mla_attention_backend.h"
#include "kestrel/engine/mla_step_buffers.h"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/fp8_dequantize.h"
#include "kestrel/ops/mla_attention.h"
#include "kestrel/ops/mla_build_q.h"
#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::engine {
namespace {

using ops::Backend;
using testing_util::throws_error_with;

constexpr int64_t kPageSize = 64, kNumPages = 16, kMaxPages = 8, kMaxPos = 512;
constexpr float kSoftmaxScale = 0.0721687836f;  // 192^-0.5

// ---- host data of one step --------------------------------------------------------------

struct HostStep {
  MlaForwardMode mode = MlaForwardMode::decode;
  int64_t batch = 0, tokens = 0;  // padded sizes
  std::vector<int64_t> loc, positions;
  std::vector<int32_t> seq_lens, q_start, block_table;
  int64_t width = 0;
  MlaStepMeta meta() const {
    return {loc, positions, seq_lens, q_start, block_table, width};
  }
};

// Live sequences with the given q_lens; each gets 3 distinct pages of 1 .. kNumPages - 1
// (page 0 is the sink) and a prefix so that its KV spans 1 to 3 pages.
HostStep make_step(MlaForwardMode mode, const std::vector<int32_t>& q_lens, int64_t batch, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostStep s;
  s.mode = mode;
  s.batch = batch;
  s.tokens = tokens;
  s.width = 3;
  std::vector<int32_t> pages;
  for (int32_t p = 1; p < kNumPages; ++p) pages.push_back(p);
  std::shuffle(pages.begin(), pages.end(), rng);
  s.q_start.push_back(0);
  for (size_t b = 0; b < q_lens.size(); ++b) {
    const int32_t n = q_lens[b];
    const int32_t prefix = static_cast<int32_t>(rng() % (3 * kPageSize - n - 1)) + 1;
    const int32_t L = prefix + n;
    s.seq_lens.push_back(L);
    s.q_start.push_back(s.q_start.back() + n);
    for (int64_t j = 0; j < s.width; ++j) s.block_table.push_back(pages[b * 3 + j]);
    for (int32_t p = prefix; p < L; ++p) {
      s.loc.push_back(static_cast<int64_t>(pages[b * 3 + p / kPageSize]) * kPageSize + p % kPageSize);
      s.positions.push_back(p);
    }
  }
  return s;
}

// Inputs of one layer, on the host: bf16 values in [-1, 1) (exact in bf16), a cache of
// finite values, a RoPE table.
struct HostLayer {
  int64_t T = 0, H = 0;
  DType cache_dt = DType::fp8_e4m3;
  std::vector<uint16_t> q_nope, q_pe, k_nope, k_pe;
  std::vector<uint8_t> cache;
  std::vector<float> cos_sin;
};

HostLayer make_layer(int64_t T, int64_t H, DType cache_dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  HostLayer l;
  l.T = T;
  l.H = H;
  l.cache_dt = cache_dt;
  auto bf16s = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = f32_to_bf16(u(rng));
    return v;
  };
  l.q_nope = bf16s(T * H * 512);
  l.q_pe = bf16s(T * H * 64);
  l.k_nope = bf16s(T * 512);
  l.k_pe = bf16s(T * 64);
  const int64_t elems = kNumPages * kPageSize * 576;
  l.cache.resize(static_cast<size_t>(elems * static_cast<int64_t>(dtype_size(cache_dt))));
  for (int64_t i = 0; i < elems; ++i) {
    if (cache_dt == DType::fp8_e4m3) {
      l.cache[i] = f32_to_fp8_e4m3(u(rng));
    } else {
      const uint16_t h = f32_to_bf16(u(rng));
      std::memcpy(&l.cache[2 * i], &h, 2);
    }
  }
  l.cos_sin.resize(kMaxPos * 64);
  for (int64_t p = 0; p < kMaxPos; ++p)
    for (int64_t i = 0; i < 32; ++i) {
      const double a = p * std::pow(10000.0, -static_cast<double>(i) / 32.0);
      l.cos_sin[p * 64 + i] = static_cast<float>(std::cos(a));
      l.cos_sin[p * 64 + 32 + i] = static_cast<float>(std::sin(a));
    }
  return l;
}

using testing_util::download;
using testing_util::upload;

// The cache's bytes with page 0 (the sink) blanked. Every padded row of a step writes the
// sink; on CUDA they race, so which one the sink holds is unspecified (docs/ops/mla_write_kv.md)
// and comparisons across runs or backends leave it out. The CPU tests check the sink itself.
std::vector<uint8_t> without_sink(std::vector<uint8_t> cache) {
  const size_t sink_bytes = cache.size() / static_cast<size_t>(kNumPages);
  std::fill(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(sink_bytes), uint8_t{0});
  return cache;
}

// The layer's tensors on a device. With `misalign`, q_nope sits one element past a 16-byte
// boundary (same values), which closes the fused gate.
struct DeviceLayer {
  Tensor q_nope_store, q_pe, k_nope, k_pe, cache, cos_sin, o, lse;
  TensorView q_nope;
  DeviceLayer(const HostLayer& h, Device d, bool misalign) {
    const int64_t T = h.T, H = h.H, shift = misalign ? 1 : 0;
    q_nope_store = Tensor::empty({T * H * 512 + 8}, DType::bf16, d);
    q_nope = TensorView(static_cast<uint16_t*>(q_nope_store.data()) + shift, d, DType::bf16, {T, H, 512},
                        {H * 512, 512, 1});
    memcpy_bytes(q_nope.data, d, h.q_nope.data(), Device::cpu, h.q_nope.size() * 2);
    q_pe = upload(h.q_pe, {T, H, 64}, DType::bf16, d);
    k_nope = upload(h.k_nope, {T, 512}, DType::bf16, d);
    k_pe = upload(h.k_pe, {T, 64}, DType::bf16, d);
    cache = upload(h.cache, {kNumPages, kPageSize, 576}, h.cache_dt, d);
    cos_sin = upload(h.cos_sin, {kMaxPos, 64}, DType::f32, d);
    o = Tensor::empty({T, H, 512}, DType::bf16, d);
    lse = Tensor::empty({T, H}, DType::f32, d);
    // Poison the outputs (NaN bits) so that a row the call forgot shows.
    const std::vector<uint8_t> nan_o(static_cast<size_t>(o.bytes()), 0xFF), nan_l(static_cast<size_t>(lse.bytes()), 0xFF);
    memcpy_bytes(o.data(), d, nan_o.data(), Device::cpu, nan_o.size());
    memcpy_bytes(lse.data(), d, nan_l.data(), Device::cpu, nan_l.size());
  }
  // Overwrites the inputs and the cache in place (same addresses), for graph replays.
  void reload(const HostLayer& h) {
    const Device d = cache.view().device;
    memcpy_bytes(q_nope.data, d, h.q_nope.data(), Device::cpu, h.q_nope.size() * 2);
    memcpy_bytes(q_pe.data(), d, h.q_pe.data(), Device::cpu, h.q_pe.size() * 2);
    memcpy_bytes(k_nope.data(), d, h.k_nope.data(), Device::cpu, h.k_nope.size() * 2);
    memcpy_bytes(k_pe.data(), d, h.k_pe.data(), Device::cpu, h.k_pe.size() * 2);
    memcpy_bytes(cache.data(), d, h.cache.data(), Device::cpu, h.cache.size());
  }
  MlaLayerInputs inputs(bool save_kv, bool rope, float q_scale = 1.0f, float kv_scale = 1.0f) const {
    MlaLayerInputs in;
    in.q_scale = q_scale;
    in.kv_scale = kv_scale;
    in.q_nope = q_nope;
    in.q_pe = q_pe;
    in.k_nope = k_nope;
    in.k_pe = k_pe;
    in.cache = cache;
    in.save_kv = save_kv;
    if (rope) in.rope_cos_sin = cos_sin;
    return in;
  }
  MlaLayerOutputs outputs() const { return {o, lse}; }
};

// The rule, restated from DESIGN.md 3.3/3.4 and the header (nullopt: an error).
std::optional<MlaPrepareKind> expected_kind(MlaForwardMode mode, bool fp8, bool rope, bool save_kv, bool gate_open) {
  if (rope) return fp8 && save_kv ? std::optional(MlaPrepareKind::rope_fp8) : std::nullopt;
  if (!fp8) return save_kv ? MlaPrepareKind::write_kv_build_q_bf16 : MlaPrepareKind::build_q_bf16;
  if (!save_kv) return MlaPrepareKind::build_q_fp8;
  const bool fused_mode = mode == MlaForwardMode::decode || mode == MlaForwardMode::target_verify;
  return fused_mode && gate_open ? MlaPrepareKind::fused_fp8 : MlaPrepareKind::chain_fp8;
}

constexpr MlaForwardMode kModes[] = {MlaForwardMode::decode, MlaForwardMode::extend, MlaForwardMode::target_verify,
                                     MlaForwardMode::draft_extend};

// A step of each mode: padded batch and tokens, as a captured graph would have them.
HostStep step_for(MlaForwardMode mode, uint64_t seed) {
  switch (mode) {
    case MlaForwardMode::decode: return make_step(mode, {1, 1, 1}, 4, 4, seed);
    case MlaForwardMode::target_verify: return make_step(mode, {3, 3, 3}, 4, 12, seed);
    case MlaForwardMode::extend: return make_step(mode, {5, 3}, 3, 10, seed);
    case MlaForwardMode::draft_extend: return make_step(mode, {2, 1, 3}, 4, 8, seed);
  }
  return {};
}

// ---- the step buffers ---------------------------------------------------------------------

TEST(MlaStepBuffers, LiveValuesAndPaddingRules) {
  MlaStepBuffers sb(Device::cpu, 6, 20, kMaxPages);
  const HostStep s = make_step(MlaForwardMode::draft_extend, {2, 1, 3}, 5, 11, 7);
  sb.refresh(s.meta(), s.batch, s.tokens);
  ASSERT_EQ(sb.batch(), 5);
  ASSERT_EQ(sb.tokens(), 11);
  EXPECT_EQ(sb.live_batch(), 3);
  EXPECT_EQ(sb.live_tokens(), 6);
  EXPECT_EQ(sb.min_q_len(), 1);
  EXPECT_EQ(sb.max_q_len(), 3);
  const auto* loc = sb.loc().ptr<int64_t>();
  const auto* pos = sb.positions().ptr<int64_t>();
  for (int64_t t = 0; t < sb.max_tokens(); ++t) {  // the tail up to max_tokens, not only to tokens
    EXPECT_EQ(loc[t], t < 6 ? s.loc[t] : 0) << "t " << t;
    EXPECT_EQ(pos[t], t < 6 ? s.positions[t] : 0) << "t " << t;
  }
  const auto* seq = sb.seq_lens().ptr<int32_t>();
  const auto* qs = sb.q_start().ptr<int32_t>();
  const std::vector<int32_t> want_qs = {0, 2, 3, 6, 6, 11};
  for (int64_t b = 0; b < 5; ++b) EXPECT_EQ(seq[b], b < 3 ? s.seq_lens[b] : 0) << "b " << b;
  for (int64_t b = 0; b <= 5; ++b) EXPECT_EQ(qs[b], want_qs[b]) << "b " << b;
  const TensorView bt = sb.block_table();
  ASSERT_EQ(bt.size(0), 5);
  ASSERT_EQ(bt.size(1), kMaxPages);
  for (int64_t b = 0; b < 5; ++b)
    for (int64_t j = 0; j < kMaxPages; ++j)
      EXPECT_EQ(bt.ptr<int32_t>()[b * bt.stride(0) + j], b < 3 && j < 3 ? s.block_table[b * 3 + j] : 0) << b << "," << j;

  // Addresses are stable across refreshes; a smaller step zeroes what the larger one left.
  const void* loc_addr = sb.loc().data;
  const HostStep s2 = make_step(MlaForwardMode::decode, {1}, 2, 2, 8);
  sb.refresh(s2.meta(), 2, 2);
  EXPECT_EQ(sb.loc().data, loc_addr);
  for (int64_t t = 1; t < sb.max_tokens(); ++t) EXPECT_EQ(sb.loc().ptr<int64_t>()[t], 0) << "t " << t;
  EXPECT_EQ(sb.q_start().ptr<int32_t>()[2], 2);
  EXPECT_EQ(sb.seq_lens().ptr<int32_t>()[1], 0);
}

TEST(MlaStepBuffers, BadMetadataIsAnError) {
  MlaStepBuffers sb(Device::cpu, 4, 8, 4);
  const HostStep s = make_step(MlaForwardMode::decode, {1, 1}, 2, 2, 1);
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(s.meta(), 2, 3); }, {"batch", "padded sequence"}));
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(s.meta(), 5, 2); }, {"batch", "max_batch"}));
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(s.meta(), 2, 9); }, {"tokens"}));
  HostStep bad = s;
  bad.loc.pop_back();
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(bad.meta(), 2, 2); }, {"loc"}));
  bad = s;
  bad.q_start = {0, 2, 1};
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(bad.meta(), 2, 2); }, {"q_start", "non-decreasing"}));
  bad = s;
  bad.width = 5;
  EXPECT_TRUE(throws_error_with([&] { sb.refresh(bad.meta(), 2, 2); }, {"block_table_width"}));
}

// ---- the rule -----------------------------------------------------------------------------

TEST(MlaAttentionBackend, ChoosePrepareRule) {
  for (MlaForwardMode mode : kModes)
    for (bool fp8 : {false, true})
      for (bool rope : {false, true})
        for (bool save_kv : {false, true})
          for (bool gate : {false, true}) {
            SCOPED_TRACE(str(mla_forward_mode_name(mode), fp8 ? " fp8" : " bf16", rope ? " rope" : "",
                             save_kv ? " save_kv" : "", gate ? " gate-open" : " gate-closed"));
            const auto want = expected_kind(mode, fp8, rope, save_kv, gate);
            const ops::Support s = gate ? ops::Support::yes() : ops::Support::no("test: closed");
            const DType dt = fp8 ? DType::fp8_e4m3 : DType::bf16;
            if (!want) {
              EXPECT_TRUE(throws_error_with([&] { mla_choose_prepare(mode, dt, rope, save_kv, s); },
                                            {rope && !fp8 ? "rope_cos_sin" : "save_kv"}));
              continue;
            }
            const MlaPathChoice c = mla_choose_prepare(mode, dt, rope, save_kv, s);
            EXPECT_EQ(c.kind, *want) << mla_prepare_kind_name(c.kind);
            EXPECT_EQ(c.why_not_fused.empty(), *want == MlaPrepareKind::fused_fp8) << c.why_not_fused;
            if (*want == MlaPrepareKind::chain_fp8 && !gate &&
                (mode == MlaForwardMode::decode || mode == MlaForwardMode::target_verify)) {
              EXPECT_NE(c.why_not_fused.find("test: closed"), std::string::npos) << c.why_not_fused;
            }
          }
}

// ---- the CPU backend against the ops called by hand ---------------------------------------

// The ops of the expected path, called directly on `d` (a copy of the layer), reading the
// metadata from `sb` (whose contents LiveValuesAndPaddingRules proved). An fp8 query goes to
// mla_attention as it is, with its q_scale. `widen` runs the former path instead: the fp8
// query widened to bf16 by fp8_dequantize (scale 1) and q_scale folded into softmax_scale in f32.
void run_by_hand(const DeviceLayer& d, const MlaStepBuffers& sb, bool fp8, bool rope, bool save_kv, int64_t H,
                 float q_scale = 1.0f, float kv_scale = 1.0f, bool widen = false) {
  const int64_t T = sb.tokens();
  Tensor q8 = Tensor::empty({T, H, 576}, DType::fp8_e4m3);
  Tensor q16 = Tensor::empty({T, H, 576}, DType::bf16);
  if (rope) {
    ops::MlaRopeQuantizeFp8Args r;
    r.q_out = q8;
    r.cache = d.cache;
    r.loc = sb.loc();
    r.q_nope = d.q_nope;
    r.q_pe = d.q_pe;
    r.k_nope = d.k_nope;
    r.k_pe = d.k_pe;
    r.cos_sin = d.cos_sin;
    r.positions = sb.positions();
    r.q_scale = q_scale;
    r.kv_scale = kv_scale;
    ops::mla_rope_quantize_fp8(Backend::cpu, r);
  } else {
    if (save_kv)
      ops::mla_write_kv(Backend::cpu, {.cache = d.cache, .loc = sb.loc(), .k_nope = d.k_nope, .k_pe = d.k_pe,
                                       .invalid_count = {}, .scale = kv_scale});
    ops::mla_build_q(Backend::cpu,
                     {.q_out = fp8 ? q8.view() : q16.view(), .q_nope = d.q_nope, .q_pe = d.q_pe, .scale = q_scale});
  }
  ops::MlaAttentionArgs a;
  a.o = d.o;
  a.lse = d.lse;
  a.q = fp8 ? q8.view() : q16.view();
  a.cache = d.cache;
  a.block_table = sb.block_table();
  a.seq_lens = sb.seq_lens();
  a.q_start = sb.q_start();
  a.softmax_scale = kSoftmaxScale;
  a.kv_scale = kv_scale;
  a.q_scale = fp8 ? q_scale : 1.0f;
  if (fp8 && widen) {
    ops::fp8_dequantize(Backend::cpu, {.out = q16, .x = q8, .scale = 1.0f});
    a.q = q16;
    a.softmax_scale = kSoftmaxScale * q_scale;
    a.q_scale = 1.0f;
  }
  ops::mla_attention(Backend::cpu, a);
}

TEST(MlaAttentionBackend, EveryPathOnCpuEqualsTheOps) {
  constexpr int64_t H = 4;
  MlaStepBuffers sb(Device::cpu, 4, 12, kMaxPages);
  MlaAttentionBackend backend(Backend::cpu, sb, H, kSoftmaxScale);
  uint64_t seed = 11;
  for (MlaForwardMode mode : kModes) {
    const HostStep s = step_for(mode, seed++);
    sb.refresh(s.meta(), s.batch, s.tokens);
    const int64_t T = s.tokens, T_live = static_cast<int64_t>(s.loc.size());
    for (bool fp8 : {false, true})
      for (bool rope : {false, true})
        for (bool save_kv : {false, true})
          for (bool gate : {false, true}) {
            SCOPED_TRACE(str(mla_forward_mode_name(mode), fp8 ? " fp8" : " bf16", rope ? " rope" : "",
                             save_kv ? " save_kv" : "", gate ? " gate-open" : " gate-closed"));
            const HostLayer h = make_layer(T, H, fp8 ? DType::fp8_e4m3 : DType::bf16, seed++);
            DeviceLayer run(h, Device::cpu, !gate), ref(h, Device::cpu, false);
            const auto want = expected_kind(mode, fp8, rope, save_kv, gate);
            if (!want) {
              EXPECT_THROW(backend.forward(run.outputs(), mode, run.inputs(save_kv, rope)), Error);
              EXPECT_EQ(download(run.cache), h.cache) << "a refused call changed the cache";
              continue;
            }
            const MlaForwardRecord rec = backend.forward(run.outputs(), mode, run.inputs(save_kv, rope));
            EXPECT_EQ(rec.prepare, *want) << mla_prepare_kind_name(rec.prepare) << ": " << rec.why_not_fused;
            EXPECT_EQ(rec.kv_written, save_kv);
            EXPECT_EQ(rec.prepare_launches + rec.attention_launches, 0u) << "the CPU launches nothing";
            if (*want == MlaPrepareKind::chain_fp8 && !gate && mode != MlaForwardMode::extend &&
                mode != MlaForwardMode::draft_extend) {
              EXPECT_NE(rec.why_not_fused.find("q_nope"), std::string::npos) << rec.why_not_fused;
            }

            run_by_hand(ref, sb, fp8, rope, save_kv, H);
            EXPECT_EQ(download(run.o), download(ref.o));
            EXPECT_EQ(download(run.lse), download(ref.lse));
            const std::vector<uint8_t> after = download(run.cache);
            EXPECT_EQ(after, download(ref.cache));

            // Only live rows and the sink row change; padded rows attend nothing.
            const int64_t row = 576 * static_cast<int64_t>(dtype_size(h.cache_dt));
            std::vector<bool> live(static_cast<size_t>(kNumPages * kPageSize), false);
            for (int64_t t = 0; t < T_live; ++t) live[s.loc[t]] = true;
            for (int64_t r = 1; r < kNumPages * kPageSize; ++r) {
              if (!live[r]) {
                ASSERT_EQ(std::memcmp(after.data() + r * row, h.cache.data() + r * row, row), 0) << "slot " << r << " changed";
              }
            }
            const bool sink_changed = std::memcmp(after.data(), h.cache.data(), row) != 0;
            EXPECT_EQ(sink_changed, save_kv && T > T_live) << "the sink row";
            if (save_kv) {
              for (int64_t t = 0; t < T_live; ++t) {
                EXPECT_NE(std::memcmp(after.data() + s.loc[t] * row, h.cache.data() + s.loc[t] * row, row), 0)
                    << "live slot " << s.loc[t] << " not written";
              }
            }
            const auto* o = run.o.view().ptr<uint16_t>();
            const auto* lse = run.lse.view().ptr<float>();
            for (int64_t t = T_live; t < T; ++t)
              for (int64_t hh = 0; hh < H; ++hh) {
                EXPECT_EQ(lse[t * H + hh], -std::numeric_limits<float>::infinity()) << "padded row " << t;
                for (int64_t i = 0; i < 512; ++i) ASSERT_EQ(o[(t * H + hh) * 512 + i], 0) << "padded row " << t;
              }
          }
  }
}

// The scales reach the ops: every fp8 path (fused, chain, build_q, rope) with q_scale and
// kv_scale != 1 equals the ops by hand. With a power-of-two q_scale it also equals the former
// path (fp8 query widened to bf16, q_scale folded into softmax_scale): scaling by 2^k is exact
// in f32 (softmax_scale * q_scale) and in the reference's f64 sums, so both give one f64 score.
TEST(MlaAttentionBackend, Fp8ScalesReachAttention) {
  constexpr int64_t H = 4;
  constexpr float kKvScale = 1.5f;
  MlaStepBuffers sb(Device::cpu, 4, 12, kMaxPages);
  MlaAttentionBackend backend(Backend::cpu, sb, H, kSoftmaxScale);
  uint64_t seed = 61;
  for (MlaForwardMode mode : {MlaForwardMode::decode, MlaForwardMode::target_verify, MlaForwardMode::extend}) {
    const HostStep s = step_for(mode, seed++);
    sb.refresh(s.meta(), s.batch, s.tokens);
    for (float q_scale : {0.5f, 0.75f})
      for (bool rope : {false, true})
        for (bool save_kv : {false, true})
          for (bool gate : {false, true}) {
            if (rope && !save_kv) continue;  // an error, covered above
            SCOPED_TRACE(str(mla_forward_mode_name(mode), " q_scale ", q_scale, rope ? " rope" : "",
                             save_kv ? " save_kv" : "", gate ? " gate-open" : " gate-closed"));
            const HostLayer h = make_layer(s.tokens, H, DType::fp8_e4m3, seed++);
            DeviceLayer run(h, Device::cpu, !gate), ref(h, Device::cpu, false), old(h, Device::cpu, false);
            const MlaForwardRecord rec =
                backend.forward(run.outputs(), mode, run.inputs(save_kv, rope, q_scale, kKvScale));
            EXPECT_EQ(rec.prepare, *expected_kind(mode, true, rope, save_kv, gate)) << rec.why_not_fused;
            run_by_hand(ref, sb, true, rope, save_kv, H, q_scale, kKvScale);
            const std::vector<uint8_t> o = download(run.o), lse = download(run.lse);
            EXPECT_EQ(o, download(ref.o));
            EXPECT_EQ(lse, download(ref.lse));
            EXPECT_EQ(download(run.cache), download(ref.cache));
            if (q_scale == 0.5f) {
              run_by_hand(old, sb, true, rope, save_kv, H, q_scale, kKvScale, /*widen=*/true);
              EXPECT_EQ(o, download(old.o)) << "the former widening path";
              EXPECT_EQ(lse, download(old.lse)) << "the former widening path";
            }
          }
  }
}

TEST(MlaAttentionBackend, ModeMustFitTheStep) {
  MlaStepBuffers sb(Device::cpu, 4, 12, kMaxPages);
  MlaAttentionBackend backend(Backend::cpu, sb, 2, kSoftmaxScale);
  const HostStep s = step_for(MlaForwardMode::draft_extend, 3);
  sb.refresh(s.meta(), s.batch, s.tokens);
  const HostLayer h = make_layer(s.tokens, 2, DType::fp8_e4m3, 4);
  DeviceLayer d(h, Device::cpu, false);
  EXPECT_TRUE(throws_error_with([&] { backend.forward(d.outputs(), MlaForwardMode::decode, d.inputs(true, false)); },
                                {"mode", "decode"}));
  EXPECT_TRUE(throws_error_with(
      [&] { backend.forward(d.outputs(), MlaForwardMode::target_verify, d.inputs(true, false)); }, {"mode", "target_verify"}));
  const HostLayer wrong_t = make_layer(s.tokens - 1, 2, DType::fp8_e4m3, 5);
  DeviceLayer w(wrong_t, Device::cpu, false);
  EXPECT_TRUE(throws_error_with([&] { backend.forward(w.outputs(), MlaForwardMode::draft_extend, w.inputs(true, false)); },
                                {"q_nope", "padded tokens"}));
  EXPECT_TRUE(throws_error_with([&] { MlaAttentionBackend(Backend::cuda, sb, 2, kSoftmaxScale); }, {"step"}));
}

// ---- CUDA: launches, and graphs -----------------------------------------------------------

#define SKIP_WITHOUT_CUDA()                                            \
  do {                                                                 \
    std::string why_;                                                  \
    if (!cuda_available(&why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

struct Outcome {
  std::vector<uint8_t> o, lse, cache;
  MlaForwardRecord rec;
  uint64_t launches = 0;  // the test's own count around the call
};

Outcome run_cuda_eager(const HostLayer& h, const HostStep& s, bool misalign, Stream stream) {
  MlaStepBuffers sb(Device::cuda, s.batch, s.tokens, kMaxPages);
  MlaAttentionBackend backend(Backend::cuda, sb, h.H, kSoftmaxScale);
  DeviceLayer d(h, Device::cuda, misalign);
  device_sync();
  sb.refresh(s.meta(), s.batch, s.tokens, stream);
  const uint64_t before = ops::cuda::launch_count();
  Outcome out;
  out.rec = backend.forward(d.outputs(), s.mode, d.inputs(true, false), stream);
  out.launches = ops::cuda::launch_count() - before;
  stream_sync(stream);
  out.o = download(d.o);
  out.lse = download(d.lse);
  out.cache = download(d.cache);
  return out;
}

// Launches mla_attention makes for this step's shapes (1, or 2 with a split-KV combine), with
// an fp8 query as the fp8-cache paths give it.
uint64_t attention_launches(const HostLayer& h, const HostStep& s) {
  MlaStepBuffers sb(Device::cuda, s.batch, s.tokens, kMaxPages);
  sb.refresh(s.meta(), s.batch, s.tokens);
  DeviceLayer d(h, Device::cuda, false);
  Tensor q = Tensor::empty({s.tokens, h.H, 576}, DType::fp8_e4m3, Device::cuda);
  memcpy_bytes(q.data(), Device::cuda, std::vector<uint8_t>(static_cast<size_t>(q.bytes()), 0).data(), Device::cpu,
               static_cast<size_t>(q.bytes()));
  device_sync();
  ops::MlaAttentionArgs a;
  a.o = d.o;
  a.lse = d.lse;
  a.q = q;
  a.cache = d.cache;
  a.block_table = sb.block_table();
  a.seq_lens = sb.seq_lens();
  a.q_start = sb.q_start();
  a.softmax_scale = kSoftmaxScale;
  const uint64_t before = ops::cuda::launch_count();
  ops::mla_attention(Backend::cuda, a);
  const uint64_t n = ops::cuda::launch_count() - before;
  device_sync();
  return n;
}

TEST(MlaAttentionBackendCuda, Fp8FusedIsOneLaunchAndChainGivesSameBytes) {
  SKIP_WITHOUT_CUDA();
  Stream stream = stream_create();
  constexpr int64_t H = 32;
  for (MlaForwardMode mode : {MlaForwardMode::target_verify, MlaForwardMode::decode}) {
    SCOPED_TRACE(mla_forward_mode_name(mode));
    const HostStep s = step_for(mode, 21);
    const HostLayer h = make_layer(s.tokens, H, DType::fp8_e4m3, 22);
    const uint64_t n_att = attention_launches(h, s);
    EXPECT_GE(n_att, 1u);
    const Outcome fused = run_cuda_eager(h, s, false, stream);
    const Outcome chain = run_cuda_eager(h, s, true, stream);
    EXPECT_EQ(fused.rec.prepare, MlaPrepareKind::fused_fp8) << fused.rec.why_not_fused;
    // The fused prepare's fp8 query goes straight to attention: no widening launch.
    EXPECT_EQ(fused.rec.prepare_launches, 1u);
    EXPECT_EQ(fused.rec.attention_launches, n_att);
    EXPECT_EQ(fused.launches, 1u + n_att);
    EXPECT_EQ(chain.rec.prepare, MlaPrepareKind::chain_fp8);
    EXPECT_NE(chain.rec.why_not_fused.find("q_nope"), std::string::npos) << chain.rec.why_not_fused;
    EXPECT_EQ(chain.rec.prepare_launches, 5u);
    EXPECT_EQ(chain.rec.attention_launches, n_att);
    EXPECT_EQ(chain.launches, 5u + n_att);
    EXPECT_EQ(fused.o, chain.o);
    EXPECT_EQ(fused.lse, chain.lse);
    EXPECT_EQ(without_sink(fused.cache), without_sink(chain.cache));

    // The prepare is bit-exact across backends: the CUDA cache equals the CPU backend's.
    MlaStepBuffers sb(Device::cpu, s.batch, s.tokens, kMaxPages);
    MlaAttentionBackend cpu(Backend::cpu, sb, H, kSoftmaxScale);
    sb.refresh(s.meta(), s.batch, s.tokens);
    DeviceLayer d(h, Device::cpu, false);
    cpu.forward(d.outputs(), mode, d.inputs(true, false));
    EXPECT_EQ(without_sink(fused.cache), without_sink(download(d.cache)));
  }
  stream_destroy(stream);
}

// Capture one step on a non-blocking stream with `first` in the buffers, then replay it after
// refresh() with `second` (new locations, lengths, pages and q/k contents) and compare with
// eager execution of `second` from the same initial cache.
void graph_equals_eager(MlaForwardMode mode, const HostStep& first, const HostStep& second) {
  ASSERT_EQ(first.batch, second.batch);
  ASSERT_EQ(first.tokens, second.tokens);
  constexpr int64_t H = 32;
  const HostLayer h1 = make_layer(first.tokens, H, DType::fp8_e4m3, 31);
  HostLayer h2 = make_layer(first.tokens, H, DType::fp8_e4m3, 32);
  h2.cache = h1.cache;  // the same initial cache for both runs
  Stream stream = stream_create();

  const Outcome eager = run_cuda_eager(h2, second, false, stream);
  EXPECT_EQ(eager.rec.prepare, MlaPrepareKind::fused_fp8) << eager.rec.why_not_fused;

  MlaStepBuffers sb(Device::cuda, first.batch, first.tokens, kMaxPages);
  MlaAttentionBackend backend(Backend::cuda, sb, H, kSoftmaxScale);
  DeviceLayer d(h1, Device::cuda, false);
  device_sync();
  sb.refresh(first.meta(), first.batch, first.tokens, stream);
  stream_sync(stream);
  CudaGraph graph;
  MlaForwardRecord captured;
  graph.capture(stream, [&] { captured = backend.forward(d.outputs(), mode, d.inputs(true, false), stream); });
  ASSERT_TRUE(graph.captured());
  EXPECT_EQ(captured.prepare, MlaPrepareKind::fused_fp8);
  graph.replay(stream);  // the first step, as captured
  stream_sync(stream);

  d.reload(h2);  // same addresses, new contents; the cache back to its initial bytes
  device_sync();
  sb.refresh(second.meta(), second.batch, second.tokens, stream);
  const uint64_t before = ops::cuda::launch_count();
  graph.replay(stream);
  EXPECT_EQ(ops::cuda::launch_count(), before) << "a replay launches through the graph, not the ops";
  stream_sync(stream);
  EXPECT_EQ(download(d.o), eager.o);
  EXPECT_EQ(download(d.lse), eager.lse);
  EXPECT_EQ(without_sink(download(d.cache)), without_sink(eager.cache));
  stream_destroy(stream);
}

TEST(MlaAttentionBackendCuda, GraphDecodeEqualsEager) {
  SKIP_WITHOUT_CUDA();
  // 3 live of 4 captured, then 2 live (more padding, other pages and locations).
  graph_equals_eager(MlaForwardMode::decode, make_step(MlaForwardMode::decode, {1, 1, 1}, 4, 4, 41),
                     make_step(MlaForwardMode::decode, {1, 1}, 4, 4, 42));
}

TEST(MlaAttentionBackendCuda, GraphVerifyEqualsEager) {
  SKIP_WITHOUT_CUDA();
  // q_len 3 (2 drafts): 3 live of 4 captured, then all 4 live.
  graph_equals_eager(MlaForwardMode::target_verify, make_step(MlaForwardMode::target_verify, {3, 3, 3}, 4, 12, 43),
                     make_step(MlaForwardMode::target_verify, {3, 3, 3, 3}, 4, 12, 44));
}

}  // namespace
}  // namespace kestrel::engine
