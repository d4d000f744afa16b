#include "kestrel/core/tensor.h"

#include <cstdlib>
#include <sstream>

#include "kestrel/core/error.h"

namespace kestrel {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

TensorView::TensorView(void* data_, Device device_, DType dtype_, const Shape& shape_, const Shape& strides_)
    : data(data_), device(device_), dtype(dtype_), rank(static_cast<int>(shape_.size())) {
  KESTREL_CHECK(shape_.size() <= kMaxRank, "TensorView: rank ", shape_.size(), " exceeds the maximum ", kMaxRank);
  KESTREL_CHECK(shape_.size() == strides_.size(), "TensorView: shape ", kestrel::shape_str(shape_), " and ",
                strides_.size(), " strides differ in rank");
  for (int i = 0; i < rank; ++i) {
    KESTREL_CHECK(shape_[i] >= 0, "TensorView: negative size in shape ", kestrel::shape_str(shape_));
    shape[i] = shape_[i];
    strides[i] = strides_[i];
  }
}

TensorView TensorView::contiguous(void* data, Device device, DType dtype, const Shape& shape) {
  return TensorView(data, device, dtype, shape, contiguous_strides(shape));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

int64_t TensorView::offset_elems(const int64_t* index) const {
  int64_t off = 0;
  for (int i = 0; i < rank; ++i) off += index[i] * strides[i];
  return off;
}

int64_t TensorView::extent_elems() const {
  if (numel() == 0) return 0;
  int64_t hi = 0;
  for (int i = 0; i < rank; ++i) {
    KESTREL_CHECK(strides[i] >= 0, "TensorView: negative strides are not supported, got ", strides_str());
    hi += (shape[i] - 1) * strides[i];
  }
  return hi + 1;
}

TensorView TensorView::select(int d, int64_t i) const {
  if (d < 0) d += rank;
  KESTREL_CHECK(d >= 0 && d < rank && i >= 0 && i < shape[d], "TensorView::select: index ", i, " in dim ", d,
                " out of range for ", shape_str());
  TensorView v = *this;
  v.data = static_cast<char*>(data) + i * strides[d] * static_cast<int64_t>(dtype_size(dtype));
  for (int k = d; k + 1 < rank; ++k) {
    v.shape[k] = shape[k + 1];
    v.strides[k] = strides[k + 1];
  }
  v.rank = rank - 1;
  return v;
}

TensorView TensorView::transposed(int d, int e) const {
  if (d < 0) d += rank;
  if (e < 0) e += rank;
  KESTREL_CHECK(d >= 0 && d < rank && e >= 0 && e < rank, "TensorView::transposed: dims ", d, " and ", e,
                " out of range for rank ", rank);
  TensorView v = *this;
  std::swap(v.shape[d], v.shape[e]);
  std::swap(v.strides[d], v.strides[e]);
  return v;
}

TensorView TensorView::slice(int d, int64_t start, int64_t len) const {
  if (d < 0) d += rank;
  KESTREL_CHECK(d >= 0 && d < rank && start >= 0 && len >= 0 && start + len <= shape[d], "TensorView::slice: [",
                start, ", ", start + len, ") of dim ", d, " out of range for ", shape_str());
  TensorView v = *this;
  v.data = static_cast<char*>(data) + start * strides[d] * static_cast<int64_t>(dtype_size(dtype));
  v.shape[d] = len;
  return v;
}

std::string TensorView::shape_str() const { return kestrel::shape_str(Shape(shape.begin(), shape.begin() + rank)); }

std::string TensorView::strides_str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << strides[i];
  os << ")";
  return os.str();
}

std::string TensorView::describe() const {
  return str(dtype_name(dtype), " ", shape_str(), " strides ", strides_str(), " on ", device_name(device));
}

Tensor Tensor::storage(int64_t elems, DType dtype, Device device) {
  KESTREL_CHECK(elems >= 0, "Tensor::storage: expected a non-negative element count, got ", elems);
  Tensor t;
  t.bytes_ = elems * static_cast<int64_t>(dtype_size(dtype));
  void* p = device_alloc(device, static_cast<size_t>(t.bytes_));
  t.buffer_ = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
  t.view_ = TensorView(p, device, dtype, {elems}, {1});
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KESTREL_CHECK(s >= 0, "Tensor::empty: expected non-negative sizes, got shape ", kestrel::shape_str(shape));
    n *= s;
  }
  Tensor t = storage(n, dtype, device);
  t.view_ = TensorView::contiguous(t.view_.data, device, dtype, shape);
  return t;
}

}  // namespace kestrel
