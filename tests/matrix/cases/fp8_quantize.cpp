// fp8_quantize cases (to be written).
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_fp8_quantize_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
