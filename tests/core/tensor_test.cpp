// TensorView (strided, non-owning) and Tensor (owning) on the host: the view arithmetic the
// kernels rely on (DESIGN.md rule 2) and the errors, which must name what was wrong.
#include <gtest/gtest.h>

#include "testing/expect_error.h"

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"

namespace kestrel {
namespace {

using testing_util::throws_error_with;

// A fake address: views never dereference their pointer, so arithmetic on it can be checked.
char* const kBase = reinterpret_cast<char*>(uintptr_t{1} << 20);

int64_t byte_offset(const TensorView& v) { return static_cast<char*>(v.data) - kBase; }

TEST(TensorView, ContiguousStridesNumelExtent) {
  const TensorView v = TensorView::contiguous(kBase, Device::cpu, DType::bf16, {2, 3, 4});
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.shape_str(), "[2, 3, 4]");
  EXPECT_EQ(v.strides_str(), "(12, 4, 1)");
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.extent_elems(), 24);
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.stride(-1), 1);
  EXPECT_EQ(v.size(0), 2);
  EXPECT_EQ(v.stride(-3), 12);
  const int64_t idx[3] = {1, 2, 3};
  EXPECT_EQ(v.offset_elems(idx), 12 + 8 + 3);
  EXPECT_TRUE(v.defined());
  EXPECT_FALSE(TensorView().defined());
  EXPECT_EQ(contiguous_strides({5, 7, 1, 2}), (Shape{14, 2, 2, 1}));
  EXPECT_EQ(shape_str({}), "[]");
}

TEST(TensorView, SelectDropsADimAndMovesThePointer) {
  const TensorView v = TensorView::contiguous(kBase, Device::cpu, DType::f32, {2, 3, 4});
  const TensorView s0 = v.select(0, 1);  // [3, 4]
  EXPECT_EQ(s0.shape_str(), "[3, 4]");
  EXPECT_EQ(s0.strides_str(), "(4, 1)");
  EXPECT_EQ(byte_offset(s0), 12 * 4);
  EXPECT_TRUE(s0.is_contiguous());
  const TensorView s1 = v.select(1, 2);  // [2, 4], rows 12 apart
  EXPECT_EQ(s1.shape_str(), "[2, 4]");
  EXPECT_EQ(s1.strides_str(), "(12, 1)");
  EXPECT_EQ(byte_offset(s1), 2 * 4 * 4);
  EXPECT_FALSE(s1.is_contiguous());
  EXPECT_EQ(s1.extent_elems(), 12 + 4);
  const TensorView s2 = v.select(-1, 3);  // [2, 3], a column of every row
  EXPECT_EQ(s2.shape_str(), "[2, 3]");
  EXPECT_EQ(s2.strides_str(), "(12, 4)");
  EXPECT_EQ(byte_offset(s2), 3 * 4);
  EXPECT_EQ(s2.numel(), 6);
  EXPECT_EQ(s2.extent_elems(), 12 + 2 * 4 + 1);
  // A column of a block table, table[:, 0] (the view rule 2 is about).
  const TensorView table = TensorView::contiguous(kBase, Device::cpu, DType::i32, {5, 3});
  const TensorView col = table.select(1, 0);
  EXPECT_EQ(col.shape_str(), "[5]");
  EXPECT_EQ(col.strides_str(), "(3)");
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.extent_elems(), 13);
  // Down to rank 0: one element.
  const TensorView scalar = col.select(0, 4);
  EXPECT_EQ(scalar.rank, 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.extent_elems(), 1);
  EXPECT_EQ(byte_offset(scalar), 12 * 4);
}

