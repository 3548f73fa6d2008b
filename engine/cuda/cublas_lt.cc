#include "engine/cuda/cublas_lt.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>

#include "engine/core/status.h"

namespace dlrm::cuda {
namespace {

// Resolves `name` into `fn`; false (with the reason in *why) if it is missing.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *why = std::string("it has no ") + name;
  return *fn != nullptr;
}

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
  std::ostringstream tried;
  for (const std::string& file : candidates) {
    // Never closed: the table's pointers live as long as the process.
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why;
    if (handle == nullptr) {
      const char* error = dlerror();
      why = error != nullptr ? error : "dlopen failed";
    } else {
      CublasLtApi api;
      if (ResolveAll(handle, &api, &why)) {
        api.path = file;
        return api;
      }
      dlclose(handle);
    }
    tried << "\n  " << file << ": " << why;
  }
  Throw(StatusCode::kFailedPrecondition,
        "cannot open cuBLASLt (needed by device.kind CUDA; it comes with the CUDA toolkit or "
        "NVIDIA's nvidia-cublas wheel: put its lib directory on LD_LIBRARY_PATH). Tried:",
        tried.str());
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
