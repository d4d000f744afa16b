// A count of kernel launches made by the CUDA backend, so that tests can prove which path
// ran (DESIGN.md rule 6): read it before and after a call and compare.
#pragma once

#include <cstdint>

namespace kestrel::ops::cuda {
uint64_t launch_count();
}
