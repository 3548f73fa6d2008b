// Compiled against the core layer only (tests/layering/CMakeLists.txt): the include below
// points up, to the model layer, and must fail to build.
#include "engine/model/dlrm_model.h"

int UpwardProbe() { return 0; }
