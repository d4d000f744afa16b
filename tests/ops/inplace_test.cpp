// In-place calls the specs allow: rms_norm with out == x, rms_norm_gated with out == x and
// out == gate. The matrix gives every buffer its own storage, so aliasing is tested here: on
// each available backend, the in-place result must equal, bit for bit, the same call with a
// separate output.
#include <gtest/gtest.h>

#include "testing/host_tensors.h"

#include <cstring>
#include <random>
#include <vector>

#include "kestrel/core/convert.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/rms_norm.h"
#include "kestrel/ops/rms_norm_gated.h"

namespace kestrel {
namespace {

using ops::Backend;

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

// bf16 tensors here.
Tensor upload(const std::vector<uint16_t>& host, const Shape& shape, Device dev) {
  return testing_util::upload(host, shape, DType::bf16, dev);
}
using testing_util::download;

class InPlace : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const ops::Support s = ops::backend_available(GetParam());
    if (!s.ok) GTEST_SKIP() << "backend " << ops::backend_name(GetParam()) << ": " << s.reason;
  }
  Device dev() const { return ops::backend_device(GetParam()); }
};

TEST_P(InPlace, RmsNormOutIsX) {
  for (int64_t D : {64, 1030, 2304}) {
    const int64_t T = 5;
    const auto x = random_bf16(T * D, 11 + D), w = random_bf16(D, 12 + D);
    Tensor xa = upload(x, {T, D}, dev()), xb = upload(x, {T, D}, dev()), wt = upload(w, {D}, dev());
    Tensor out = Tensor::empty({T, D}, DType::bf16, dev());
    ops::rms_norm(GetParam(), {out, xa, wt, {}, 1e-6f});
    ops::rms_norm(GetParam(), {xb, xb, wt, {}, 1e-6f});
    device_sync();
    EXPECT_EQ(download(out), download(xb)) << "D=" << D;
  }
}

TEST_P(InPlace, RmsNormGatedOutIsXOrGate) {
  for (int64_t D : {64, 128, 200, 1030}) {
    const int64_t T = 3, H = 4;
    const auto x = random_bf16(T * H * D, 21 + D), g = random_bf16(T * H * D, 22 + D), w = random_bf16(D, 23 + D);
    Tensor xt = upload(x, {T, H, D}, dev()), gt = upload(g, {T, H, D}, dev()), wt = upload(w, {D}, dev());
    Tensor out = Tensor::empty({T, H, D}, DType::bf16, dev());
    ops::rms_norm_gated(GetParam(), {out, xt, gt, wt, 1e-5f});
    Tensor x_alias = upload(x, {T, H, D}, dev());
    ops::rms_norm_gated(GetParam(), {x_alias, x_alias, gt, wt, 1e-5f});
    Tensor g_alias = upload(g, {T, H, D}, dev());
    ops::rms_norm_gated(GetParam(), {g_alias, xt, g_alias, wt, 1e-5f});
    device_sync();
    const auto expect = download(out);
    EXPECT_EQ(expect, download(x_alias)) << "out == x, D=" << D;
    EXPECT_EQ(expect, download(g_alias)) << "out == gate, D=" << D;
  }
}

INSTANTIATE_TEST_SUITE_P(, InPlace, testing::Values(Backend::cpu, Backend::cuda),
                         [](const testing::TestParamInfo<Backend>& i) { return ops::backend_name(i.param); });

}  // namespace
}  // namespace kestrel
