// KDA properties the matrix cannot see, on every available backend (the CUDA kernels are
// checked against the CPU reference in the matrix): the conv ops in place (out = x) give the
// bits of the out-of-place call; kda_recurrent with T = 1 and num_accepted 1 gives the bits of
// kda_packed_decode on column 0 (decode and verify share one path, DESIGN.md rule 4); and each
// CUDA KDA op is one launch (rule 6).
#include <gtest/gtest.h>

#include "testing/host_tensors.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/cuda_launches.h"
#include "kestrel/ops/kda_chunk_prefill.h"
#include "kestrel/ops/kda_conv1d_prefill.h"
#include "kestrel/ops/kda_conv1d_update.h"
#include "kestrel/ops/kda_packed_decode.h"
#include "kestrel/ops/kda_recurrent.h"

namespace kestrel {
namespace {

using ops::Backend;
using testing_util::download;
using testing_util::upload;

std::vector<float> random_f32(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Launches made by the CUDA backend during f (0 on the CPU backend).
template <typename F>
uint64_t launches(Backend b, F&& f) {
  const uint64_t before = b == Backend::cuda ? ops::cuda::launch_count() : 0;
  f();
  return b == Backend::cuda ? ops::cuda::launch_count() - before : 0;
}

class Kda : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const ops::Support s = ops::backend_available(GetParam());
    if (!s.ok) GTEST_SKIP() << "backend " << ops::backend_name(GetParam()) << ": " << s.reason;
  }
  Device dev() const { return ops::backend_device(GetParam()); }
  uint64_t expected_launches() const { return GetParam() == Backend::cuda ? 1 : 0; }
};

TEST_P(Kda, Conv1dPrefillOutIsX) {
  const int64_t C = 200, W = 4, R = 5, slots = 6;
  const std::vector<int32_t> cu = {0, 1, 10, 10, 80, 83}, slot = {2, 5, 1, 3, 0}, init = {1, 0, 1, 1, 1};
  const int64_t T = cu.back(), N = 5;
  const auto x = random_f32(T * C, 1, -1, 1), st = random_f32(slots * R * C, 2, -1, 1), w = random_f32(C * W, 3, -1, 1);
  Tensor xa = upload(x, {T, C}, DType::f32, dev()), xb = upload(x, {T, C}, DType::f32, dev());
  Tensor sa = upload(st, {slots, R, C}, DType::f32, dev()), sb = upload(st, {slots, R, C}, DType::f32, dev());
  Tensor wt = upload(w, {C, W}, DType::f32, dev()), out = Tensor::empty({T, C}, DType::f32, dev());
  Tensor cut = upload(cu, {N + 1}, DType::i32, dev()), sl = upload(slot, {N}, DType::i32, dev()),
         in = upload(init, {N}, DType::i32, dev());
  ops::kda_conv1d_prefill(GetParam(), {out, sa, xa, wt, cut, sl, in});
  EXPECT_EQ(launches(GetParam(), [&] { ops::kda_conv1d_prefill(GetParam(), {xb, sb, xb, wt, cut, sl, in}); }),
            expected_launches());
  device_sync();
  EXPECT_EQ(download(out), download(xb));
  EXPECT_EQ(download(sa), download(sb));
}

TEST_P(Kda, Conv1dUpdateOutIsX) {
  const int64_t C = 300, W = 4, E = 3, R = W - 1 + E, N = 4, T = 3, slots = 7;
  const std::vector<int64_t> slot = {3, -1, 6, 1}, acc = {1, 2, 4, 3};
  const auto x = random_f32(N * T * C, 4, -1, 1), st = random_f32(slots * R * C, 5, -1, 1), w = random_f32(C * W, 6, -1, 1);
  Tensor xa = upload(x, {N * T, C}, DType::f32, dev()), xb = upload(x, {N * T, C}, DType::f32, dev());
  Tensor sa = upload(st, {slots, R, C}, DType::f32, dev()), sb = upload(st, {slots, R, C}, DType::f32, dev());
  Tensor wt = upload(w, {C, W}, DType::f32, dev()), out = Tensor::empty({N * T, C}, DType::f32, dev());
  Tensor sl = upload(slot, {N}, DType::i64, dev()), ac = upload(acc, {N}, DType::i64, dev());
  ops::kda_conv1d_update(GetParam(), {out, sa, xa, wt, sl, ac});
  EXPECT_EQ(launches(GetParam(), [&] { ops::kda_conv1d_update(GetParam(), {xb, sb, xb, wt, sl, ac}); }),
            expected_launches());
  device_sync();
  EXPECT_EQ(download(out), download(xb));
  EXPECT_EQ(download(sa), download(sb));
}

TEST_P(Kda, RecurrentOneTokenIsDecode) {
  const int64_t H = 3, K = 128, V = 128, N = 5, S = 3, slots = N * S + 1, cols = 2 * H * K + H * V;
  // Rows 1 and 3 are padding (0 and -1 in column 0); the other columns are live ids.
  const std::vector<int32_t> table = {4, 9, 2, 0, 7, 8, 13, 1, 3, -1, 5, 6, 10, 11, 12};
  const std::vector<int32_t> acc(N, 1);
  const auto qkv = random_f32(N * cols, 7, -1, 1), g = random_f32(N * H * K, 8, -4, 2),
             beta = random_f32(N * H, 9, -3, 3), alog = random_f32(H, 10, -1, 1), dt = random_f32(H * K, 11, -1, 1),
             pool = random_f32(slots * H * V * K, 12, -0.5f, 0.5f);
  Tensor q = upload(qkv, {N, cols}, DType::f32, dev()), gt = upload(g, {N, H, K}, DType::f32, dev()),
         bt = upload(beta, {N, H}, DType::f32, dev()), at = upload(alog, {H}, DType::f32, dev()),
         dtt = upload(dt, {H * K}, DType::f32, dev()), tab = upload(table, {N, S}, DType::i32, dev()),
         act = upload(acc, {N}, DType::i32, dev());
  for (const std::optional<float> lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    Tensor pa = upload(pool, {slots, H, V, K}, DType::f32, dev()), pb = upload(pool, {slots, H, V, K}, DType::f32, dev());
    Tensor oa = Tensor::empty({N, H, V}, DType::f32, dev()), ob = Tensor::empty({N, H, V}, DType::f32, dev());
    ops::KdaPackedDecodeArgs d{oa, pa, q, gt, bt, at, dtt, tab.view().select(1, 0), lb};
    ops::KdaRecurrentArgs r{ob, pb, q, gt, bt, at, dtt, tab.view(), act, lb};
    EXPECT_EQ(launches(GetParam(), [&] { ops::kda_packed_decode(GetParam(), d); }), expected_launches());
    EXPECT_EQ(launches(GetParam(), [&] { ops::kda_recurrent(GetParam(), r); }), expected_launches());
    device_sync();
    EXPECT_EQ(download(oa), download(ob)) << (lb ? "lb" : "softplus");
    EXPECT_EQ(download(pa), download(pb)) << (lb ? "lb" : "softplus");
    // Padding rows are exactly zero.
    const auto o = download(oa);
    std::vector<uint8_t> zeros(static_cast<size_t>(H * V * 4), 0);
    for (int64_t n : {1, 3})
      EXPECT_EQ(std::memcmp(o.data() + n * H * V * 4, zeros.data(), zeros.size()), 0) << "row " << n;
  }
}

TEST_P(Kda, Bf16PoolDecodeIsF32DecodeRounded) {
  // A bf16 pool widens exactly, steps in the same f32 code and rounds to nearest even
  // (docs/ops/kda.md "State dtype"), so on one backend: bf16-pool decode == f32-pool decode on
  // the widened state, then the state rounded. Outputs and states bit for bit, token by token;
  // padding rows zero, slots nobody addresses untouched. Then verify with T = S = 3 from a bf16
  // pool: column t == the pool after t + 1 bf16 decode steps (the running state is rounded
  // after every token).
  const int64_t H = 2, K = 128, V = 128, B = 4, L = 3, slots = 7, cols = 2 * H * K + H * V;
  const std::vector<int32_t> idx = {3, 0, 5, 1};
  const auto qkv = random_f32(L * B * cols, 20, -1, 1), g = random_f32(L * B * H * K, 21, -4, 2),
             beta = random_f32(L * B * H, 22, -3, 3), alog = random_f32(H, 23, -1, 1), dt = random_f32(H * K, 24, -1, 1),
             pool32 = random_f32(slots * H * V * K, 25, -0.5f, 0.5f);
  std::vector<uint16_t> pool16(pool32.size());
  for (size_t i = 0; i < pool16.size(); ++i) pool16[i] = f32_to_bf16(pool32[i]);
  Tensor q = upload(qkv, {L * B, cols}, DType::f32, dev()), gt = upload(g, {L * B, H, K}, DType::f32, dev()),
         bt = upload(beta, {L * B, H}, DType::f32, dev()), at = upload(alog, {H}, DType::f32, dev()),
         dtt = upload(dt, {H * K}, DType::f32, dev()), it = upload(idx, {B}, DType::i32, dev());
  Tensor pb = upload(pool16, {slots, H, V, K}, DType::bf16, dev());
  const std::vector<uint8_t> pb0 = download(pb);
  Tensor ob = Tensor::empty({B, H, V}, DType::f32, dev()), of = Tensor::empty({B, H, V}, DType::f32, dev());
  const int64_t slot_bytes = H * V * K * 2;
  for (int64_t t = 0; t < L; ++t) {
    std::vector<uint16_t> cur(pool16.size());
    std::memcpy(cur.data(), download(pb).data(), cur.size() * 2);
    std::vector<float> wide(cur.size());
    for (size_t i = 0; i < cur.size(); ++i) wide[i] = bf16_to_f32(cur[i]);
    Tensor pf = upload(wide, {slots, H, V, K}, DType::f32, dev());
    const TensorView qt = q.view().slice(0, t * B, B), g_t = gt.view().slice(0, t * B, B),
                     b_t = bt.view().slice(0, t * B, B);
    ops::KdaPackedDecodeArgs d{of, pf, qt, g_t, b_t, at, dtt, it, std::optional<float>{-5.0f}};
    ops::kda_packed_decode(GetParam(), d);
    d.out = ob;
    d.state_pool = pb;
    EXPECT_EQ(launches(GetParam(), [&] { ops::kda_packed_decode(GetParam(), d); }), expected_launches());
    device_sync();
    EXPECT_EQ(download(ob), download(of)) << "token " << t;
    std::vector<float> after(wide.size());
    std::memcpy(after.data(), download(pf).data(), after.size() * 4);
    std::vector<uint16_t> want(after.size());
    for (size_t i = 0; i < after.size(); ++i) want[i] = f32_to_bf16(after[i]);
    std::vector<uint8_t> want_bytes(want.size() * 2);
    std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
    EXPECT_EQ(download(pb), want_bytes) << "token " << t;
  }
  const std::vector<uint8_t> pb1 = download(pb);
  for (int64_t s : {0, 2, 4, 6})
    EXPECT_EQ(std::memcmp(pb1.data() + s * slot_bytes, pb0.data() + s * slot_bytes, slot_bytes), 0) << "slot " << s;
  // Verify: N = 1 sequence, slots 1, 2, 3 as its columns; decode from slot 1 of a copy.
  Tensor pv = upload(pool16, {slots, H, V, K}, DType::bf16, dev()), pd = upload(pool16, {slots, H, V, K}, DType::bf16, dev());
  const std::vector<int32_t> tab = {1, 2, 3}, acc = {1}, one = {1};
  Tensor tt = upload(tab, {1, 3}, DType::i32, dev()), act = upload(acc, {1}, DType::i32, dev()),
         onet = upload(one, {1}, DType::i32, dev());
  Tensor ov = Tensor::empty({3, H, V}, DType::f32, dev()), od = Tensor::empty({1, H, V}, DType::f32, dev());
  ops::KdaRecurrentArgs r{ov, pv, q.view().slice(0, 0, 3), gt.view().slice(0, 0, 3), bt.view().slice(0, 0, 3),
                          at, dtt, tt, act, std::nullopt};
  ops::kda_recurrent(GetParam(), r);
  for (int64_t t = 0; t < 3; ++t) {
    ops::KdaPackedDecodeArgs d{od, pd, q.view().slice(0, t, 1), gt.view().slice(0, t, 1), bt.view().slice(0, t, 1),
                               at, dtt, onet, std::nullopt};
    ops::kda_packed_decode(GetParam(), d);
    device_sync();
    const std::vector<uint8_t> v = download(pv), w = download(pd);
    EXPECT_EQ(std::memcmp(v.data() + (1 + t) * slot_bytes, w.data() + slot_bytes, slot_bytes), 0) << "column " << t;
    const std::vector<uint8_t> ovb = download(ov), odb = download(od);
    EXPECT_EQ(std::memcmp(ovb.data() + t * H * V * 4, odb.data(), H * V * 4), 0) << "token " << t;
  }
}

// One chunk-prefill call on a fixed varlen batch (an empty live sequence, a padding one (slot 0,
// 130 tokens), partial chunks, checkpoints): out, pool and checkpoints as bytes. max_ws: the
// workspace bound (0: the default); windows: the chunk windows it makes on CUDA (9 chunk slots).
// pool_dt: the state pool's and checkpoints' dtype; bf16_states: the initial states rounded to
// bf16 values (so that an f32 pool and a bf16 one start from the same states).
struct ChunkPrefillBytes {
  std::vector<uint8_t> buf[3];
};
ChunkPrefillBytes run_chunk_prefill(Backend b, std::optional<float> lb, int64_t max_ws, int64_t windows,
                                    DType pool_dt = DType::f32, bool bf16_states = false) {
  const int64_t H = 2, K = 128, V = 128, slots = 7, cols = 2 * H * K + H * V;
  const std::vector<int32_t> cu = {0, 1, 71, 71, 201, 265}, slot = {2, 5, 3, 0, 6}, init = {1, 0, 1, 1, 1};
  const std::vector<int64_t> cuk = {0, 0, 1, 1, 3, 4};  // floor(len / 64) rows per live sequence
  const int64_t T = cu.back(), N = 5, P = 4;
  const Device dv = ops::backend_device(b);
  const auto qkv = random_f32(T * cols, 30, -1, 1), g = random_f32(T * H * K, 31, -4, 2),
             beta = random_f32(T * H, 32, -3, 3), alog = random_f32(H, 33, -1, 1), dt = random_f32(H * K, 34, -1, 1),
             pool = random_f32(slots * H * V * K, 35, -0.5f, 0.5f);
  Tensor q = upload(qkv, {T, cols}, DType::f32, dv), gt = upload(g, {T, H, K}, DType::f32, dv),
         bt = upload(beta, {T, H}, DType::f32, dv), at = upload(alog, {H}, DType::f32, dv),
         dtt = upload(dt, {H * K}, DType::f32, dv), cut = upload(cu, {N + 1}, DType::i32, dv),
         sl = upload(slot, {N}, DType::i32, dv), in = upload(init, {N}, DType::i32, dv),
         ckt = upload(cuk, {N + 1}, DType::i64, dv);
  std::vector<uint16_t> pool16(pool.size());
  std::vector<float> pool32(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) {
    pool16[i] = f32_to_bf16(pool[i]);
    pool32[i] = bf16_states ? bf16_to_f32(pool16[i]) : pool[i];
  }
  Tensor pt = pool_dt == DType::bf16 ? upload(pool16, {slots, H, V, K}, DType::bf16, dv)
                                     : upload(pool32, {slots, H, V, K}, DType::f32, dv);
  Tensor out = Tensor::empty({T, H, V}, DType::f32, dv), ck = Tensor::empty({P, H, V, K}, pool_dt, dv);
  memcpy_bytes(ck.data(), dv, std::vector<uint8_t>(static_cast<size_t>(ck.bytes()), 0).data(), Device::cpu,
               static_cast<size_t>(ck.bytes()));
  ops::KdaChunkPrefillArgs a;
  a.out = out;
  a.state_pool = pt;
  a.checkpoints = ck;
  a.mixed_qkv = q;
  a.raw_g = gt;
  a.raw_beta = bt;
  a.A_log = at;
  a.dt_bias = dtt;
  a.cu_seqlens = cut;
  a.state_indices = sl;
  a.has_initial_state = in;
  a.cu_checkpoints = ckt;
  a.lower_bound = lb;
  a.max_workspace_bytes = max_ws;
  // CUDA: two launches (the intra-chunk kernel, then the state kernel) per window.
  const uint64_t expected = b == Backend::cuda ? static_cast<uint64_t>(2 * windows) : 0u;
  EXPECT_EQ(launches(b, [&] { ops::kda_chunk_prefill(b, a); }), expected);
  device_sync();
  return {{download(out), download(pt), download(ck)}};
}

TEST_P(Kda, ChunkPrefillRunTwiceIsBitIdentical) {
  // Deterministic (no atomics, no order-dependent sums), so two runs give the same bits.
  for (const std::optional<float> lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    const ChunkPrefillBytes first = run_chunk_prefill(GetParam(), lb, 0, 1), second = run_chunk_prefill(GetParam(), lb, 0, 1);
    for (int b = 0; b < 3; ++b) EXPECT_EQ(second.buf[b], first.buf[b]) << (lb ? "lb" : "softplus") << " buffer " << b;
  }
}

// f32 bytes rounded to bf16 (nearest even), as bytes.
std::vector<uint8_t> rounded_to_bf16(const std::vector<uint8_t>& f32_bytes) {
  std::vector<uint8_t> r(f32_bytes.size() / 2);
  for (size_t i = 0; i < f32_bytes.size() / 4; ++i) {
    float x;
    std::memcpy(&x, f32_bytes.data() + 4 * i, 4);
    const uint16_t h = f32_to_bf16(x);
    std::memcpy(r.data() + 2 * i, &h, 2);
  }
  return r;
}

TEST_P(Kda, Bf16PoolPrefillIsF32PrefillRounded) {
  // docs/ops/kda.md "State dtype": the chunked form keeps the state f32 at chunk boundaries and
  // rounds only what it stores, so a bf16 pool's final states and checkpoints are the f32 pool's
  // (from the same initial states) rounded to nearest even, and the outputs are equal, whatever
  // the windows: on CUDA the f32 state crosses a window boundary through an f32 carry, never
  // through the bf16 slot. Untouched slots stay as they were (their rounding is the identity).
  const int64_t per_slot = 2 * ops::kKdaChunkWorkspaceBytesPerSlotHead;  // H = 2 heads
  for (const std::optional<float> lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    const ChunkPrefillBytes f = run_chunk_prefill(GetParam(), lb, 0, 1, DType::f32, true);
    const std::vector<uint8_t> pool = rounded_to_bf16(f.buf[1]), ck = rounded_to_bf16(f.buf[2]);
    for (const int64_t w : {0, 1, 4}) {
      const ChunkPrefillBytes h =
          run_chunk_prefill(GetParam(), lb, w * per_slot, w == 0 ? 1 : (9 + w - 1) / w, DType::bf16, true);
      const std::string what = str(lb ? "lb" : "softplus", ", windows of ", w == 0 ? 9 : w, " chunk slots");
      EXPECT_EQ(h.buf[0], f.buf[0]) << "outputs, " << what;
      EXPECT_EQ(h.buf[1], pool) << "final states, " << what;
      EXPECT_EQ(h.buf[2], ck) << "checkpoints, " << what;
    }
  }
}

TEST_P(Kda, ChunkPrefillWindowsAreBitIdentical) {
  // A workspace bound that forces windows of 1, 2 and 4 chunk slots (of 9) changes nothing: each
  // chunk's work is the same and the state crosses a window boundary through the pool exactly.
  // (The CPU reference ignores the bound: one launch count, the same bytes.)
  const int64_t per_slot = 2 * ops::kKdaChunkWorkspaceBytesPerSlotHead;  // H = 2 heads
  for (const std::optional<float> lb : {std::optional<float>{}, std::optional<float>{-5.0f}}) {
    const ChunkPrefillBytes whole = run_chunk_prefill(GetParam(), lb, 0, 1);
    for (const int64_t w : {1, 2, 4}) {
      const ChunkPrefillBytes win = run_chunk_prefill(GetParam(), lb, w * per_slot, (9 + w - 1) / w);
      for (int b = 0; b < 3; ++b)
        EXPECT_EQ(win.buf[b], whole.buf[b]) << (lb ? "lb" : "softplus") << ", windows of " << w << ", buffer " << b;
    }
    // A bound under one slot still runs (one slot per window).
    const ChunkPrefillBytes tiny = run_chunk_prefill(GetParam(), lb, 1, 9);
    for (int b = 0; b < 3; ++b) EXPECT_EQ(tiny.buf[b], whole.buf[b]) << "1-byte bound, buffer " << b;
  }
}

// kda_packed_decode's two store kinds for an f32 pool (kda_packed_decode_streaming_stores: plain
// stores when the call's state exceeds twice the L2, streaming ones below) write the same bits:
// 160 sequences at H = 32 (320 MiB of state: plain on any GPU with an L2 of up to 160 MiB) in one
// call, against the same sequences in calls of 8 (16 MiB: streaming), outputs and the whole pool
// compared byte for byte; the launch log proves which kind ran.
TEST(KdaCuda, DecodeStoreKindsAreBitIdentical) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "CUDA: " << why;
  const int64_t H = 32, K = 128, V = 128, B = 160, part = 8, slots = B + 2, cols = 2 * H * K + H * V;
  std::vector<int32_t> slot(static_cast<size_t>(B));
  for (int64_t n = 0; n < B; ++n) slot[static_cast<size_t>(n)] = static_cast<int32_t>(n % 7 == 3 ? 0 : slots - 1 - n);
  const auto qkv = random_f32(B * cols, 50, -1, 1), g = random_f32(B * H * K, 51, -4, 2),
             beta = random_f32(B * H, 52, -3, 3), alog = random_f32(H, 53, -1, 1), dt = random_f32(H * K, 54, -1, 1),
             pool0 = random_f32(slots * H * V * K, 55, -0.5f, 0.5f);
  const Device dv = Device::cuda;
  const Tensor q = upload(qkv, {B, cols}, DType::f32, dv), gt = upload(g, {B, H, K}, DType::f32, dv),
               bt = upload(beta, {B, H}, DType::f32, dv), at = upload(alog, {H}, DType::f32, dv),
               dtt = upload(dt, {H * K}, DType::f32, dv), sl = upload(slot, {B}, DType::i32, dv);
  const auto run = [&](int64_t step, std::vector<std::string>& names) {
    Tensor pool = upload(pool0, {slots, H, V, K}, DType::f32, dv);
    Tensor out = upload(std::vector<float>(static_cast<size_t>(B * H * V), NAN), {B, H, V}, DType::f32, dv);
    ops::cuda::set_launch_log(&names);
    for (int64_t n0 = 0; n0 < B; n0 += step) {
      ops::KdaPackedDecodeArgs d{out.view().slice(0, n0, step), pool.view(), q.view().slice(0, n0, step),
                                 gt.view().slice(0, n0, step), bt.view().slice(0, n0, step), at.view(), dtt.view(),
                                 sl.view().slice(0, n0, step), std::optional<float>{-5.0f}};
      ops::kda_packed_decode(Backend::cuda, d);
    }
    device_sync();
    ops::cuda::set_launch_log(nullptr);
    return std::make_pair(download(out), download(pool));
  };
  std::vector<std::string> whole_names, part_names;
  const auto whole = run(B, whole_names);
  const auto parts = run(part, part_names);
  ASSERT_EQ(whole_names.size(), 1u);
  ASSERT_EQ(part_names.size(), static_cast<size_t>(B / part));
  if (whole_names[0].find("<streaming stores>") != std::string::npos)
    GTEST_SKIP() << "this GPU's L2 takes 320 MiB of state with streaming stores: the plain kind is not reached";
  EXPECT_EQ(whole_names[0], "kda_packed_decode_kernel");
  for (const auto& n : part_names) EXPECT_EQ(n, "kda_packed_decode_kernel<streaming stores>");
  EXPECT_EQ(whole.first, parts.first) << "outputs";
  EXPECT_EQ(whole.second, parts.second) << "pool";
  // The poison is gone from every output row (padding rows are zeros, the others computed).
  const auto o = whole.first;
  for (size_t i = 0; i < o.size(); i += 4) {
    float x;
    std::memcpy(&x, o.data() + i, 4);
    ASSERT_FALSE(std::isnan(x)) << "output element " << i / 4;
  }
}

