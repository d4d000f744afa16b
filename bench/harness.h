// The benchmark harness: a registry of cases, each timed on the GPU against ceilings measured
// in the same run (DESIGN.md section 6; docs/perf.md says how to read the output).
//
// A case declares its buffers (dtype, shape, fill) and how to call the op on one set of them.
// The harness owns the memory: it allocates as many copies ("rotation sets") of the buffers as
// it takes for the bytes touched across the sets to reach 4x the L2, fills them with random
// non-zero values on the device, and runs set r % sets on repetition r, so that a timing
// measures HBM and not a cache that a real model step would have evicted. "Bytes touched" is
// the case's minimum bytes per call, so sets = ceil(4 * L2 / bytes).
//
// This header needs no CUDA include: case files (bench/<op>.cpp) are plain C++.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kestrel/core/tensor.h"

namespace kestrel::bench {

// Values written into a buffer before timing. Never zeros (METHOD.md: zeros hide unwritten
// outputs and can run faster than real data).
struct Fill {
  enum Kind : uint8_t { signed_magnitude, uniform, integer } kind = signed_magnitude;
  double lo = 0.25, hi = 1.0;
  // +-[lo, hi) with a random sign; lo > 0 keeps every value non-zero after rounding.
  static Fill signed_mag(double lo = 0.25, double hi = 1.0) { return {signed_magnitude, lo, hi}; }
  // Uniform in [lo, hi) (for positive scales: lo > 0).
  static Fill range(double lo, double hi) { return {uniform, lo, hi}; }
  // Integers uniform in [lo, hi] (token ids, indices).
  static Fill ints(int64_t lo, int64_t hi) { return {integer, static_cast<double>(lo), static_cast<double>(hi)}; }
};

struct BufferDecl {
  std::string name;
  DType dtype;
  Shape shape;  // allocated contiguous; a case may view it with other strides in `run`
  Fill fill = {};
  // Allocated once and given to every rotation set: a large table of which one call reads only
  // a few rows (embedding), where the rotated inputs (ids) already spread the reads over HBM.
  bool shared = false;
};

enum class Timing : uint8_t {
  automatic,  // events, or graph replay when one launch takes under kGraphBelowUs
  events,     // an event pair around every launch
  graph,      // N launches captured in a CUDA graph, replayed, time divided by N
};
const char* timing_name(Timing t);
// Below this many microseconds per launch, `automatic` switches to graph replay: the launch
// gap (a few us on the host) would otherwise be part of the number. Measured on the H200
// (docs/perf.md, fifth session): a two-kernel mla_attention call timed by events read 3.6 /
// 4.2 / 6.0 us over its graph replay at 45 / 56 / 111 us, so the switch is at 100 us, not 30.
inline constexpr double kGraphBelowUs = 100.0;

struct Case {
  std::string name;  // stable ID: "<op>/<shape>-<dtype>", e.g. "rms_norm/T4096-D2304-bf16"
  std::vector<BufferDecl> buffers;
  double bytes = 0;  // the fewest bytes one call must move: inputs read once, outputs written once
  double flops = 0;  // floating-point operations of one call
  // Tokens one call processes, for the throughput an engine quotes (decode: sequences; verify:
  // sequences x tokens each; prefill and prepare: all tokens; attention: query rows); 0 where
  // a token count means nothing (a GEMM, a cast).
  double tokens = 0;
  Timing timing = Timing::automatic;
  // Runs the op once on one rotation set: `bufs[i]` is a contiguous view of `buffers[i]`.
  std::function<void(const std::vector<TensorView>& bufs, Stream stream)> run;
};

class Registry {
 public:
  void add(Case c);
  const std::vector<Case>& cases() const { return cases_; }

