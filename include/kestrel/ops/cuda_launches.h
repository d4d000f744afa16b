// A count of kernel launches made by the CUDA backend, so that tests can prove which path
// ran (DESIGN.md rule 6): read it before and after a call and compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::ops::cuda {
uint64_t launch_count();
// While set (not null), every launch also appends its kernel's name to *log (for tests that
// must tell two kernels of one op apart, e.g. the TMA and relayout modes of mla_attention).
void set_launch_log(std::vector<std::string>* log);
// The current device's SM count, as the host rules read it (0 in a build without CUDA).
int num_sms();
}