TEST(TensorView, SliceKeepsStridesAndMovesThePointer) {
  const TensorView v = TensorView::contiguous(kBase, Device::cpu, DType::bf16, {2, 3, 4});
  const TensorView s = v.slice(1, 1, 2);  // [2, 2, 4] rows 1..2 of each
  EXPECT_EQ(s.shape_str(), "[2, 2, 4]");
  EXPECT_EQ(s.strides_str(), "(12, 4, 1)");
  EXPECT_EQ(byte_offset(s), 4 * 2);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.numel(), 16);
  EXPECT_EQ(s.extent_elems(), 12 + 4 + 3 + 1);
  // A slice of a packed projection: columns [64, 96) of [T, 160].
  const TensorView packed = TensorView::contiguous(kBase, Device::cpu, DType::bf16, {7, 160});
  const TensorView part = packed.slice(-1, 64, 32);
  EXPECT_EQ(part.shape_str(), "[7, 32]");
  EXPECT_EQ(part.strides_str(), "(160, 1)");
  EXPECT_EQ(byte_offset(part), 64 * 2);
  EXPECT_EQ(part.extent_elems(), 6 * 160 + 32);
  // The whole dim and an empty slice.
  EXPECT_TRUE(v.slice(0, 0, 2).is_contiguous());
  const TensorView empty = v.slice(2, 4, 0);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.extent_elems(), 0);
  // Slicing the leading dim of a contiguous tensor stays contiguous.
  EXPECT_TRUE(v.slice(0, 1, 1).is_contiguous());
}

TEST(TensorView, TransposedSwapsShapeAndStrides) {
  const TensorView v = TensorView::contiguous(kBase, Device::cpu, DType::f16, {2, 3, 4});
  const TensorView t = v.transposed(0, 2);
  EXPECT_EQ(t.shape_str(), "[4, 3, 2]");
  EXPECT_EQ(t.strides_str(), "(1, 4, 12)");
  EXPECT_EQ(t.data, v.data);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.extent_elems(), 24);
  const TensorView back = t.transposed(2, 0);
  EXPECT_EQ(back.strides_str(), v.strides_str());
  EXPECT_TRUE(back.is_contiguous());
}

