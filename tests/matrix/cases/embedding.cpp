// embedding cases (to be written).
#include "matrix/cases/common.h"

namespace kestrel::matrix {

void add_embedding_cases(Registry&, Size) {}

}  // namespace kestrel::matrix
