// A strided tensor view (non-owning) and an owning tensor for host or device memory.
//
// Strides are in elements, int64, and may be anything the caller's memory allows: a column
// of a table, a slice of a packed projection, a head-strided query. Kernels take the strides
// as given (DESIGN.md rule 2).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/core/device.h"
#include "kestrel/core/dtype.h"

namespace kestrel {

inline constexpr int kMaxRank = 5;

using Shape = std::vector<int64_t>;

struct TensorView {
  void* data = nullptr;
  Device device = Device::cpu;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements

  TensorView() = default;
  TensorView(void* data, Device device, DType dtype, const Shape& shape, const Shape& strides);
  // Contiguous (row-major) strides for `shape`.
  static TensorView contiguous(void* data, Device device, DType dtype, const Shape& shape);

  bool defined() const { return data != nullptr; }
  int64_t size(int d) const { return shape[d < 0 ? d + rank : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + rank : d]; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Byte offset of the element at `index` (rank entries) from `data`.
  int64_t offset_elems(const int64_t* index) const;
  // One past the furthest element this view reaches, in elements from `data` (0 if empty).
  int64_t extent_elems() const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // A view of dims [d0, d1) with index fixed at `i` in dim d: select(0, i) drops dim 0.
  TensorView select(int d, int64_t i) const;
  // Dims d and e swapped (a transpose without copying).
  TensorView transposed(int d, int e) const;
  // Elements [start, start + len) of dim d.
  TensorView slice(int d, int64_t start, int64_t len) const;

  std::string shape_str() const;    // "[17, 32, 576]"
  std::string strides_str() const;  // "(18432, 576, 1)"
  std::string describe() const;     // "bf16 [17, 32, 576] strides (18432, 576, 1) on cuda"
};

Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

// Owning tensor: host memory (256-byte aligned, like cudaMalloc) or device memory (cudaMalloc).
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu);
  // Raw storage of `elems` elements, to be viewed with any strides.
  static Tensor storage(int64_t elems, DType dtype, Device device = Device::cpu);

  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }
  void* data() const { return view_.data; }
  int64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> buffer_;
  TensorView view_;
  int64_t bytes_ = 0;
};

}  // namespace kestrel
