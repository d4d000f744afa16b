#include "kestrel/ops/checks.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kestrel/ops/backend.h"
#include "kestrel/ops/cuda_launches.h"

namespace kestrel::ops {

#if !KESTREL_WITH_CUDA
uint64_t cuda::launch_count() { return 0; }  // a CPU-only build launches nothing
void cuda::set_launch_log(std::vector<std::string>*) {}
int cuda::num_sms() { return 0; }
#endif

Support backend_available(Backend b) {
  if (b == Backend::cpu) return Support::yes();
  std::string why;
  if (!cuda_available(&why)) return Support::no(why);
  return Support::yes();
}

void require_support(const char* op, Backend b, const Support& s) {
  if (!s.ok) throw Error(str(op, ": backend ", backend_name(b), " cannot run this call: ", s.reason));
}

void check_defined(const char* op, const char* arg, const TensorView& t) {
  if (!t.defined()) fail_arg(op, arg, "a tensor", "none (null data pointer)");
}

void check_rank(const char* op, const char* arg, const TensorView& t, int rank, const char* dims) {
  check_defined(op, arg, t);
  if (t.rank != rank) fail_arg(op, arg, str("rank ", rank, " ", dims), str("rank ", t.rank, " ", t.shape_str()));
}

void check_rank_between(const char* op, const char* arg, const TensorView& t, int lo, int hi) {
  check_defined(op, arg, t);
  if (t.rank < lo || t.rank > hi)
    fail_arg(op, arg, str("rank ", lo, " to ", hi), str("rank ", t.rank, " ", t.shape_str()));
}

void check_device(const char* op, const char* arg, const TensorView& t, Device d) {
  if (t.device != d) fail_arg(op, arg, str("a tensor on ", device_name(d)), str("one on ", device_name(t.device)));
}

void check_same_device(const char* op, const char* arg, const TensorView& t, const char* other_arg,
                       const TensorView& other) {
  if (t.device != other.device)
    fail_arg(op, arg, str("the device of ", other_arg, " (", device_name(other.device), ")"), device_name(t.device));
}

void check_dtype(const char* op, const char* arg, const TensorView& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  fail_arg(op, arg, str("dtype ", names), dtype_name(t.dtype));
}

void check_same_dtype(const char* op, const char* arg, const TensorView& t, const char* other_arg,
                      const TensorView& other) {
  if (t.dtype != other.dtype)
    fail_arg(op, arg, str("the dtype of ", other_arg, " (", dtype_name(other.dtype), ")"), dtype_name(t.dtype));
}

void check_strides(const char* op, const char* arg, const TensorView& t) {
  for (int i = 0; i < t.rank; ++i)
    if (t.strides[i] < 0) fail_arg(op, arg, "non-negative strides", t.strides_str());
}

void check_size(const char* op, const char* arg, const TensorView& t, int d, int64_t expected, const char* what) {
  if (t.shape[d] != expected)
    fail_arg(op, arg, str("size ", expected, " in dim ", d, " (", what, ")"), str("shape ", t.shape_str()));
}

void check_no_self_overlap(const char* op, const char* arg, const TensorView& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] > 1) dims.push_back({t.strides[i], t.shape[i]});
  std::sort(dims.begin(), dims.end());
  int64_t reach = 1;  // elements spanned by the dims seen so far
  for (auto [stride, size] : dims) {
    if (stride < reach) fail_arg(op, arg, "an output whose elements do not overlap", str("strides ", t.strides_str(), " for shape ", t.shape_str()));
    reach = stride * (size - 1) + reach;
  }
}

void check_positive_finite(const char* op, const char* arg, float v) {
  if (!(v > 0.0f && std::isfinite(v))) fail_arg(op, arg, "a positive finite number", str(v));
}

}  // namespace kestrel::ops
