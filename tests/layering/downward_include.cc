// Compiled against the train layer (tests/layering/CMakeLists.txt): every include below
// points down, and must build (the control for upward_include.cc).
#include "engine/checkpoint/codec.h"
#include "engine/core/status.h"
#include "engine/model/dlrm_model.h"
#include "engine/ps/shard_store.h"

int DownwardProbe() { return 0; }
