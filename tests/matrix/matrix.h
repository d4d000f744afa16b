// The op test matrix: one registry of cases, run against every backend, each compared with
// the CPU reference backend (our `test-backend-ops`, DESIGN.md section 5).
//
// A case lists its buffers (dtype, shape, role, memory layout, value generator), how to call
// the op on a backend, and, per output, the metric and tolerance its spec states. The runner
//   1. draws fresh random inputs from a seed it prints (KESTREL_SEED=<n> replays a run),
//   2. lays every buffer out in the backend's memory with its layout (padded rows, transposed,
//      inner stride 2: strided views are a test axis), canary bytes around and between the
//      elements, and outputs poisoned (NaN, or 0x5A bytes for integers),
//   3. asks the backend `supports`; a "no" is NOT_SUPPORTED, shown with its reason, never a pass,
//   4. runs the op twice from fresh uploads (the two runs must be bit-identical), checks that
//      no canary byte and no input changed,
//   5. only then builds contiguous host copies and runs the CPU reference on them,
//   6. compares every output by its metric: bytes, ulps of the output dtype, or ulps plus a
//      per-element bound computed from the inputs (GEMM); NaN/inf must match by position.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kestrel/core/tensor.h"
#include "kestrel/ops/backend.h"

namespace kestrel::matrix {

// How a buffer is laid out in memory for the backend under test. The CPU reference always
// gets contiguous copies.
enum class Layout : uint8_t {
  contiguous,     // row-major, but the base is still surrounded by canaries
  padded,         // row-major with 3 spare elements after every row of every dim, base misaligned
  transposed,     // the last two dims stored column-major (then padded)
  inner_strided,  // innermost stride 2, rows padded
};
const char* layout_name(Layout l);

enum class Role : uint8_t { input, output, inout };

// Values for inputs: uniform reals in [lo, hi), or integers in [lo, hi] when `integer` is set.
// `custom` (if set) fills the logical values itself.
struct Gen {
  double lo = -1.0, hi = 1.0;
  bool integer = false;
  std::function<void(std::vector<double>&, uint64_t seed)> custom;
  static Gen uniform(double lo, double hi) { return {lo, hi, false, {}}; }
  static Gen ints(int64_t lo, int64_t hi) { return {static_cast<double>(lo), static_cast<double>(hi), true, {}}; }
  static Gen with(std::function<void(std::vector<double>&, uint64_t)> f) { return {0, 0, false, std::move(f)}; }
};

// The logical values of an input of n elements, drawn from `gen` with `seed` (as the runner draws
// them; a custom Gen may start from another's values).
std::vector<double> generate(const Gen& gen, int64_t n, uint64_t seed);

// Host copies of a case's buffers, logical and contiguous, as the runner saw them.
struct HostBuffers {
  std::vector<std::vector<uint8_t>> bytes;  // per buffer, numel * dtype_size
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  double value(size_t buffer, int64_t i) const;  // element i (row-major) as a double
};

// How an output is compared with the reference (which is already in the output dtype).
struct Metric {
  enum Kind : uint8_t { exact, ulps } kind = exact;
  double max_ulps = 0;  // ulps of the output dtype at the reference value
  // Optional extra absolute allowance per element (row-major index), from the inputs.
  std::function<std::vector<double>(const HostBuffers& inputs)> bound;
  static Metric bytes() { return {}; }
  static Metric within_ulps(double u) { return {ulps, u, {}}; }
};

struct BufferSpec {
  std::string name;
  DType dtype;
  Shape shape;
  Role role = Role::input;
  Layout layout = Layout::contiguous;
  Gen gen = {};
  Metric metric = {};  // outputs and inouts only
};

enum class Size : uint8_t { ci, full };

struct Case {
  std::string op;  // the op's stem: "rms_norm"
  std::string id;  // stable and readable: "rms_norm/T17-D2304-bf16-padded"
  Size size = Size::ci;
  std::vector<BufferSpec> buffers;
  // Asks the backend whether it can run this call (views in the order of `buffers`).
  std::function<ops::Support(ops::Backend, const std::vector<TensorView>&)> supports;
  // Runs the op on the backend.
  std::function<void(ops::Backend, const std::vector<TensorView>&, Stream)> run;
};

enum class Status : uint8_t { pass, fail, not_supported, unavailable };
const char* status_name(Status s);

struct Result {
  Status status = Status::pass;
  std::string message;  // why it failed, or why it was skipped
  double worst = 0;     // worst error seen, in the metric's units (ulps)
  double worst_share = 0;  // worst error as a share of what the tolerance allowed (0 .. 1 when it passed)
  std::string shares = {};  // the same per output buffer: "o 0.12 lse 0.30"
};

// All registered cases up to `size` (full includes ci).
const std::vector<Case>& all_cases(Size size);
// The size KESTREL_MATRIX asks for: "full" or (default) "ci".
Size requested_size();
// The run's base seed: KESTREL_SEED if set, else fresh from std::random_device; printed once.
uint64_t base_seed();

Result run_case(const Case& c, ops::Backend backend, uint64_t base_seed);

// A rough timing for the self-check (the real benchmarks are kestrel-bench): uploads the
// case's buffers once, runs the op `reps` times on `backend` and returns the median seconds
// per call, host-timed with a device sync after each call. `bytes` gets the logical bytes
// the call touches (inputs read once, outputs written once, in/out both).
double time_case(const Case& c, ops::Backend backend, int reps, double* bytes);

// Op registration: each op's case file defines one of these; all_cases() calls them all.
using Registry = std::vector<Case>;
void add_rms_norm_cases(Registry& r, Size size);
void add_rms_norm_gated_cases(Registry& r, Size size);
void add_silu_and_mul_cases(Registry& r, Size size);
void add_embedding_cases(Registry& r, Size size);
void add_fp8_quantize_cases(Registry& r, Size size);
void add_fp8_dequantize_cases(Registry& r, Size size);
void add_gemm_cases(Registry& r, Size size);
void add_kda_cases(Registry& r, Size size);  // every KDA op (tests/matrix/cases/kda*.cpp)
void add_mla_cases(Registry& r, Size size);  // every MLA cache/prepare op (tests/matrix/cases/mla.cpp)
void add_mla_attention_cases(Registry& r, Size size);

}  // namespace kestrel::matrix
