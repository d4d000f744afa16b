// The MLA prepare paths (DESIGN.md rules 3 and 6): the fused kernel and the 5-launch chain
// give the same bytes, on the CPU and on CUDA; each path makes exactly its launches (fused 1,
// chain 5); the gate declines a misaligned call with a reason and the chain then still gives
// the same bytes; bad input is an error naming the argument; and the RoPE variant's index
// mapping and order of operations.
//
// Each problem lives in one arena (all tensors at fixed byte offsets, random bytes between
// them), so "the same bytes" is a comparison of whole arenas: outputs, the cache rows not at
// loc, and every byte around the tensors.
#include <gtest/gtest.h>

#include "testing/expect_error.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/mla_build_q.h"
#include "kestrel/ops/mla_prepare.h"
#include "kestrel/ops/mla_rope_quantize_fp8.h"
#include "kestrel/ops/mla_write_kv.h"

namespace kestrel::ops {
namespace {

using testing_util::throws_error_with;

// A tensor's place in the arena: byte offset, dtype, shape, element strides.
struct Place {
  int64_t off = -1;
  DType dt = DType::f32;
  Shape shape, strides;
  TensorView view(uint8_t* base, Device d) const {
    return off < 0 ? TensorView() : TensorView(base + off, d, dt, shape, strides);
  }
};

struct ProblemSpec {
  int64_t T = 7, H = 32, page_size = 64;
  bool proj = false;            // k and q are slices of wider projection rows (16-byte friendly)
  int64_t misalign_q_nope = 0;  // elements to shift q_nope's base by (1: breaks 16-byte alignment)
  DType loc_dt = DType::i64;
  int64_t n_invalid = 0;        // loc entries outside the cache (needs the counter)
  float kv_scale = 1.0f, q_scale = 1.0f;
};

struct Problem {
  ProblemSpec spec;
  int64_t num_pages = 0, bytes = 0;
  Place cache, loc, k_nope, k_pe, q_out, q_nope, q_pe, counter;
  std::vector<uint8_t> init;  // the arena's initial bytes

