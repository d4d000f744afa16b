// The `kestrel` command. Until the model runner exists its main job is `kestrel selfcheck`:
// every available backend runs a slice of the op matrix against the CPU reference, then a
// short timing of each op, and a readable summary is printed. Works with no GPU (the CUDA
// backend is then reported as unavailable, with the reason).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kestrel/core/device.h"
#include "matrix/matrix.h"

namespace {

using kestrel::matrix::Case;
using kestrel::matrix::Result;
using kestrel::matrix::Status;
using kestrel::ops::Backend;

void usage() {
  std::puts(
      "usage: kestrel selfcheck [--full] [--op NAME] [--no-timing]\n"
      "  Runs the op matrix (CI slice, or --full) on every available backend against the CPU\n"
      "  reference, then times one case of each op per backend, and prints a summary.\n"
      "  KESTREL_SEED=<n> replays a run's random inputs.");
}

int selfcheck(int argc, char** argv) {
  bool full = false, timing = true;
  std::string only;
  for (int i = 0; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--full")) full = true;
    else if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    else if (!std::strcmp(argv[i], "--op") && i + 1 < argc) only = argv[++i];
    else { usage(); return 2; }
  }
  std::printf("Kestrel self-check\n");
  std::printf("  cpu : reference backend, available\n");
  std::string why;
  const bool cuda = kestrel::cuda_available(&why);
  std::printf("  cuda: %s\n\n", cuda ? kestrel::cuda_device_summary().c_str() : ("unavailable: " + why).c_str());

  const auto& cases = kestrel::matrix::all_cases(full ? kestrel::matrix::Size::full : kestrel::matrix::Size::ci);
  const uint64_t seed = kestrel::matrix::base_seed();
  struct Tally { int pass = 0, fail = 0, unsupported = 0, unavailable = 0; };
  std::map<std::string, std::map<std::string, Tally>> tally;  // op -> backend -> counts
  std::vector<std::string> failures;
  std::map<std::string, const Case*> first_of_op;
  for (const Case& c : cases) {
    if (!only.empty() && c.op != only) continue;
    // time the largest CI case of each op
    auto elems = [](const Case* k) {
      double n = 0;
      for (const auto& b : k->buffers) {
        double e = 1;
        for (int64_t d : b.shape) e *= static_cast<double>(d);
        n += e;
      }
      return n;
    };
    if (!first_of_op.count(c.op) || elems(&c) > elems(first_of_op[c.op])) first_of_op[c.op] = &c;
    for (Backend b : kestrel::ops::kAllBackends) {
      const Result r = kestrel::matrix::run_case(c, b, seed);
      Tally& t = tally[c.op][kestrel::ops::backend_name(b)];
      switch (r.status) {
        case Status::pass: ++t.pass; break;
        case Status::fail: ++t.fail; failures.push_back(c.id + " on " + kestrel::ops::backend_name(b) + ": " + r.message); break;
        case Status::not_supported: ++t.unsupported; break;
        case Status::unavailable: ++t.unavailable; break;
      }
    }
  }
  std::printf("%-22s %-5s %6s %6s %14s %12s\n", "op", "backend", "pass", "fail", "not supported", "unavailable");
  int total_fail = 0, total_pass = 0;
  for (auto& [op, per] : tally)
    for (auto& [be, t] : per) {
      std::printf("%-22s %-5s %6d %6d %14d %12d\n", op.c_str(), be.c_str(), t.pass, t.fail, t.unsupported, t.unavailable);
      total_fail += t.fail;
      total_pass += t.pass;
    }
  for (const auto& f : failures) std::printf("\nFAIL %s\n", f.c_str());

  if (timing) {
    std::printf("\nTiming (the largest case of each op, host-timed, median of 20; kestrel-bench has the real numbers)\n");
    std::printf("%-64s %-5s %12s %10s\n", "case", "backend", "us", "GB/s");
    for (auto& [op, c] : first_of_op) {
      for (Backend b : kestrel::ops::kAllBackends) {
        if (!kestrel::ops::backend_available(b).ok) continue;
        try {
          double bytes = 0;
          const double s = kestrel::matrix::time_case(*c, b, 20, &bytes);
          std::printf("%-64s %-5s %12.1f %10.2f\n", c->id.c_str(), kestrel::ops::backend_name(b), s * 1e6, bytes / s / 1e9);
        } catch (const std::exception& e) {
          std::printf("%-64s %-5s %s\n", c->id.c_str(), kestrel::ops::backend_name(b), e.what());
        }
      }
    }
  }
  std::printf("\n%s: %d passed, %d failed (seed %llu)\n", total_fail ? "FAILED" : "OK", total_pass, total_fail,
              static_cast<unsigned long long>(seed));
  return total_fail ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  try {
    if (!std::strcmp(argv[1], "selfcheck")) return selfcheck(argc - 2, argv + 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel: %s\n", e.what());
    return 1;
  }
  usage();
  return 2;
}
