// KDA cases (to be written): registers every KDA op's cases.
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_kda_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
