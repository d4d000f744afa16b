// rms_norm: bad input is an error with a clear message, never a wrong answer (DESIGN.md rule 8).
// Each case starts from a valid call on real host buffers filled with random data, breaks one
// thing, and requires a kestrel::Error whose message names the op, the argument and the
// offending value, and that the output was not touched.
#include <gtest/gtest.h>

#include "testing/expect_error.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"
#include "kestrel/ops/cpu_access.h"
#include "kestrel/ops/rms_norm.h"

namespace kestrel::ops {
namespace {

constexpr int64_t T = 5, D = 8;

using testing_util::throws_error_with;

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, dtype);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const TensorView v = t.view();
  for (int64_t i = 0; i < v.numel(); ++i) cpu::store_f32(v, i, dist(rng));
  return t;
}

// Buffers for one valid call, plus a copy of `out` to prove a failed call wrote nothing.
class RmsNormErrors : public testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(1234);
    out_ = random_tensor({T, D}, DType::bf16, rng);
    x_ = random_tensor({T, D}, DType::bf16, rng);
    weight_ = random_tensor({D}, DType::bf16, rng);
    residual_ = random_tensor({T, D}, DType::bf16, rng);
    wide_ = random_tensor({T, 2 * D}, DType::bf16, rng);
    f32_ = random_tensor({T, D}, DType::f32, rng);
    i32_ = random_tensor({T, D}, DType::f32, rng);  // bytes reinterpreted as i32 below
    args_ = {out_, x_, weight_, {}, 1e-6f};
    before_.assign(static_cast<const char*>(out_.data()), static_cast<const char*>(out_.data()) + out_.bytes());
  }
  void TearDown() override {
    EXPECT_EQ(std::memcmp(before_.data(), out_.data(), before_.size()), 0) << "a rejected call wrote to out";
  }
  // The error from running the CPU backend on `a`.
  testing::AssertionResult cpu_rejects(const RmsNormArgs& a, std::initializer_list<std::string> parts) {
    return throws_error_with([&] { rms_norm(Backend::cpu, a); }, parts);
  }

  Tensor out_, x_, weight_, residual_, wide_, f32_, i32_;
  RmsNormArgs args_;
  std::vector<char> before_;
};

TEST_F(RmsNormErrors, TheValidCallRuns) {
  // The baseline every other case breaks: it must succeed, on a copy so out stays untouched.
  std::mt19937 rng(99);
  Tensor out = random_tensor({T, D}, DType::bf16, rng);
  RmsNormArgs a = args_;
  a.out = out;
  EXPECT_NO_THROW(rms_norm(Backend::cpu, a));
  a.residual = residual_;
  EXPECT_NO_THROW(rms_norm(Backend::cpu, a));
}

TEST_F(RmsNormErrors, WrongRank) {
  RmsNormArgs a = args_;
  a.x = TensorView::contiguous(x_.data(), Device::cpu, DType::bf16, {1, T, D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "rank 2 [T, D]", "rank 3 [1, 5, 8]"}));
  a = args_;
  a.out = TensorView::contiguous(out_.data(), Device::cpu, DType::bf16, {T * D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "rank 2 [T, D]", "rank 1 [40]"}));
  a = args_;
  a.weight = TensorView::contiguous(weight_.data(), Device::cpu, DType::bf16, {1, D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: weight:", "rank 1 [D]", "rank 2 [1, 8]"}));
  a = args_;
  a.residual = TensorView::contiguous(residual_.data(), Device::cpu, DType::bf16, {T * D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: residual:", "rank 2 [T, D]", "rank 1 [40]"}));
}

TEST_F(RmsNormErrors, MissingTensor) {
  RmsNormArgs a = args_;
  a.x = TensorView();
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "null data pointer"}));
  a = args_;
  a.weight = TensorView();
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: weight:", "null data pointer"}));
}

TEST_F(RmsNormErrors, MismatchedDtype) {
  RmsNormArgs a = args_;
  a.x = f32_;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "dtype of out (bf16)", "got f32"}));
  a = args_;
  a.weight = TensorView::contiguous(weight_.data(), Device::cpu, DType::f16, {D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: weight:", "dtype of out (bf16)", "got f16"}));
  a = args_;
  a.residual = f32_;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: residual:", "dtype of out (bf16)", "got f32"}));
  a = args_;
  a.out = TensorView::contiguous(i32_.data(), Device::cpu, DType::i32, {T, D});
  a.x = a.out;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "bf16 or f16 or f32", "got i32"}));
  a = args_;
  a.out = TensorView::contiguous(out_.data(), Device::cpu, DType::fp8_e4m3, {T, D});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "bf16 or f16 or f32", "got fp8_e4m3"}));
}