  MlaPrepareFp8Args args(uint8_t* base, Device d) const {
    MlaPrepareFp8Args a;
    a.cache = cache.view(base, d);
    a.loc = loc.view(base, d);
    a.k_nope = k_nope.view(base, d);
    a.k_pe = k_pe.view(base, d);
    a.q_out = q_out.view(base, d);
    a.q_nope = q_nope.view(base, d);
    a.q_pe = q_pe.view(base, d);
    a.invalid_count = counter.view(base, d);
    a.kv_scale = spec.kv_scale;
    a.q_scale = spec.q_scale;
    return a;
  }
};

Problem make_problem(const ProblemSpec& s, uint64_t seed) {
  Problem p;
  p.spec = s;
  const int64_t n_pad = std::min<int64_t>(s.T / 4, s.page_size), live = s.T - n_pad - s.n_invalid;
  p.num_pages = 2 + (live * 3 / 2 + s.page_size - 1) / s.page_size;
  int64_t at = 256;
  auto place = [&](DType dt, Shape shape, Shape strides, int64_t extent_elems, int64_t shift = 0) {
    Place pl{at + shift * static_cast<int64_t>(dtype_size(dt)), dt, std::move(shape), std::move(strides)};
    at += ((extent_elems + shift) * static_cast<int64_t>(dtype_size(dt)) + 256 + 255) / 256 * 256;
    return pl;
  };
  const int64_t T = s.T, H = s.H;
  p.cache = place(DType::fp8_e4m3, {p.num_pages, s.page_size, 576}, {s.page_size * 576, 576, 1},
                  p.num_pages * s.page_size * 576);
  p.loc = place(s.loc_dt, {T}, {3}, 3 * T);  // a strided column, as from a table
  p.q_out = place(DType::fp8_e4m3, {T, H, 576}, {H * 576, 576, 1}, T * H * 576);
  if (s.proj) {
    // [T, 640] and [T, H, 640] rows: nope at 0, pe at 576 (64 unrelated columns between).
    p.k_nope = place(DType::bf16, {T, 512}, {640, 1}, T * 640);
    p.k_pe = p.k_nope;
    p.k_pe.shape = {T, 64};
    p.k_pe.off += 576 * 2;
    p.q_nope = place(DType::bf16, {T, H, 512}, {H * 640, 640, 1}, T * H * 640, s.misalign_q_nope);
    p.q_pe = p.q_nope;
    p.q_pe.shape = {T, H, 64};
    p.q_pe.off = p.q_nope.off - s.misalign_q_nope * 2 + 576 * 2;
  } else {
    p.k_nope = place(DType::bf16, {T, 512}, {512, 1}, T * 512);
    p.k_pe = place(DType::bf16, {T, 64}, {64, 1}, T * 64);
    p.q_nope = place(DType::bf16, {T, H, 512}, {H * 512, 512, 1}, T * H * 512, s.misalign_q_nope);
    p.q_pe = place(DType::bf16, {T, H, 64}, {H * 64, 64, 1}, T * H * 64);
  }
  if (s.n_invalid) p.counter = place(DType::i32, {1}, {1}, 1);
  p.bytes = at;

  std::mt19937_64 rng(seed);
  p.init.resize(static_cast<size_t>(p.bytes));
  for (auto& b : p.init) b = static_cast<uint8_t>(rng());
  // bf16 inputs: sign * 2^u, u in [-12, 10.5]: fp8 subnormals, normals, saturation past 448
  std::uniform_real_distribution<double> e(-12.0, 10.5);
  auto fill_bf16 = [&](const Place& pl) {
    std::vector<int64_t> idx(pl.shape.size(), 0);
    const int64_t n = std::accumulate(pl.shape.begin(), pl.shape.end(), int64_t{1}, std::multiplies<>());
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0, r = i;
      for (int d = static_cast<int>(pl.shape.size()) - 1; d >= 0; --d) {
        off += (r % pl.shape[d]) * pl.strides[d];
        r /= pl.shape[d];
      }
      const float v = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(p.init.data() + pl.off + off * 2, &h, 2);
    }
  };
  for (const Place* pl : {&p.k_nope, &p.k_pe, &p.q_nope, &p.q_pe}) fill_bf16(*pl);
  // loc: n_invalid bad slots, n_pad distinct sink slots of page 0, live distinct slots of pages 1..
  const int64_t slots = p.num_pages * s.page_size;
  std::vector<int64_t> live_slots(static_cast<size_t>(slots - s.page_size));
  std::iota(live_slots.begin(), live_slots.end(), s.page_size);
  std::shuffle(live_slots.begin(), live_slots.end(), rng);
  std::vector<int64_t> loc(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    loc[t] = t < s.n_invalid ? (t % 2 ? -1 : slots + t) : t < s.n_invalid + n_pad ? t - s.n_invalid : live_slots[t];
  std::shuffle(loc.begin(), loc.end(), rng);
  for (int64_t t = 0; t < T; ++t) {
    uint8_t* dst = p.init.data() + p.loc.off + t * 3 * static_cast<int64_t>(dtype_size(s.loc_dt));
    if (s.loc_dt == DType::i32) {
      const int32_t v = static_cast<int32_t>(loc[t]);
      std::memcpy(dst, &v, 4);
    } else {
      std::memcpy(dst, &loc[t], 8);
    }
  }
  if (s.n_invalid) std::memset(p.init.data() + p.counter.off, 0, 4);
  return p;
}

std::string describe(const ProblemSpec& s) {
  return str("T", s.T, "-H", s.H, "-P", s.page_size, s.proj ? "-proj" : "", s.misalign_q_nope ? "-misaligned" : "",
             "-", dtype_name(s.loc_dt), s.n_invalid ? str("-bad", s.n_invalid) : "");
}

// Index of the first differing byte, or -1.
int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(std::min(a.size(), b.size()));
}

// Runs `fn` on a host copy of the arena (64-byte aligned) and returns the arena after it.
std::vector<uint8_t> on_cpu(const Problem& p, const std::function<void(const MlaPrepareFp8Args&)>& fn) {
  Tensor arena = Tensor::storage(p.bytes, DType::fp8_e4m3, Device::cpu);
  std::memcpy(arena.data(), p.init.data(), p.init.size());
  fn(p.args(static_cast<uint8_t*>(arena.data()), Device::cpu));
  std::vector<uint8_t> out(p.init.size());
  std::memcpy(out.data(), arena.data(), out.size());
  return out;
}

// The same on the GPU; `launches` gets the number of kernel launches the call made.
std::vector<uint8_t> on_cuda(const Problem& p, const std::function<void(const MlaPrepareFp8Args&)>& fn,
                             uint64_t* launches) {
  Tensor arena = Tensor::storage(p.bytes, DType::fp8_e4m3, Device::cuda);
  memcpy_bytes(arena.data(), Device::cuda, p.init.data(), Device::cpu, p.init.size());
  device_sync();
  const uint64_t before = cuda::launch_count();
  fn(p.args(static_cast<uint8_t*>(arena.data()), Device::cuda));
  device_sync();
  *launches = cuda::launch_count() - before;
  std::vector<uint8_t> out(p.init.size());
  memcpy_bytes(out.data(), Device::cpu, arena.data(), Device::cuda, out.size());
  return out;
}

std::vector<ProblemSpec> problems() {
  std::vector<ProblemSpec> v;
  for (int64_t T : {1, 7, 64, 257})
    for (int64_t H : {32, 96}) {
      if (T == 257 && H == 96) continue;  // the largest stays in the full matrix
      ProblemSpec s;
      s.T = T;
      s.H = H;
      s.page_size = T == 7 ? 32 : T == 64 ? 128 : 64;
      s.proj = H == 96;
      s.loc_dt = T % 2 ? DType::i32 : DType::i64;
      s.n_invalid = T >= 7 && H == 32 ? 2 : 0;
      s.kv_scale = T == 64 ? 1.5f : 1.0f;
      s.q_scale = T == 64 ? 0.75f : 1.0f;
      v.push_back(s);
    }
  return v;
}

TEST(MlaPrepare, FusedEqualsChainCpu) {
  uint64_t seed = 1;
  for (const ProblemSpec& s : problems()) {
    SCOPED_TRACE(describe(s));
    const Problem p = make_problem(s, seed++);
    const auto fused = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cpu, a); });
    const auto chain = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_chain_fp8(Backend::cpu, a); });
    EXPECT_EQ(first_diff(fused, chain), -1);
    EXPECT_NE(first_diff(fused, p.init), -1) << "the call changed nothing";
    if (s.n_invalid) {
      int32_t c;
      std::memcpy(&c, fused.data() + p.counter.off, 4);
      EXPECT_EQ(c, s.n_invalid);
    }
  }
}

