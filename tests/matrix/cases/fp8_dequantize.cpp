// fp8_dequantize cases (to be written).
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_fp8_dequantize_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
