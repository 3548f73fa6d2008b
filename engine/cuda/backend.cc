#include "engine/cuda/backend.h"

#include "engine/core/status.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                ThreadPool* pool) {
  (void)state;
  (void)pool;
  const DeviceInfo device = OpenDevice(ordinal);
  Throw(StatusCode::kFailedPrecondition, "device cuda:", ordinal, " (", device.name,
        ") is usable, but this libdlrm's CUDA training step is not built yet (only the "
        "pooled embedding forward is); set device.kind to CPU");
}

}  // namespace dlrm::cuda