TEST(TensorView, ContiguityIgnoresSizeOneDimsAndEmptyViews) {
  // A size-1 dim may carry any stride.
  EXPECT_TRUE(TensorView(kBase, Device::cpu, DType::f32, {1, 4}, {999, 1}).is_contiguous());
  EXPECT_TRUE(TensorView(kBase, Device::cpu, DType::f32, {3, 1, 4}, {4, 7, 1}).is_contiguous());
  EXPECT_FALSE(TensorView(kBase, Device::cpu, DType::f32, {3, 4}, {5, 1}).is_contiguous());
  EXPECT_FALSE(TensorView(kBase, Device::cpu, DType::f32, {3, 4}, {4, 2}).is_contiguous());
  // Broadcast (stride 0): numel counts every index, extent only the memory reached.
  const TensorView bcast(kBase, Device::cpu, DType::f32, {6, 4}, {0, 1});
  EXPECT_EQ(bcast.numel(), 24);
  EXPECT_EQ(bcast.extent_elems(), 4);
  EXPECT_FALSE(bcast.is_contiguous());
  // Empty views.
  const TensorView empty = TensorView::contiguous(kBase, Device::cpu, DType::f32, {0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.extent_elems(), 0);
  // Rank 0.
  const TensorView scalar = TensorView::contiguous(kBase, Device::cpu, DType::i64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.extent_elems(), 1);
  EXPECT_TRUE(scalar.is_contiguous());
  EXPECT_EQ(scalar.shape_str(), "[]");
}

TEST(TensorView, DescribeNamesDtypeShapeStridesDevice) {
  const TensorView v(kBase, Device::cuda, DType::bf16, {17, 32, 576}, {18432, 576, 1});
  EXPECT_EQ(v.describe(), "bf16 [17, 32, 576] strides (18432, 576, 1) on cuda");
  const TensorView w = TensorView::contiguous(kBase, Device::cpu, DType::fp8_e4m3, {4, 576}).transposed(0, 1);
  EXPECT_EQ(w.describe(), "fp8_e4m3 [576, 4] strides (1, 576) on cpu");
  EXPECT_EQ(TensorView::contiguous(kBase, Device::cpu, DType::i64, {3}).describe(), "i64 [3] strides (1) on cpu");
}

TEST(TensorView, Errors) {
  EXPECT_TRUE(throws_error_with([] { TensorView::contiguous(kBase, Device::cpu, DType::f32, {1, 2, 3, 4, 5, 6}); },
                                {"TensorView", "rank 6", "maximum 5"}));
  EXPECT_TRUE(throws_error_with([] { TensorView(kBase, Device::cpu, DType::f32, {2, 3}, {3}); },
                                {"TensorView", "[2, 3]", "1 strides"}));
  EXPECT_TRUE(throws_error_with([] { TensorView::contiguous(kBase, Device::cpu, DType::f32, {2, -3}); },
                                {"TensorView", "negative size", "[2, -3]"}));
  const TensorView v = TensorView::contiguous(kBase, Device::cpu, DType::f32, {2, 3});
  EXPECT_TRUE(throws_error_with([&] { v.select(0, 2); }, {"TensorView::select", "index 2", "dim 0", "[2, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { v.select(1, -1); }, {"TensorView::select", "index -1", "dim 1", "[2, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { v.select(2, 0); }, {"TensorView::select", "dim 2", "[2, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { v.slice(1, 2, 2); }, {"TensorView::slice", "[2, 4)", "dim 1", "[2, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { v.slice(0, -1, 1); }, {"TensorView::slice", "[-1, 0)", "dim 0", "[2, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { v.slice(-3, 0, 1); }, {"TensorView::slice", "dim -1", "[2, 3]"}));
  const TensorView neg(kBase, Device::cpu, DType::f32, {2, 3}, {-3, 1});
  EXPECT_TRUE(throws_error_with([&] { neg.extent_elems(); }, {"TensorView", "negative strides", "(-3, 1)"}));
}

TEST(Tensor, EmptyOnCpuIsContiguousAlignedAndWritable) {
  const Tensor t = Tensor::empty({3, 5}, DType::bf16);
  const TensorView v = t.view();
  EXPECT_EQ(v.device, Device::cpu);
  EXPECT_EQ(v.dtype, DType::bf16);
  EXPECT_EQ(v.shape_str(), "[3, 5]");
  EXPECT_EQ(v.strides_str(), "(5, 1)");
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(t.bytes(), 3 * 5 * 2);
  ASSERT_NE(t.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  auto* p = static_cast<uint16_t*>(t.data());
  for (int i = 0; i < 15; ++i) p[i] = static_cast<uint16_t>(i * 7);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(p[i], i * 7);
  const TensorView converted = t;  // implicit view
  EXPECT_EQ(converted.data, t.data());

  // Copies share the buffer (shared ownership).
  const Tensor u = t;
  EXPECT_EQ(u.data(), t.data());

  // Empty tensors still get a distinct valid pointer.
  const Tensor e = Tensor::empty({0, 8}, DType::f32);
  EXPECT_TRUE(e.view().defined());
  EXPECT_EQ(e.view().numel(), 0);
  EXPECT_EQ(e.bytes(), 0);

  const Tensor s = Tensor::storage(10, DType::i64);
  EXPECT_EQ(s.view().shape_str(), "[10]");
  EXPECT_EQ(s.bytes(), 80);
  const TensorView strided(s.data(), Device::cpu, DType::i64, {3, 2}, {3, 1});  // view storage with any strides
  EXPECT_LE(strided.extent_elems(), s.view().numel());
}

TEST(Tensor, Errors) {
  EXPECT_TRUE(throws_error_with([] { Tensor::empty({-2, -3}, DType::f32); }, {"negative size", "[-2, -3]"}));
  EXPECT_TRUE(throws_error_with([] { Tensor::empty({1, 2, 3, 4, 5, 6}, DType::f32); }, {"rank 6", "maximum 5"}));
  std::string why;
  if (!cuda_available(&why)) {
    // No device (or no CUDA build): asking for device memory is an error naming the call.
    try {
      Tensor::empty({4}, DType::f32, Device::cuda);
      ADD_FAILURE() << "Tensor::empty on cuda without a device did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("device_alloc") != std::string::npos || msg.find("cudaMalloc") != std::string::npos)
          << msg;
    }
  }
}

}  // namespace
}  // namespace kestrel
