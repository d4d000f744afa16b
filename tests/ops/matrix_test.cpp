// The op matrix as GoogleTest cases: one test per (backend, case), named after the case ID so
// that --gtest_list_tests lists the matrix and --gtest_filter selects by op, backend or case:
//   --gtest_filter='cuda/*'   --gtest_filter='*/OpMatrix.Run/rms_norm_*'
// An absent backend or an unsupported call is GTEST_SKIP()ped with its reason: reported by
// name, never counted as passed. KESTREL_MATRIX=full selects the full set, KESTREL_SEED replays,
// KESTREL_MATRIX_REPORT=1 prints the share of its tolerance each passing case used.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "matrix/matrix.h"

namespace kestrel::matrix {
namespace {

struct Param {
  const Case* c;
  ops::Backend backend;
};

class OpMatrix : public testing::TestWithParam<Param> {};

TEST_P(OpMatrix, Run) {
  const Param& p = GetParam();
  const Result r = run_case(*p.c, p.backend, base_seed());
  // KESTREL_MATRIX_REPORT=1 prints how much of each case's tolerance it used (a precision survey).
  if (r.status == Status::pass && std::getenv("KESTREL_MATRIX_REPORT") != nullptr)
    std::printf("[ tolerance ] %s on %s: %.4f of the bound (%s), %.1f ulps\n", p.c->id.c_str(), ops::backend_name(p.backend),
                r.worst_share, r.shares.c_str(), r.worst);
  switch (r.status) {
    case Status::pass: break;
    case Status::unavailable: GTEST_SKIP() << r.message;
    case Status::not_supported: GTEST_SKIP() << "NOT_SUPPORTED: " << r.message;
    case Status::fail: FAIL() << p.c->id << " on " << ops::backend_name(p.backend) << ":\n" << r.message;
  }
}

std::vector<Param> params_for(ops::Backend b) {
  std::vector<Param> out;
  for (const Case& c : all_cases(requested_size())) out.push_back({&c, b});
  return out;
}

std::string test_name(const testing::TestParamInfo<Param>& info) {
  std::string n = info.param.c->id;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(cpu, OpMatrix, testing::ValuesIn(params_for(ops::Backend::cpu)), test_name);
INSTANTIATE_TEST_SUITE_P(cuda, OpMatrix, testing::ValuesIn(params_for(ops::Backend::cuda)), test_name);

}  // namespace
}  // namespace kestrel::matrix