 private:
  std::vector<Case> cases_;
};

// Bytes of a contiguous tensor, and of one rotation set of a case's buffers.
double tensor_bytes(DType dtype, const Shape& shape);
double footprint_bytes(const Case& c);

// ---- measurements ---------------------------------------------------------------------------

struct Stats {
  double median_us = 0, min_us = 0, p90_us = 0;
  int samples = 0;
};
Stats stats_of(std::vector<double> us);

struct Ceilings {
  bool measured = false;
  double copy_bytes = 0;      // bytes of the copy (read + write counted: 2x the buffer)
  Stats copy;                 // per copy
  double copy_gbps = 0;       // GB/s (1e9 bytes/s), read + write
  int gemm_n = 0;             // M = N = K
  Stats gemm;                 // per GEMM
  double gemm_tflops = 0;     // TFLOP/s (1e12 FLOP/s), bf16 in, fp32 accumulate
  double ridge() const { return copy_gbps > 0 ? gemm_tflops * 1e3 / copy_gbps : 0; }  // FLOP/byte
};

struct Options {
  int reps = 50;
  int warmup = 5;  // launches before timing (at least one per rotation set)
  Timing timing = Timing::automatic;  // overrides cases marked automatic when not automatic
  bool ceilings = true;
};

// The ceilings of this GPU, measured now: a device-to-device copy of `copy_gib` GiB and a
// cuBLAS bf16 GEMM of n^3 (bench/ceilings.cu).
Ceilings measure_ceilings(const Options& opt, double copy_gib = 1.0, int gemm_n = 8192);

struct Result {
  std::string name;
  bool ok = false;
  std::string error;  // when !ok
  Stats time;
  double bytes = 0, flops = 0, tokens = 0;
  int sets = 0;           // rotation sets used
  double rotated_bytes = 0;  // bytes touched across all sets (sets * bytes); 4x L2 unless capped
  bool rotation_capped = false;  // the set count hit its cap before reaching 4x L2
  Timing timing_used = Timing::events;
  int graph_launches = 0;  // launches per graph replay (graph timing)
  // Kernel launches per call of the op, counted by ops::cuda::launch_count over the warm-up
  // (its total over the warm-up calls, divided by their number). 0: none counted, as for a
  // library call (cuBLAS) that Kestrel does not launch itself.
  double launches = 0;
  std::string note;        // e.g. why graph timing fell back to events
  // Derived from the ceilings (0 when they were not measured).
  double gbps() const { return time.median_us > 0 ? bytes / (time.median_us * 1e3) : 0; }
  double tflops() const { return time.median_us > 0 ? flops / (time.median_us * 1e6) : 0; }
  double mtok_per_s() const { return time.median_us > 0 ? tokens / time.median_us : 0; }  // 1e6 tokens/s
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
};

// Runs one case: allocate and fill the rotation sets, warm up, time. Never throws: a failure
// is returned in Result::error.
Result run_case(const Case& c, const Options& opt, int64_t l2_bytes);

// ---- the GPU --------------------------------------------------------------------------------

struct GpuInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, sms = 0;
  int64_t memory_bytes = 0, l2_bytes = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0;  // peak clocks from the device attributes (0: unknown)
  int driver_version = 0, runtime_version = 0;
};
// False with `why` set when there is no usable CUDA device.
bool query_gpu(GpuInfo& info, std::string& why);

// ---- reporting (bench/report.cpp) ---------------------------------------------------------

std::string bound_of(const Result& r, const Ceilings& c);  // "mem" | "math" | "-"
void print_ceilings(const Ceilings& c);
// The table, all at once or a row at a time as cases finish (`name_width`: the widest name).
void print_table(const std::vector<Result>& results, const Ceilings& c);
void print_table_header(int name_width);
void print_table_row(const Result& r, const Ceilings& c, int name_width);
struct RunInfo {
  GpuInfo gpu;
  std::string commit, command, date;
  Options opt;
};
// Writes everything to `path` as JSON; throws kestrel::Error when the file cannot be written.
void write_json(const std::string& path, const RunInfo& info, const Ceilings& c, const std::vector<Result>& results);

}  // namespace kestrel::bench
