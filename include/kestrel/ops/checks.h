// Argument checks shared by every op's checking function. Each throws kestrel::Error with
// "<op>: <arg>: expected ..., got ..." and the ops call them in the fixed order of DESIGN.md
// rule 8: rank, device, dtype, layout/strides/alignment, shapes and their relations.
#pragma once

#include <initializer_list>
#include <string>

#include "kestrel/core/error.h"
#include "kestrel/core/tensor.h"

namespace kestrel::ops {

void check_defined(const char* op, const char* arg, const TensorView& t);
// `dims` documents the expected shape, e.g. "[T, D]".
void check_rank(const char* op, const char* arg, const TensorView& t, int rank, const char* dims);
// Rank in [lo, hi] (elementwise ops that take any rank).
void check_rank_between(const char* op, const char* arg, const TensorView& t, int lo, int hi);
void check_device(const char* op, const char* arg, const TensorView& t, Device d);
void check_same_device(const char* op, const char* arg, const TensorView& t, const char* other_arg,
                       const TensorView& other);
void check_dtype(const char* op, const char* arg, const TensorView& t, std::initializer_list<DType> allowed);
void check_same_dtype(const char* op, const char* arg, const TensorView& t, const char* other_arg,
                      const TensorView& other);
// Strides must be non-negative (negative strides are not supported anywhere).
void check_strides(const char* op, const char* arg, const TensorView& t);
// dim `d` of `t` must equal `expected`; `what` names it, e.g. "D (x.size(1))".
void check_size(const char* op, const char* arg, const TensorView& t, int d, int64_t expected, const char* what);
// Outputs must not overlap themselves (two indices, one address): checked for the simple
// shapes ops use, by requiring that sorted |strides| step past each other's extent.
void check_no_self_overlap(const char* op, const char* arg, const TensorView& t);
// A scalar argument (a scale) must be positive and finite.
void check_positive_finite(const char* op, const char* arg, float v);

}  // namespace kestrel::ops
