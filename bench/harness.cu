// The timers: rotation sets, warm-up, event timing and graph-replay timing of one case.
#include <algorithm>
#include <cmath>
#include <exception>

#include "cuda_util.h"
#include "kestrel/ops/cuda_launches.h"

namespace kestrel::bench {

namespace {

// Rotation sets reach 4x the L2. The cap bounds the graph size and host time of cases of a few
// hundred bytes; at 2^18 every current case (the smallest, 1.7 KB, needs 139K sets on an H200)
// stays under it, and a capped case is marked in the table.
constexpr double kL2Multiple = 4.0;
constexpr int kMaxSets = 1 << 18;
// A graph replays at least this many launches, so one replay is long against event resolution
// (about 0.5 us) even when there is one rotation set.
constexpr int kMinGraphLaunches = 32;
// Each set starts 256-byte aligned, as a fresh cudaMalloc would.
constexpr int64_t kSetAlign = 256;
// Launches timed one by one to decide `automatic` timing.
constexpr int kProbeLaunches = 5;
// Graph timing: each sample already averages `launches` launches, so when one replay holds many
// launches (tiny cases with thousands of rotation sets) fewer replays suffice: the replays are
// cut to keep about reps * kGraphLaunchBudget launches in all, but never under kMinGraphReps.
constexpr int kGraphLaunchBudget = 1024;
constexpr int kMinGraphReps = 10;

// One buffer of a case, `sets` times over in one allocation.
struct Slab {
  Tensor storage;
  int64_t set_stride_bytes = 0;
};

using RunFn = std::function<void(int set, cudaStream_t)>;

std::vector<double> time_events(const RunFn& run, int sets, int reps, cudaStream_t s) {
  EventPairs ev(reps);
  for (int i = 0; i < reps; ++i) {
    ev.start(i, s);
    run(i % sets, s);
    ev.stop(i, s);
  }
  std::vector<double> us = ev.elapsed_ms();
  for (double& t : us) t *= 1e3;
  return us;
}

// Captures `launches` launches (cycling through the sets) into one graph and times `reps`
// replays; each sample is one replay's time over `launches`.
std::vector<double> time_graph(const RunFn& run, int sets, int launches, int reps, cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < launches; ++i) run(i % sets, s);
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the failed capture's error is reported by the rethrow, not later calls
    throw;
  }
  BENCH_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  BENCH_CUDA(inst);
  std::vector<double> us;
  try {
    BENCH_CUDA(cudaGraphUpload(exec, s));
    for (int i = 0; i < 2; ++i) BENCH_CUDA(cudaGraphLaunch(exec, s));  // warm-up replays
    EventPairs ev(reps);
    for (int i = 0; i < reps; ++i) {
      ev.start(i, s);
      BENCH_CUDA(cudaGraphLaunch(exec, s));
      ev.stop(i, s);
    }
    us = ev.elapsed_ms();
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  for (double& t : us) t = t * 1e3 / launches;
  return us;
}

}  // namespace

const char* timing_name(Timing t) {
  switch (t) {
    case Timing::automatic: return "auto";
    case Timing::events: return "events";
    case Timing::graph: return "graph";
  }
  return "?";
}

void Registry::add(Case c) {
  KESTREL_CHECK(c.run, "bench: case ", c.name, " has no run function");
  for (const Case& e : cases_) KESTREL_CHECK(e.name != c.name, "bench: case ", c.name, " registered twice");
  cases_.push_back(std::move(c));
}

double footprint_bytes(const Case& c) {
  double b = 0;
  for (const BufferDecl& d : c.buffers) b += tensor_bytes(d.dtype, d.shape);
  return b;
}

double tensor_bytes(DType dtype, const Shape& shape) {
  double n = 1;
  for (int64_t s : shape) n *= static_cast<double>(s);
  return n * static_cast<double>(dtype_size(dtype));
}

Stats stats_of(std::vector<double> us) {
  Stats st;
  st.samples = static_cast<int>(us.size());
  if (us.empty()) return st;
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  st.min_us = us.front();
  st.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  // Nearest rank: the smallest sample with at least 90% of the samples at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  st.p90_us = us[std::max<size_t>(rank, 1) - 1];
  return st;
}

