#include "engine/cuda/cublas_lt.h"

#include <mutex>

#include "engine/core/status.h"
#include "engine/cuda/shared_library.h"

namespace dlrm::cuda {
namespace {

bool ResolveAll(void* handle, CublasLtApi* api, std::string* why) {
  return Resolve(handle, "cublasLtGetVersion", &api->GetVersion, why) &&
         Resolve(handle, "cublasLtGetStatusString", &api->GetStatusString, why) &&
         Resolve(handle, "cublasLtCreate", &api->Create, why) &&
         Resolve(handle, "cublasLtDestroy", &api->Destroy, why) &&
         Resolve(handle, "cublasLtMatmulDescCreate", &api->MatmulDescCreate, why) &&
         Resolve(handle, "cublasLtMatmulDescDestroy", &api->MatmulDescDestroy, why) &&
         Resolve(handle, "cublasLtMatmulDescSetAttribute", &api->MatmulDescSetAttribute, why) &&
         Resolve(handle, "cublasLtMatrixLayoutCreate", &api->MatrixLayoutCreate, why) &&
         Resolve(handle, "cublasLtMatrixLayoutDestroy", &api->MatrixLayoutDestroy, why) &&
         Resolve(handle, "cublasLtMatmulPreferenceCreate", &api->MatmulPreferenceCreate, why) &&
         Resolve(handle, "cublasLtMatmulPreferenceDestroy", &api->MatmulPreferenceDestroy, why) &&
         Resolve(handle, "cublasLtMatmulPreferenceSetAttribute", &api->MatmulPreferenceSetAttribute,
                 why) &&
         Resolve(handle, "cublasLtMatmulAlgoGetHeuristic", &api->MatmulAlgoGetHeuristic, why) &&
         Resolve(handle, "cublasLtMatmul", &api->Matmul, why);
}

}  // namespace

std::vector<std::string> CublasLtCandidates() {
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  return {name, "/usr/local/cuda/lib64/" + name};
}

CublasLtApi OpenCublasLt(const std::vector<std::string>& candidates) {
  CublasLtApi api;
  api.path = OpenFirst(
      candidates, [&](void* handle, std::string* why) { return ResolveAll(handle, &api, why); },
      "cannot open cuBLASLt (needed by device.kind CUDA; it comes with the CUDA toolkit or "
      "NVIDIA's nvidia-cublas wheel: put its lib directory on LD_LIBRARY_PATH).");
  return api;
}

const CublasLtApi& CublasLt() {
  static std::once_flag once;
  static CublasLtApi api;
  std::call_once(once, [] { api = OpenCublasLt(CublasLtCandidates()); });
  return api;
}

void CheckCublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasLtApi& api = CublasLt();
  Throw(StatusCode::kInternal, what, " failed: ", api.GetStatusString(status), " (",
        static_cast<int>(status), ")");
}

}  // namespace dlrm::cuda