// The state kernel's two warp layouts (kda_chunk_prefill_state_roles, by grid size) give the same
// bits: two sequences as one batch (H = 24: a grid of 192 CTAs, uniform warps on a GPU of up to
// 191 SMs) against each sequence alone (96 CTAs: two roles on one of at least 96), outputs, final
// states and checkpoints compared byte for byte; the launch log proves which layout ran.
TEST(KdaCuda, ChunkPrefillStateLayoutsAreBitIdentical) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "CUDA: " << why;
  const int64_t H = 24, K = 128, V = 128, cols = 2 * H * K + H * V, slots = 4;
  const std::vector<int64_t> lens = {300, 130};
  const int64_t T = lens[0] + lens[1];
  const auto qkv = random_f32(T * cols, 40, -1, 1), g = random_f32(T * H * K, 41, -4, 2),
             beta = random_f32(T * H, 42, -3, 3), alog = random_f32(H, 43, -1, 1), dt = random_f32(H * K, 44, -1, 1),
             pool0 = random_f32(slots * H * V * K, 45, -0.5f, 0.5f);
  const Device dv = Device::cuda;
  const Tensor at = upload(alog, {H}, DType::f32, dv), dtt = upload(dt, {H * K}, DType::f32, dv);
  // Runs sequences [first, first + count) as one call, each from and to its own slot (1 + n),
  // with checkpoints; returns the kernel names it launched.
  const auto run = [&](Tensor& pool, Tensor& out, Tensor& ck, int64_t first, int64_t count) {
    int64_t t0 = 0, p0 = 0;
    for (int64_t n = 0; n < first; ++n) {
      t0 += lens[static_cast<size_t>(n)];
      p0 += lens[static_cast<size_t>(n)] / 64;
    }
    std::vector<int32_t> cu = {0}, slot, init;
    std::vector<int64_t> cuk = {0};
    for (int64_t n = first; n < first + count; ++n) {
      cu.push_back(cu.back() + static_cast<int32_t>(lens[static_cast<size_t>(n)]));
      cuk.push_back(cuk.back() + lens[static_cast<size_t>(n)] / 64);
      slot.push_back(static_cast<int32_t>(1 + n));
      init.push_back(1);
    }
    const int64_t Tn = cu.back();
    ops::KdaChunkPrefillArgs a;
    a.out = out.view().slice(0, t0, Tn);
    a.state_pool = pool.view();
    a.checkpoints = ck.view().slice(0, p0, cuk.back());
    const Tensor q = upload(std::vector<float>(qkv.begin() + t0 * cols, qkv.begin() + (t0 + Tn) * cols), {Tn, cols},
                            DType::f32, dv);
    const Tensor gt = upload(std::vector<float>(g.begin() + t0 * H * K, g.begin() + (t0 + Tn) * H * K), {Tn, H, K},
                             DType::f32, dv);
    const Tensor bt = upload(std::vector<float>(beta.begin() + t0 * H, beta.begin() + (t0 + Tn) * H), {Tn, H},
                             DType::f32, dv);
    const Tensor cut = upload(cu, {count + 1}, DType::i32, dv), sl = upload(slot, {count}, DType::i32, dv),
                 in = upload(init, {count}, DType::i32, dv), ckt = upload(cuk, {count + 1}, DType::i64, dv);
    a.mixed_qkv = q.view();
    a.raw_g = gt.view();
    a.raw_beta = bt.view();
    a.A_log = at.view();
    a.dt_bias = dtt.view();
    a.cu_seqlens = cut.view();
    a.state_indices = sl.view();
    a.has_initial_state = in.view();
    a.cu_checkpoints = ckt.view();
    a.lower_bound = -5.0f;
    std::vector<std::string> names;
    ops::cuda::set_launch_log(&names);
    ops::kda_chunk_prefill(Backend::cuda, a);
    device_sync();
    ops::cuda::set_launch_log(nullptr);
    return names;
  };
  const int64_t P = lens[0] / 64 + lens[1] / 64;
  const auto fresh = [&](Tensor& pool, Tensor& out, Tensor& ck) {
    pool = upload(pool0, {slots, H, V, K}, DType::f32, dv);
    out = upload(std::vector<float>(static_cast<size_t>(T * H * V), NAN), {T, H, V}, DType::f32, dv);  // poisoned
    ck = upload(std::vector<float>(static_cast<size_t>(P * H * V * K), NAN), {P, H, V, K}, DType::f32, dv);
  };
  Tensor pool_b, out_b, ck_b, pool_s, out_s, ck_s;
  fresh(pool_b, out_b, ck_b);
  const auto batch_names = run(pool_b, out_b, ck_b, 0, 2);
  fresh(pool_s, out_s, ck_s);
  auto single_names = run(pool_s, out_s, ck_s, 0, 1);
  const auto second = run(pool_s, out_s, ck_s, 1, 1);
  single_names.insert(single_names.end(), second.begin(), second.end());
  const auto took = [](const std::vector<std::string>& names, const char* what) {
    for (const auto& n : names)
      if (n.find(what) != std::string::npos) return true;
    return false;
  };
  if (took(batch_names, "<roles>") || took(single_names, "<uniform>"))
    GTEST_SKIP() << "this GPU's SM count puts both calls on one layout";
  EXPECT_TRUE(took(batch_names, "kda_chunk_prefill_state_kernel<uniform>"));
  EXPECT_TRUE(took(single_names, "kda_chunk_prefill_state_kernel<roles>"));
  EXPECT_EQ(download(out_s), download(out_b)) << "outputs";
  EXPECT_EQ(download(pool_s), download(pool_b)) << "final states (and untouched slots)";
  EXPECT_EQ(download(ck_s), download(ck_b)) << "checkpoints";
  size_t finite = 0;
  for (float x : testing_util::download<float>(out_b)) finite += std::isfinite(x) && x != 0.0f;
  EXPECT_GT(finite, static_cast<size_t>(T * H * V) / 2) << "the outputs are mostly finite, non-zero values";
}

INSTANTIATE_TEST_SUITE_P(, Kda, testing::Values(Backend::cpu, Backend::cuda),
                         [](const testing::TestParamInfo<Backend>& i) { return ops::backend_name(i.param); });

}  // namespace
}  // namespace kestrel