TEST(MlaPrepare, FusedEqualsChainCudaWithLaunchCounts) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  uint64_t seed = 100;
  for (const ProblemSpec& s : problems()) {
    SCOPED_TRACE(describe(s));
    const Problem p = make_problem(s, seed++);
    {  // the arena's offsets are multiples of 256 bytes, so a host arena answers for the device one
      Tensor host = Tensor::storage(p.bytes, DType::fp8_e4m3, Device::cpu);
      const Support g = mla_prepare_fp8_fused_gate(p.args(static_cast<uint8_t*>(host.data()), Device::cpu));
      ASSERT_TRUE(g.ok) << g.reason;
    }
    const auto ref = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cpu, a); });
    uint64_t n_fused = 0, n_chain = 0, n_auto = 0;
    const auto fused = on_cuda(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cuda, a); }, &n_fused);
    const auto chain = on_cuda(p, [](const MlaPrepareFp8Args& a) { mla_prepare_chain_fp8(Backend::cuda, a); }, &n_chain);
    MlaPreparePath path = MlaPreparePath::chain;
    const auto chosen = on_cuda(p, [&](const MlaPrepareFp8Args& a) { path = mla_prepare_fp8(Backend::cuda, a); }, &n_auto);
    EXPECT_EQ(n_fused, 1u);
    EXPECT_EQ(n_chain, 5u);
    EXPECT_EQ(path, MlaPreparePath::fused);
    EXPECT_EQ(n_auto, 1u);
    EXPECT_EQ(first_diff(fused, chain), -1);
    EXPECT_EQ(first_diff(fused, ref), -1);
    EXPECT_EQ(first_diff(chosen, ref), -1);
  }
}