TEST_F(RmsNormErrors, MismatchedD) {
  RmsNormArgs a = args_;
  a.weight = TensorView::contiguous(weight_.data(), Device::cpu, DType::bf16, {D - 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: weight:", "size 8 in dim 0 (D (x.size(1)))", "shape [7]"}));
  a = args_;
  a.out = wide_;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "size 8 in dim 1 (D (x.size(1)))", "shape [5, 16]"}));
  a = args_;
  a.out = wide_.view().slice(0, 0, T - 1).slice(1, 0, D);
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "size 5 in dim 0 (T (x.size(0)))", "shape [4, 8]"}));
  a = args_;
  a.residual = wide_;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: residual:", "size 8 in dim 1", "shape [5, 16]"}));
  a = args_;
  a.x = x_.view().slice(1, 0, 0);
  a.out = out_.view().slice(1, 0, 0);
  a.weight = weight_.view().slice(0, 0, 0);
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "D >= 1", "shape [5, 0]"}));
}

TEST_F(RmsNormErrors, BadEps) {
  RmsNormArgs a = args_;
  a.eps = -1e-6f;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: eps:", "a positive number", "got -1e-06"}));
  a.eps = 0.0f;
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: eps:", "a positive number", "got 0"}));
  a.eps = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: eps:", "a positive number", "got nan"}));
}

TEST_F(RmsNormErrors, OverlappingOrNegativeStrides) {
  RmsNormArgs a = args_;
  a.out = TensorView(out_.data(), Device::cpu, DType::bf16, {T, D}, {0, 1});  // every row the same memory
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "do not overlap", "strides (0, 1) for shape [5, 8]"}));
  a.out = TensorView(out_.data(), Device::cpu, DType::bf16, {T, D}, {4, 1});  // rows half overlap
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "do not overlap", "strides (4, 1) for shape [5, 8]"}));
  a.out = TensorView(out_.data(), Device::cpu, DType::bf16, {T, D}, {1, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "do not overlap", "strides (1, 1)"}));
  a = args_;
  a.residual = TensorView(residual_.data(), Device::cpu, DType::bf16, {T, D}, {1, 0});  // written in place too
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: residual:", "do not overlap", "strides (1, 0)"}));
  a = args_;
  a.x = TensorView(static_cast<uint16_t*>(x_.data()) + (T - 1) * D, Device::cpu, DType::bf16, {T, D}, {-D, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "non-negative strides", "(-8, 1)"}));
  // Overlapping *inputs* are legal (a broadcast x), and a transposed out is a legal layout.
  a = args_;
  std::mt19937 rng(7);
  Tensor out = random_tensor({D, T}, DType::bf16, rng);
  a.out = out.view().transposed(0, 1);
  a.x = TensorView(x_.data(), Device::cpu, DType::bf16, {T, D}, {0, 1});
  EXPECT_NO_THROW(rms_norm(Backend::cpu, a));
}

TEST_F(RmsNormErrors, WrongDevice) {
  // Views of cuda memory are never dereferenced by the checks, so a host address stands in.
  auto on_cuda = [](const TensorView& v) {
    TensorView c = v;
    c.device = Device::cuda;
    return c;
  };
  RmsNormArgs a = args_;
  a.out = on_cuda(a.out);
  a.x = on_cuda(a.x);
  a.weight = on_cuda(a.weight);
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "a tensor on cpu", "one on cuda"}));
  a = args_;
  a.x = on_cuda(a.x);
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "the device of out (cpu)", "got cuda"}));
  a = args_;
  a.weight = on_cuda(a.weight);
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: weight:", "the device of out (cpu)", "got cuda"}));
  a = args_;
  a.residual = on_cuda(residual_.view());
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: residual:", "the device of out (cpu)", "got cuda"}));
  // Host tensors given to the cuda backend: the same check, the other way round (whether or
  // not this machine has a GPU, the device check comes first).
  EXPECT_TRUE(throws_error_with([&] { rms_norm(Backend::cuda, args_); },
                                {"rms_norm: out:", "a tensor on cuda", "one on cpu"}));
}

TEST_F(RmsNormErrors, ChecksRunInTheDocumentedOrder) {
  // Rank before device before dtype before layout before shapes (DESIGN.md rule 8): with
  // several things wrong the first in that order is the one reported.
  RmsNormArgs a = args_;
  a.x = TensorView(x_.data(), Device::cuda, DType::f32, {1, T, D}, {0, -1, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "rank 3"}));
  a.x = TensorView(x_.data(), Device::cuda, DType::f32, {T, D + 1}, {-1, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "device of out"}));
  a.x = TensorView(x_.data(), Device::cpu, DType::f32, {T, D + 1}, {-1, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "dtype of out"}));
  a.x = TensorView(x_.data(), Device::cpu, DType::bf16, {T, D + 1}, {-1, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: x:", "non-negative strides"}));
  a.x = TensorView(x_.data(), Device::cpu, DType::bf16, {T, D - 1}, {D, 1});
  EXPECT_TRUE(cpu_rejects(a, {"rms_norm: out:", "size 7 in dim 1"}));
}

}  // namespace
}  // namespace kestrel::ops
