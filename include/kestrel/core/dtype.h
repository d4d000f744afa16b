// Element types and their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

enum class DType : uint8_t { f32, bf16, f16, fp8_e4m3, i32, i64 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::i32, DType::i64};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) { return t != DType::i32 && t != DType::i64; }

}  // namespace kestrel