TEST(MlaPrepare, GateDeclinesMisalignedAndChainStillMatches) {
  ProblemSpec s;
  s.T = 7;
  s.H = 32;
  s.misalign_q_nope = 1;
  s.n_invalid = 1;
  const Problem p = make_problem(s, 7);
  {  // the gate is a host function of the arguments: it can be asked without a GPU
    Tensor arena = Tensor::storage(p.bytes, DType::fp8_e4m3, Device::cpu);
    const Support g = mla_prepare_fp8_fused_gate(p.args(static_cast<uint8_t*>(arena.data()), Device::cpu));
    EXPECT_FALSE(g.ok);
    EXPECT_NE(g.reason.find("q_nope"), std::string::npos) << g.reason;
    EXPECT_NE(g.reason.find("16-byte"), std::string::npos) << g.reason;
  }
  const ProblemSpec aligned_spec = [&] { ProblemSpec a = s; a.misalign_q_nope = 0; return a; }();
  {  // and it names other rules: inner stride, a 4-byte pe
    const Problem q = make_problem(aligned_spec, 7);
    Tensor arena = Tensor::storage(q.bytes, DType::fp8_e4m3, Device::cpu);
    MlaPrepareFp8Args a = q.args(static_cast<uint8_t*>(arena.data()), Device::cpu);
    EXPECT_TRUE(mla_prepare_fp8_fused_gate(a).ok) << mla_prepare_fp8_fused_gate(a).reason;
    MlaPrepareFp8Args b = a;
    b.k_pe.data = static_cast<uint8_t*>(b.k_pe.data) + 2;
    EXPECT_NE(mla_prepare_fp8_fused_gate(b).reason.find("k_pe"), std::string::npos);
    MlaPrepareFp8Args c = a;
    c.q_out = c.q_out.slice(2, 0, 288);
    c.q_out.strides[2] = 2;
    c.q_out.shape[2] = 576;
    EXPECT_NE(mla_prepare_fp8_fused_gate(c).reason.find("inner stride"), std::string::npos);
  }
  const auto fused_cpu = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cpu, a); });
  const auto chain_cpu = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_chain_fp8(Backend::cpu, a); });
  EXPECT_EQ(first_diff(fused_cpu, chain_cpu), -1);
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "CPU part passed; no CUDA device for the rest: " << why;
  uint64_t n = 0;
  MlaPreparePath path = MlaPreparePath::fused;
  const auto chosen = on_cuda(p, [&](const MlaPrepareFp8Args& a) { path = mla_prepare_fp8(Backend::cuda, a); }, &n);
  EXPECT_EQ(path, MlaPreparePath::chain);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(first_diff(chosen, fused_cpu), -1);
  EXPECT_TRUE(throws_error_with(
      [&] { on_cuda(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cuda, a); }, &n); },
      {"mla_prepare_fp8_fused", "cannot run this call", "q_nope"}));
}

