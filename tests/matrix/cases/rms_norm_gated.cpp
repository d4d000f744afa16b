// rms_norm_gated cases (to be written).
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_rms_norm_gated_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
