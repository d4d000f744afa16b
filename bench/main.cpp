// kestrel-bench: times every registered op case on the GPU against the copy and GEMM ceilings
// measured in the same run, after the cases: measured first, the ceilings' GEMMs slowed the
// microsecond cases that followed them by 2-15% (H200, docs/perf.md, thirteenth session).
// Usage: kestrel-bench --help; docs/perf.md.
//
// Exit status: 0 every selected case ran; 1 a case (or a ceiling) failed; 2 bad arguments or
// no CUDA device.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <string>
#include <vector>

#include "cases.h"
#include "harness.h"
#include "kestrel/core/error.h"

namespace kb = kestrel::bench;

namespace {

constexpr const char* kUsage =
    "usage: kestrel-bench [options]\n"
    "  --filter SUBSTR   run only cases whose name contains SUBSTR (repeat: any of them)\n"
    "  --reps N          timed repetitions per case and per ceiling (default 50)\n"
    "  --warmup N        warm-up launches after one per rotation set (default 5)\n"
    "  --timing MODE     auto (default: graph replay under 100 us a launch), events or graph\n"
    "  --json PATH       also write ceilings, GPU, date, commit and every result as JSON\n"
    "  --commit SHA      the commit being measured, recorded in the JSON\n"
    "  --no-ceilings     skip the copy and GEMM ceilings (the % columns show '-')\n"
    "  --list            print the selected cases with bytes and FLOPs, and exit (no GPU needed)\n"
    "  -h, --help        this text\n";

struct Cli {
  kb::Options opt;
  std::vector<std::string> filters;
  std::string json_path, commit;
  bool list = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "kestrel-bench: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

int parse_count(const std::string& flag, const std::string& v, int min) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < min || n > 1000000)
    usage_error(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return static_cast<int>(n);
}

Cli parse(int argc, char** argv) {
  Cli cli;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + ": missing value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else if (a == "--filter") {
      cli.filters.push_back(value());
    } else if (a == "--reps") {
      cli.opt.reps = parse_count(a, value(), 1);
    } else if (a == "--warmup") {
      cli.opt.warmup = parse_count(a, value(), 0);
    } else if (a == "--timing") {
      const std::string m = value();
      if (m == "auto") cli.opt.timing = kb::Timing::automatic;
      else if (m == "events") cli.opt.timing = kb::Timing::events;
      else if (m == "graph") cli.opt.timing = kb::Timing::graph;
      else usage_error("--timing: expected auto, events or graph, got '" + m + "'");
    } else if (a == "--json") {
      cli.json_path = value();
    } else if (a == "--commit") {
      cli.commit = value();
    } else if (a == "--no-ceilings") {
      cli.opt.ceilings = false;
    } else if (a == "--list") {
      cli.list = true;
    } else {
      usage_error("unknown argument '" + a + "'");
    }
  }
  return cli;
}

bool selected(const std::string& name, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const std::string& f : filters)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string join_args(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Cli cli = parse(argc, argv);

  kb::Registry registry;
  std::vector<const kb::Case*> cases;
  try {
    kb::add_all_benches(registry);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench: registering cases failed: %s\n", e.what());
    return 1;
  }
  for (const kb::Case& c : registry.cases())
    if (selected(c.name, cli.filters)) cases.push_back(&c);
  if (cases.empty()) usage_error("no case matches the filter");
  int name_width = 4;
  for (const kb::Case* c : cases) name_width = std::max(name_width, static_cast<int>(c->name.size()));

  if (cli.list) {
    for (const kb::Case* c : cases)
      std::printf("%-*s  bytes %.0f  flops %.0f  tokens %.0f\n", name_width, c->name.c_str(), c->bytes, c->flops,
                  c->tokens);
    return 0;
  }

  kb::RunInfo info;
  std::string why;
  if (!kb::query_gpu(info.gpu, why)) {
    std::fprintf(stderr, "kestrel-bench: no CUDA device: %s\nkestrel-bench: the benchmarks need a GPU; nothing was run.\n",
                 why.c_str());
    return 2;
  }
  info.commit = cli.commit;
  info.command = join_args(argc, argv);
  info.date = utc_now();
  info.opt = cli.opt;
  const kb::GpuInfo& g = info.gpu;
  std::printf("kestrel-bench  %s  commit %s\n", info.date.c_str(), cli.commit.empty() ? "(not given)" : cli.commit.c_str());
  std::printf("gpu      %s, sm_%d%d, %d SMs, %.0f GB, L2 %.0f MiB, peak clocks SM %d MHz / mem %d MHz\n", g.name.c_str(),
              g.sm_major, g.sm_minor, g.sms, g.memory_bytes / 1e9, g.l2_bytes / 1048576.0, g.sm_clock_khz / 1000,
              g.mem_clock_khz / 1000);
  std::printf("options  reps %d, warmup %d, timing %s, rotation sets up to 4x L2\n", cli.opt.reps, cli.opt.warmup,
              kb::timing_name(cli.opt.timing));
  std::fflush(stdout);

  // The cases first, each reported on stderr as it finishes; then the ceilings; then the table.
  int status = 0;
  std::vector<kb::Result> results;
  for (const kb::Case* c : cases) {
    results.push_back(kb::run_case(*c, cli.opt, g.l2_bytes));
    if (!results.back().ok) status = 1;
    std::fprintf(stderr, "kestrel-bench: %zu / %zu %s\n", results.size(), cases.size(), c->name.c_str());
  }
  kb::Ceilings ceilings;
  if (cli.opt.ceilings) {
    try {
      ceilings = kb::measure_ceilings(cli.opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel-bench: measuring the ceilings failed: %s\n", e.what());
      status = 1;
    }
  }
  kb::print_ceilings(ceilings);
  std::printf("\n");
  kb::print_table_header(name_width);
  for (const kb::Result& r : results) kb::print_table_row(r, ceilings, name_width);
  std::fflush(stdout);

  if (!cli.json_path.empty()) {
    try {
      kb::write_json(cli.json_path, info, ceilings, results);
      std::printf("\nwrote %s\n", cli.json_path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel-bench: %s\n", e.what());
      status = 1;
    }
  }
  return status;
}