Result run_case(const Case& c, const Options& opt, int64_t l2_bytes) {
  Result r;
  r.name = c.name;
  r.bytes = c.bytes;
  r.flops = c.flops;
  r.tokens = c.tokens;
  try {
    OwnedStream stream;
    const cudaStream_t s = stream.get();

    const double set_bytes = std::max(c.bytes > 0 ? c.bytes : footprint_bytes(c), 1.0);
    const double want = std::ceil(kL2Multiple * static_cast<double>(l2_bytes) / set_bytes);
    const int sets = static_cast<int>(std::clamp(want, 1.0, static_cast<double>(kMaxSets)));
    r.sets = sets;
    r.rotated_bytes = sets * set_bytes;
    r.rotation_capped = want > kMaxSets;

    // Allocate and fill every buffer `sets` times; buffer b of set i gets its own seed region.
    std::vector<Slab> slabs;
    for (size_t b = 0; b < c.buffers.size(); ++b) {
      const BufferDecl& d = c.buffers[b];
      const int64_t esize = static_cast<int64_t>(dtype_size(d.dtype));
      const int64_t bytes = static_cast<int64_t>(tensor_bytes(d.dtype, d.shape));
      Slab sl;
      sl.set_stride_bytes = d.shared ? 0 : (bytes + kSetAlign - 1) / kSetAlign * kSetAlign;
      const int64_t copies = d.shared ? 1 : sets;
      const int64_t elems = std::max<int64_t>((d.shared ? bytes : sl.set_stride_bytes * copies) / esize, 1);
      sl.storage = Tensor::storage(elems, d.dtype, Device::cuda);
      fill_device(sl.storage.data(), d.dtype, elems, d.fill, 0x6b657374ull * (b + 1), s);
      slabs.push_back(std::move(sl));
    }
    std::vector<std::vector<TensorView>> views(sets);
    for (int i = 0; i < sets; ++i) {
      for (size_t b = 0; b < c.buffers.size(); ++b) {
        char* base = static_cast<char*>(slabs[b].storage.data()) + static_cast<int64_t>(i) * slabs[b].set_stride_bytes;
        views[i].push_back(TensorView::contiguous(base, Device::cuda, c.buffers[b].dtype, c.buffers[b].shape));
      }
    }
    BENCH_CUDA(cudaStreamSynchronize(s));

    const RunFn run = [&](int set, cudaStream_t st) { c.run(views[set], static_cast<Stream>(st)); };

    // Warm-up: every set once (module load, first-touch, cuBLAS heuristics), then `warmup` more.
    // The launch counter over these calls gives the launches per call.
    const uint64_t launches_before = ops::cuda::launch_count();
    for (int i = 0; i < sets + opt.warmup; ++i) run(i % sets, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    r.launches = static_cast<double>(ops::cuda::launch_count() - launches_before) / (sets + opt.warmup);

    Timing t = opt.timing != Timing::automatic ? opt.timing : c.timing;
    if (t == Timing::automatic) {
      const Stats probe = stats_of(time_events(run, sets, kProbeLaunches, s));
      t = probe.median_us < kGraphBelowUs ? Timing::graph : Timing::events;
    }
    const int reps = std::max(opt.reps, 1);
    std::vector<double> us;
    if (t == Timing::graph) {
      const int launches = std::max(sets, kMinGraphLaunches);
      try {
        const int64_t budget = static_cast<int64_t>(reps) * kGraphLaunchBudget / launches;
        const int graph_reps = static_cast<int>(std::clamp<int64_t>(budget, std::min(kMinGraphReps, reps), reps));
        us = time_graph(run, sets, launches, graph_reps, s);
        r.graph_launches = launches;
      } catch (const std::exception& e) {
        // An op that cannot be captured (a host sync, an allocation) is still timed, by events.
        r.note = str("graph capture failed, timed by events: ", e.what());
        t = Timing::events;
      }
    }
    if (t == Timing::events) us = time_events(run, sets, reps, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    BENCH_CUDA(cudaGetLastError());
    r.timing_used = t;
    r.time = stats_of(std::move(us));
    r.ok = true;
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
    cudaGetLastError();  // clear a non-sticky error so that the next case starts clean
  }
  return r;
}

bool query_gpu(GpuInfo& info, std::string& why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    why = err != cudaSuccess ? str(cudaGetErrorName(err), ": ", cudaGetErrorString(err)) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp p{};
  const cudaError_t perr = cudaGetDeviceProperties(&p, 0);
  if (perr != cudaSuccess) {
    why = str("cudaGetDeviceProperties: ", cudaGetErrorString(perr));
    return false;
  }
  info.name = p.name;
  info.sm_major = p.major;
  info.sm_minor = p.minor;
  info.sms = p.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  info.l2_bytes = p.l2CacheSize;
  // Peak clocks; unknown (0) where the attribute is not answered.
  if (cudaDeviceGetAttribute(&info.sm_clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess) info.sm_clock_khz = 0;
  if (cudaDeviceGetAttribute(&info.mem_clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) info.mem_clock_khz = 0;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaGetLastError();
  return true;
}

}  // namespace kestrel::bench
