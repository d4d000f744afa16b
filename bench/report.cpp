// The printed table and the JSON file (written by hand: the GPU box has no JSON library).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "harness.h"
#include "kestrel/core/error.h"

namespace kestrel::bench {

namespace {

// 13800 -> "13.8K", 3.7e7 -> "37.7M": three significant digits and an SI prefix.
std::string si(double v) {
  static const char* kPrefix[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (std::fabs(v) >= 999.5 && p < 5) {
    v /= 1000.0;
    ++p;
  }
  char buf[32];
  const int decimals = std::fabs(v) >= 99.95 ? 0 : std::fabs(v) >= 9.995 ? 1 : 2;
  std::snprintf(buf, sizeof buf, "%.*f%s", p == 0 && v == std::floor(v) ? 0 : decimals, v, kPrefix[p]);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Launches per call: "1", "5"; "-" when none were counted (a cuBLAS call); two decimals if the
// count varied between calls.
std::string launches_cell(double n) { return n > 0 ? fixed(n, n == std::floor(n) ? 0 : 2) : "-"; }

// Percent of a ceiling, or "-" when the ceiling is unknown.
std::string pct(double part, double whole) { return whole > 0 ? fixed(100.0 * part / whole, 1) : "-"; }

// Time floor of a case from the ceilings: max(bytes / bandwidth, flops / rate), in us.
double floor_us(const Result& r, const Ceilings& c) {
  if (!c.measured) return 0;
  return std::max(r.bytes / (c.copy_gbps * 1e3), r.flops / (c.gemm_tflops * 1e6));
}

struct Column {
  const char* title;
  int width;
  bool left = false;
};
constexpr Column kColumns[] = {
    {"mode", 6, true}, {"sets", 6},  {"launches", 8}, {"median us", 10}, {"min us", 9}, {"p90 us", 9},
    {"bytes", 7},      {"FLOPs", 7}, {"GB/s", 8},     {"TFLOP/s", 8},    {"%copy", 6},  {"%gemm", 6},
    {"bound", 5, true}, {"%roof", 6}, {"Mtok/s", 7},
};

void print_cells(const std::string& name, int name_width, const std::vector<std::string>& cells) {
  std::printf("%-*s", name_width, name.c_str());
  for (size_t i = 0; i < cells.size() && i < std::size(kColumns); ++i) {
    const Column& col = kColumns[i];
    std::printf(col.left ? "  %-*s" : "  %*s", col.width, cells[i].c_str());
  }
  std::printf("\n");
}

// ---- JSON ----------------------------------------------------------------------------------

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (const char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"') o += "\\\"";
    else if (ch == '\\') o += "\\\\";
    else if (ch == '\n') o += "\\n";
    else if (ch == '\t') o += "\\t";
    else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  // Whole numbers (bytes, FLOPs) exactly; the rest to nine significant digits.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string jstats(const Stats& s) {
  return str("{\"median_us\": ", jnum(s.median_us), ", \"min_us\": ", jnum(s.min_us), ", \"p90_us\": ", jnum(s.p90_us),
             ", \"samples\": ", s.samples, "}");
}

}  // namespace

std::string bound_of(const Result& r, const Ceilings& c) {
  if (!c.measured || !r.ok) return "-";
  return r.intensity() < c.ridge() ? "mem" : "math";
}

void print_ceilings(const Ceilings& c) {
  if (!c.measured) {
    std::printf("ceilings: not measured (--no-ceilings)\n");
    return;
  }
  std::printf("ceiling  copy  %s bytes (read + write) d2d memcpy: %.1f us median, %.0f GB/s\n", si(c.copy_bytes).c_str(),
              c.copy.median_us, c.copy_gbps);
  std::printf("ceiling  gemm  cuBLAS bf16 %d^3, fp32 accumulate: %.1f us median, %.1f TFLOP/s\n", c.gemm_n,
              c.gemm.median_us, c.gemm_tflops);
  std::printf("ridge    %.1f FLOP/byte (below: mem-bound, above: math-bound)\n", c.ridge());
}

void print_table_header(int name_width) {
  std::vector<std::string> titles;
  for (const Column& col : kColumns) titles.emplace_back(col.title);
  print_cells("case", name_width, titles);
  int total = name_width;
  for (const Column& col : kColumns) total += 2 + col.width;
  std::printf("%s\n", std::string(static_cast<size_t>(total), '-').c_str());
}

void print_table_row(const Result& r, const Ceilings& c, int name_width) {
  if (!r.ok) {
    std::printf("%-*s  FAILED: %s\n", name_width, r.name.c_str(), r.error.c_str());
    return;
  }
  const double fl = floor_us(r, c);
  print_cells(r.name, name_width,
              {timing_name(r.timing_used), std::to_string(r.sets) + (r.rotation_capped ? "*" : ""),
               launches_cell(r.launches), fixed(r.time.median_us, 2), fixed(r.time.min_us, 2), fixed(r.time.p90_us, 2),
               si(r.bytes), si(r.flops), fixed(r.gbps(), 1), fixed(r.tflops(), 2),
               pct(r.gbps(), c.measured ? c.copy_gbps : 0), pct(r.tflops(), c.measured ? c.gemm_tflops : 0),
               bound_of(r, c), fl > 0 ? pct(fl, r.time.median_us) : "-", r.tokens > 0 ? fixed(r.mtok_per_s(), 2) : "-"});
  if (r.rotation_capped)
    std::printf("%-*s  note: * rotation capped at %d sets: %s touched across sets, under 4x L2\n", name_width, "",
                r.sets, si(r.rotated_bytes).c_str());
  if (!r.note.empty()) std::printf("%-*s  note: %s\n", name_width, "", r.note.c_str());
}

void print_table(const std::vector<Result>& results, const Ceilings& c) {
  int w = 4;
  for (const Result& r : results) w = std::max(w, static_cast<int>(r.name.size()));
  print_table_header(w);
  for (const Result& r : results) print_table_row(r, c, w);
}

void write_json(const std::string& path, const RunInfo& info, const Ceilings& c, const std::vector<Result>& results) {
  std::ofstream f(path);
  KESTREL_CHECK(f, "kestrel-bench: --json: cannot open ", path, " for writing");
  const GpuInfo& g = info.gpu;
  f << "{\n";
  f << "  \"schema\": \"kestrel-bench/1\",\n";
  f << "  \"date\": " << jstr(info.date) << ",\n";
  f << "  \"commit\": " << jstr(info.commit) << ",\n";
  f << "  \"command\": " << jstr(info.command) << ",\n";
  f << "  \"gpu\": {\"name\": " << jstr(g.name) << ", \"sm\": \"" << g.sm_major << g.sm_minor << "\", \"sms\": " << g.sms
    << ", \"memory_bytes\": " << g.memory_bytes << ", \"l2_bytes\": " << g.l2_bytes
    << ", \"sm_clock_peak_mhz\": " << jnum(g.sm_clock_khz / 1e3) << ", \"mem_clock_peak_mhz\": " << jnum(g.mem_clock_khz / 1e3)
    << ", \"driver_version\": " << g.driver_version << ", \"runtime_version\": " << g.runtime_version << "},\n";
  f << "  \"options\": {\"reps\": " << info.opt.reps << ", \"warmup\": " << info.opt.warmup << ", \"timing\": \""
    << timing_name(info.opt.timing) << "\"},\n";
  f << "  \"ceilings\": {\"measured\": " << (c.measured ? "true" : "false") << ",\n";
  f << "    \"copy\": {\"bytes\": " << jnum(c.copy_bytes) << ", \"time\": " << jstats(c.copy)
    << ", \"gbps\": " << jnum(c.copy_gbps) << "},\n";
  f << "    \"gemm\": {\"m\": " << c.gemm_n << ", \"n\": " << c.gemm_n << ", \"k\": " << c.gemm_n
    << ", \"dtype\": \"bf16\", \"accumulate\": \"f32\", \"time\": " << jstats(c.gemm)
    << ", \"tflops\": " << jnum(c.gemm_tflops) << "},\n";
  f << "    \"ridge_flop_per_byte\": " << jnum(c.ridge()) << "},\n";
  f << "  \"cases\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double fl = floor_us(r, c);
    f << (i ? ",\n" : "\n") << "    {\"name\": " << jstr(r.name) << ", \"ok\": " << (r.ok ? "true" : "false");
    if (!r.ok) f << ", \"error\": " << jstr(r.error);
    f << ", \"timing\": \"" << timing_name(r.timing_used) << "\", \"sets\": " << r.sets
      << ", \"rotated_bytes\": " << jnum(r.rotated_bytes) << ", \"rotation_capped\": " << (r.rotation_capped ? "true" : "false")
      << ", \"graph_launches\": " << r.graph_launches << ", \"launches\": " << jnum(r.launches)
      << ", \"time\": " << jstats(r.time) << ", \"bytes\": " << jnum(r.bytes)
      << ", \"flops\": " << jnum(r.flops) << ", \"gbps\": " << jnum(r.gbps()) << ", \"tflops\": " << jnum(r.tflops())
      << ", \"flop_per_byte\": " << jnum(r.intensity())
      << ", \"pct_copy\": " << (c.measured && r.ok ? jnum(100.0 * r.gbps() / c.copy_gbps) : "null")
      << ", \"pct_gemm\": " << (c.measured && r.ok ? jnum(100.0 * r.tflops() / c.gemm_tflops) : "null")
      << ", \"pct_roof\": " << (fl > 0 && r.ok ? jnum(100.0 * fl / r.time.median_us) : "null")
      << ", \"bound\": " << jstr(bound_of(r, c));
    if (r.tokens > 0) f << ", \"tokens\": " << jnum(r.tokens) << ", \"mtok_per_s\": " << jnum(r.mtok_per_s());
    if (!r.note.empty()) f << ", \"note\": " << jstr(r.note);
    f << "}";
  }
  f << "\n  ]\n}\n";
  f.flush();
  KESTREL_CHECK(f, "kestrel-bench: --json: writing ", path, " failed");
}

}  // namespace kestrel::bench