TEST(MlaPrepare, BadInputNamesTheArgument) {
  ProblemSpec s;
  s.T = 7;
  s.H = 4;
  const Problem p = make_problem(s, 3);
  Tensor arena = Tensor::storage(p.bytes, DType::fp8_e4m3, Device::cpu);
  std::memcpy(arena.data(), p.init.data(), p.init.size());
  const MlaPrepareFp8Args good = p.args(static_cast<uint8_t*>(arena.data()), Device::cpu);
  auto expect = [&](std::function<void(MlaPrepareFp8Args&)> edit, std::initializer_list<std::string> parts) {
    MlaPrepareFp8Args a = good;
    edit(a);
    EXPECT_TRUE(throws_error_with([&] { mla_prepare_chain_fp8(Backend::cpu, a); }, parts));
  };
  expect([](auto& a) { a.k_nope = a.k_nope.slice(1, 0, 500); }, {"mla_prepare_fp8", "k_nope", "512"});
  expect([](auto& a) { a.q_pe = a.q_pe.slice(1, 0, 3); }, {"q_pe", "H (q_nope.size(1))"});
  expect([](auto& a) { a.q_out = a.q_out.select(0, 0); }, {"q_out", "rank 3"});
  expect([](auto& a) { a.loc.dtype = DType::f32; }, {"loc", "i32 or i64"});
  expect([](auto& a) { a.cache.dtype = DType::bf16; }, {"cache", "fp8_e4m3"});
  expect([](auto& a) { a.cache.strides[2] = 2; a.cache.shape[2] = 576; }, {"cache", "stride(2) == 1"});
  expect([](auto& a) { a.cache = a.cache.slice(2, 0, 512); }, {"cache", "576"});
  expect([](auto& a) { a.kv_scale = 0.0f; }, {"kv_scale", "positive"});
  expect([](auto& a) { a.q_scale = NAN; }, {"q_scale", "positive"});
  // A slot outside the cache with no counter: the CPU backend names it and writes nothing.
  std::vector<uint8_t> before(p.init);
  int64_t* loc0 = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(arena.data()) + p.loc.off);
  const int64_t saved = *loc0;
  *loc0 = 1 << 30;
  EXPECT_TRUE(throws_error_with([&] { mla_prepare_fp8_fused(Backend::cpu, good); }, {"loc", "loc[0] = 1073741824"}));
  EXPECT_TRUE(throws_error_with([&] { mla_prepare_chain_fp8(Backend::cpu, good); }, {"loc", "invalid_count"}));
  *loc0 = saved;
  EXPECT_EQ(std::memcmp(arena.data(), p.init.data(), p.init.size()), 0) << "a failed call wrote something";
  // mla_write_kv: a bf16 cache is a plain copy, so its scale must be 1.
  MlaWriteKvArgs w;
  std::vector<uint16_t> cache16(2 * 4 * 576);
  w.cache = TensorView::contiguous(cache16.data(), Device::cpu, DType::bf16, {2, 4, 576});
  w.loc = good.loc;
  w.k_nope = good.k_nope;
  w.k_pe = good.k_pe;
  w.scale = 2.0f;
  EXPECT_TRUE(throws_error_with([&] { mla_write_kv(Backend::cpu, w); }, {"mla_write_kv", "scale", "bf16"}));
  w.scale = 1.0f;
  w.k_pe = good.k_nope;
  EXPECT_TRUE(throws_error_with([&] { mla_write_kv(Backend::cpu, w); }, {"mla_write_kv", "k_pe", "64"}));
  // mla_build_q: q_out must not overlap itself.
  MlaBuildQArgs q;
  q.q_out = good.q_out;
  q.q_out.strides[1] = 0;
  q.q_nope = good.q_nope;
  q.q_pe = good.q_pe;
  EXPECT_TRUE(throws_error_with([&] { mla_build_q(Backend::cpu, q); }, {"mla_build_q", "q_out", "overlap"}));
}

