// KESTREL_CUDA_CHECK(expr): throws kestrel::Error naming the CUDA error, the expression, the
// file and the line when a CUDA runtime call fails. For CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include "kestrel/core/error.h"

#define KESTREL_CUDA_CHECK(expr)                                                                  \
  do {                                                                                            \
    cudaError_t err_ = (expr);                                                                    \
    if (err_ != cudaSuccess)                                                                      \
      throw ::kestrel::Error(::kestrel::str("CUDA error ", cudaGetErrorName(err_), " (",         \
                                            cudaGetErrorString(err_), ") in ", #expr, " at ",     \
                                            __FILE__, ":", __LINE__));                            \
  } while (0)
