// silu_and_mul cases (to be written).
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_silu_and_mul_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