// RoPE: the pair mapping of each style on exactly representable numbers, then a table of
// cos = 1, sin = 0 makes the op equal to the NoPE prepare (write_kv + build_q), byte for byte.
TEST(MlaRopeQuantizeFp8, PairMappingAndIdentity) {
  for (bool neox : {true, false}) {
    SCOPED_TRACE(neox ? "neox" : "interleaved");
    const int64_t T = 1, H = 1, P = 4;
    std::vector<uint16_t> q_nope(512, f32_to_bf16(1.0f)), q_pe(64, 0), k_nope(512, f32_to_bf16(-2.0f)), k_pe(64, 0);
    std::vector<float> cs(P * 64, 0.0f);
    for (int i = 0; i < 32; ++i) { cs[2 * 64 + i] = 0.5f; cs[2 * 64 + 32 + i] = 0.25f; }
    // pair 5: x_a = 1, x_b = 2 -> y_a = 1*0.5 - 2*0.25 = 0, y_b = 2*0.5 + 1*0.25 = 1.25
    const int ia = neox ? 5 : 10, ib = neox ? 37 : 11;
    q_pe[ia] = k_pe[ia] = f32_to_bf16(1.0f);
    q_pe[ib] = k_pe[ib] = f32_to_bf16(2.0f);
    std::vector<uint8_t> q_out(576, 0xAA), cache(2 * 2 * 576, 0xAA);
    int64_t loc = 3, pos = 2;
    MlaRopeQuantizeFp8Args a;
    a.q_out = TensorView::contiguous(q_out.data(), Device::cpu, DType::fp8_e4m3, {T, H, 576});
    a.cache = TensorView::contiguous(cache.data(), Device::cpu, DType::fp8_e4m3, {2, 2, 576});
    a.loc = TensorView::contiguous(&loc, Device::cpu, DType::i64, {T});
    a.q_nope = TensorView::contiguous(q_nope.data(), Device::cpu, DType::bf16, {T, H, 512});
    a.q_pe = TensorView::contiguous(q_pe.data(), Device::cpu, DType::bf16, {T, H, 64});
    a.k_nope = TensorView::contiguous(k_nope.data(), Device::cpu, DType::bf16, {T, 512});
    a.k_pe = TensorView::contiguous(k_pe.data(), Device::cpu, DType::bf16, {T, 64});
    a.cos_sin = TensorView::contiguous(cs.data(), Device::cpu, DType::f32, {P, 64});
    a.positions = TensorView::contiguous(&pos, Device::cpu, DType::i64, {T});
    a.is_neox = neox;
    mla_rope_quantize_fp8(Backend::cpu, a);
    const uint8_t* row = cache.data() + 3 * 576;  // slot 3 = page 1, row 1
    EXPECT_EQ(q_out[0], f32_to_fp8_e4m3(1.0f));
    EXPECT_EQ(row[0], f32_to_fp8_e4m3(-2.0f));
    for (int j = 0; j < 64; ++j) {
      const float want = j == ib ? 1.25f : 0.0f;
      EXPECT_EQ(q_out[512 + j], f32_to_fp8_e4m3(want)) << "q pe " << j;
      EXPECT_EQ(row[512 + j], f32_to_fp8_e4m3(want)) << "k pe " << j;
    }
    EXPECT_EQ(cache[0], 0xAA);  // other rows untouched
  }
  // Identity table: equals the NoPE prepare.
  ProblemSpec s;
  s.T = 64;
  s.H = 8;
  s.kv_scale = 1.25f;
  s.q_scale = 0.5f;
  const Problem p = make_problem(s, 11);
  std::vector<float> ident(16 * 64, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int i = 0; i < 32; ++i) ident[r * 64 + i] = 1.0f;
  std::vector<int32_t> positions(64);
  for (int t = 0; t < 64; ++t) positions[t] = t % 16;
  const auto nope = on_cpu(p, [](const MlaPrepareFp8Args& a) { mla_prepare_fp8_fused(Backend::cpu, a); });
  for (bool neox : {true, false}) {
    const auto rope = on_cpu(p, [&](const MlaPrepareFp8Args& b) {
      MlaRopeQuantizeFp8Args a;
      a.q_out = b.q_out; a.cache = b.cache; a.loc = b.loc; a.q_nope = b.q_nope; a.q_pe = b.q_pe;
      a.k_nope = b.k_nope; a.k_pe = b.k_pe; a.invalid_count = b.invalid_count;
      a.cos_sin = TensorView::contiguous(ident.data(), Device::cpu, DType::f32, {16, 64});
      a.positions = TensorView::contiguous(positions.data(), Device::cpu, DType::i32, {64});
      a.is_neox = neox;
      a.q_scale = b.q_scale;
      a.kv_scale = b.kv_scale;
      mla_rope_quantize_fp8(Backend::cpu, a);
    });
    EXPECT_EQ(first_diff(rope, nope), -1) << (neox ? "neox" : "interleaved");
  }
}

}  // namespace
}  // namespace kestrel::ops
